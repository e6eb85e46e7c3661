// The job page (SPEC U2, U4): its fields, the event timeline, the dependency chain; the log pane
// (log.js), the files pane (files.js) and "why it waited" (why.js) are drawn from here.
import { $, api, clearRows, codeSpan, codeText, fmtClock, fmtDur, fmtNum, fmtSlurm, fmtTime, gpusText, h, has, jobLink, reasonCode, rerender, setRows, showError, state, t, tf } from "./core.js";
import { refreshFiles } from "./files.js";
import { refreshLog, resetLog } from "./log.js";
import { drawWhy, why } from "./why.js";

// SPEC U4: an estimate, with its basis and when it was computed; with no start, "unknown" and
// why (the API's estimate_reason), never the basis "unknown" a second time
export const estimateText = (j) => j.estimated_start ? fmtTime(j.estimated_start)
  : j.estimate_basis ? t("est.unknown") : "–";
export const estimateTitle = (j) => {
  if (!j.estimate_basis && !j.estimate_reason) return null;
  const what = j.estimated_start ? t("est." + j.estimate_basis) : j.estimate_reason || t("est.unknown");
  return `${what}${j.estimated_at ? ` · ${t("est.at")} ${fmtTime(j.estimated_at)}` : ""}`;
};

export function describe(key, v, job) {
  if (key === "estimated_start" && (job.estimate_basis || job.estimate_reason)) {
    return job.estimated_start ? `${estimateText(job)} (${estimateTitle(job)})`
      : `${t("est.unknown")}: ${estimateTitle(job)}`;
  }
  if (v === null || v === undefined || v === "") return null;
  if (key === "state") return codeSpan("state", v);
  if (key === "pending_reason") return codeSpan("reason", reasonCode(job));
  if (key === "reason") return codeSpan("end", v);
  if (key === "placement") return `${v.node} · ${v.tier} [${(v.gpus || []).join(",")}]`;
  if (key === "reservation") return `${v.node} · ${v.tier} [${(v.gpus || []).join(",")}] ${t("maint.since")} ${fmtTime(v.since)}`;
  if (key === "time_limit_s") return fmtSlurm(v);
  if (key === "elapsed_s") return fmtSlurm(v);
  if (key.endsWith("_at")) return fmtTime(v);
  if (key === "usage_charged") return fmtNum(v) + " TFLOP-s";
  if (key === "states") return Object.entries(v).map(([st, n]) => `${st}:${n}`).join(", ");
  if (key === "tasks") return h("span", {}, v.flatMap((id, i) => [i ? ", " : "", jobLink(id)]));
  if (key === "array_id") return jobLink(v);
  if (key === "held") return v ? t("f.held") : null;
  if (Array.isArray(v)) return v.join(", ");
  return String(v);
}

export const JOB_FIELDS = ["state", "states", "tasks", "array_id", "held", "attempt", "user", "lab", "num_gpus", "tiers", "min_vram_gb", "rank",
  "pending_reason", "estimated_start", "placement", "reservation", "time_limit_s", "elapsed_s",
  "usage_charged", "backend_job_id", "isolation", "exit_code", "reason", "submitted_at",
  "queue_entered_at", "ended_at", "workdir", "account"];

// --- the event timeline (SPEC U2): each event a sentence, its local time, how long since what it
// follows; the raw event behind a <details> toggle

