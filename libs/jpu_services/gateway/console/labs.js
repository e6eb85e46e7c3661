// The lab usage view (SPEC U2: the usage chart and its window) and a lab's charges (F5).
import { $, api, fill, fmtDur, fmtNum, fmtTime, h, has, jobLink, labColor, labNames, localError, pad, setRows, state, swatch, t, tf } from "./core.js";

// SPEC U2 "lab usage over time": the window is 1 h, 24 h (default), 7 d or 30 d; the x axis follows it: every 10 min for 1 h, every 3 h (clock times) for
// 24 h, every day for 7 d, every 5 days for 30 d (dates, MM-DD as in fmtTime), at local midnight / on the hour.
export function chartTicks(x0, x1, hours) {
  const out = [];
  const d = new Date(x0 * 1000);
  if (hours <= 2) {
    d.setSeconds(0, 0);
    while (d.getMinutes() % 10) d.setMinutes(d.getMinutes() + 1);
    for (; d.getTime() / 1000 <= x1; d.setMinutes(d.getMinutes() + 10)) {
      if (d.getTime() / 1000 >= x0) out.push([d.getTime() / 1000, `${pad(d.getHours())}:${pad(d.getMinutes())}`]);
    }
  } else if (hours <= 48) {
    d.setMinutes(0, 0, 0);
    const step = hours <= 24 ? 3 : 6;
    while (d.getHours() % step) d.setHours(d.getHours() + 1);
    for (; d.getTime() / 1000 <= x1; d.setHours(d.getHours() + step)) {
      if (d.getTime() / 1000 >= x0) out.push([d.getTime() / 1000, `${pad(d.getHours())}:00`]);
    }
  } else {
    d.setHours(0, 0, 0, 0);
    const step = hours <= 24 * 8 ? 1 : 5;
    for (; d.getTime() / 1000 <= x1; d.setDate(d.getDate() + step)) {
      if (d.getTime() / 1000 >= x0) {
        out.push([d.getTime() / 1000, `${pad(d.getMonth() + 1)}-${pad(d.getDate())}`]);
      }
    }
  }
  return out;
}

