// What every view of the console uses (SPEC U2): its state, strings, DOM building, formats, the
// API client and its errors, lab colours and the maintenance banner. Vanilla JS, no build step.
// All text reaches the page through textContent / DOM nodes, never innerHTML (no HTML injection).
import { STRINGS } from "./strings.js";

export const POLL_MS = 3000, LOG_POLL_MS = 2000;  // live updates while the page is visible
export const CHART_WINDOWS = [1, 24, 168, 720];  // hours: 1 h / 24 h / 7 d / 30 d

export const state = {
  lang: localStorage.getItem("jpu.lang") || ((navigator.language || "").startsWith("ko") ? "ko" : "en"),
  token: localStorage.getItem("jpu.token") || "",
  nav: 0,          // request token: answers of an older render are dropped (never a stale view)
  viewKey: null,   // the view (and job) on screen: another one means a navigation
  busy: 0,         // the token of a render in flight: a poll waits for the next tick
  timers: null,    // the poll timers, stopped while the page is hidden
  error: null,     // the error shown (re-rendered in the other language on the toggle)
  chartHours: 24,  // the usage chart's window
  labs: [],        // lab names (sorted): the index gives the lab's colour
  labsAt: 0,
  log: null,       // the log pane of the job page (see refreshLog)
  me: null,        // GET /v1/me: the caller's lab (their charges) and role
  files: null,     // the files pane of the job page (files.js)
  openArrays: new Set(),  // arrays shown with their tasks in the jobs view (Q7)
};
export const $ = (id) => document.getElementById(id);
export const t = (key) => (STRINGS[state.lang] || STRINGS.en)[key] ?? STRINGS.en[key] ?? key;
export const has = (key) => key in (STRINGS[state.lang] || {}) || key in STRINGS.en;
export const fill = (text, params) => text.replace(/\{(\w+)\}/g, (m, k) => (k in (params || {}) ? String(params[k]) : m));
export const tf = (key, params) => fill(t(key), params);
export const gpusText = (n) => tf(n === 1 ? "ev.gpus" : "ev.gpus_n", { n });

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k === "class") el.className = v; else if (k === "href") el.href = v;
    else if (k === "style") Object.assign(el.style, v); else el.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c !== null && c !== undefined && c !== false) el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

// Replace `el`'s children only when what they show changed (`sig`): a poll then leaves the
// page alone — an open raw event, a selection, a scrolled table stay as they are.
export function setRows(el, sig, build) {
  const s = state.lang + "\u0000" + sig;
  if (el.dataset.sig === s) return;
  el.dataset.sig = s;
  el.replaceChildren(...build().filter((c) => c !== null && c !== undefined));
}
export function clearRows(el) { delete el.dataset.sig; el.replaceChildren(); }

export const locale = () => (state.lang === "ko" ? "ko-KR" : undefined);
export const fmtNum = (x) => (x === null || x === undefined ? "" : Number(x).toLocaleString(locale(), { maximumFractionDigits: 1 }));
export const pad = (n) => String(n).padStart(2, "0");
// One date format everywhere, the CLI's (jpu.cli.rest.render.fmt_ts): "2026-12-01 09:03:10", local.
export function fmtTime(s) {
  if (!s) return "";
  const d = new Date(s * 1000);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} `
    + `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

// Local wall-clock time of an epoch: "12:03:10", with the date (fmtTime) when it is not today.
export function fmtClock(s) {
  const full = fmtTime(s);
  return new Date(s * 1000).toDateString() === new Date().toDateString() ? full.slice(11) : full;
}

// A duration for people: "4 s", "2 min 5 s", "1 h 3 min", "2 d 3 h" (KO: "4초", "2분 5초", …).
export function fmtDur(seconds) {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) return "";
  const s = Math.round(Math.max(0, seconds));
  if (seconds < 1) return t("dur.lt1");
  if (s < 60) return tf("dur.s", { s });
  if (s < 3600) { const m = Math.floor(s / 60), r = s % 60; return tf(r ? "dur.ms" : "dur.m", { m, s: r }); }
  if (s < 86400) { const hh = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60); return tf(m ? "dur.hm" : "dur.h", { h: hh, m }); }
  const d = Math.floor(s / 86400), hh = Math.floor((s % 86400) / 3600);
  return tf(hh ? "dur.dh" : "dur.d", { d, h: hh });
}