export function timeline(events) {
  let submitted = null, queued = null, reserved = null, dispatched = null, started = null;
  return events.map((e) => {
    const { type, ts } = e;
    let text, dur = null;
    const since = (from, key) => { if (from !== null) dur = tf(key, { d: fmtDur(ts - from) }); };
    const n = (e.gpus || []).length;
    switch (type) {
      case "JobSubmitted":
        submitted = ts; queued = ts;
        text = tf("ev.JobSubmitted", { user: e.user, lab: e.lab, name: e.name, gpus: gpusText(e.num_gpus),
          tiers: e.tiers && e.tiers.length ? tf("ev.tiers", { tiers: e.tiers.join(", ") }) : "",
          limit: e.time_limit_s ? tf("ev.limit", { limit: fmtSlurm(e.time_limit_s) }) : "" });
        break;
      case "JobPromoted":
        text = t("ev.JobPromoted"); since(submitted, "ev.JobPromoted.d");
        queued = e.queue_entered_at ?? ts;
        break;
      case "ReservationStarted":
        reserved = ts;
        text = tf("ev.ReservationStarted", { gpus: gpusText(n), node: e.node, tier: e.tier });
        since(queued, "ev.ReservationStarted.d");
        break;
      case "ReservationGrown":
        text = tf("ev.ReservationGrown", { gpus: gpusText(n), node: e.node, tier: e.tier });
        since(reserved, "ev.ReservationGrown.d");
        break;
      case "ReservationShrunk":
        text = tf("ev.ReservationShrunk", { gpus: gpusText(n), node: e.node, tier: e.tier, removed: (e.removed || []).join(",") });
        break;
      case "ReservationReleased":
        text = tf("ev.ReservationReleased", { gpus: gpusText(n), node: e.node, tier: e.tier,
          why: has("rel." + e.reason) ? t("rel." + e.reason)
            : has("why.release." + e.reason) ? t("why.release." + e.reason) : e.reason });
        since(reserved, "ev.ReservationReleased.d");
        reserved = null;
        break;
      case "JobDispatched":
        dispatched = ts; started = null;
        text = tf("ev.JobDispatched", { attempt: e.attempt, node: e.node, tier: e.tier, list: (e.gpus || []).join(",") });
        since(queued, "ev.JobDispatched.d");
        break;
      case "JobStarted":
        started = ts;
        text = tf("ev.JobStarted", { attempt: e.attempt, backend: e.backend_job_id, isolation: e.isolation });
        since(dispatched, "ev.JobStarted.d");
        break;
      case "JobEnded":
        text = tf("ev.JobEnded", { attempt: e.attempt, state: codeText("state", e.state),
          exit: e.exit_code !== null && e.exit_code !== undefined ? tf("ev.exit", { code: e.exit_code }) : "",
          reason: e.reason ? tf("ev.reason", { reason: codeText("end", e.reason) }) : "",
          usage: e.usage ? tf("ev.usage", { usage: fmtNum(e.usage) }) : "" });
        if (started !== null) since(started, "ev.JobEnded.d"); else since(dispatched, "ev.JobEnded.held");
        break;
      case "JobRetryScheduled":
        queued = ts;  // back in the global queue, keeping its place (X8)
        // X8: the event opens attempt n+1; the one that ran out of memory is n
        text = tf("ev.JobRetryScheduled", { attempt: e.attempt - 1, next: e.attempt, vram: e.min_vram_gb });
        break;
      case "JobRetryDeclined":
        text = tf("ev.JobRetryDeclined", { attempt: e.attempt,
          why: has("ev.JobRetryDeclined." + e.reason) ? tf("ev.JobRetryDeclined." + e.reason, { vram: e.needed_vram_gb }) : e.reason });
        break;
      case "JobCancelRequested":
        text = tf("ev.JobCancelRequested", { by: e.by });
        break;
      default:
        text = tf("ev.other", { type });
    }
    return h("li", { "data-type": type, "data-seq": e.seq },
      h("span", { class: "sentence" }, text),
      h("span", { class: "sep" }, " · "), h("time", { class: "t", datetime: new Date(ts * 1000).toISOString(), title: fmtTime(ts) }, fmtClock(ts)),
      dur ? [h("span", { class: "sep" }, " · "), h("span", { class: "dur" }, dur)] : null,
      // the event as recorded, for whoever needs it (an admin, a bug report)
      h("details", { class: "raw" }, h("summary", {}, t("ev.raw")), h("pre", {}, JSON.stringify(e, null, 2))));
  });
}


export function clearJob(id) {
  $("job-body").hidden = true;
  $("job-title").textContent = "";
  clearRows($("job-fields"));
  clearRows($("job-events"));
  $("job-cancel").onclick = null;
  resetLog(id);
  state.files = null;  // the files pane (files.js) starts again
  clearRows($("job-files-rows"));
}

// Q8: the parents a job's `dependency` names (Slurm syntax; `singleton` names none)
export const parentsOf = (dep) => (dep || "").split(",").flatMap((part) => {
  const [kind, ...ids] = part.split(":");
  return ids.filter(Boolean).map((id) => ({ kind, id }));
});

