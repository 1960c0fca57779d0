/**
 * The status page served at `GET /` on the management port: one self-contained HTML document
 * (inline CSS and JS, no CDN, no web font, no build step) that asks for the admin token, keeps it
 * in sessionStorage and polls `GET /admin/stats` every 2 s (the JSON shape is in
 * /work/briefs/contracts.md and the README's admin API section).
 *
 * Every string from the JSON reaches the DOM through `textContent` or an SVG attribute set with
 * `setAttribute`, never through innerHTML, so an operation name or an upstream error message is
 * text, whatever it contains. The page is sent with a strict Content-Security-Policy that allows
 * exactly the one inline <script> and the one inline <style> below by their SHA-256 hashes
 * (computed here, at module load, from the very strings that are served), and nothing else:
 * no other script, no style attribute, no external fetch but same-origin XHR to /admin/stats.
 */
import { createHash } from 'node:crypto';

const STYLE = String.raw`
:root {
  color-scheme: dark light;
  --bg: #0d1117; --panel: #161b22; --border: #30363d; --text: #e6edf3; --muted: #9da7b3;
  --hit: #3fb950; --offload: #58a6ff; --warn: #d29922; --bad: #f85149; --good: #3fb950;
  --grid: #30363d; --focus: #f0b72f; --coalesced: #a371f7;
}
@media (prefers-color-scheme: light) {
  :root {
    --bg: #f6f8fa; --panel: #ffffff; --border: #d0d7de; --text: #1f2328; --muted: #57606a;
    --hit: #1a7f37; --offload: #0969da; --warn: #9a6700; --bad: #cf222e; --good: #1a7f37;
    --grid: #d8dee4; --focus: #bf8700; --coalesced: #8250df;
  }
}
* { box-sizing: border-box; }
html { font-size: 16px; }
body {
  margin: 0; background: var(--bg); color: var(--text);
  font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
  line-height: 1.4; font-variant-numeric: tabular-nums;
}
header {
  display: flex; flex-wrap: wrap; align-items: baseline; gap: 0.25rem 1.25rem;
  padding: 0.75rem 1.25rem; border-bottom: 1px solid var(--border); background: var(--panel);
}
h1 { font-size: 1.35rem; margin: 0; }
h2 { font-size: 0.95rem; margin: 0 0 0.5rem; color: var(--muted); font-weight: 600; text-transform: uppercase; letter-spacing: 0.04em; }
.meta { margin: 0; color: var(--muted); font-size: 0.9rem; }
.meta span { color: var(--text); }
#updated { margin-left: auto; font-size: 0.9rem; color: var(--muted); }
main { padding: 1rem 1.25rem 2rem; max-width: 1600px; margin: 0 auto; }
[hidden] { display: none !important; }
button, input { font: inherit; }
button {
  background: var(--offload); color: #fff; border: 0; border-radius: 6px; padding: 0.45rem 1rem; cursor: pointer;
}
@media (prefers-color-scheme: dark) { button { color: #0d1117; } }
button.secondary { background: transparent; color: var(--muted); border: 1px solid var(--border); padding: 0.2rem 0.7rem; font-size: 0.85rem; }
:focus-visible { outline: 3px solid var(--focus); outline-offset: 2px; }
#login { max-width: 30rem; margin: 3rem auto; padding: 1.5rem; background: var(--panel); border: 1px solid var(--border); border-radius: 8px; }
#login label { display: block; margin-bottom: 0.35rem; font-weight: 600; }
#login input {
  width: 100%; padding: 0.5rem; margin-bottom: 0.75rem; border-radius: 6px;
  border: 1px solid var(--border); background: var(--bg); color: var(--text);
}
.hint { color: var(--muted); font-size: 0.85rem; margin: 0.75rem 0 0; }
.error, .banner { color: var(--bad); font-weight: 600; }
.banner { border: 1px solid var(--bad); border-radius: 6px; padding: 0.5rem 0.75rem; margin-bottom: 1rem; background: var(--panel); }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(100%, 11rem), 1fr)); gap: 0.75rem; margin-bottom: 0.75rem; }
.card, .panel { background: var(--panel); border: 1px solid var(--border); border-radius: 8px; padding: 0.75rem 1rem; min-width: 0; }
.card h2 { margin-bottom: 0.2rem; font-size: 0.8rem; }
.big { font-size: 2.1rem; font-weight: 700; line-height: 1.15; white-space: nowrap; }
.sub { color: var(--muted); font-size: 0.85rem; }
.sub span:not([class]) { color: var(--text); }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(100%, 30rem), 1fr)); gap: 0.75rem; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(100%, 19rem), 1fr)); gap: 0.75rem; margin-top: 0.75rem; }
.chart-head { display: flex; flex-wrap: wrap; justify-content: space-between; gap: 0.5rem; }
.legend { display: flex; flex-wrap: wrap; gap: 0.25rem 1rem; font-size: 0.85rem; margin: 0; padding: 0; list-style: none; }
.legend li::before { content: ""; display: inline-block; width: 1.4rem; height: 0; vertical-align: middle; margin-right: 0.35rem; border-top: 3px solid; }
.legend .hit::before { border-color: var(--hit); }
.legend .offload::before { border-color: var(--offload); border-top-style: dashed; }
svg.chart { display: block; width: 100%; height: 220px; }
#rate-chart { height: 180px; }
.chart .axis { stroke: var(--grid); stroke-width: 1; }
.chart text { fill: var(--muted); font-size: 11px; }
.chart .line { fill: none; stroke-width: 2.5; stroke-linejoin: round; stroke-linecap: round; }
.chart .hitRatio { stroke: var(--hit); }
.chart .offload { stroke: var(--offload); stroke-dasharray: 7 4; }
.chart circle.hitRatio { fill: var(--hit); stroke: none; }
.chart circle.offload { fill: var(--offload); stroke: none; }
.chart .upstream { stroke: var(--text); stroke-width: 2; }
.bar.cache { fill: var(--hit); }
.bar.coalesced { fill: var(--coalesced); }
.bar.miss { fill: var(--warn); }
.bar.other { fill: var(--bad); }
.bar.passthrough { fill: var(--muted); }
.legend .cache::before { border-color: var(--hit); border-top-width: 8px; }
.legend .coalesced::before { border-color: var(--coalesced); border-top-width: 8px; }
.legend .miss::before { border-color: var(--warn); border-top-width: 8px; }
.legend .other::before { border-color: var(--bad); border-top-width: 8px; }
.legend .passthrough::before { border-color: var(--muted); border-top-width: 8px; }
.legend .upstream::before { border-color: var(--text); }
.empty { color: var(--muted); font-style: italic; margin: 0.5rem 0; }
table { width: 100%; border-collapse: collapse; font-size: 0.92rem; }
th, td { text-align: left; padding: 0.25rem 0.4rem; border-bottom: 1px solid var(--border); }
th { color: var(--muted); font-weight: 600; }
td.num, th.num { text-align: right; white-space: nowrap; width: 1%; }
td.name { overflow-wrap: break-word; }
table.top { table-layout: fixed; }
table.top th.num { width: 5.8rem; }
.tops { grid-template-columns: repeat(auto-fit, minmax(min(100%, 26rem), 1fr)); }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 0.3rem 1rem; margin: 0 0 0.5rem; }
dt { color: var(--muted); }
dd { margin: 0; overflow-wrap: anywhere; }
meter { width: 100%; height: 0.8rem; margin-bottom: 1rem; }
.state-up, .state-ok { color: var(--good); font-weight: 700; }
.state-down { color: var(--bad); font-weight: 700; }
.state-degraded, .state-unknown, .state-off { color: var(--warn); font-weight: 700; }
.visually-hidden { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
@media (max-width: 40rem) {
  main, header { padding-left: 0.6rem; padding-right: 0.6rem; }
  .big { font-size: 1.6rem; }
  #updated { margin-left: 0; }
}
`;

