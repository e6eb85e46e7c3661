// The jobs view (SPEC U2; arrays as one row, Q7).
import { $, api, codeSpan, h, jobLink, setRows, state, t } from "./core.js";

// Q7: an array's indices as squeue writes them, `ID_[0-3,7%2]`
export function arrayLabel(id, tasks) {
  const ks = tasks.map((j) => j.array_task).sort((a, b) => a - b), parts = [];
  for (let i = 0; i < ks.length; i++) {
    let k = i;
    while (k + 1 < ks.length && ks[k + 1] === ks[k] + 1) k++;
    parts.push(k > i ? `${ks[i]}-${ks[k]}` : `${ks[i]}`);
    i = k;
  }
  const cap = tasks[0].array_throttle ? `%${tasks[0].array_throttle}` : "";
  return `${id}_[${parts.join(",")}${cap}]`;
}

// "COMPLETED:3, RUNNING:1" (in the order the API gives them, lifecycle order)
export const stateCounts = (tasks) => {
  const n = {};
  tasks.forEach((j) => { n[j.state] = (n[j.state] || 0) + 1; });
  return Object.entries(n).map(([s, c]) => `${s}:${c}`).join(", ");
};

// Q8: a job ended because its dependency can never be met says so next to CANCELLED (as
// `jpu jobs`), not a bare CANCELLED
export const stateCell = (j) => j.state === "CANCELLED" && j.reason === "DEPENDENCY_NEVER_SATISFIED"
  ? h("td", {}, codeSpan("state", j.state), " (", codeSpan("end", j.reason), ")")
  : h("td", {}, codeSpan("state", j.state));

export const jobRow = (j, cls) => h("tr", { class: cls },
  h("td", {}, jobLink(j.id)), h("td", { class: "wrap" }, j.name), h("td", {}, j.user),
  h("td", { class: "num" }, j.num_gpus), stateCell(j),
  h("td", { class: "num" }, j.attempt));

// Q7: the tasks of one array as one row (its indices and %N, its tasks per state), expanded to
// the tasks' own rows on request; an array with one task in the page is that task's row
export function jobRows(jobs, draw) {
  const tasks = new Map();
  jobs.forEach((j) => { if (j.array_id) tasks.set(j.array_id, [...(tasks.get(j.array_id) || []), j]); });
  const out = [], shown = new Set();
  for (const j of jobs) {
    const members = j.array_id ? tasks.get(j.array_id) : null;
    if (!members || members.length < 2) { out.push(jobRow(j)); continue; }
    if (shown.has(j.array_id)) continue;
    shown.add(j.array_id);
    const open = state.openArrays.has(j.array_id);
    const toggle = h("button", { class: "expand", type: "button", "aria-expanded": String(open),
      title: t(open ? "jobs.collapse" : "jobs.expand"), "data-array": j.array_id }, open ? "▾" : "▸");
    toggle.addEventListener("click", () => {
      if (open) state.openArrays.delete(j.array_id); else state.openArrays.add(j.array_id);
      draw();
    });
    out.push(h("tr", { class: "array-row", "data-array": j.array_id },
      h("td", {}, toggle, " ", h("a", { href: "#/job/" + encodeURIComponent(j.array_id) }, arrayLabel(j.array_id, members))),
      h("td", { class: "wrap" }, j.name), h("td", {}, j.user), h("td", { class: "num" }, j.num_gpus),
      h("td", {}, stateCounts(members)), h("td", { class: "num" }, "–")));
    if (open) [...members].sort((a, b) => a.array_task - b.array_task).forEach((m) => out.push(jobRow(m, "task-row")));
  }
  return out;
}

export async function loadJobs() {
  const r = await api("/v1/jobs?limit=100");
  const draw = () => setRows($("job-rows"), JSON.stringify([r.jobs, [...state.openArrays]]), () => {
    const rows = jobRows(r.jobs || [], draw);
    return rows.length ? rows : [h("tr", {}, h("td", { colspan: 6 }, t("jobs.empty")))];
  });
  return draw;
}
