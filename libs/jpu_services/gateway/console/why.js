import { $, api, clearRows, codeText, fmtDur, fmtNum, fmtTime, h, has, setRows, showError, state, t, tf } from "./core.js";
import { catalog } from "./strings.js";

// Why a job waited, on the job page (SPEC U4): GET /v1/jobs/{id}/wait in sentences, in
// the console's language. Loaded on request (a replay of the log, not for every poll) and kept for
// the job shown, so a poll or the language toggle redraws it without asking again. Its sentences
// are the catalog `jpu why` reads (jpu/explain/why.json, strings.js): `why.k` for its key `k`.
// An ES module of the console (main.js), its helpers from core.js.

export const why = { id: null, wait: null };  // the explanation loaded for the job shown

// The cause in words: one sentence per kind (jpu.explain.wait.CauseKind), or per kind and
// reason, as jpu.cli.why renders it; never the event's type.
export function whyCause(c) {
  if (!c) return "";
  // Q8: the parent and how it ended, when the story knows them (as jpu.cli.why)
  const sub = c.kind === "dependency_never_satisfied" && (c.jobs || []).length
    ? (c.state ? "parent" : "unknown") : c.reason;
  const key = has(`why.cause.${c.kind}.${sub}`) ? `why.cause.${c.kind}.${sub}` : `why.cause.${c.kind}`;
  if (!has(key)) return "";
  const jobs = (c.jobs || []).join(", "), waited = fmtDur(c.waited_s || 0);
  let text = tf(key, {
    job: c.job_id || "", lab: c.lab || "", jobs, other_lab: c.other_lab || "", user: c.user || "",
    node: c.node || "", tier: c.tier || "", gpus: (c.gpus || []).join(","), count: c.count,
    needed: c.needed, vram: c.vram_gb, min_vram: c.min_vram_gb, code: c.code, reason: c.reason || "",
    why: has("why.release." + c.reason) ? t("why.release." + c.reason) : (c.reason || ""),
    state: c.state || "", by: c.by || "", waited,
    message: c.message ? tf("why.message", { message: c.message }) : "",
    after: (c.waited_s || 0) < 1 ? t("why.at_once") : tf("why.after", { waited }),
    freed: jobs ? tf("why.freed_by", { jobs }) : "",
  });
  if (c.kind === "other_entered_ahead" && c.lab_usage !== null && c.lab_usage !== undefined) {
    text += tf("why.usage", { lab: c.lab, usage: fmtNum(c.lab_usage) });
  }
  if (c.charge !== null && c.charge !== undefined && c.lab) {
    text += tf("why.charged", { lab: c.lab, charge: fmtNum(c.charge), usage: fmtNum(c.lab_usage) });
  }
  return text;
}

// The step's pending reason in the catalog's sentence, as jpu.cli.why says it: the personal
// queue's names the jobs holding the slots (S1) or the array's tasks holding its %N (Q7), MinVram
// the VRAM floor (D7).
export function whyReason(s, w) {
  if (!s.pending_reason) return t("why.reason.none");
  const jobs = (s.slot_holders || []).join(", ");
  const key = s.pending_reason === "ConcurrencyLimit" && !jobs ? "ConcurrencyLimit.none" : s.pending_reason;
  if (!has("why.reason." + key)) return s.pending_reason;
  return tf("why.reason." + key, { user: w.user, jobs, min_vram: s.min_vram_gb });
}

export function whyNodes(w) {
  const phases = Object.entries(w.phases).map(([k, s]) => `${t("why.phase." + k)} ${fmtDur(s)}`).join(" · ");
  const out = [h("p", { class: "why-phases" }, tf("why.phases", { phases }))];
  const steps = w.steps.map((s) => {
    let head = `${fmtTime(s.at)} — ${codeText("state", s.state)}`;
    if (s.rank !== null) {
      head += ", " + tf("why.rank", { rank: s.rank, n: s.queue_length }) + " — " + whyReason(s, w);
    } else if (s.pending_reason) {
      head += " — " + whyReason(s, w);
    }
    const items = [h("div", {}, head)];
    const cause = whyCause(s.cause);
    if (cause) items.push(h("div", { class: "muted" }, tf("why.because", { cause })));
    else if (s.sampled) items.push(h("div", { class: "muted" }, t("why.sampled")));
    if (s.ahead.length) {
      const labs = s.ahead.map((a) => tf("why.ahead_lab", { lab: a.lab, usage: fmtNum(a.usage), jobs: a.jobs })).join(", ");
      items.push(h("div", { class: "muted" }, tf("why.ahead", { labs })));
    }
    return h("li", { "data-rank": s.rank ?? "" }, items);
  });
  out.push(h("ol", { class: "timeline why-steps" }, steps));
  if (!w.reservations.length) out.push(h("p", {}, t("why.no_reservations")));
  for (const r of w.reservations) {
    const gpus = "GPU " + r.gpus.join(",");
    if (r.reason === null) {
      out.push(h("p", {}, tf("why.res_held", { gpus, node: r.node, tier: r.tier, start: fmtTime(r.started_at) })));
      continue;
    }
    const cost = tf(r.charged_now ? "why.res_now" : "why.res_later", { cost: fmtNum(r.cost), lab: w.lab });
    const end = `${t("why.release." + r.reason)}; ${cost}`;
    out.push(h("p", { class: "why-reservation" }, tf("why.res", {
      gpus, node: r.node, tier: r.tier, start: fmtTime(r.started_at), dur: fmtDur(r.ended_at - r.started_at), end })));
    if (r.demoted_by) {
      out.push(h("p", { class: "why-demoted" }, tf("why.demoted", {
        cause: whyCause(r.demoted_by), first: r.overtaken_by, first_lab: r.overtaken_by_lab,
        usage: fmtNum(r.overtaken_by_usage) })));
    }
  }
  return out;
}

// Called by the job page's draw (job.js loadJob) for the job shown.
export function drawWhy(jobId) {
  const box = $("job-why"), button = $("job-why-load");
  if (why.id !== jobId) { why.id = jobId; why.wait = null; }
  button.onclick = async () => {
    try {
      const [w] = await Promise.all([api("/v1/jobs/" + encodeURIComponent(jobId) + "/wait"), catalog]);
      if (why.id === jobId) { why.wait = w; showError(null); drawWhy(jobId); }
    } catch (e) { showError(e); }
  };
  if (why.wait === null) { clearRows(box); return; }
  setRows(box, JSON.stringify(why.wait), () => whyNodes(why.wait));
}