// Plain ES2020 for the browser, written without template literals so it can sit in this one.
const SCRIPT = String.raw`
(function () {
  'use strict';
  var TOKEN_KEY = 'tm-cache.adminToken';
  var POLL_MS = 2000;
  var BUCKET_MS = 10000;
  var RATE_WINDOW_MS = 30000;
  var OUTCOMES = ['hit', 'stale', 'miss', 'coalesced', 'bypass', 'error', 'passthrough'];
  var SVG_NS = 'http://www.w3.org/2000/svg';

  var body = document.body;
  var loginSection = document.getElementById('login');
  var loginForm = document.getElementById('login-form');
  var loginError = document.getElementById('login-error');
  var tokenInput = document.getElementById('token');
  var dashboard = document.getElementById('dashboard');
  var banner = document.getElementById('banner');
  var updated = document.getElementById('updated');
  var forget = document.getElementById('forget');
  var meta = document.getElementById('meta');
  var chart = document.getElementById('chart');
  var chartEmpty = document.getElementById('chart-empty');
  var rateChart = document.getElementById('rate-chart');
  var rateChartEmpty = document.getElementById('rate-chart-empty');

  var timer = null;
  var inFlight = null;
  var last = null;

  // ---- formatting -------------------------------------------------------------------------
  function isNum(v) { return typeof v === 'number' && isFinite(v); }
  function pct(v) { return isNum(v) ? (v * 100).toFixed(1) + ' %' : '—'; }
  function count(v) {
    if (!isNum(v)) return '—';
    var a = Math.abs(v);
    if (a < 1000) return String(Math.round(v * 10) / 10);
    var scale = a < 1e6 ? 1e3 : a < 1e9 ? 1e6 : 1e9;
    var unit = scale === 1e3 ? ' k' : scale === 1e6 ? ' M' : ' G';
    var digits = a / scale < 10 ? 2 : a / scale < 100 ? 1 : 0;
    return (v / scale).toFixed(digits) + unit;
  }
  function rate(v) { return isNum(v) ? (v < 10 ? v.toFixed(2) : count(v)) + ' /s' : '—'; }
  function bytes(v) {
    if (!isNum(v)) return '—';
    var units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    var i = 0;
    while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (i === 0 ? String(v) : v.toFixed(Math.abs(v) < 10 ? 2 : 1)) + ' ' + units[i];
  }
  function duration(s) {
    if (!isNum(s)) return '—';
    s = Math.max(0, Math.floor(s));
    var d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60), sec = s % 60;
    if (d > 0) return d + ' d ' + h + ' h';
    if (h > 0) return h + ' h ' + m + ' min';
    if (m > 0) return m + ' min ' + sec + ' s';
    return sec + ' s';
  }
  function ago(t, now) {
    if (!isNum(t)) return 'never';
    return duration((now - t) / 1000) + ' ago';
  }
  function clock(t) {
    var d = new Date(t);
    function two(n) { return (n < 10 ? '0' : '') + n; }
    return two(d.getHours()) + ':' + two(d.getMinutes()) + ':' + two(d.getSeconds());
  }
  function text(v) { return v === null || v === undefined || v === '' ? '—' : String(v); }

  // ---- DOM helpers (text only: never innerHTML) -------------------------------------------
  function stat(name) { return document.querySelector('[data-stat="' + name + '"]'); }
  function stats(name) { return Array.prototype.slice.call(document.querySelectorAll('[data-stat="' + name + '"]')); }
  /** Shows a figure: its formatted text, and the raw value in data-value for tests and tools. */
  function setStat(name, shown, raw) {
    stats(name).forEach(function (el) {
      el.textContent = shown;
      el.setAttribute('data-value', raw === null || raw === undefined ? '' : String(raw));
    });
  }
  /** A state word (up, down, ok, degraded…), coloured by its class. */
  function setState(name, value) {
    setStat(name, text(value), value);
    stats(name).forEach(function (el) { el.className = 'state-' + String(value).replace(/[^a-z]/g, ''); });
  }
  function cell(tag, content, cls) {
    var el = document.createElement(tag);
    el.textContent = content;
    if (cls) el.className = cls;
    return el;
  }
  function numCell(raw, shown) {
    var td = cell('td', shown, 'num');
    td.setAttribute('data-value', String(raw));
    return td;
  }
  function svg(tag, attrs) {
    var el = document.createElementNS(SVG_NS, tag);
    for (var k in attrs) el.setAttribute(k, String(attrs[k]));
    return el;
  }
  function num(v) { return isNum(v) ? v : 0; }

  // ---- series -----------------------------------------------------------------------------
  /** The buckets that are over: every one but the last, which is the current, partial bucket. */
  function completeBuckets(series) { return Array.isArray(series) ? series.slice(0, -1) : []; }
  function cacheable(b) { return num(b.requests) - num(b.byOutcome && b.byOutcome.passthrough); }
  function bucketHitRatio(b) {
    var c = cacheable(b);
    return c > 0 ? (num(b.byOutcome.hit) + num(b.byOutcome.stale)) / c : null;
  }
  function bucketOffload(b) {
    var c = cacheable(b);
    return c > 0 ? 1 - num(b.upstream) / c : null;
  }
  /**
   * Requests per second over the complete buckets of the last 30 s (by time, so a bucket missing
   * from the series counts as a quiet one), and only since the process started.
   */
  function rates(s) {
    var series = Array.isArray(s.series) ? s.series : [];
    if (series.length === 0) return null;
    var end = series[series.length - 1].t;
    var start = Math.max(end - RATE_WINDOW_MS, isNum(s.startedAt) ? s.startedAt : -Infinity);
    var seconds = (end - start) / 1000;
    if (!(seconds > 0)) return null;
    var sums = { total: 0 };
    OUTCOMES.forEach(function (o) { sums[o] = 0; });
    completeBuckets(series).forEach(function (b) {
      if (b.t + BUCKET_MS <= end && b.t + BUCKET_MS > end - RATE_WINDOW_MS) {
        sums.total += num(b.requests);
        OUTCOMES.forEach(function (o) { sums[o] += num(b.byOutcome && b.byOutcome[o]); });
      }
    });
    var out = { from: start, to: end, seconds: seconds };
    for (var k in sums) out[k] = sums[k] / seconds;
    return out;
  }

  // ---- charts -----------------------------------------------------------------------------
  /**
   * Empties an SVG, sizes its viewBox to its box (so text is not stretched) and returns the time
   * axis shared by both charts: complete buckets from the first one (at least 5 minutes back)
   * to the start of the current bucket, with labels under it.
   */
  function frame(el, s, buckets, height) {
    while (el.firstChild) el.removeChild(el.firstChild);
    var width = Math.max(280, Math.round(el.getBoundingClientRect().width) || 800);
    var pad = { l: 48, r: 12, t: 10, b: 24 };
    el.setAttribute('viewBox', '0 0 ' + width + ' ' + height);
    var end = Array.isArray(s.series) && s.series.length > 0 ? s.series[s.series.length - 1].t : s.now;
    var span = Math.max(5 * 60000, buckets.length > 0 ? end - buckets[0].t : 0);
    var begin = end - span;
    var f = {
      width: width, height: height, pad: pad, minutes: Math.round(span / 60000),
      barWidth: Math.max(1, BUCKET_MS / span * (width - pad.l - pad.r) - 1),
      /** The middle of the bucket that starts at t. */
      x: function (t) { return pad.l + (t + BUCKET_MS / 2 - begin) / span * (width - pad.l - pad.r); },
      /** v in [0, max] → height; max at the top. */
      y: function (v, max) { return pad.t + (1 - Math.max(0, Math.min(1, v / max))) * (height - pad.t - pad.b); },
    };
    [f.minutes, Math.round(f.minutes / 2), 0].forEach(function (m, i) {
      var label = svg('text', { x: pad.l + (1 - m * 60000 / span) * (width - pad.l - pad.r), y: height - 6, 'text-anchor': ['start', 'middle', 'end'][i] });
      label.textContent = m === 0 ? 'now' : '−' + m + ' min';
      el.appendChild(label);
    });
    return f;
  }
  function gridLines(el, f, max, ticks, format) {
    ticks.forEach(function (v) {
      el.appendChild(svg('line', { 'class': 'axis', x1: f.pad.l, x2: f.width - f.pad.r, y1: f.y(v, max), y2: f.y(v, max) }));
      var label = svg('text', { x: f.pad.l - 6, y: f.y(v, max) + 4, 'text-anchor': 'end' });
      label.textContent = format(v);
      el.appendChild(label);
    });
  }
  function titled(el, content) {
    var title = svg('title', {});
    title.textContent = content;
    el.appendChild(title);
    return el;
  }
  function showEmpty(el, emptyEl, drawn, message, label) {
    emptyEl.hidden = drawn;
    emptyEl.textContent = drawn ? '' : message;
    el.setAttribute('aria-label', drawn ? label : 'No data yet.');
  }

  /** Hit ratio and offload per bucket, as lines broken where a bucket has nothing cacheable. */
  function drawRatioChart(s) {
    var buckets = completeBuckets(s.series);
    var f = frame(chart, s, buckets, 220);
    gridLines(chart, f, 1, [0, 0.25, 0.5, 0.75, 1], function (v) { return (v * 100) + '%'; });
    var described = { hitRatio: bucketHitRatio, offload: bucketOffload };
    var latest = {};
    ['offload', 'hitRatio'].forEach(function (name) {
      var d = '';
      var prevT = null;
      buckets.forEach(function (b) {
        var v = described[name](b);
        if (v === null) { prevT = null; return; }
        // A missing bucket or one without cacheable requests breaks the line: no invented values.
        var x = f.x(b.t).toFixed(1), y = f.y(v, 1).toFixed(1);
        d += (prevT !== null && b.t - prevT <= BUCKET_MS ? ' L' : ' M') + x + ' ' + y;
        prevT = b.t;
        chart.appendChild(titled(svg('circle', { 'class': name, cx: x, cy: y, r: f.barWidth > 8 ? 2.5 : 1.5, 'data-series': name, 'data-t': b.t, 'data-value': v }),
          clock(b.t) + ' ' + (name === 'hitRatio' ? 'hit ratio ' : 'offload ') + pct(v)));
        latest[name] = v;
      });
      if (d) chart.insertBefore(svg('path', { 'class': 'line ' + name, d: d.trim() }), chart.querySelector('circle'));
    });
    showEmpty(chart, chartEmpty, chart.querySelectorAll('circle').length > 0,
      'No complete 10-second bucket with cacheable requests yet.',
      'Hit ratio and offload per 10-second bucket over the last ' + f.minutes + ' minutes; latest hit ratio ' +
        pct(latest.hitRatio) + ', latest offload ' + pct(latest.offload) + '.');
  }

  /** Requests per second by outcome (stacked bars) and upstream requests per second (a line). */
  var STACK = [
    { name: 'cache', label: 'hit + stale', outcomes: ['hit', 'stale'] },
    { name: 'coalesced', label: 'coalesced', outcomes: ['coalesced'] },
    { name: 'miss', label: 'miss', outcomes: ['miss'] },
    { name: 'other', label: 'bypass + error', outcomes: ['bypass', 'error'] },
    { name: 'passthrough', label: 'passthrough', outcomes: ['passthrough'] },
  ];
  function niceMax(v) {
    var p = Math.pow(10, Math.floor(Math.log10(v)));
    var m = [1, 2, 5, 10].find(function (k) { return k * p >= v; });
    return m * p;
  }
  function drawRateChart(s) {
    var buckets = completeBuckets(s.series);
    var peak = buckets.reduce(function (m, b) { return Math.max(m, num(b.requests), num(b.upstream)); }, 0) / (BUCKET_MS / 1000);
    var max = peak > 0 ? niceMax(peak) : 1;
    var f = frame(rateChart, s, buckets, 180);
    gridLines(rateChart, f, max, [0, max / 2, max], function (v) { return count(v) + '/s'; });
    var d = '';
    var prevT = null;
    buckets.forEach(function (b) {
      if (!(num(b.requests) > 0) && !(num(b.upstream) > 0)) { prevT = null; return; }
      var base = 0;
      var x = f.x(b.t) - f.barWidth / 2;
      var detail = OUTCOMES.map(function (o) { return o + ' ' + count(num(b.byOutcome && b.byOutcome[o])); }).join(', ');
      STACK.forEach(function (part) {
        var n = part.outcomes.reduce(function (sum, o) { return sum + num(b.byOutcome && b.byOutcome[o]); }, 0) / (BUCKET_MS / 1000);
        if (n <= 0) return;
        var top = f.y(base + n, max), bottom = f.y(base, max);
        rateChart.appendChild(titled(svg('rect', { 'class': 'bar ' + part.name, x: x.toFixed(1), width: f.barWidth.toFixed(1), y: top.toFixed(1), height: Math.max(0.5, bottom - top).toFixed(1), 'data-t': b.t, 'data-value': n }),
          clock(b.t) + ': ' + rate(num(b.requests) / (BUCKET_MS / 1000)) + ' (' + detail + '), upstream ' + rate(num(b.upstream) / (BUCKET_MS / 1000))));
        base += n;
      });
      var y = f.y(num(b.upstream) / (BUCKET_MS / 1000), max).toFixed(1);
      d += (prevT !== null && b.t - prevT <= BUCKET_MS ? ' L' : ' M') + f.x(b.t).toFixed(1) + ' ' + y;
      prevT = b.t;
    });
    if (d) rateChart.appendChild(svg('path', { 'class': 'line upstream', d: d.trim() }));
    var lastB = buckets[buckets.length - 1];
    showEmpty(rateChart, rateChartEmpty, d !== '', 'No complete 10-second bucket with requests yet.',
      'Requests per second by outcome and upstream requests per second, per 10-second bucket over the last ' + f.minutes +
        ' minutes; last bucket ' + rate(num(lastB && lastB.requests) / (BUCKET_MS / 1000)) + ', upstream ' + rate(num(lastB && lastB.upstream) / (BUCKET_MS / 1000)) + '.');
  }
  function drawCharts(s) {
    drawRatioChart(s);
    drawRateChart(s);
  }

  // ---- tables -----------------------------------------------------------------------------
  function fillTop(name, rows, key) {
    var tbody = stat(name);
    while (tbody.firstChild) tbody.removeChild(tbody.firstChild);
    (Array.isArray(rows) ? rows : []).forEach(function (r) {
      var tr = document.createElement('tr');
      tr.appendChild(cell('td', text(r[key]), 'name'));
      tr.appendChild(numCell(r.upstreamRequests, count(r.upstreamRequests)));
      tr.appendChild(numCell(r.requests, count(r.requests)));
      var saved = num(r.requests) > 0 ? 1 - num(r.upstreamRequests) / r.requests : null;
      tr.appendChild(numCell(saved === null ? '' : saved, pct(saved)));
      tbody.appendChild(tr);
    });
    if (!tbody.firstChild) {
      var tr = document.createElement('tr');
      var td = cell('td', 'No requests yet.', 'empty');
      td.colSpan = 4;
      tr.appendChild(td);
      tbody.appendChild(tr);
    }
  }

  // ---- render -----------------------------------------------------------------------------
  function render(s) {
    var req = s.requests || {}, up = s.upstream || {}, mem = s.memory || {}, redis = s.redis || {}, b = s.bytes || {};
    setStat('version', text(s.version), s.version);
    setStat('node', text(s.node), s.node);
    setStat('uptimeS', duration(s.uptimeS), s.uptimeS);

    setStat('hitRatio', pct(s.hitRatio), s.hitRatio);
    document.title = 'tm-cache: ' + pct(s.hitRatio) + ' hits, upstream ' + text(up.state);
    setStat('offload', pct(up.offload), up.offload);
    setStat('requests.total', count(req.total), req.total);
    setStat('upstream.requests', count(up.requests), up.requests);
    setStat('upstream.avoided', count(up.avoided), up.avoided);
    setStat('bytes.sent', bytes(b.sent), b.sent);
    setStat('bytes.savedBy304', bytes(b.savedBy304), b.savedBy304);

    var r = rates(s);
    var rateEl = stat('rate.total');
    // The window the rates cover, so a reader can recompute them from the same series.
    rateEl.setAttribute('data-from', r ? r.from : '');
    rateEl.setAttribute('data-to', r ? r.to : '');
    rateEl.setAttribute('data-seconds', r ? r.seconds : '');
    setStat('rate.total', r ? rate(r.total) : '—', r ? r.total : null);
    OUTCOMES.forEach(function (o) {
      setStat('rate.' + o, r ? rate(r[o]) : '—', r ? r[o] : null);
      setStat('requests.byOutcome.' + o, count(req.byOutcome && req.byOutcome[o]), req.byOutcome && req.byOutcome[o]);
    });
    ['memory', 'redis', 'none'].forEach(function (t) {
      setStat('requests.byTier.' + t, count(req.byTier && req.byTier[t]), req.byTier && req.byTier[t]);
    });

    setState('upstream.state', up.state);
    setStat('upstream.lastError', text(up.lastError), up.lastError);
    setStat('upstream.lastCheckedAt', ago(up.lastCheckedAt, s.now), up.lastCheckedAt);
    setStat('upstream.active', count(up.active), up.active);
    setStat('upstream.queued', count(up.queued), up.queued);
    setStat('upstream.recent429', count(up.recent429), up.recent429);
    setStat('upstream.last429At', ago(up.last429At, s.now), up.last429At);
    ['2xx', '3xx', '4xx', '429', '5xx', 'error'].forEach(function (c) {
      setStat('upstream.byStatusClass.' + c, count(up.byStatusClass && up.byStatusClass[c]), up.byStatusClass && up.byStatusClass[c]);
    });

    setStat('memory.entries', count(mem.entries), mem.entries);
    setStat('memory.bytes', bytes(mem.bytes), mem.bytes);
    setStat('memory.maxBytes', bytes(mem.maxBytes), mem.maxBytes);
    setStat('memory.evictions', count(mem.evictions), mem.evictions);
    var meter = document.getElementById('memory-meter');
    meter.max = Math.max(1, num(mem.maxBytes));
    meter.value = num(mem.bytes);
    meter.textContent = pct(num(mem.bytes) / Math.max(1, num(mem.maxBytes)));

    setState('redis.status', redis.status);
    setStat('redis.configured', redis.configured ? 'yes' : 'no', redis.configured);
    setStat('redis.detail', text(redis.detail), redis.detail);
    setStat('redis.errors', count(redis.errors), redis.errors);

    fillTop('top.operations', s.top && s.top.operations, 'operation');
    fillTop('top.users', s.top && s.top.users, 'userId');
    drawCharts(s);
  }

  // ---- polling ----------------------------------------------------------------------------
  function showLogin(message) {
    stop();
    sessionStorage.removeItem(TOKEN_KEY);
    body.setAttribute('data-state', message ? 'unauthorized' : 'login');
    document.title = 'tm-cache status';
    loginError.textContent = message || '';
    loginError.hidden = !message;
    loginSection.hidden = false;
    dashboard.hidden = true;
    banner.hidden = true;
    forget.hidden = true;
    meta.hidden = true;
    updated.textContent = 'not connected';
    tokenInput.value = '';
    tokenInput.focus();
  }
  function showBanner(message) {
    banner.textContent = message;
    banner.hidden = false;
  }
  function stop() {
    if (timer !== null) clearTimeout(timer);
    timer = null;
    if (inFlight) inFlight.abort();
    inFlight = null;
  }
  function schedule() {
    if (timer !== null) clearTimeout(timer);
    timer = setTimeout(poll, POLL_MS);
  }
  function poll() {
    timer = null;
    var token = sessionStorage.getItem(TOKEN_KEY);
    if (!token) { showLogin(''); return; }
    var controller = new AbortController();
    inFlight = controller;
    fetch('/admin/stats', { headers: { authorization: 'Bearer ' + token }, cache: 'no-store', signal: controller.signal })
      .then(function (res) {
        if (res.status === 401) { showLogin('The admin token was refused (401). Enter it again.'); return; }
        if (res.status === 404) {
          body.setAttribute('data-state', 'disabled');
          showBanner('The admin API is off on this instance (404): set admin.token (TM_CACHE_ADMIN_TOKEN) to enable it.');
          schedule();
          return;
        }
        if (!res.ok) throw new Error('HTTP ' + res.status);
        return res.json().then(function (s) {
          last = s;
          loginSection.hidden = true;
          dashboard.hidden = false;
          forget.hidden = false;
          meta.hidden = false;
          banner.hidden = true;
          render(s);
          body.setAttribute('data-state', 'ok');
          body.setAttribute('data-now', String(s.now)); // which stats are on screen
          updated.textContent = 'updated ' + clock(Date.now());
          schedule();
        });
      })
      .catch(function (err) {
        if (controller.signal.aborted) return;
        body.setAttribute('data-state', 'error');
        showBanner('Cannot read /admin/stats: ' + (err && err.message ? err.message : String(err)) +
          (last ? '. Showing the figures of ' + clock(last.now) + '.' : '.') + ' Retrying every 2 s.');
        schedule();
      })
      .finally(function () { if (inFlight === controller) inFlight = null; });
  }

  loginForm.addEventListener('submit', function (e) {
    e.preventDefault();
    var token = tokenInput.value.trim();
    if (!token) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    tokenInput.value = '';
    loginError.hidden = true;
    body.setAttribute('data-state', 'loading');
    updated.textContent = 'connecting…';
    stop();
    poll();
  });
  forget.addEventListener('click', function () { showLogin(''); });
  var resizeTimer = null;
  window.addEventListener('resize', function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(function () { if (last && !dashboard.hidden) drawCharts(last); }, 150);
  });

  if (sessionStorage.getItem(TOKEN_KEY)) poll(); else showLogin('');
})();
`;