export function usageChart(hist, hours) {
  const NS = "http://www.w3.org/2000/svg";
  const labs = Object.keys(hist.series || {}).sort();
  const all = labs.flatMap((l) => hist.series[l]);
  if (!all.length) return h("p", {}, t("chart.empty"));
  const svg = document.createElementNS(NS, "svg");
  // drawn at the size it is shown (the box's width, the CSS height): it fills the whole width
  const box = $("usage-chart");
  const W = Math.max(480, Math.round((box && box.clientWidth) || 800)), H = 260, L = 70, B = 22, R = 14;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const x0 = hist.start, x1 = Math.max(hist.end, x0 + 1);
  Object.entries({ "data-hours": hours, "data-start": x0, "data-end": x1 }).forEach(([k, v]) => svg.setAttribute(k, v));
  const ymax = Math.max(1, ...all.map((p) => p[1]));
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const sy = (y) => H - B - (y / ymax) * (H - B - 10);
  const add = (tag, attrs, text) => {
    const el = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
    if (text !== undefined) el.textContent = text;
    svg.append(el); return el;
  };
  for (const [x, label] of chartTicks(x0, x1, hours)) {
    add("line", { x1: sx(x), y1: 10, x2: sx(x), y2: H - B, stroke: "#eceff3" });
    add("text", { class: "tick", x: sx(x), y: H - 6, "font-size": 11, "text-anchor": "middle", fill: "#6b7280" }, label);
  }
  add("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#999" });
  add("line", { x1: L, y1: 10, x2: L, y2: H - B, stroke: "#999" });
  add("text", { x: L - 6, y: 16, "font-size": 11, "text-anchor": "end" }, fmtNum(ymax));
  add("text", { x: L - 6, y: sy(ymax / 2) + 4, "font-size": 11, "text-anchor": "end" }, fmtNum(ymax / 2));
  add("text", { x: L - 6, y: H - B, "font-size": 11, "text-anchor": "end" }, "0");
  add("text", { x: L - 6, y: 30, "font-size": 10, "text-anchor": "end", fill: "#6b7280" }, "TFLOP-s");
  labs.forEach((lab, i) => {
    const color = labColor(lab);
    const pts = hist.series[lab].map((p) => `${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join(" ");
    add("polyline", { points: pts, fill: "none", stroke: color, "stroke-width": 2, "data-lab": lab });
    add("text", { x: L + 10 + i * 90, y: 24, fill: color, "font-size": 12 }, lab);
  });
  return svg;
}

export async function loadLabs() {
  const hours = state.chartHours;
  const [labs, hist] = await Promise.all([api("/v1/labs"), api(`/v1/usage/history?hours=${hours}&points=144`)]);
  await labNames(labs);
  return () => {
    document.querySelectorAll("#chart-window button").forEach((b) => {
      b.setAttribute("aria-pressed", String(Number(b.dataset.hours) === hours));
    });
    setRows($("lab-rows"), JSON.stringify(labs.labs), () => (labs.labs || []).map((l) => h("tr", {},
      h("td", {}, swatch(l.lab), l.lab), h("td", { class: "num" }, fmtNum(l.usage)),
      h("td", { class: "num" }, fmtNum(l.accrued_uncharged)),  // F4: charged when the jobs end
      h("td", { class: "num" }, fmtNum(l.raw_value)), h("td", {}, fmtTime(l.as_of)),
      h("td", { class: "num" }, l.running), h("td", { class: "num" }, l.queued))));
    // redrawn at each poll: the curves decay, and "now" moves
    chartShown = { hist, hours };
    $("usage-chart").replaceChildren(usageChart(hist, hours));
  };
}

// The chart is drawn at its box's width: a resized box (window, zoom) draws it again at once,
// not at the next poll. Called by a ResizeObserver on #usage-chart (main.js).
let chartShown = null;
export function chartResized() {
  const box = $("usage-chart"), svg = box.querySelector("svg");
  if (!chartShown || !svg || $("view-labs").hidden) return;
  if (Math.abs(svg.viewBox.baseVal.width - box.clientWidth) < 1) return;  // already at its width
  box.replaceChildren(usageChart(chartShown.hist, chartShown.hours));
}

// F5: a lab's charges, one by one — the answer of jpu.explain.usage, not computed here.
export const RELEASE_RULE = { demoted: "R3", maintenance: "M1", capacity: "R5" };
export function chargeKind(c) {
  if (c.kind === "reservation") return tf("charges.reservation", { rule: RELEASE_RULE[c.reason] || c.reason });
  if (c.kind === "run") return t(c.held.some((x) => x.what === "reservation") ? "charges.run_res" : "charges.run");
  return has("charges." + c.kind) ? t("charges." + c.kind) : c.kind;
}
export function heldText(c) {
  return c.held.map((x) => `${fmtDur(x.gpu_seconds)} × ${x.tier || "?"} (${x.tflops} TFLOPS)`).join(" + ");
}

export async function loadCharges(lab) {
  const me = state.me || (state.me = await api("/v1/me"));
  lab = lab || me.lab;  // a member's own lab by default
  const [x, labs] = await Promise.all([
    api(`/v1/labs/${encodeURIComponent(lab)}/usage/explain`).catch((e) => {
      throw e.status === 403 ? localError("charges.forbidden", { lab, mine: me.lab }) : e;
    }),
    me.role === "admin" ? api("/v1/labs") : null,  // admins: every lab's
  ]);
  return () => {
    $("charges-lab").textContent = lab;
    $("charges-labs").replaceChildren(...(labs ? labs.labs : []).map((l) =>
      h("a", { href: "#/charges/" + encodeURIComponent(l.lab), style: { marginRight: "1em" } }, l.lab)));
    $("charges-summary").textContent = x.charges.length
      ? tf("charges.summary", { usage: fmtNum(x.usage), hl: fmtDur(x.half_life_s) }) : t("charges.empty");
    setRows($("charge-rows"), JSON.stringify([x.at, x.charges.map((c) => c.seq)]), () => x.charges.map((c) => h("tr", {},
      h("td", {}, fmtTime(c.at)), h("td", {}, c.job_id ? jobLink(c.job_id) : ""), h("td", { class: "num" }, c.attempt ?? ""),
      h("td", {}, c.user ?? ""), h("td", {}, chargeKind(c)), h("td", {}, heldText(c)),
      h("td", { class: "num" }, fmtNum(c.amount)), h("td", { class: "num" }, c.decay.toFixed(4)),
      h("td", { class: "num" }, fmtNum(c.value_now)))));
  };
}
