import { $, api, codeSpan, errorHeadline, fmtDur, fmtSlurm, h, jobLink, localError, showError, t } from "./core.js";
import { parseTimeLimit } from "./time.js";

// --- the submit form (SPEC U2; the time limit as SPEC U1's `jpu submit --time`) ---------------
export function timeHint() {
  const input = document.querySelector("#submit-form input[name=time_limit]"), hint = $("time-hint");
  if (!input || !hint) return;
  const v = input.value.trim();
  if (!v) { hint.textContent = ""; input.removeAttribute("aria-invalid"); return; }
  try {
    const s = parseTimeLimit(v);
    hint.textContent = s === null ? `= ${t("submit.time_none")}` : `= ${fmtDur(s)} (${fmtSlurm(s)})`;
    input.removeAttribute("aria-invalid");
  } catch (e) {
    hint.textContent = errorHeadline(e);
    input.setAttribute("aria-invalid", "true");
  }
}

export async function submitJob(ev) {
  ev.preventDefault();
  const f = new FormData(ev.target);
  const body = { name: f.get("name"), command: f.get("command"), num_gpus: Number(f.get("num_gpus")) };
  const tiers = String(f.get("tiers") || "").split(",").map((s) => s.trim()).filter(Boolean);
  if (tiers.length) body.tiers = tiers;
  const chdir = String(f.get("chdir") || "").trim();  // U5: as `jpu submit -D`; the API checks it
  if (chdir) body.chdir = chdir;
  const out = $("submit-result");
  const refuse = (err) => { out.textContent = ""; showError(err); };
  const limit = String(f.get("time_limit") || "").trim();
  if (limit) {
    try {
      const s = parseTimeLimit(limit);
      if (s !== null) body.time_limit_s = s;
    } catch (e) { refuse(e); return; }
  }
  // KEY=VALUE per line; a line without "=" is the user's mistake to see, never dropped silently
  const env = {};
  const lines = String(f.get("env") || "").split("\n");
  for (let n = 0; n < lines.length; n++) {
    const l = lines[n].trim();
    if (!l) continue;
    const i = l.indexOf("=");
    if (i <= 0) { refuse(localError("submit.env_bad", { n: n + 1, line: l })); return; }
    env[l.slice(0, i)] = l.slice(i + 1);
  }
  if (Object.keys(env).length) body.env = env;
  try {
    const job = await api("/v1/jobs", { method: "POST", body: JSON.stringify(body),
      headers: { "Idempotency-Key": crypto.randomUUID ? crypto.randomUUID() : String(Date.now()) } });
    out.replaceChildren(`${t("submit.ok")} `, jobLink(job.id), " (", codeSpan("state", job.state), ")",
      ...(job.warnings || []).map((w) => h("p", { class: "warning" }, w.message)));  // U5: e.g. a read-only chdir
    showError(null);
  } catch (e) { refuse(e); }
}
