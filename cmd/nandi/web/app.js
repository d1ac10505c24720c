// nandi web: renders the snapshots the server streams. Everything a worker
// wrote (ids, errors, versions) is set as text, never as markup.
"use strict";

function el(tag, cls, ...kids) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  for (const k of kids) {
    if (k === null || k === undefined) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

function td(text, cls) { return el("td", cls, text); }

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function dur(ns) {
  const ms = ns / 1e6;
  if (ms < 1000) return (Math.round(ms * 10) / 10) + "ms";
  return (Math.round(ms / 100) / 10) + "s";
}

function ago(t, now) {
  if (!t || t.startsWith("0001")) return "-";
  const s = (now - Date.parse(t)) / 1000;
  if (s < 60) return (Math.max(s, 0)).toFixed(1) + "s ago";
  if (s < 3600) return Math.floor(s / 60) + "m ago";
  return Math.floor(s / 3600) + "h ago";
}

function bar(value, maxValue, text, hot) {
  const b = el("span", "bar" + (hot ? " hot" : ""), el("i"));
  b.firstChild.style.width = (maxValue > 0 ? Math.min(100, 100 * value / maxValue) : 0) + "%";
  return el("span", null, b, text);
}

function lagOf(w) {
  let secs = -1, msgs = -1;
  for (const s of w.lag_seconds || []) if (s !== null) secs = Math.max(secs, s);
  for (const m of w.lag_messages || []) if (m !== null) msgs = Math.max(msgs, m);
  if (secs >= 0) return { v: secs, text: secs.toFixed(1) + "s" };
  if (msgs >= 0) return { v: msgs, text: String(msgs) };
  return { v: 0, text: "-" };
}

function oldestOf(w) {
  let o = 0;
  for (const x of w.oldest_seconds || []) o = Math.max(o, x);
  return o;
}

function renderStrip(snap) {
  const strip = document.getElementById("strip");
  const cells = snap.strip || [];
  let top = 1;
  for (const c of cells) top = Math.max(top, c.count);
  strip.replaceChildren(...cells.map(c => {
    const cls = ["cell"];
    if (c.rebalance) cls.push("rebalance");
    if (c.generation_changed) cls.push("generation");
    if (c.handover) cls.push("handover");
    if (!c.closed) cls.push("open");
    const cell = el("div", cls.join(" "), el("i"));
    cell.firstChild.style.height = (100 * c.count / top) + "%";
    cell.dataset.count = c.count;
    cell.title = "interval " + c.interval + ": " + c.count + " registered" +
      (c.closed ? "" : " (open)") + (c.rebalance ? ", rebalance" : "") +
      (c.handover ? ", handover: old shares served to their caps" : "") + (c.generation_changed ? ", store generation changed" : "");
    return cell;
  }));
  document.getElementById("strip-note").textContent =
    cells.length + " intervals; kept since " + new Date(snap.watching_since).toLocaleTimeString();
}

function renderChanges(snap) {
  const cs = snap.changes || [];
  document.getElementById("changes-wrap").hidden = cs.length === 0;
  document.getElementById("changes").replaceChildren(...cs.map(c => {
    const what = c.from !== c.to ? "rebalance " + c.from + " \u2192 " + c.to : "membership";
    return el("li", c.from !== c.to ? "rebalance" : null,
      el("time", null, new Date(c.at).toLocaleTimeString()), " interval " + c.interval + ": " + what +
      ((c.joined_left || []).length ? "; " + c.joined_left.join("; ") : ""));
  }));
}

function renderMapping(snap) {
  const now = Date.parse(snap.at);
  const rows = snap.mapping || [];
  let maxLag = 0, maxOld = 0;
  for (const r of rows) if (r.holder) { maxLag = Math.max(maxLag, lagOf(r.holder).v); maxOld = Math.max(maxOld, oldestOf(r.holder)); }
  document.getElementById("replicas").textContent = snap.replicas + " replicas";
  fill(document.querySelector("#mapping tbody"), rows.map(r => {
    const w = r.holder;
    if (!w) {
      const tr = el("tr", "unowned", td(r.index, "num"), td("no worker record (joining, handing over, or presence off)"));
      for (let i = 0; i < 10; i++) tr.append(td(""));
      return tr;
    }
    const lag = lagOf(w), old = oldestOf(w);
    const recentErr = w.last_error && (now - Date.parse(w.last_error_at)) < 60000;
    const cls = w.overdue > 0 ? "overdue" : (recentErr || w.unserved ? "failing" : "");
    const tr = el("tr", cls,
      td(r.index, "num"),
      td(w.worker + (w.unserved ? " (unserved)" : "") + (w.handing_over ? " (handing over)" : ""), "worker wrap"),
      td(w.reading && w.reading.length ? w.reading.join(",") + " of " + w.of : "all", "wrap"),
      td(ago(w.since, now)),
      td(w.handled, "num"), td(w.failed, "num"), td(w.in_flight, "num"),
      el("td", null, bar(lag.v, maxLag, lag.text, false)),
      el("td", null, bar(old, Math.max(maxOld, 1), old.toFixed(1) + "s", old > 60)),
      td(w.overdue, "num"),
      td(w.last_error ? w.last_error + " (" + ago(w.last_error_at, now) + ")" : "-", "wrap"),
      td(w.version));
    tr.dataset.worker = w.worker;
    return tr;
  }));
  document.getElementById("standby-wrap").hidden = !(snap.standby || []).length;
  fill(document.querySelector("#standby tbody"), (snap.standby || []).map(w =>
    el("tr", null, td(w.worker, "wrap"), td(w.held ? w.index + " of " + w.replicas : "-"),
      td(w.handled, "num"), td(w.failed, "num"), td(w.last_error || "-", "wrap"))));
}

function renderEpochs(st) {
  const le = document.getElementById("ledger-error");
  le.hidden = !st.ledger_error;
  le.textContent = st.ledger_error || "";
  fill(document.querySelector("#epochs tbody"), (st.epochs || []).slice().reverse().map(e => {
    const keys = Object.keys(e.positions).sort((a, b) => {
      const [a1, a2] = a.split("/").map(Number), [b1, b2] = b.split("/").map(Number);
      return a1 - b1 || a2 - b2;
    });
    return el("tr", null, td(e.n + (e.current ? " (current)" : "")), td(e.replicas, "num"), td(e.token),
      td(keys.map(k => k + ": " + e.positions[k]).join("  "), "wrap"));
  }));
}

// The session: whether this server takes actions, and the CSRF token
// every action carries (/api/session).
const session = { readOnly: true, csrf: "" };
let group = "";
// Buttons clicked once and waiting for the confirming click, by name, with
// when the confirmation lapses (the table is drawn again on every snapshot).
const armed = new Map();

async function act(path, body) {
  const res = await fetch("/api/g/" + encodeURIComponent(group) + path, {
    method: "POST", headers: { "Content-Type": "application/json", "X-Nandi-CSRF": session.csrf },
    body: JSON.stringify(body || {}), credentials: "same-origin",
  });
  const text = await res.text();
  const out = document.getElementById("action-result");
  out.textContent = res.ok ? "done: " + path.replace(/^\//, "") : text.trim();
  out.className = res.ok ? "note" : "error";
  return res.ok;
}

// confirmButton is a button that acts on its second click within 4s.
function confirmButton(name, label, onConfirm) {
  const b = el("button", null);
  b.type = "button";
  const until = armed.get(name) || 0;
  b.textContent = Date.now() < until ? "really " + label + "?" : label;
  b.dataset.action = name;
  b.onclick = () => {
    if (Date.now() < (armed.get(name) || 0)) { armed.delete(name); onConfirm(); return; }
    armed.set(name, Date.now() + 4000);
    b.textContent = "really " + label + "?";
  };
  return b;
}

async function showLetter(id) {
  const res = await fetch("/api/g/" + encodeURIComponent(group) + "/dead/" + encodeURIComponent(id));
  const box = document.getElementById("letter");
  if (!res.ok) { document.getElementById("action-result").textContent = (await res.text()).trim(); return; }
  const l = await res.json();
  box.hidden = false;
  document.getElementById("letter-id").textContent = l.id;
  const pairs = [["key", l.key], ["error", l.error], ["attempts", l.attempts], ["worker", l.worker],
    ["term", "index " + l.index + " of " + l.replicas + ", token " + l.token],
    ["source", (l.system || "?") + " " + (l.source || "(not recorded)") + ", shard " + l.shard + " at " + l.position], ["at", l.at]];
  for (const [k, v] of Object.entries(l.headers || {}).sort()) pairs.push(["header " + k, v]);
  pairs.push(["payload", l.payload_form === "hex" ? "hex" : "text"]);
  dl("letter-fields", pairs);
  document.getElementById("letter-payload").textContent = l.payload_text;
}

function renderDead(st) {
  document.getElementById("dead-wrap").hidden = !st.dead;
  document.getElementById("dead-note").textContent = st.dead ? "(" + st.dead + " in all, the newest " + (st.dead_latest || []).length + " here; nandi dead list, show and replay)" : "";
  fill(document.querySelector("#dead tbody"), (st.dead_latest || []).map(l => {
    const show = el("button", null, "show");
    show.type = "button";
    show.dataset.action = "show:" + l.id;
    show.onclick = () => showLetter(l.id);
    const acts = el("td", "actions", show);
    if (!session.readOnly) {
      acts.append(confirmButton("replay:" + l.id, "replay", () => act("/dead/" + encodeURIComponent(l.id) + "/replay")),
        confirmButton("delete:" + l.id, "delete", () => act("/dead/" + encodeURIComponent(l.id) + "/delete")));
    }
    const tr = el("tr", null, td(l.id), td(l.at), td(l.key), td(l.attempts, "num"), td(l.worker),
      td(l.index + " of " + l.replicas + ", token " + l.token), td((l.source || "shard " + l.shard) + " at " + l.position, "wrap"),
      td(l.error, "wrap err"), acts);
    tr.dataset.letter = l.id;
    return tr;
  }));
}

function renderControl(st) {
  const paused = !!st.paused;
  document.getElementById("pause-state").textContent = paused
    ? "Paused since " + st.paused.since + (st.paused.reason ? " (" + st.paused.reason + ")" : "") + ": running tasks finish, none starts; every worker keeps its lease."
    : "Running.";
  document.getElementById("control-note").textContent = session.readOnly ? "(read-only: this server takes no action)" : "";
  document.getElementById("pause-form").hidden = session.readOnly || paused;
  document.getElementById("resume").hidden = session.readOnly || !paused;
}

// renderChart draws handled (and failed, in red, on top) per minute as
// bars: one column per minute of the last hour.
function renderChart(minutes) {
  const box = document.getElementById("chart");
  const n = 60;
  let top = 1;
  for (const m of minutes) top = Math.max(top, m.handled + m.failed);
  const cols = [];
  const last = minutes.length ? Date.parse(minutes[minutes.length - 1].at) : 0;
  const byIndex = new Map();
  for (const m of minutes) byIndex.set(n - 1 - Math.round((last - Date.parse(m.at)) / 60000), m);
  for (let i = 0; i < n; i++) {
    const m = byIndex.get(i);
    const col = el("span", "col");
    if (m) {
      const failed = el("i", "failed"), handled = el("i", "handled");
      failed.style.height = (100 * m.failed / top) + "%";
      handled.style.height = (100 * m.handled / top) + "%";
      col.append(failed, handled);
      col.title = m.at + ": " + m.handled + " handled, " + m.failed + " failed";
    }
    cols.push(col);
  }
  const sum = minutes.reduce((a, m) => [a[0] + m.handled, a[1] + m.failed], [0, 0]);
  box.replaceChildren(el("div", "bars", ...cols),
    el("p", "note", "peak " + top + "/min; " + sum[0] + " handled, " + sum[1] + " failed over " + minutes.length + " min"));
  box.dataset.minutes = minutes.length;
  box.dataset.handled = sum[0];
}

function dl(id, pairs) {
  const d = document.getElementById(id);
  d.replaceChildren();
  for (const [k, v, cls] of pairs) d.append(el("dt", null, k), el("dd", cls || null, v));
}

function renderSettings(snap) {
  const st = snap.status;
  dl("settings", [
    ["interval", dur(st.interval_ns)],
    ["gap", st.gap + " (" + dur(st.interval_ns * st.gap) + ")"],
    ["store generation", st.generation],
    ["server time", st.server_time + ", interval " + st.current_interval],
    ["paused", st.paused ? "since " + st.paused.since + (st.paused.reason ? " (" + st.paused.reason + ")" : "") + ": no worker starts a task" : "no", st.paused ? "verdict-WARN" : null],
  ]);
  const p = snap.plan;
  if (!p) { dl("plan", []); return; }
  const pairs = [
    ["verdict", p.verdict, "verdict-" + p.verdict],
    ["round trip, jitter", dur(p.rtt_ns) + ", " + dur(p.jitter_ns)],
    ["first lease of a new worker", dur(p.first_lease_ns[0]) + " to " + dur(p.first_lease_ns[1])],
    ["first lease of a group restarted at once", dur(p.restart_lease_ns[0]) + " to " + dur(p.restart_lease_ns[1])],
    ["pause per change, per share", "about " + dur(p.pause_ns)],
    ["fully assigned after a change", dur(p.assigned_ns[0]) + " to " + dur(p.assigned_ns[1])],
    ["script calls on the group's node", p.calls_per_second.toFixed(1) + "/s"],
  ];
  for (const f of p.findings || []) pairs.push(["finding", f]);
  dl("plan", pairs);
}

function render(snap) {
  const err = document.getElementById("error");
  err.hidden = !snap.error;
  err.textContent = snap.error || "";
  renderStrip(snap);
  renderChanges(snap);
  if (!snap.status) return;
  renderMapping(snap);
  renderControl(snap.status);
  renderChart(snap.minutes || []);
  renderDead(snap.status);
  renderEpochs(snap.status);
  renderSettings(snap);
}

function live(on, text) {
  const l = document.getElementById("live");
  l.className = "live" + (on ? "" : " off");
  l.textContent = text;
}

async function showGroup(name) {
  group = name;
  try {
    const res = await fetch("/api/session", { credentials: "same-origin" });
    if (res.ok) { const s = await res.json(); session.readOnly = s.read_only; session.csrf = s.csrf || ""; }
  } catch (e) { /* read-only, then */ }
  document.getElementById("pause-form").onsubmit = ev => {
    ev.preventDefault();
    act("/pause", { reason: document.getElementById("pause-reason").value });
  };
  document.getElementById("resume").onclick = () => act("/resume");
  document.getElementById("letter-close").onclick = () => { document.getElementById("letter").hidden = true; };
  document.getElementById("page").hidden = false;
  document.getElementById("group").textContent = group;
  document.title = "nandi: " + group;
  const api = "/api/g/" + encodeURIComponent(group);
  try {
    const res = await fetch(api);
    if (!res.ok) throw new Error(await res.text());
    render(await res.json());
  } catch (e) {
    const err = document.getElementById("error");
    err.hidden = false;
    err.textContent = String(e.message || e);
    live(false, "not watched");
    return;
  }
  const es = new EventSource("/api/g/" + encodeURIComponent(group) + "/events");
  es.onopen = () => live(true, "live");
  es.onerror = () => live(false, "reconnecting");
  es.onmessage = ev => { live(true, "live"); render(JSON.parse(ev.data)); };
}

async function showGroups() {
  document.getElementById("groups").hidden = false;
  const list = document.getElementById("group-list");
  try {
    const res = await fetch("/api/groups");
    if (!res.ok) throw new Error(await res.text());
    const names = await res.json();
    if (names.length === 0) list.replaceChildren(el("li", null, "no group found (no lease, checkpoints, dead letters, pause or workers of any group: check -redis and its database)"));
    else list.replaceChildren(...names.map(n => {
      const a = el("a", null, n);
      a.href = "/g/" + encodeURIComponent(n);
      return el("li", null, a);
    }));
    live(true, "read");
  } catch (e) {
    list.replaceChildren(el("li", "error", String(e)));
    live(false, "error");
  }
}

const m = location.pathname.match(/^\/g\/(.+)$/);
if (m) showGroup(decodeURIComponent(m[1])); else showGroups();
