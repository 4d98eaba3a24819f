// binlake console: one page, a view per hash (#topics, #messages?topic=…), drawn from /api/*.
"use strict";

const view = document.getElementById("view");
let config = {};
let refresh = null;

const esc = (value) => String(value ?? "").replace(/[&<>"']/g,
  (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
const num = (value) => value === null || value === undefined ? "—" : Number(value).toLocaleString("en");
const bytes = (n) => n === null || n === undefined ? "—" : n < 1024 ? `${n} B`
  : n < 1048576 ? `${(n / 1024).toFixed(1)} KiB` : `${(n / 1048576).toFixed(1)} MiB`;
const table = (id, headers, rows) => `<table data-testid="${id}"><thead><tr>${headers.map((h) => `<th>${esc(h)}</th>`)
  .join("")}</tr></thead><tbody>${rows.map((r) => `<tr>${r.join("")}</tr>`).join("")}</tbody></table>`;
const td = (value, cls = "") => `<td class="${cls}">${value}</td>`;

async function api(path, options) {
  const response = await fetch(`/api/${path}`, options);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

const views = {
  async cluster() {
    const o = await api("overview");
    return `<h2>Cluster ${esc(o.cluster_id)}</h2>
      <p>${o.brokers.length} broker(s), controller <b data-testid="controller">${esc(o.controller)}</b>,
      ${num(o.topics)} topic(s), ${num(o.partitions)} partition(s)</p>` +
      table("brokers", ["broker", "host", "port", "role"], o.brokers.map((b) => [td(b.id, "num"), td(esc(b.host)),
        td(b.port, "num"), td(b.id === o.controller ? "controller" : "")]));
  },

  async topics(params) {
    const topics = await api("topics");
    const chosen = topics.find((t) => t.name === params.get("topic"));
    let html = "<h2>Topics</h2>" + table("topics", ["topic", "partitions", "messages", "size", "replication"],
      topics.map((t) => {
        const under = t.partitions.filter((p) => p.under_replicated).length;
        return [td(`<a href="#topics?topic=${encodeURIComponent(t.name)}">${esc(t.name)}</a>`),
          td(t.partitions.length, "num"), td(num(t.messages), "num"), td(bytes(t.size), "num"),
          td(under ? `${under} under-replicated` : "in sync", under ? "bad" : "good")];
      }));
    if (chosen) {
      html += `<h2>${esc(chosen.name)}</h2><p><a href="#messages?topic=${encodeURIComponent(chosen.name)}">browse its
        messages</a></p>` + table("partitions", ["partition", "leader", "replicas", "ISR", "start", "end", "size"],
        chosen.partitions.map((p) => [td(p.partition, "num"), td(p.leader, "num"), td(p.replicas.join(", ")),
          td(p.isr.join(", "), p.under_replicated ? "bad" : ""), td(num(p.start), "num"), td(num(p.end), "num"),
          td(bytes(p.size), "num")]));
    }
    return html;
  },

  async messages(params) {
    const topics = await api("topics");
    const topic = params.get("topic") || "";
    const form = `<h2>Messages</h2><form id="browse">
      <label>topic <select name="topic">${topics.filter((t) => !t.internal).map((t) =>
        `<option ${t.name === topic ? "selected" : ""}>${esc(t.name)}</option>`).join("")}</select></label>
      <label>partition <input name="partition" type="number" min="0" value="${esc(params.get("partition") || 0)}"></label>
      <label>from offset <input name="offset" type="number" min="0" value="${esc(params.get("offset") || "")}"></label>
      <label>or from time (UTC) <input name="timestamp" type="datetime-local" step="1"
        value="${esc(params.get("timestamp") || "")}"></label>
      <label>limit <input name="limit" type="number" min="1" max="500" value="${esc(params.get("limit") || 50)}"></label>
      <button type="submit">Read</button></form>`;
    if (!topic) return form + "<p>Pick a topic.</p>";
    const query = new URLSearchParams([...params].filter(([k, v]) => v && k !== "topic"));
    const page = await api(`topics/${encodeURIComponent(topic)}/messages?${query}`);
    const rows = page.records.map((r) => {
      const c = r.change;
      const what = c ? describeChange(c) : r.kind === "tombstone" ? "<i>tombstone</i>"
        : `<span class="mono">${esc((r.value || "").slice(0, 300))}</span>`;
      return [td(r.offset, "num"), td(new Date(r.timestamp).toISOString().replace("T", " ").slice(0, 23)),
        td(esc(c ? c.table : r.kind)), td(c ? `<b class="op-${c.op}">${c.op}</b>` : ""),
        td(`<span class="mono">${esc(r.key)}</span>`), td(what)];
    });
    const next = page.next === null ? "" : `<p><a data-testid="next" href="#messages?${new URLSearchParams(
      {topic, partition: page.partition, offset: page.next, limit: params.get("limit") || 50})}">next page</a></p>`;
    return form + `<p>${page.records.length} record(s) of ${esc(topic)}-${page.partition}</p>` +
      table("records", ["offset", "time", "table", "op", "key", "change"], rows) + next;
  },

  async groups() {
    const groups = await api("groups");
    let html = "<h2>Consumer groups</h2>" + table("groups", ["group", "state", "members", "lag", ""], groups.map((g) =>
      [td(esc(g.group)), td(esc(g.state)), td(g.members.length, "num"), td(num(g.lag), g.lag > 0 ? "num bad" : "num"),
        td(config.writes && !g.members.length ? `<button data-reset="${esc(g.group)}" data-to="earliest">reset to
          earliest</button> <button data-reset="${esc(g.group)}" data-to="latest">reset to latest</button>` : "")]));
    for (const g of groups.filter((g) => g.partitions.length)) {
      html += `<h2>${esc(g.group)}</h2>` + table(`group-${g.group}`, ["topic", "partition", "committed", "end", "lag",
        "member"], g.partitions.map((p) => [td(esc(p.topic)), td(p.partition, "num"), td(num(p.committed), "num"),
        td(num(p.end), "num"), td(num(p.lag), "num"), td(`<span class="mono">${esc(p.member || "")}</span>`)]));
    }
    return html;
  },

  async transactions() {
    const found = await api("transactions");
    return "<h2>Transactions</h2>" + table("transactions", ["transactional id", "state", "producer id", "coordinator"],
      found.map((t) => [td(esc(t.transactional_id)), td(esc(t.state)), td(t.producer_id, "num"),
        td(t.coordinator, "num")]));
  },

  async connectors() {
    const found = await api("connectors");
    return "<h2>Connectors</h2>" + table("connectors", ["connector", "plugin", "state", "tasks", "snapshot",
      "binlog lag", ""], found.map((c) => [td(esc(c.name)), td(esc(c.plugin)), td(esc(c.state),
        c.state === "RUNNING" ? "good" : "bad"), td(c.tasks.map((t) => `${t.id}: ${esc(t.state)}`).join("<br>")),
      td(c.tasks.map(snapshot).join("<br>")), td(c.tasks.map(lag).join("<br>")),
      td(config.writes ? `<button data-restart="${esc(c.name)}">restart</button>` : "")]));
  },

  async sink() {
    const queries = await api("sink");
    const now = Date.now();
    for (const q of queries) {
      for (const [t, f] of Object.entries(q.freshness)) {
        const points = (freshness[`${q.query} ${t}`] ??= []);
        points.push({at: now, p50: f["0.5"], p99: f["0.99"]});
        points.splice(0, points.length - FRESHNESS_POINTS);
      }
    }
    return "<h2>Spark sink</h2>" + table("sink", ["query", "batches", "rows merged", "mean s: read+decode / plan / " +
      "merge+commit", "offsets behind", "freshness (last minute)"], queries.map((q) => [td(esc(q.query)),
      td(num(q.batches), "num"), td(Object.entries(q.rows).map(([t, n]) => `${esc(t)}: ${num(n)}`).join("<br>")),
      td(["read_decode", "plan", "write"].map((p) => q.seconds[p] ?? "—").join(" / "), "num"),
      td(num(q.behind), q.behind > 0 ? "num bad" : "num"),
      td(Object.entries(q.freshness).map(([t, f]) => `${esc(t)}: p50 ${seconds(f["0.5"])}, p99 ${seconds(f["0.99"])}`)
        .join("<br>") || "no changes")])) +
      "<h2>Freshness: MySQL commit to visible in the target</h2>" + (Object.keys(freshness).length
        ? Object.entries(freshness).map(([name, points]) => freshnessChart(name, points)).join("")
        : "<p>No changes merged since this page opened.</p>");
  },
  async pipeline() {
    const p = await api("pipeline");
    const now = Date.now(), last = pipelineLast;
    const rate = (key, value) => {  // per second since the last refresh of this page; none on the first
      if (!last || value === null || value === undefined || last.values[key] === undefined) return null;
      return Math.max(value - last.values[key], 0) / ((now - last.at) / 1000);
    };
    const values = {};
    const perSecond = (key, value, unit) => {
      values[key] = value;
      const r = rate(key, value);
      return `<span data-rate="${esc(key)}">${r === null ? "—" : num(Math.round(r * 10) / 10)}</span> ${unit}/s`;
    };
    const stage = (id, title, items) => `<section class="stage" data-testid="stage-${id}"><h3>${title}</h3>${
      items.length ? items.join("") : "<p class=\"none\">none</p>"}</section>`;
    const item = (name, lines, bad = false) => `<div class="item${bad ? " bad-item" : ""}"><b>${esc(name)}</b>${
      lines.map((l) => `<div>${l}</div>`).join("")}</div>`;
    const html = [
      stage("mysql", "MySQL", p.mysql.map((m) => item(m.server || m.connector, [`read by ${esc(m.connector)}`,
        `binlog lag ${m.lag_seconds === null ? "—" : `${Number(m.lag_seconds).toFixed(1)} s`}` +
        (m.lag_bytes === null ? "" : `, ${bytes(m.lag_bytes)}`)]))),
      stage("connector", "Connector", p.connectors.map((c) => item(c.name, [
        `<span class="${c.state === "RUNNING" ? "good" : "bad"}">${esc(c.state)}</span>`,
        `${num(c.records)} records written`, perSecond(`connector ${c.name}`, c.records, "records")],
        c.state !== "RUNNING"))),
      stage("log", "Log", p.log.topics.length ? [item(`${p.log.topics.length} topic(s)`, [
        `${num(p.log.messages)} messages${p.log.size === null ? "" : `, ${bytes(p.log.size)}`}`,
        perSecond("log", p.log.end, "offsets"),
        p.log.under_replicated ? `<span class="bad">${p.log.under_replicated} under-replicated</span>` : "in sync"],
        p.log.under_replicated > 0)] : []),
      stage("processors", "Processors", p.processors.map((g) => item(g.group, [
        `${esc(g.state)}, ${g.members} member(s)`,
        `<span class="${g.lag > 0 ? "bad" : ""}">${num(g.lag)} records behind</span>`,
        perSecond(`group ${g.group}`, g.committed, "offsets")]))),
      stage("sink", "Sink", p.sinks.map((q) => item(q.query, [`${num(q.rows)} rows merged`,
        perSecond(`sink ${q.query}`, q.rows, "rows"),
        `<span class="${q.behind > 0 ? "bad" : ""}">${num(q.behind)} offsets behind</span>`,
        `freshness p99 ${q.freshness_p99 === null ? "—" : seconds(q.freshness_p99)}`]))),
    ];
    pipelineLast = {at: now, values};
    return "<h2>Pipeline</h2><div class=\"pipeline\">" + html.join("<div class=\"arrow\">→</div>") + "</div>" +
      (p.log.topics.length ? `<p class="topics">topics: ${p.log.topics.map((t) =>
        `<a href="#topics?topic=${encodeURIComponent(t)}">${esc(t)}</a>`).join(", ")}</p>` : "") +
      (config.connect ? "" : "<p>Start the console with --connect URL to see the connectors and their topics.</p>");
  },
};

let pipelineLast = null;  // the last refresh's totals, for the rates
const FRESHNESS_POINTS = 120;  // ten minutes of the page's 5 s refresh
const freshness = {};  // "query table" -> [{at, p50, p99}], one point a refresh while the page is open
const seconds = (s) => s === undefined ? "—" : `${s < 10 ? s.toFixed(2) : s.toFixed(1)} s`;

function freshnessChart(name, points) {
  // An SVG line chart of one table's p50 and p99 over the page's refreshes, seconds on a scale from 0.
  const [w, h, left, bottom] = [480, 140, 48, 18];
  const top = Math.max(...points.map((p) => p.p99), 0.001) * 1.1;
  const first = points[0].at, span = Math.max(points[points.length - 1].at - first, 1);
  const x = (p) => (left + (p.at - first) / span * (w - left - 4)).toFixed(1);
  const y = (v) => (h - bottom - Math.max(v, 0) / top * (h - bottom - 6)).toFixed(1);
  const last = points[points.length - 1];
  const line = (key) => `<polyline class="${key}" data-quantile="${key}" points="${points.map((p) =>
    `${x(p)},${y(p[key])}`).join(" ")}"/><circle class="${key}" cx="${x(last)}" cy="${y(last[key])}" r="3"/>`;
  return `<figure class="chart" data-testid="freshness-chart" data-table="${esc(name)}">
    <figcaption>${esc(name)}: p50 ${seconds(last.p50)}, p99 ${seconds(last.p99)}</figcaption>
    <svg viewBox="0 0 ${w} ${h}" width="${w}" height="${h}" role="img">
      <line class="axis" x1="${left}" y1="${h - bottom}" x2="${w}" y2="${h - bottom}"/>
      <line class="axis" x1="${left}" y1="4" x2="${left}" y2="${h - bottom}"/>
      <text x="${left - 4}" y="12" text-anchor="end">${esc(seconds(top))}</text>
      <text x="${left - 4}" y="${h - bottom}" text-anchor="end">0 s</text>
      <text x="${w - 4}" y="${h - 4}" text-anchor="end">${Math.round(span / 1000)} s shown</text>
      ${line("p99")}${line("p50")}
    </svg><span class="legend"><i class="p50"></i> p50 <i class="p99"></i> p99</span></figure>`;
}

function describeChange(c) {
  if (c.op === "u") {
    return c.changed.map((k) => `${esc(k)}: ${esc(JSON.stringify(c.before[k]))} → ${esc(JSON.stringify(c.after[k]))}`)
      .join(", ") || "no column changed";
  }
  const row = c.after || c.before || {};
  return Object.entries(row).map(([k, v]) => `${esc(k)}=${esc(JSON.stringify(v))}`).join(", ");
}

function snapshot(task) {
  const s = task.source || {};
  const inc = s.incremental_snapshot;  // an incremental snapshot under way (issue 35)
  if (inc) {
    const eta = inc.eta_seconds === null ? "" : `, ETA ${num(Math.round(inc.eta_seconds))} s`;
    return `incremental: ${esc(inc.table)} chunk ${num(inc.chunk)}, ${num(inc.rows)}/${num(inc.rows_estimated)} rows` +
      `${eta}${inc.paused ? " (paused)" : ""}`;
  }
  if (s.snapshot_tables_total === undefined) return "—";
  return `${num(s.snapshot_tables_done)}/${num(s.snapshot_tables_total)} tables, ${num(s.snapshot_rows_read)} rows`;
}

function lag(task) {
  const s = task.source || {};
  if (s.binlog_lag_seconds === undefined) return "—";
  return `${Number(s.binlog_lag_seconds).toFixed(1)} s` + (s.binlog_lag_bytes === undefined ? ""
    : `, ${bytes(s.binlog_lag_bytes)}`);
}

async function show() {
  clearTimeout(refresh);
  const [name, query] = (location.hash.slice(1) || "cluster").split("?");
  const params = new URLSearchParams(query || "");
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.hash === `#${name}`);
  const draw = views[name] || views.cluster;
  try {
    view.innerHTML = await draw(params);
    view.dataset.view = name;
    document.getElementById("status").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    view.innerHTML = `<div class="error" data-testid="error">${esc(error.message)}</div>`;
    view.dataset.view = name;
  }
  if (name !== "messages") refresh = setTimeout(show, 5000);
}

view.addEventListener("submit", (event) => {
  event.preventDefault();
  const data = new URLSearchParams([...new FormData(event.target)].filter(([, v]) => v));
  location.hash = `messages?${data}`;
});

view.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-restart], button[data-reset]");
  if (!button) return;
  const path = button.dataset.restart ? `connectors/${encodeURIComponent(button.dataset.restart)}/restart`
    : `groups/${encodeURIComponent(button.dataset.reset)}/reset?to=${button.dataset.to}`;
  try {
    await api(path, {method: "POST"});
    document.getElementById("action").textContent = `· done: ${button.textContent.replace(/\s+/g, " ").trim()}`;
  } catch (error) {
    document.getElementById("action").textContent = `· refused: ${error.message}`;
  }
  show();
});

window.addEventListener("hashchange", show);
api("config").then((c) => {
  config = c;
  document.getElementById("mode").textContent = `${c.bootstrap} · ${c.writes ? "writes allowed" : "read-only"}`;
  show();
});
