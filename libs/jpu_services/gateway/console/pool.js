// The GPU pool view (SPEC U2).
import { $, api, h, jobLink, labColor, labNames, setRows, state, swatch, t } from "./core.js";

export function gpuClass(s) { return s.startsWith("job:") ? "job" : s.split(":")[0]; }

// SPEC U2 "the GPU pool by placement", with who uses what: the pool's GPUs carry job ids;
// /v1/queue (public, like squeue) says whose (user, lab) they are.
export async function loadPool() {
  const [p, q] = await Promise.all([api("/v1/placements"), api("/v1/queue"), labNames()]);
  return () => {
    const who = new Map();
    for (const j of [...(q.running || []), ...(q.queue || [])]) who.set(j.job_id, j);
    const owner = (id) => who.get(id) || {};
    const holder = (kind, r) => {
      const j = owner(r.job_id);
      return h("div", { class: "holder" }, j.lab ? swatch(j.lab) : null, `${t(kind)}: `,
        j.user ? h("strong", {}, `${j.user} (${j.lab})`) : null, " ", jobLink(r.job_id),
        ` · ${t("pool.gpu")} ${r.gpus.join(",")}`);
    };
    const labs = [...new Set([...state.labs, ...[...who.values()].map((j) => j.lab)])];
    setRows($("lab-legend"), JSON.stringify(labs), () => [h("span", {}, t("gpu.labs")),
      ...labs.map((l) => h("span", { class: "lab-key", "data-lab": l }, swatch(l), l))]);
    const sig = JSON.stringify([p.placements, [...who.values()].map((j) => [j.job_id, j.user, j.lab])]);
    setRows($("pool-cards"), sig, () => (p.placements || []).map((pl) => h("div", { class: "card" },
      h("h3", {}, `${pl.node} · ${pl.tier}`),
      h("div", { class: "meta" }, `${t("pool.capacity")} ${pl.capacity} · ${t("pool.idle")} ${pl.idle}`),
      h("div", {}, (pl.gpus || []).map((g) => {
        const kind = gpuClass(g.state), ref = g.state.split(":")[1];
        const j = ref && (kind === "job" || kind === "reserved") ? owner(ref) : {};
        const style = !j.lab ? null : kind === "job" ? { background: labColor(j.lab) } : { borderColor: labColor(j.lab) };
        const label = { free: "gpu.idle", job: "gpu.running", reserved: "gpu.reserved", backfill: "gpu.backfill", down: "gpu.down" }[kind];
        const title = [`#${g.index}`, label ? t(label) : g.state, ref, j.user ? `${j.user} (${j.lab})` : null].filter(Boolean).join(" · ");
        return h("span", { class: "gpu " + kind, title, style, "data-lab": j.lab || null, "data-user": j.user || null });
      })),
      h("div", { class: "meta" },
        (pl.running || []).map((r) => holder("gpu.running", r)),
        (pl.reserved || []).map((r) => holder("gpu.reserved", r)),
        (pl.backfilled || []).map((b) => h("div", {}, `${t("gpu.backfill")}: ${t("pool.gpu")} #${b.gpu}`))))));
  };
}
