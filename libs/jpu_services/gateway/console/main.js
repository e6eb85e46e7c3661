// JPU-Share web console (SPEC U2), the page's one script (an ES module, no build step): routing
// to the views, live updates, and the page's controls. It talks only to the REST API (/v1); the
// token the user types is kept in localStorage and sent as `Authorization: Bearer <token>`.
import { $, CHART_WINDOWS, LOG_POLL_MS, POLL_MS, api, applyStrings, clearRows, refreshBanner, setRenderer, showError, state } from "./core.js";
import { clearJob, loadJob } from "./job.js";
import { loadJobs } from "./jobs.js";
import { chartResized, loadCharges, loadLabs } from "./labs.js";
import { refreshLog } from "./log.js";
import { loadPool } from "./pool.js";
import { loadQueue } from "./queue.js";
import { submitJob, timeHint } from "./submit.js";
import { catalog } from "./strings.js";
import { loadWorkspaces } from "./workspaces.js";

// --- routing, with a request token: only the latest render may draw ----------------------------
export const VIEWS = { queue: loadQueue, pool: loadPool, labs: loadLabs, jobs: loadJobs, job: loadJob, charges: loadCharges, workspaces: loadWorkspaces, submit: null };
export const CLEAR = {
  queue: () => { clearRows($("queue-rows")); clearRows($("running-rows")); },
  pool: () => { clearRows($("pool-cards")); },
  labs: () => { clearRows($("lab-rows")); $("usage-chart").replaceChildren(); },
  jobs: () => { clearRows($("job-rows")); },
  workspaces: () => { clearRows($("ws-rows")); $("ws-log").textContent = ""; $("ws-default").textContent = ""; },
  job: (id) => clearJob(id),
  charges: () => { clearRows($("charge-rows")); $("charges-summary").textContent = ""; $("charges-lab").textContent = ""; },
};

export function route() {
  const [, name = "queue", arg] = (location.hash || "#/queue").split("/");
  const view = name in VIEWS ? name : "queue";
  return { view, arg: arg ? decodeURIComponent(arg) : undefined };
}

export async function render(opts = {}) {
  const { view, arg } = route();
  const key = `${view}/${arg ?? ""}`;
  if (opts.poll && (state.busy || key !== state.viewKey)) return;  // a navigation is under way
  const tok = ++state.nav;
  if (key !== state.viewKey) {  // a navigation: nothing of the previous view stays on screen
    state.viewKey = key;
    if (CLEAR[view]) CLEAR[view](arg);
    showError(null);
  }
  document.querySelectorAll(".view").forEach((s) => { s.hidden = s.id !== "view-" + view; });
  document.querySelectorAll("nav a").forEach((a) => a.classList.toggle("active", a.hash === "#/" + view));
  refreshBanner();
  if (!VIEWS[view]) return;
  state.busy = tok;
  try {
    const draw = await VIEWS[view](arg);
    if (tok !== state.nav) return;  // the answer of an older navigation or poll: dropped
    draw();
    showError(null);
  } catch (e) {
    if (tok !== state.nav) return;
    if (view === "job") clearJob(arg);  // a 403/404 alone, never above another job
    showError(e);
  } finally {
    if (state.busy === tok) state.busy = 0;
  }
}

export async function whoami() {
  if (!state.token) { $("whoami").textContent = ""; return; }
  try {
    const me = state.me = await api("/v1/me"); $("whoami").textContent = `${me.user} (${me.lab}, ${me.role})`;
    $("charges-link").href = "#/charges/" + encodeURIComponent(me.lab);  // F5: their own lab's
  } catch (_) { $("whoami").textContent = ""; state.me = null; }
}

// Live updates (SPEC U2): the current view's endpoints every POLL_MS (the log pane every LOG_POLL_MS)
// while the page is visible; nothing while it is hidden; at once when it shows again.
export function startPolling() {
  if (state.timers) return;
  state.timers = [
    setInterval(() => { if (!location.hash.startsWith("#/submit")) render({ poll: true }); }, POLL_MS),
    setInterval(() => {
      if (location.hash.startsWith("#/job/") && state.log && !state.log.ended) refreshLog();
    }, LOG_POLL_MS),
  ];
}
export function stopPolling() {
  (state.timers || []).forEach(clearInterval);
  state.timers = null;
}

// The page's words in the current language, the time limit's hint with them.
function strings() {
  applyStrings();
  timeHint();
}

export function start() {
  setRenderer(render);
  strings();
  $("token-input").value = state.token;
  $("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.token = $("token-input").value.trim();
    localStorage.setItem("jpu.token", state.token);
    state.labs = []; state.me = null;
    state.viewKey = null;  // everything again, as the new user sees it
    whoami(); render();
  });
  $("lang-toggle").addEventListener("click", () => {
    state.lang = state.lang === "ko" ? "en" : "ko";
    localStorage.setItem("jpu.lang", state.lang);
    strings(); render();
  });
  $("job-open").addEventListener("submit", (ev) => {
    ev.preventDefault(); location.hash = "#/job/" + encodeURIComponent($("job-id-input").value.trim());
  });
  $("submit-form").addEventListener("submit", submitJob);
  document.querySelector("#submit-form input[name=time_limit]").addEventListener("input", timeHint);
  document.querySelectorAll("#chart-window button").forEach((b) => b.addEventListener("click", () => {
    const hours = Number(b.dataset.hours);
    if (!CHART_WINDOWS.includes(hours) || hours === state.chartHours) return;
    state.chartHours = hours;
    state.viewKey = null;  // a new window: drop what an older request would draw
    render();
  }));
  $("job-log-attempt").addEventListener("change", (ev) => {
    if (!state.log) return;
    state.log.pinned = true; state.log.attempt = Number(ev.target.value); refreshLog();
  });
  document.querySelectorAll("input[name=job-log-stream]").forEach((r) => r.addEventListener("change", () => {
    if (state.log && r.checked) { state.log.stream = r.value; refreshLog(); }
  }));
  document.addEventListener("visibilitychange", () => {
    if (document.hidden) { stopPolling(); return; }
    startPolling(); render({ poll: true });
  });
  window.addEventListener("hashchange", () => render());
  new ResizeObserver(chartResized).observe($("usage-chart"));
  whoami();
  // the first view once the catalog's words are in STRINGS (a state's Korean name is there);
  // the controls above work at once, so nothing typed meanwhile is lost
  catalog.catch(() => {}).then(() => {
    strings(); render();
    if (!document.hidden) startPolling();
  });
}

start();
