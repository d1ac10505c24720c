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
  for (const s of w.lag_seconds || []) secs = Math.max(secs, s);
  for (const m of w.lag_messages || []) msgs = Math.max(msgs, m);
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
    if (c.generation) cls.push("generation");
    if (c.handover) cls.push("handover");
    if (!c.closed) cls.push("open");
    const cell = el("div", cls.join(" "), el("i"));
    cell.firstChild.style.height = (100 * c.count / top) + "%";
    cell.dataset.count = c.count;
    cell.title = "interval " + c.interval + ": " + c.count + " registered" +
      (c.closed ? "" : " (open)") + (c.rebalance ? ", rebalance" : "") +
      (c.handover ? ", handover: old shares served to their caps" : "") + (c.generation ? ", store generation changed" : "");
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
      ((c.workers || []).length ? "; " + c.workers.join("; ") : ""));
  }));
}

function renderMapping(snap) {
  const now = Date.parse(snap.at);
  const rows = snap.mapping || [];
  let maxLag = 0, maxOld = 0;
  for (const r of rows) if (r.worker) { maxLag = Math.max(maxLag, lagOf(r.worker).v); maxOld = Math.max(maxOld, oldestOf(r.worker)); }
  document.getElementById("replicas").textContent = snap.replicas + " replicas";
  fill(document.querySelector("#mapping tbody"), rows.map(r => {
    const w = r.worker;
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
      td(w.shards && w.shards.length ? w.shards.join(",") + " of " + w.of : "all", "wrap"),
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

function renderDead(st) {
  document.getElementById("dead-wrap").hidden = !st.dead;
  document.getElementById("dead-note").textContent = st.dead ? "(" + st.dead + " in all, the newest " + (st.dead_latest || []).length + " here; nandi dead list and replay)" : "";
  fill(document.querySelector("#dead tbody"), (st.dead_latest || []).map(l =>
    el("tr", null, td(l.id), td(l.at), td(l.key), td(l.attempts, "num"), td(l.worker),
      td(l.index + " of " + l.replicas + ", token " + l.token), td(l.error, "wrap err"))));
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
    ["verdict", p.Verdict, "verdict-" + p.Verdict],
    ["round trip, jitter", dur(p.RTT) + ", " + dur(p.Jitter)],
    ["first lease of a new worker", dur(p.FirstLease[0]) + " to " + dur(p.FirstLease[1])],
    ["pause per change, per share", "about " + dur(p.Pause)],
    ["fully assigned after a change", dur(p.Assigned[0]) + " to " + dur(p.Assigned[1])],
    ["script calls on the group's node", p.CallsPerSecond.toFixed(1) + "/s"],
  ];
  for (const f of p.Findings || []) pairs.push(["finding", f]);
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
  renderDead(snap.status);
  renderEpochs(snap.status);
  renderSettings(snap);
}

function live(on, text) {
  const l = document.getElementById("live");
  l.className = "live" + (on ? "" : " off");
  l.textContent = text;
}

async function showGroup(group) {
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
    if (names.length === 0) list.replaceChildren(el("li", null, "no group found (no {NAME}:lease key)"));
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
