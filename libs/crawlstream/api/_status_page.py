"""The ``/status`` page: one HTML document, its script and its style sheet, as module strings.

No framework and no build step: the page polls ``GET /v1/status`` every ``POLL_MS`` (the next
request starts after the previous answer, so a slow API is never asked twice at once) and
fills elements marked ``data-field`` (a path into the JSON answer) or rebuilds the small
tables. Every number element carries the raw value in ``data-value`` next to its text, and
``<body data-generated-at>`` names the answer shown, so a test can compare the page with
the API. A missing value shows ``n/a``; ages show as "just now", "43 min ago", "2 h 5 min ago".

Tokens: the HTML says whether the API allows anonymous reads (``data-anonymous``). When it
does not, the page asks for a token before its first request, keeps it in
``sessionStorage`` (gone when the tab closes; never in a cookie, so no other page can make
the browser send it) and sends it as ``Authorization: Bearer``; a 401/403 asks again.
The script is a separate file so the page runs under a strict Content-Security-Policy
(``script-src 'self'``, no inline script).
"""

from __future__ import annotations

__all__ = ["POLL_MS", "STATUS_CSS", "STATUS_JS", "status_html"]

POLL_MS = 2000

_HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>crawlstream status</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/status/status.css">
<script src="/status/status.js" defer></script>
</head>
<body data-anonymous="__ANONYMOUS__" data-poll-ms="__POLL_MS__" data-generated-at="">
<header>
  <h1>crawlstream status</h1>
  <span id="state" class="state">loading&hellip;</span>
</header>
<form id="token-form" hidden>
  <label for="token">This API needs a token to read. Paste one (kept in this tab only):</label>
  <input id="token" name="token" type="password" autocomplete="off" spellcheck="false">
  <button type="submit">Use token</button>
  <span id="token-message" class="message"></span>
</form>
<main>
  <section>
    <h2>Crawl</h2>
    <dl class="numbers">
      <dt>pages fetched</dt><dd data-field="crawl.pages"></dd>
      <dt>pages stored</dt><dd data-field="crawl.stored"></dd>
      <dt>queued URLs (approx.)</dt><dd data-field="crawl.queued_urls"></dd>
      <dt>pages / s</dt><dd data-field="crawl.pages_per_s" data-format="rate"></dd>
      <dt>fetch results</dt><dd data-field="crawl.results"></dd>
      <dt>fetch results / s</dt><dd data-field="crawl.results_per_s" data-format="rate"></dd>
      <dt>body bytes fetched</dt><dd data-field="crawl.body_bytes" data-format="bytes"></dd>
      <dt>stats saved</dt><dd data-field="crawl.stats_age_s" data-format="age"></dd>
    </dl>
  </section>
  <section>
    <h2>Services (consumer groups)</h2>
    <table>
      <thead><tr><th>service</th><th>lag</th><th>consumed</th><th>per s</th></tr></thead>
      <tbody id="services"></tbody>
    </table>
  </section>
  <section>
    <h2>Errors</h2>
    <table>
      <thead><tr><th>kind</th><th>count</th></tr></thead>
      <tbody id="errors"></tbody>
    </table>
    <table>
      <thead><tr><th>dead-letter topic</th><th>messages</th></tr></thead>
      <tbody id="dlq"></tbody>
    </table>
  </section>
  <section>
    <h2>Top domains <span id="top-exact" class="note"></span></h2>
    <table>
      <thead><tr><th>domain</th><th>pages</th></tr></thead>
      <tbody id="domains"></tbody>
    </table>
  </section>
  <section>
    <h2>Content store <span id="store-note" class="note"></span></h2>
    <dl class="numbers">
      <dt>URLs</dt><dd data-field="store.urls"></dd>
      <dt>on disk</dt><dd data-field="store.stored_bytes" data-format="bytes"></dd>
      <dt>raw</dt><dd data-field="store.raw_bytes" data-format="bytes"></dd>
      <dt>ratio</dt><dd data-field="store.ratio" data-format="ratio"></dd>
      <dt>quarantined URLs</dt><dd data-field="store.quarantined_urls"></dd>
      <dt>stats saved</dt><dd data-field="store.stats_age_s" data-format="age"></dd>
    </dl>
  </section>
  <section>
    <h2>URL index</h2>
    <dl class="numbers">
      <dt>version</dt><dd data-field="index.version" data-format="text"></dd>
      <dt>built</dt><dd data-field="index.created_at" data-format="text"></dd>
      <dt>domains</dt><dd data-field="index.domains"></dd>
      <dt>URLs</dt><dd data-field="index.urls"></dd>
      <dt>size</dt><dd data-field="index.bytes" data-format="bytes"></dd>
      <dt>versions kept</dt><dd data-field="index.versions_kept"></dd>
    </dl>
  </section>
