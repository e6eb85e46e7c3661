import { $, api, clearRows, errorHeadline, fmtTime, h, locale, setRows, state, t, tf } from "./core.js";
import { STRINGS } from "./strings.js";

// The files pane of the job page (SPEC §8 GET /v1/jobs/{id}/files): the files the job wrote into
// the attempt's JOB_OUTPUT_DIR, one directory at a time, each file a download link. The attempt
// is the output pane's (its selector). A listing is asked again on each poll while the attempt
// runs, and kept once it has ended (nothing changes any more). A plain link cannot carry the API
// token, so a click fetches the file with it and hands the bytes to the browser as a download.
// An ES module of the console (main.js), its helpers from core.js.

Object.assign(STRINGS.en, {
  "job.files": "Files", "files.name": "Name", "files.size": "Size (bytes)",
  "files.modified": "Modified", "files.up": "Up one directory",
  "files.empty": "No files here.", "files.none": "No output directory yet for this attempt.",
  "files.symlink": "symbolic link, never followed", "files.other": "not a plain file",
  "files.more": "Showing the first {n} entries; `jpu files ID` lists them all.",
});
Object.assign(STRINGS.ko, {
  "job.files": "파일", "files.name": "이름", "files.size": "크기 (바이트)",
  "files.modified": "수정 시각", "files.up": "상위 디렉터리",
  "files.empty": "파일이 없습니다.", "files.none": "이 시도의 출력 디렉터리가 아직 없습니다.",
  "files.symlink": "심볼릭 링크 (따라가지 않음)", "files.other": "일반 파일이 아님",
  "files.more": "처음 {n}개만 표시합니다. 전체는 `jpu files ID`로 볼 수 있습니다.",
});

export const FILES_LIMIT = 500;

export const filesUrl = (jobId, path) => `/v1/jobs/${encodeURIComponent(jobId)}/files` +
  (path === undefined ? "" : "/" + path.split("/").map(encodeURIComponent).join("/"));

// Called by the job page's draw (job.js loadJob) with the job shown.
export async function refreshFiles(job) {
  if (!state.files || state.files.job !== job.id) {
    state.files = { job: job.id, path: "", key: null, final: false, busy: false, body: null,
      error: null, missing: false };
    clearRows($("job-files-rows"));
  }
  const F = state.files, L = state.log;
  F.latest = job;
  const attempt = L && L.job === job.id && L.pinned ? L.attempt : job.attempt;
  const key = `${job.id}/${attempt}/${F.path}`;
  if (key !== F.key) Object.assign(F, { key, attempt, final: false, body: null, error: null, missing: false });
  if (F.final || F.busy) { drawFiles(); return; }
  const over = Boolean(job.terminal) || attempt < job.attempt;  // its files no longer change
  F.busy = true;
  try {
    const q = new URLSearchParams({ attempt: String(attempt), path: F.path, limit: String(FILES_LIMIT) });
    const body = await api(`${filesUrl(job.id)}?${q}`);
    if (key !== F.key || F !== state.files) return;  // another attempt, directory or job meanwhile
    Object.assign(F, { body, missing: false, error: null, final: over });
  } catch (e) {
    if (key !== F.key || F !== state.files) return;
    if (e.status === 404 && !F.path) Object.assign(F, { missing: true, body: null, error: null, final: over });
    else F.error = e;
  } finally {
    F.busy = false;
  }
  if (F === state.files) drawFiles();
}

export function fileRow(F, e) {
  const rel = F.path ? `${F.path}/${e.name}` : e.name;
  let name;
  if (e.type === "dir") name = h("a", { href: "#", "data-dir": rel }, e.name + "/");
  else if (e.type === "file") {
    name = h("a", { href: `${filesUrl(F.job, rel)}?attempt=${F.attempt}`, download: e.name, "data-file": rel }, e.name);
  } else name = h("span", {}, e.name, " ", h("span", { class: "muted" }, `(${t("files." + e.type)})`));
  const size = e.size === null ? "" : Number(e.size).toLocaleString(locale());
  return h("tr", {}, h("td", {}, name), h("td", { class: "num" }, size), h("td", {}, fmtTime(e.mtime)));
}

export function drawFiles() {
  const F = state.files;
  if (!F) return;
  $("job-files-path").textContent = "/" + F.path;
  $("job-files-up").hidden = !F.path;
  const entries = (F.body && F.body.entries) || [];
  setRows($("job-files-rows"), F.key + "\u0000" + JSON.stringify(entries), () => entries.map((e) => fileRow(F, e)));
  const err = F.error ? `${errorHeadline(F.error)} (${F.error.status || ""} ${F.error.code || ""}) ${F.error.serverMessage || ""}` : "";
  let status = err || (F.missing ? t("files.none") : F.body && !entries.length ? t("files.empty") : "");
  if (!err && F.body && F.body.next_cursor) status = tf("files.more", { n: entries.length });
  $("job-files-status").textContent = status;
}

export async function downloadFile(a) {
  const F = state.files;
  try {
    const headers = state.token ? { Authorization: "Bearer " + state.token } : {};
    const resp = await fetch(a.getAttribute("href"), { headers });
    if (!resp.ok) {
      const e = ((await resp.json().catch(() => ({}))).error) || {};
      throw Object.assign(new Error(e.message || resp.statusText),
        { status: resp.status, code: e.code || "", serverMessage: e.message || resp.statusText });
    }
    const url = URL.createObjectURL(await resp.blob());
    const save = h("a", { href: url, download: a.getAttribute("download"), hidden: "" });
    document.body.append(save);
    save.click();
    save.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60_000);
  } catch (e) {
    if (F !== state.files) return;
    F.error = e.status ? e : { network: true, message: String(e.message || e), serverMessage: String(e.message || e) };
    drawFiles();
  }
}

export function openDir(path) {
  const F = state.files;
  if (!F || !F.latest) return;
  F.path = path;
  refreshFiles(F.latest);
}

$("job-files-rows").addEventListener("click", (ev) => {
  const a = ev.target.closest("a");
  if (!a) return;
  ev.preventDefault();
  if (a.dataset.dir !== undefined) openDir(a.dataset.dir);
  else if (a.dataset.file !== undefined) downloadFile(a);
});
$("job-files-up").addEventListener("click", () => {
  if (state.files) openDir(state.files.path.split("/").slice(0, -1).join("/"));
});
$("job-log-attempt").addEventListener("change", () => {  // the output pane's attempt: ours too
  if (state.files && state.files.latest) refreshFiles(state.files.latest);
});