// Like squeue's TIME and `jpu show` (jpu.cli.rest.render.fmt_duration): [D-]HH:MM:SS.
export function fmtSlurm(seconds) {
  if (seconds === null || seconds === undefined) return "";
  let s = Math.round(seconds);
  const days = Math.floor(s / 86400); s %= 86400;
  const out = `${pad(Math.floor(s / 3600))}:${pad(Math.floor((s % 3600) / 60))}:${pad(s % 60)}`;
  return days ? `${days}-${out}` : out;
}


// A state, pending reason or end reason: English shows the code (as the CLI and Slurm do),
// Korean its translation (a state's is the catalog's, `jpu why`'s: why.state.NAME); the tooltip
// says what it means (and the code, in Korean).
export function codeText(kind, code) {
  if (code === null || code === undefined || code === "") return "";
  const base = String(code).split(":")[0];  // "NODE_FAIL: launch failed …" → NODE_FAIL
  const key = kind === "state" ? `why.state.${base}` : `${kind}.${base}`;
  if (state.lang === "en" || !(key in (STRINGS[state.lang] || {}))) return String(code);  // the code
  const rest = String(code).slice(base.length);
  return t(key) + rest;
}
// D7: MinVram names the VRAM floor it waits for ("MinVram: ≥13 GB", raised by an OOM retry, X8)
export const reasonCode = (j) => j.pending_reason === "MinVram" && j.min_vram_gb != null
  ? `MinVram: ≥${j.min_vram_gb} GB` : j.pending_reason;
export function codeSpan(kind, code) {
  if (code === null || code === undefined || code === "") return "";
  const base = String(code).split(":")[0];
  // what it means: the page's own words, else a pending reason's sentence in the catalog when it
  // names no fact of a job (jpu why's: one wording)
  const own = has(`${kind}.${base}.t`) ? t(`${kind}.${base}.t`) : "";
  const said = kind === "reason" && has(`why.reason.${base}`) ? t(`why.reason.${base}`) : "";
  const tip = own || (said.includes("{") ? "" : said);
  const title = state.lang === "en" ? tip : [base, tip].filter(Boolean).join(" — ");
  // a code breaks only after its underscores (PERSONAL_QUEUE_ / WAIT), never inside a word
  const parts = String(codeText(kind, code)).split(/(?<=_)/);
  return h("span", { class: "code", title: title || null, "data-code": base },
    parts.flatMap((p, i) => (i ? [h("wbr"), p] : [p])));
}

// --- API ---------------------------------------------------------------------------------------
export function localError(key, params) {
  const e = new Error(fill(STRINGS.en[key] || key, params));
  e.i18n = { key, params };
  return e;
}

export async function api(path, options = {}) {
  const headers = Object.assign({ Accept: "application/json" }, options.headers || {});
  if (state.token) headers.Authorization = "Bearer " + state.token;
  if (options.body) headers["Content-Type"] = "application/json";
  let resp;
  try {
    resp = await fetch(path, Object.assign({}, options, { headers }));
  } catch (e) {
    const err = new Error(String(e.message || e));
    err.network = true;
    throw err;
  }
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) {
    const e = (body && body.error) || {};
    const err = new Error(`${resp.status} ${e.code || ""}: ${e.message || resp.statusText}`);
    err.status = resp.status; err.code = e.code || ""; err.details = e.details;
    err.serverMessage = e.message || resp.statusText || "";
    throw err;
  }
  return body;
}

// The headline of an API error in the UI's language (SPEC §8 codes), and its code.
export function errorHeadline(err) {
  if (err.i18n) return fill(t(err.i18n.key), err.i18n.params);
  if (err.status === 401) return t(state.token ? "token.rejected" : "token.missing");
  if (err.network) return t("err.NETWORK");
  if (err.status) return has("err." + err.code) ? t("err." + err.code) : tf("err.HTTP", { status: err.status });
  return String(err.message || err);
}