</main>
<footer>bus: <span data-field="bus.backend" data-format="text"></span> &middot;
data dir: <span data-field="data_dir" data-format="text"></span> &middot;
<a href="/v1/status">JSON</a></footer>
</body>
</html>
"""

STATUS_CSS = """
:root { color-scheme: light dark; --muted: #777; --bad: #c0392b; --ok: #1e8449; }
body { font: 14px/1.4 system-ui, sans-serif; margin: 0 auto; max-width: 1100px; padding: 0 1rem 2rem; }
header { display: flex; align-items: baseline; gap: 1rem; }
h1 { font-size: 1.3rem; } h2 { font-size: 1.05rem; margin: 0 0 .4rem; }
main { display: grid; grid-template-columns: repeat(auto-fit, minmax(320px, 1fr)); gap: 1rem 2rem; }
section { border-top: 1px solid #8884; padding-top: .5rem; }
dl.numbers { display: grid; grid-template-columns: auto auto; gap: .15rem 1rem; margin: 0; }
dd { margin: 0; text-align: right; font-variant-numeric: tabular-nums; }
table { border-collapse: collapse; width: 100%; margin-bottom: .6rem; }
th, td { text-align: right; padding: .1rem .4rem; font-variant-numeric: tabular-nums; }
th:first-child, td:first-child { text-align: left; overflow-wrap: anywhere; }
.na { color: var(--muted); }
.state.live { color: var(--ok); } .state.stale, .message { color: var(--bad); }
.note { color: var(--muted); font-weight: normal; font-size: .85rem; }
form[hidden] { display: none; }
form { margin: 1rem 0; display: flex; flex-wrap: wrap; gap: .5rem; align-items: center; }
footer { margin-top: 1.5rem; color: var(--muted); }
"""

STATUS_JS = r"""
"use strict";
(function () {
  const TOKEN_KEY = "crawlstream.status.token";
  const body = document.body;
  const anonymous = body.dataset.anonymous === "true";
  const pollMs = Number(body.dataset.pollMs) || 2000;
  const state = document.getElementById("state");
  const form = document.getElementById("token-form");
  const tokenInput = document.getElementById("token");
  const tokenMessage = document.getElementById("token-message");
  let timer = null;

  function get(doc, path) {
    let v = doc;
    for (const part of path.split(".")) {
      if (v === null || v === undefined || typeof v !== "object") return null;
      v = v[part];
    }
    return v === undefined ? null : v;
  }

  // "just now", "42 s ago", "43 min ago", "2 h 5 min ago", "3 d 4 h ago"
  function age(seconds) {
    const s = Math.max(0, Math.round(seconds));
    if (s < 10) return "just now";
    if (s < 60) return s + " s ago";
    const minutes = Math.round(s / 60);
    if (minutes < 60) return minutes + " min ago";
    const [big, bigUnit, small, smallUnit] = minutes < 24 * 60
      ? [Math.floor(minutes / 60), " h", minutes % 60, " min"]
      : [Math.floor(minutes / 1440), " d", Math.floor((minutes % 1440) / 60), " h"];
    return big + bigUnit + (small ? " " + small + smallUnit : "") + " ago";
  }

  function format(value, kind) {
    if (value === null || value === undefined) return "n/a";
    if (kind === "text") return String(value);
    if (kind === "rate") return Number(value).toFixed(1);
    if (kind === "ratio") return Number(value).toFixed(2) + "x";
    if (kind === "age") return age(Number(value));
    if (kind === "bytes") {
      const units = ["B", "kB", "MB", "GB", "TB"];
      let v = Number(value), i = 0;
      while (v >= 1000 && i < units.length - 1) { v /= 1000; i += 1; }
      return (i === 0 ? String(v) : v.toFixed(1)) + " " + units[i];
    }
    return String(value);
  }

  function fill(el, value, kind) {
    el.textContent = format(value, kind);
    el.dataset.value = value === null || value === undefined ? "" : String(value);
    el.classList.toggle("na", value === null || value === undefined);
  }

  function cell(tag, value, kind, field) {
    const el = document.createElement(tag);
    if (field) el.dataset.field = field;
    fill(el, value, kind);
    return el;
  }

  function rows(tbodyId, items, columns, emptyText) {
    const tbody = document.getElementById(tbodyId);
    const fresh = [];
    if (items === null) {
      const tr = document.createElement("tr");
      tr.appendChild(cell("td", null, "text"));
      fresh.push(tr);
    } else if (items.length === 0) {
      const tr = document.createElement("tr");
      tr.appendChild(cell("td", emptyText, "text"));
      fresh.push(tr);
    }
    for (const item of items || []) {
      const tr = document.createElement("tr");
      for (const [key, kind, field] of columns(item)) tr.appendChild(cell("td", key, kind, field));
      fresh.push(tr);
    }
    tbody.replaceChildren(...fresh);
  }

  function render(doc) {
    for (const el of document.querySelectorAll("[data-field]")) {
      if (el.closest("tbody")) continue;
      fill(el, get(doc, el.dataset.field), el.dataset.format || "int");
    }
    rows("services", doc.services, (s) => [
      [s.service, "text"],
      [s.lag, "int", "services." + s.group + ".lag"],
      [s.consumed, "int", "services." + s.group + ".consumed"],
      [s.rate_per_s, "rate", "services." + s.group + ".rate_per_s"],
    ], "no consumer group has committed yet");
    const errors = doc.errors || {};
    const kinds = errors.by_kind ? Object.entries(errors.by_kind) : null;
    rows("errors", kinds, ([kind, n]) => [[kind, "text"], [n, "int", "errors.by_kind." + kind]], "none");
    const dlq = errors.dlq ? Object.entries(errors.dlq) : null;
    rows("dlq", dlq, ([topic, n]) => [[topic, "text"], [n, "int", "errors.dlq." + topic]], "no dead-letter topic");
    const top = doc.top_domains;
    rows("domains", top ? top.items : null, (d) => [[d.domain, "text"], [d.pages, "int", "top_domains." + d.domain]],
         "no page yet");
    document.getElementById("top-exact").textContent =
      top ? (top.exact ? "(exact)" : "(counts may be over by up to " + top.max_error + ")") : "";
    const store = doc.store;
    document.getElementById("store-note").textContent = !store || store.source !== "files" ? ""
      : store.stats_age_s === null ? "(URLs, raw and ratio: none saved yet)" : "(URLs, raw and ratio as last saved)";
    body.dataset.generatedAt = String(doc.generated_at_ms);
    state.textContent = "live, updated " + new Date(doc.generated_at_ms).toLocaleTimeString();
    state.className = "state live";
  }

  function askForToken(message) {
    form.hidden = false;
    tokenMessage.textContent = message || "";
    state.textContent = "waiting for a token";
    state.className = "state stale";
    tokenInput.focus();
  }

  async function poll() {
    timer = null;
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (!anonymous && !token) { askForToken(""); return; }
    const headers = { "Accept": "application/json" };
    if (token) headers["Authorization"] = "Bearer " + token;
    let resp;
    try {
      resp = await fetch("/v1/status", { headers: headers, cache: "no-store" });
    } catch (err) {
      state.textContent = "API unreachable; retrying";
      state.className = "state stale";
      timer = setTimeout(poll, pollMs);
      return;
    }
    if (resp.status === 401 || resp.status === 403) {
      sessionStorage.removeItem(TOKEN_KEY);
      const answer = await resp.json().catch(() => ({}));
      askForToken("token refused: " + (answer.message || resp.status));
      return;
    }
    if (!resp.ok) {
      state.textContent = "API answered " + resp.status + "; retrying";
      state.className = "state stale";
    } else {
      form.hidden = true;
      render(await resp.json());
    }
    timer = setTimeout(poll, pollMs);
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const token = tokenInput.value.trim();
    if (!token) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    tokenInput.value = "";
    if (timer !== null) clearTimeout(timer);
    poll();
  });
  poll();
})();
"""


def status_html(*, anonymous_reads: bool) -> str:
    """The page; ``anonymous_reads``: whether it may ask ``/v1/status`` without a token first."""
    return _HTML.replace("__ANONYMOUS__", "true" if anonymous_reads else "false").replace("__POLL_MS__", str(POLL_MS))
