// The workspaces view (SPEC X4a).
import { $, api, fmtTime, h, rerender, setRows, showError, state, t, tf } from "./core.js";

// SPEC X4a: the user's default workspace (PUT /v1/me/workspace; null clears it), then the view again
export async function setDefaultWorkspace(name) {
  try {
    await api("/v1/me/workspace", { method: "PUT", body: JSON.stringify({ workspace: name }) });
    showError(null); rerender();
  } catch (e) { showError(e); }
}

// The row a default name means: the user's own workspace of that name, else the lab's (X4a)
export const isDefault = (w, all, name) => w.name === name
  && (w.scope === "user" || !all.some((o) => o.scope === "user" && o.name === name));

// SPEC X4a: workspaces (own and the lab's) with their state, and the user's default (set from a
// row, cleared above the list); `#/workspaces/<scope>:<name>` shows that one's build log below
export async function loadWorkspaces(arg) {
  const [r, mine] = await Promise.all([api("/v1/workspaces"), api("/v1/me/workspace")]);
  const all = r.workspaces || [], current = mine.workspace;
  const [scope, name] = arg ? arg.split(/:(.*)/s) : [];
  let log = null;
  if (name) {  // text/plain, not JSON: read as text (its errors are the §8 envelope)
    const headers = state.token ? { Authorization: "Bearer " + state.token } : {};
    const resp = await fetch(`/v1/workspaces/${encodeURIComponent(name)}/log?scope=${scope}`, { headers });
    log = resp.ok ? await resp.text() : `(${resp.status} ${(await resp.json().catch(() => ({}))).error?.message || ""})`;
  }
  const mark = (w) => {
    if (isDefault(w, all, current)) return h("strong", { class: "ws-is-default" }, t("ws.is_default"));
    if (!isDefault(w, all, w.name)) return "";  // a lab's workspace behind an own one of its name
    const b = h("button", { type: "button", class: "ws-make-default" }, t("ws.make_default"));
    b.onclick = () => setDefaultWorkspace(w.name);
    return b;
  };
  return () => {
    $("ws-default").textContent = current || t("ws.default_none");
    $("ws-default-clear").hidden = !current;
    $("ws-default-clear").onclick = () => setDefaultWorkspace(null);
    setRows($("ws-rows"), JSON.stringify([all, current]), () => {
      const rows = all.map((w) => h("tr", {},
        h("td", {}, h("a", { href: `#/workspaces/${w.scope}:${encodeURIComponent(w.name)}` }, w.name)),
        h("td", {}, w.scope), h("td", {}, w.scope === "lab" ? w.lab : w.user),
        h("td", {}, w.state), h("td", { class: "wrap" }, w.reason || ""),
        h("td", { class: "num" }, w.size ? `${Math.round(w.size / 1048576)} MiB` : "–"),
        h("td", {}, w.created_at ? fmtTime(w.created_at) : "–"), h("td", {}, mark(w))));
      return rows.length ? rows : [h("tr", {}, h("td", { colspan: 8 }, t("ws.empty")))];
    });
    $("ws-log-title").textContent = name ? tf("ws.log", { name }) : "";
    $("ws-log").textContent = name ? (typeof log === "string" && log ? log : t("ws.nolog")) : "";
    $("ws-log").hidden = !name;
  };
}