const OUTCOME_ROWS = ['hit', 'stale', 'miss', 'coalesced', 'bypass', 'error', 'passthrough']
  .map((o) => `<tr><th scope="row">${o}</th><td class="num" data-stat="rate.${o}">—</td><td class="num" data-stat="requests.byOutcome.${o}">—</td></tr>`)
  .join('\n');

const STATUS_CLASS_ROWS = ['2xx', '3xx', '4xx', '429', '5xx', 'error']
  .map((c) => `<th scope="col" class="num">${c}</th>`)
  .join('');
const STATUS_CLASS_CELLS = ['2xx', '3xx', '4xx', '429', '5xx', 'error']
  .map((c) => `<td class="num" data-stat="upstream.byStatusClass.${c}">—</td>`)
  .join('');

function topTable(id: string, caption: string, keyHeader: string): string {
  return `<section class="panel" aria-labelledby="${id}-title">
<h2 id="${id}-title">${caption}</h2>
<table class="top">
<thead><tr><th scope="col">${keyHeader}</th><th scope="col" class="num">Upstream</th><th scope="col" class="num">Requests</th><th scope="col" class="num">Saved</th></tr></thead>
<tbody data-stat="top.${id}"></tbody>
</table>
</section>`;
}

const BODY = `<header>
<h1>tm-cache status</h1>
<p id="meta" class="meta" hidden>version <span data-stat="version">—</span> · node <span data-stat="node">—</span> · up <span data-stat="uptimeS">—</span></p>
<p id="updated">not connected</p>
<button id="forget" class="secondary" type="button" hidden>Forget token</button>
</header>
<main>
<section id="login" aria-labelledby="login-title" hidden>
<h2 id="login-title">Sign in</h2>
<p id="login-error" class="error" role="alert" hidden></p>
<form id="login-form" autocomplete="off">
<label for="token">Admin token</label>
<input id="token" name="token" type="password" required spellcheck="false" autocomplete="off">
<button type="submit">Show status</button>
<p class="hint">The token set as admin.token (TM_CACHE_ADMIN_TOKEN). It stays in this browser tab (sessionStorage) and is sent only to this server's /admin/stats.</p>
</form>
</section>
<div id="banner" class="banner" role="alert" hidden></div>
<div id="dashboard" hidden>
<div class="cards">
<section class="card"><h2>Hit ratio</h2><div class="big" data-stat="hitRatio">—</div><div class="sub">(hit + stale) / cacheable</div></section>
<section class="card"><h2>Offload</h2><div class="big" data-stat="offload">—</div><div class="sub"><span data-stat="upstream.avoided">—</span> upstream requests avoided</div></section>
<section class="card"><h2>Requests</h2><div class="big" data-stat="requests.total">—</div><div class="sub"><span data-stat="rate.total">—</span> over the last 30 s</div></section>
<section class="card"><h2>Upstream requests</h2><div class="big" data-stat="upstream.requests">—</div><div class="sub">state <span data-stat="upstream.state">—</span> · 429s in 5 min <span data-stat="upstream.recent429">—</span></div></section>
<section class="card"><h2>Bytes sent</h2><div class="big" data-stat="bytes.sent">—</div><div class="sub">saved by 304: <span data-stat="bytes.savedBy304">—</span></div></section>
</div>
<div class="charts">
<section class="panel" aria-labelledby="chart-title">
<div class="chart-head">
<h2 id="chart-title">Hit ratio and offload per 10 s</h2>
<ul class="legend"><li class="hit">hit ratio</li><li class="offload">offload</li></ul>
</div>
<svg id="chart" class="chart" role="img" aria-label="No data yet." preserveAspectRatio="none"></svg>
<p id="chart-empty" class="empty" hidden></p>
</section>
<section class="panel" aria-labelledby="rate-chart-title">
<div class="chart-head">
<h2 id="rate-chart-title">Requests per second by outcome</h2>
<ul class="legend"><li class="cache">hit + stale</li><li class="coalesced">coalesced</li><li class="miss">miss</li><li class="other">bypass + error</li><li class="passthrough">passthrough</li><li class="upstream">upstream requests</li></ul>
</div>
<svg id="rate-chart" class="chart" role="img" aria-label="No data yet." preserveAspectRatio="none"></svg>
<p id="rate-chart-empty" class="empty" hidden></p>
</section>
</div>
<div class="grid">
<section class="panel" aria-labelledby="outcomes-title">
<h2 id="outcomes-title">Requests by outcome</h2>
<table>
<thead><tr><th scope="col">Outcome</th><th scope="col" class="num">Last 30 s</th><th scope="col" class="num">Since start</th></tr></thead>
<tbody>
${OUTCOME_ROWS}
</tbody>
</table>
<p class="sub">Answered from memory <span data-stat="requests.byTier.memory">—</span> · Redis <span data-stat="requests.byTier.redis">—</span> · no tier <span data-stat="requests.byTier.none">—</span></p>
</section>
<section class="panel" aria-labelledby="upstream-title">
<h2 id="upstream-title">Upstream</h2>
<dl>
<dt>State</dt><dd><span data-stat="upstream.state">—</span>, checked <span data-stat="upstream.lastCheckedAt">—</span></dd>
<dt>Last error</dt><dd data-stat="upstream.lastError">—</dd>
<dt>In flight</dt><dd><span data-stat="upstream.active">—</span> active, <span data-stat="upstream.queued">—</span> queued</dd>
<dt>429 (5 min)</dt><dd><span data-stat="upstream.recent429">—</span>, last <span data-stat="upstream.last429At">—</span></dd>
</dl>
<table>
<caption class="visually-hidden">Upstream responses by status class</caption>
<thead><tr>${STATUS_CLASS_ROWS}</tr></thead>
<tbody><tr>${STATUS_CLASS_CELLS}</tr></tbody>
</table>
</section>
<section class="panel" aria-labelledby="memory-title">
<h2 id="memory-title">Memory tier</h2>
<dl>
<dt>Entries</dt><dd data-stat="memory.entries">—</dd>
<dt>Size</dt><dd><span data-stat="memory.bytes">—</span> of <span data-stat="memory.maxBytes">—</span></dd>
<dt>Evictions</dt><dd data-stat="memory.evictions">—</dd>
</dl>
<meter id="memory-meter" min="0" max="1" value="0" aria-label="Memory tier use">—</meter>
<h2 id="redis-title">Redis</h2>
<dl aria-labelledby="redis-title">
<dt>Status</dt><dd data-stat="redis.status">—</dd>
<dt>Configured</dt><dd data-stat="redis.configured">—</dd>
<dt>Detail</dt><dd data-stat="redis.detail">—</dd>
<dt>Errors</dt><dd data-stat="redis.errors">—</dd>
</dl>
</section>
</div>
<div class="grid tops">
${topTable('operations', 'Top operations by upstream requests', 'Operation')}
${topTable('users', 'Top users by upstream requests', 'User id')}
</div>
</div>
</main>`;

export const STATUS_PAGE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>tm-cache status</title>
<link rel="icon" href="data:,">
<style>${STYLE}</style>
</head>
<body data-state="login">
${BODY}
<script>${SCRIPT}</script>
</body>
</html>
`;

function sha256(source: string): string {
  return `'sha256-${createHash('sha256').update(source, 'utf8').digest('base64')}'`;
}

/**
 * Allows the page's one inline script and one inline style by hash, same-origin fetches (the
 * stats), a data: favicon, and nothing else: no framing, no <base>, no form submission.
 */
export const STATUS_PAGE_CSP = [
  "default-src 'none'",
  `script-src ${sha256(SCRIPT)}`,
  `style-src ${sha256(STYLE)}`,
  "connect-src 'self'",
  "img-src 'self' data:",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

/** Every header the page is served with (the route sends these as they are). */
export const STATUS_PAGE_HEADERS: Readonly<Record<string, string>> = Object.freeze({
  'content-type': 'text/html; charset=utf-8',
  'content-security-policy': STATUS_PAGE_CSP,
  'cache-control': 'no-store',
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
});