// The fix the error's details give, in the UI's language (SPEC §8 details).
export function errorFix(err) {
  const d = err.details || {};
  if (err.code === "NO_FIT_PLACEMENT" && d.largest_placement && d.largest_placement.gpus) {
    const l = d.largest_placement;
    return tf("fix.no_fit", { gpus: gpusText(l.gpus), n: l.gpus, tier: l.tier, node: l.node });
  }
  if (err.code === "SERVICE_MAINTENANCE" && d.message) return tf("fix.maintenance", { message: d.message });
  if (err.code === "RATE_LIMITED" && typeof d.retry_after_s === "number") return tf("fix.rate", { s: d.retry_after_s });
  if (d.field && !String(err.serverMessage || "").includes(String(d.field))) return tf("fix.field", { field: d.field });
  return null;
}

export function showError(err) { state.error = err || null; drawError(); }

export function drawError() {
  const el = $("error"), err = state.error;
  if (!err) { el.hidden = true; el.replaceChildren(); return; }
  const code = err.status && !(err.status === 401 && !state.token) ? `${err.status} ${err.code || ""}`.trim() : null;
  // beneath the headline: the server's own message (it names the field, the limit, the fix)
  const server = err.status === 401 && !state.token ? null : err.network ? err.message : err.serverMessage;
  const fix = err.status ? errorFix(err) : null;
  el.replaceChildren(...[  // (replaceChildren would write a null as the text "null")
    h("div", { class: "err-head" }, errorHeadline(err), code ? [" ", h("code", { class: "err-code" }, code)] : null),
    server ? h("div", { class: "err-server" }, server) : null,
    fix ? h("div", { class: "err-fix" }, fix) : null].filter(Boolean));
  el.hidden = false;
}

export function applyStrings() {
  document.documentElement.lang = state.lang;
  document.querySelectorAll("[data-i18n]").forEach((el) => { el.textContent = t(el.dataset.i18n); });
  document.querySelectorAll("[data-i18n-placeholder]").forEach((el) => { el.placeholder = t(el.dataset.i18nPlaceholder); });
  $("lang-toggle").textContent = state.lang === "ko" ? "English" : "한국어";
  drawError();
}

// --- the current view, drawn again: main.js registers its router, so no view imports main.js ----
let renderer = () => {};
export function setRenderer(fn) { renderer = fn; }
export function rerender(opts) { return renderer(opts); }

// --- lab colours (SPEC U2): one per lab, the same in the pool grid, the tables and the chart ----
export const LAB_COLORS = ["#2456c8", "#c62828", "#00838f", "#6d4c41", "#ad1457", "#3949ab", "#558b2f",
  "#ef6c00", "#37474f", "#0277bd"];

export function labColor(lab) {
  let i = state.labs.indexOf(lab);
  if (i < 0) { i = 0; for (const ch of String(lab)) i = (i * 31 + ch.charCodeAt(0)) >>> 0; }
  return LAB_COLORS[i % LAB_COLORS.length];
}
export const swatch = (lab) => h("span", { class: "swatch", style: { background: labColor(lab) } });

export async function labNames(labsBody) {
  if (labsBody) {
    state.labs = (labsBody.labs || []).map((l) => l.lab).sort();
    state.labsAt = Date.now();
  } else if (!state.labs.length || Date.now() - state.labsAt > 60000) {
    await labNames(await api("/v1/labs"));
  }
  return state.labs;
}

// --- maintenance banner (SPEC M5): anonymous endpoint, shown in every state but NORMAL ---------
export async function refreshBanner() {
  try {
    const m = await fetch("/v1/maintenance/status").then((r) => r.json());
    const banner = $("maintenance-banner");
    banner.hidden = !m.state || m.state === "NORMAL";
    banner.className = "banner " + (m.state || "");
    $("maintenance-state").textContent = m.state || "";
    $("maintenance-text").textContent = m.state && m.state !== "NORMAL"
      ? `${t("maint." + m.state)} (${t("maint.since")} ${fmtTime(m.since)})` : "";
    $("maintenance-message").textContent = m.message ? ` — ${m.message}` : "";
  } catch (_) { /* the next poll retries */ }
}

// --- views: load(arg) fetches and returns draw(); render() draws only if still current ---------
export const jobLink = (id) => h("a", { href: "#/job/" + encodeURIComponent(id) }, id);
