// The queue view (SPEC U2): the global queue with ranks and pending reasons, and what runs now.
import { $, api, codeSpan, fmtNum, fmtSlurm, h, jobLink, labNames, reasonCode, setRows, swatch, t } from "./core.js";
import { estimateText, estimateTitle } from "./job.js";

export async function loadQueue() {
  const [q] = await Promise.all([api("/v1/queue"), labNames()]);
  return () => {
    const queue = q.queue || [], running = q.running || [];
    const eta = queue.some((j) => "estimated_start" in j);  // SPEC U4, once the API gives it
    $("queue-eta-head").hidden = !eta;
    setRows($("queue-rows"), JSON.stringify([eta, queue]), () => {
      const rows = queue.map((j) => h("tr", {},
        h("td", { class: "num" }, j.rank ?? "–"), h("td", {}, jobLink(j.job_id)),
        h("td", { class: "name" }, j.name), h("td", {}, swatch(j.lab), j.lab), h("td", {}, j.user), h("td", { class: "num" }, j.num_gpus),
        h("td", {}, codeSpan("state", j.state)), h("td", { class: "num" }, fmtNum(j.lab_usage)),
        h("td", { class: "num" }, fmtNum(j.lab_accrued_uncharged)),  // F4: not in the order
        eta ? h("td", { title: estimateTitle(j) }, estimateText(j)) : null,
        h("td", {}, codeSpan("reason", reasonCode(j)))));
      return rows.length ? rows : [h("tr", {}, h("td", { colspan: eta ? 11 : 10 }, t("queue.empty")))];
    });
    setRows($("running-rows"), JSON.stringify(running.map((j) => [j, Math.floor((j.elapsed_s || 0) / 60)])), () => {
      const rows = running.map((j) => h("tr", {},
        h("td", {}, jobLink(j.job_id)), h("td", { class: "name" }, j.name),
        h("td", {}, swatch(j.lab), j.lab), h("td", {}, j.user), h("td", { class: "num" }, j.num_gpus),
        h("td", {}, j.placement ? `${j.placement.node} · ${j.placement.tier} [${j.placement.gpus.join(",")}]` : ""),
        h("td", {}, codeSpan("state", j.state)), h("td", { class: "num" }, fmtSlurm(j.elapsed_s)),
        h("td", { class: "num" }, j.time_limit_s ? fmtSlurm(j.time_limit_s) : "–")));
      return rows.length ? rows : [h("tr", {}, h("td", { colspan: 9 }, t("running.empty")))];
    });
  };
}
