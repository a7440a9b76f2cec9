"""The monitor's HTML page: static markup, one style sheet, one script (no user data in it).

The page is the same for every monitor. Its script fetches the JSON API (relative to the page's
own address, so the page works wherever the application is mounted) and builds every table cell
with ``textContent``: nothing a processor, a view or a table holds is ever parsed as HTML.
:mod:`broker.backends.kafka.processor.monitor` serves it with a Content-Security-Policy that allows
exactly :data:`STYLE` and :data:`SCRIPT` (by their SHA-256) and requests to the same origin.
"""

from __future__ import annotations

import html

__all__ = ["SCRIPT", "STYLE", "page"]

#: The page's style sheet (the text of its ``<style>`` element).
STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: .4em 0 1em; }
th, td { border: 1px solid #ccc; padding: .2em .6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.state-running, .status-running { color: #176b2c; font-weight: 600; }
.state-failed, .state-stopped, .status-stopped { color: #a11; font-weight: 600; }
.muted { color: #777; }
form { display: flex; gap: .5em; flex-wrap: wrap; align-items: end; }
label { display: flex; flex-direction: column; font-size: .9em; }
input { font: inherit; padding: .2em .4em; min-width: 14em; }
pre { background: #f7f7f7; border: 1px solid #ddd; padding: .6em; overflow: auto; max-height: 30em; }
#keys button { margin: 0 .3em .3em 0; }
"""

#: The page's script (the text of its ``<script>`` element).
SCRIPT = """
"use strict";
const base = location.pathname.endsWith("/") ? location.pathname : location.pathname + "/";
const api = (path) => base + "api/" + path;
const REFRESH_MS = 2000;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function table(headers, rows) {
  const head = el("tr", {}, ...headers.map((h) => el("th", {}, h)));
  return el("table", {}, el("thead", {}, head), el("tbody", {}, ...rows));
}

function num(value) {
  return el("td", {class: "num"}, value === null || value === undefined ? "" : value);
}

function progress(recovery) {
  if (!recovery || recovery.progress === null) return "not started";
  const pct = Math.floor(recovery.progress * 100);
  return `${pct}% (${recovery.offset}/${recovery.hwm}, ${recovery.remaining} left)`;
}

function tableCell(stats) {
  if (!stats) return el("td", {class: "muted"}, "-");
  return el("td", {class: "status-" + stats.status}, `${stats.status}: ${progress(stats.recovery)}`);
}

function renderProcessors(processors) {
  const box = document.getElementById("processors");
  if (!processors.length) { box.replaceChildren(el("p", {class: "muted"}, "no processors")); return; }
  const parts = [];
  for (const proc of processors) {
    parts.push(el("h3", {}, proc.name + " ",
      el("span", {class: "state-" + proc.state}, proc.state),
      proc.recovered ? " (recovered)" : " (recovering)",
      `, lag ${proc.lag}`));
    if (proc.error) parts.push(el("p", {class: "state-failed"}, proc.error));
    const rows = proc.partitions.map((p) => el("tr", {},
      num(p.partition), el("td", {}, p.role), tableCell(p.table),
      el("td", {}, Object.entries(p.joins).map(([t, s]) => `${t}: ${s.status}`).join(", ") || "-"),
      el("td", {}, Object.entries(p.inputs)
        .map(([t, s]) => `${t}: ${s.count} msgs, lag ${s.lag}`).join("; ")),
      num(p.lag)));
    parts.push(table(["partition", "role", "group table", "joins", "inputs", "lag"], rows));
  }
  box.replaceChildren(...parts);
}

function renderViews(views) {
  const box = document.getElementById("views");
  const names = document.getElementById("view-names");
  names.replaceChildren(...views.map((v) => el("option", {value: v.name})));
  if (!views.length) { box.replaceChildren(el("p", {class: "muted"}, "no views")); return; }
  const rows = views.map((v) => el("tr", {},
    el("td", {}, v.name), el("td", {}, v.table),
    el("td", {class: "state-" + v.state}, v.state), el("td", {}, v.recovered ? "yes" : "no"),
    el("td", {}, progress(v.recovery)),
    el("td", {}, v.partitions.map((p) => `${p.partition}: ${p.status}`).join(", "))));
  box.replaceChildren(table(["view", "table", "state", "recovered", "recovery", "partitions"], rows));
}

async function getJSON(path) {
  const response = await fetch(api(path), {headers: {accept: "application/json"}});
  let body = null;
  try { body = await response.json(); } catch (err) { body = {error: String(err)}; }
  return {status: response.status, body};
}

async function refresh() {
  const status = document.getElementById("refreshed");
  try {
    const [procs, views] = await Promise.all([getJSON("processors"), getJSON("views")]);
    if (procs.status === 200) renderProcessors(procs.body.processors);
    if (views.status === 200) renderViews(views.body.views);
    status.textContent = "updated " + new Date().toLocaleTimeString();
  } catch (err) {
    status.textContent = "refresh failed: " + err;
  }
}

function show(state, label, text) {
  const result = document.getElementById("result");
  result.dataset.state = state;
  document.getElementById("result-status").textContent = label;
  result.textContent = text;
}

async function lookup(viewName, key) {
  show("loading", "looking up...", "");
  const path = "views/" + encodeURIComponent(viewName) + "/value?key=" + encodeURIComponent(key);
  try {
    const {status, body} = await getJSON(path);
    if (status === 200) show("found", `${viewName} / ${key} (partition ${body.partition})` +
      (body.exact ? "" : " [some parts shown as repr()]"), JSON.stringify(body.value, null, 2));
    else if (status === 404) show("missing", `${status}: ${body.error}`, "");
    else show("error", `${status}: ${body && body.error}`, "");
  } catch (err) {
    show("error", "request failed: " + err, "");
  }
}

async function listKeys(viewName, prefix) {
  const box = document.getElementById("keys");
  const path = "views/" + encodeURIComponent(viewName) + "/keys?limit=50&prefix=" +
    encodeURIComponent(prefix);
  const {status, body} = await getJSON(path);
  if (status !== 200) {
    box.replaceChildren(el("span", {class: "state-failed"}, `${status}: ${body.error}`));
    return;
  }
  const buttons = body.keys.map((k) => {
    const b = el("button", {type: "button"}, k);
    b.addEventListener("click", () => { document.getElementById("key").value = k; lookup(viewName, k); });
    return b;
  });
  if (body.more) buttons.push(el("span", {class: "muted"}, "...more"));
  if (!buttons.length) buttons.push(el("span", {class: "muted"}, "no keys"));
  box.replaceChildren(...buttons);
}

document.getElementById("query").addEventListener("submit", (event) => {
  event.preventDefault();
  lookup(document.getElementById("view").value, document.getElementById("key").value);
});
document.getElementById("list").addEventListener("click", () => {
  listKeys(document.getElementById("view").value, document.getElementById("key").value);
});
refresh();
setInterval(refresh, REFRESH_MS);
"""

_TEMPLATE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{title}</title>
<style>{style}</style>
</head>
<body>
<h1>{title}</h1>
<p class="muted" id="refreshed">loading...</p>
<h2>Query a view</h2>
<form id="query" autocomplete="off">
<label>view <input id="view" name="view" list="view-names" required></label>
<datalist id="view-names"></datalist>
<label>key <input id="key" name="key"></label>
<button id="lookup" type="submit">Look up</button>
<button id="list" type="button">List keys (key as prefix)</button>
</form>
<div id="keys"></div>
<p id="result-status"></p>
<pre id="result" data-state="idle"></pre>
<h2>Processors</h2>
<div id="processors"></div>
<h2>Views</h2>
<div id="views"></div>
<script>{script}</script>
</body>
</html>
"""


def page(title: str) -> str:
    """The page's HTML, headed ``title`` (escaped here: the only text put into the markup)."""
    escaped = html.escape(title, quote=True)
    return _TEMPLATE.format(title=escaped, style=STYLE, script=SCRIPT)
