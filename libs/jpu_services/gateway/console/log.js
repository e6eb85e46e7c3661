import { $, errorHeadline, h, state, t } from "./core.js";

// --- the log pane (SPEC U5): GET /v1/jobs/{id}/logs of the selected attempt and stream -----------
// The first read is the last LOG_TAIL bytes (offset < 0); then only what was appended since
// (offset = Jpu-Log-End), every 2 s while the attempt runs, until Jpu-Log-Ended says it is final.
export const LOG_TAIL = 64 * 1024, LOG_KEEP = 256 * 1024;

export function resetLog(jobId) {
  state.log = { job: jobId, pinned: false, attempt: null, stream: "stdout", key: null, text: "",
    next: null, ended: false, missing: false, truncated: false, error: null, busy: false,
    latest: null, decoder: null };
  $("job-log").textContent = "";
  $("job-log-status").textContent = "";
  $("job-log-attempt").replaceChildren();
  document.querySelectorAll("input[name=job-log-stream]").forEach((r) => { r.checked = r.value === "stdout"; });
}

export function drawLog() {
  const L = state.log, pre = $("job-log");
  if (!L || !L.latest) return;
  const atBottom = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 24;
  if (pre.textContent !== L.text) pre.textContent = L.text;
  if (atBottom) pre.scrollTop = pre.scrollHeight;  // keep following the end unless scrolled up
  const err = L.error ? `${errorHeadline(L.error)} (${L.error.status || ""} ${L.error.code || ""}) ${L.error.serverMessage || ""}` : "";
  const parts = [err || (L.missing ? t("log.none") : L.ended ? t("log.ended") : t("log.running"))];
  if (L.truncated && !L.missing) parts.push(t("log.truncated"));
  $("job-log-status").textContent = parts.join(" ");
}

export async function refreshLog(job) {
  if (job) {
    if (!state.log || state.log.job !== job.id) resetLog(job.id);
    state.log.latest = job;
  }
  const L = state.log;
  if (!L || !L.latest) return;
  const latest = L.latest, attempt = L.pinned ? L.attempt : latest.attempt;
  const key = `${latest.id}/${attempt}/${L.stream}`;
  if (key !== L.key) {
    Object.assign(L, { key, attempt, text: "", next: null, ended: false, missing: false,
      truncated: false, error: null, decoder: new TextDecoder("utf-8") });
  }
  const select = $("job-log-attempt");
  if (select.options.length !== latest.attempt) {
    select.replaceChildren(...Array.from({ length: latest.attempt }, (_, i) =>
      h("option", { value: String(i + 1) }, String(i + 1))));
  }
  select.value = String(attempt);
  if (L.ended || L.busy) { drawLog(); return; }
  L.busy = true;
  try {
    const offset = L.next === null ? -LOG_TAIL : L.next;
    const q = `attempt=${attempt}&stream=${L.stream}&offset=${offset}`;
    const headers = state.token ? { Authorization: "Bearer " + state.token } : {};
    const resp = await fetch(`/v1/jobs/${encodeURIComponent(latest.id)}/logs?${q}`, { headers });
    if (key !== L.key || L !== state.log) return;  // another attempt, stream or job meanwhile
    if (resp.ok) {
      const bytes = new Uint8Array(await resp.arrayBuffer());
      if (key !== L.key || L !== state.log) return;
      if (L.next === null && Number(resp.headers.get("Jpu-Log-Start")) > 0) L.truncated = true;
      L.text += L.decoder.decode(bytes, { stream: true });
      if (L.text.length > LOG_KEEP) { L.text = L.text.slice(-LOG_KEEP); L.truncated = true; }
      L.next = Number(resp.headers.get("Jpu-Log-End"));
      L.ended = resp.headers.get("Jpu-Log-Ended") === "true";
      L.missing = false; L.error = null;
    } else if (resp.status === 404) {
      L.missing = true;  // not started yet; an attempt that is over will never have any
      L.ended = latest.terminal || attempt < latest.attempt;
    } else {
      const e = ((await resp.json().catch(() => ({}))).error) || {};
      L.error = { status: resp.status, code: e.code || "", serverMessage: e.message || resp.statusText };
    }
  } catch (e) {
    L.error = { network: true, message: String(e.message || e), serverMessage: String(e.message || e) };
  } finally {
    L.busy = false;
  }
  if (L === state.log) drawLog();
}