// Q8: the dependency chain up from a job: each parent (a job, a task or a whole array) with its
// state, then its own parents, a few levels up (one GET each, at most DEP_MAX)
export const DEP_DEPTH = 4, DEP_MAX = 20;
export async function dependencyChain(dep, seen = new Set(), depth = 0) {
  const parents = parentsOf(dep).filter((p) => !seen.has(p.id) && seen.size < DEP_MAX);
  parents.forEach((p) => seen.add(p.id));
  return Promise.all(parents.map(async (p) => {
    const job = await api("/v1/jobs/" + encodeURIComponent(p.id)).catch(() => null);
    const up = job && job.dependency && depth + 1 < DEP_DEPTH
      ? await dependencyChain(job.dependency, seen, depth + 1) : [];
    return { ...p, job, up };
  }));
}

export function chainNodes(chain) {
  if (!chain.length) return null;
  return h("ul", { class: "dep-chain" }, chain.map((p) => h("li", { "data-parent": p.id },
    `${p.kind} → `, jobLink(p.id), p.job ? ` ${p.job.name} ` : ` (${t("dep.unknown")})`,
    p.job ? (p.job.states ? `(${describe("states", p.job.states)})` : codeSpan("state", p.job.state)) : null,
    chainNodes(p.up))));
}

export async function loadJob(id) {
  const [job, ev] = await Promise.all([
    api("/v1/jobs/" + encodeURIComponent(id)),
    api("/v1/jobs/" + encodeURIComponent(id) + "/events").catch((e) => e)]);
  const array = Array.isArray(job.tasks);  // Q7: an array's page: its fields and tasks
  if (ev instanceof Error) throw ev;
  const deps = job.dependency ? await dependencyChain(job.dependency, new Set([job.id])) : [];
  const chain = deps.length ? h("span", {}, job.dependency, chainNodes(deps)) : null;
  return () => {
    $("job-body").hidden = false;
    $("job-title").textContent = job.id;
    setRows($("job-fields"), JSON.stringify([job, deps]), () => {
      const items = JOB_FIELDS.flatMap((k) => {
        // Q7: an array's own page is not a task of itself
        if (k === "array_id" && job[k] === job.id) return [];
        let v = describe(k, job[k], job);
        // X8 raises min_vram_gb after an OOM: never show it as if the user had set it
        if (k === "min_vram_gb" && v !== null && "min_vram_gb_requested" in job
            && job.min_vram_gb_requested !== job.min_vram_gb) v += ` (${t("f.raised_by_oom")})`;
        return v === null ? [] : [h("dt", {}, t("f." + k)), h("dd", { "data-field": k }, v)];
      });
      (job.oom_explanation || []).forEach((s) => items.push(h("dt", {}, t("f.oom_retry")), h("dd", {}, s)));
      // SPEC U6: the sbatch options accepted with a warning at submit, kept on the job
      (job.sbatch_warnings || []).forEach((s) => items.push(h("dt", {}, t("f.sbatch_warning")), h("dd", { "data-field": "sbatch_warning" }, s)));
      if (job.command) items.push(h("dt", {}, t("f.command")), h("dd", {}, h("pre", {}, job.command)));
      if (chain) items.push(h("dt", {}, t("f.dependency")), h("dd", { "data-field": "dependency" }, chain));
      return items;
    });
    $("job-cancel").hidden = Boolean(job.terminal) || ["COMPLETED", "FAILED", "CANCELLED"].includes(job.state);
    $("job-cancel").onclick = async () => {
      try {
        await api(`/v1/jobs/${encodeURIComponent(id)}/cancel`, { method: "POST" }); showError(null);
        alert(t("job.cancel_sent")); rerender({ poll: true });
      } catch (e) { showError(e); }
    };
    $("job-run-panes").hidden = array;
    if (array) return;  // each task has its own output, files, events and wait
    const events = ev.events || [];
    setRows($("job-events"), events.map((e) => e.seq).join(","), () => timeline(events));
    drawWhy(job.id);  // why.js (U4)
    refreshLog(job);
    refreshFiles(job);  // files.js (SPEC §8 files)
  };
}
