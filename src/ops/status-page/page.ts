/**
 * The status page's browser code: asks for the admin token, keeps it in sessionStorage and polls
 * `GET /admin/stats` every 2 s, then shows the figures, two charts and two tables.
 *
 * The token comes from the form, or from a sign-in link's fragment (`/#token=...`, what
 * `tm-cache demo` prints): a fragment is never sent to the server, so it reaches no access log;
 * it is read at load (or when it changes in an open tab) and removed from the address bar (and the
 * history entry) at once. The form's "remember on this device" keeps it in localStorage instead,
 * across browser restarts (a wall screen with a viewer token); "Forget token" removes it from both.
 * A link's token replaces the kept one only once the server has accepted it: a wrong link does not
 * sign a screen out (see `linkToken`).
 *
 * A classic script, not a module: it is inlined into index.html at start-up (src/ops/status-page.ts)
 * and allowed by the hash of exactly those bytes, so it imports nothing and is wrapped in a function
 * that leaves no global behind (strict mode comes from the "use strict" the compiler puts first).
 * Every string from the JSON reaches the DOM through `textContent` or `setAttribute`, never through
 * innerHTML, so an operation name or an upstream error message is text, whatever it contains.
 */
(function () {
  const TOKEN_KEY = 'tm-cache.adminToken';
  const POLL_MS = 2000;
  const BUCKET_MS = 10000;
  const RATE_WINDOW_MS = 30000;
  const OUTCOMES = ['hit', 'stale', 'miss', 'coalesced', 'bypass', 'error', 'passthrough'] as const;
  const SVG_NS = 'http://www.w3.org/2000/svg';

  // ---- what /admin/stats sends (src/ops/stats.ts, src/ops/admin.ts) ------------------------
  // Described as sent; the code below still checks every figure (isNum, num, `|| {}`), so a
  // missing or null field shows as '—' or 0 rather than breaking the page.
  type Outcome = (typeof OUTCOMES)[number];
  type Counts = Partial<Record<string, number | null>>;
  /** One 10-second bucket; the last one of a series is the current, partial bucket. */
  interface Bucket {
    t: number;
    requests: number;
    byOutcome: Counts;
    upstream: number;
  }
  interface Cost {
    requests: number;
    upstreamRequests: number;
  }
  interface TopRow extends Cost {
    operation?: string;
    userId?: number;
  }
  interface Stats {
    version?: string;
    node?: string;
    startedAt?: number;
    now: number;
    uptimeS?: number;
    hitRatio?: number | null;
    requests?: { total?: number; byOutcome?: Counts; byTier?: Counts };
    upstream?: {
      requests?: number;
      avoided?: number;
      offload?: number | null;
      byStatusClass?: Counts;
      state?: string;
      lastError?: string | null;
      lastCheckedAt?: number | null;
      last429At?: number | null;
      recent429?: number;
      active?: number;
      queued?: number;
      /** The fleet's upstream budget as this replica knows it (null: none wired). */
      budget?: BudgetStats | null;
    };
    bytes?: { sent?: number; savedBy304?: number };
    /** cache.sharing: project: upstream requests saved by members reading each other's answers. */
    sharing?: { sharedHits?: number; grantFills?: number; savedRequests?: number };
    memory?: { entries?: number; bytes?: number; maxBytes?: number; evictions?: number };
    redis?: { configured?: boolean; status?: string; detail?: string | null; errors?: number };
    /** The rows, and what they leave out (`other*`): rows and rest add up to the cards' totals. */
    top?: { operations?: TopRow[]; otherOperations?: Cost; users?: TopRow[]; otherUsers?: Cost };
    series?: Bucket[];
  }
  /** /admin/stats' `upstream.budget` (admin.ts, BudgetStats). */
  interface BudgetStats {
    mode?: string;
    rate?: 'fixed' | 'learned';
    rateRps?: number;
    ceilingRps?: number | null;
    pausedMs?: number;
    pause?: { since?: string; until?: string; from?: string; retryAfterMs?: number | null } | null;
    queued?: Counts;
    waiting?: number;
    lastMinutePerSecond?: { refused?: number; stale?: number; skipped?: number };
    deferredToStale?: number;
    refused?: number;
  }
  /** Requests per second over the rate window, in total and by outcome. */
  type Rates = Record<'total' | Outcome, number> & { from: number; to: number; seconds: number };
  type AttributeValue = string | number;

  /** The element with this id, of the type the page's markup gives it (index.html). */
  function byId<T extends Element>(id: string, type: { new (): T; prototype: T }): T {
    const el = document.getElementById(id);
    if (!(el instanceof type)) throw new Error('status page: no #' + id + ' of the expected type');
    return el;
  }

  const body = document.body;
  const loginSection = byId('login', HTMLElement);
  const loginForm = byId('login-form', HTMLFormElement);
  const loginError = byId('login-error', HTMLElement);
  const tokenInput = byId('token', HTMLInputElement);
  const rememberInput = byId('remember', HTMLInputElement);
  const dashboard = byId('dashboard', HTMLElement);
  const banner = byId('banner', HTMLElement);
  const notice = byId('notice', HTMLElement);
  const updated = byId('updated', HTMLElement);
  const forget = byId('forget', HTMLButtonElement);
  const meta = byId('meta', HTMLElement);
  const chart = byId('chart', SVGSVGElement);
  const chartEmpty = byId('chart-empty', HTMLElement);
  const rateChart = byId('rate-chart', SVGSVGElement);
  const rateChartEmpty = byId('rate-chart-empty', HTMLElement);

  let timer: number | null = null;
  let inFlight: AbortController | null = null;
  let last: Stats | null = null;
  /**
   * A sign-in link's token the server has not answered yet. Until it does, the token kept in this
   * tab or on this device stays where it is: the first poll tries the link's token, and only a
   * success keeps it (in the kept token's place); a refusal drops it and the page goes on with the
   * kept one. Never stored, so a reload before the answer forgets it rather than sign in with it.
   */
  let linkToken: string | null = null;

  // ---- formatting -------------------------------------------------------------------------
  function isNum(v: unknown): v is number {
    return typeof v === 'number' && isFinite(v);
  }
  function pct(v: unknown): string {
    return isNum(v) ? (v * 100).toFixed(1) + ' %' : '—';
  }
  function count(v: unknown): string {
    if (!isNum(v)) return '—';
    const a = Math.abs(v);
    if (a < 1000) return String(Math.round(v * 10) / 10);
    const scale = a < 1e6 ? 1e3 : a < 1e9 ? 1e6 : 1e9;
    const unit = scale === 1e3 ? ' k' : scale === 1e6 ? ' M' : ' G';
    const digits = a / scale < 10 ? 2 : a / scale < 100 ? 1 : 0;
    return (v / scale).toFixed(digits) + unit;
  }
  function rate(v: unknown): string {
    return isNum(v) ? (v < 10 ? v.toFixed(2) : count(v)) + ' /s' : '—';
  }
  function bytes(v: unknown): string {
    if (!isNum(v)) return '—';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (Math.abs(v) >= 1024 && i < units.length - 1) {
      v /= 1024;
      i++;
    }
    return (i === 0 ? String(v) : v.toFixed(Math.abs(v) < 10 ? 2 : 1)) + ' ' + units[i];
  }
  function duration(seconds: unknown): string {
    if (!isNum(seconds)) return '—';
    const s = Math.max(0, Math.floor(seconds));
    const d = Math.floor(s / 86400),
      h = Math.floor((s % 86400) / 3600),
      m = Math.floor((s % 3600) / 60),
      sec = s % 60;
    if (d > 0) return d + ' d ' + h + ' h';
    if (h > 0) return h + ' h ' + m + ' min';
    if (m > 0) return m + ' min ' + sec + ' s';
    return sec + ' s';
  }
  function ago(t: unknown, now: number): string {
    if (!isNum(t)) return 'never';
    return duration((now - t) / 1000) + ' ago';
  }
  function clock(t: number): string {
    const d = new Date(t);
    function two(n: number): string {
      return (n < 10 ? '0' : '') + n;
    }
    return two(d.getHours()) + ':' + two(d.getMinutes()) + ':' + two(d.getSeconds());
  }
  function text(v: unknown): string {
    return v === null || v === undefined || v === '' ? '—' : String(v);
  }

  // ---- DOM helpers (text only: never innerHTML) -------------------------------------------
  function stat(name: string): Element | null {
    return document.querySelector('[data-stat="' + name + '"]');
  }
  function stats(name: string): Element[] {
    return Array.from(document.querySelectorAll('[data-stat="' + name + '"]'));
  }
  /** Shows a figure: its formatted text, and the raw value in data-value for tests and tools. */
  function setStat(name: string, shown: string, raw: unknown): void {
    stats(name).forEach(function (el) {
      el.textContent = shown;
      el.setAttribute('data-value', raw === null || raw === undefined ? '' : String(raw));
    });
  }
  /** A state word (up, down, ok, degraded…), coloured by its class. */
  function setState(name: string, value: unknown): void {
    setStat(name, text(value), value);
    stats(name).forEach(function (el) {
      el.className = 'state-' + String(value).replace(/[^a-z]/g, '');
    });
  }
  function cell(tag: 'td' | 'th', content: string, cls?: string): HTMLTableCellElement {
    const el = document.createElement(tag);
    el.textContent = content;
    if (cls) el.className = cls;
    return el;
  }
  function numCell(raw: AttributeValue, shown: string): HTMLTableCellElement {
    const td = cell('td', shown, 'num');
    td.setAttribute('data-value', String(raw));
    return td;
  }
  function svg(tag: string, attrs: Record<string, AttributeValue>): SVGElement {
    const el = document.createElementNS(SVG_NS, tag);
    for (const k in attrs) el.setAttribute(k, String(attrs[k]));
    return el;
  }
  function num(v: unknown): number {
    return isNum(v) ? v : 0;
  }

  // ---- series -----------------------------------------------------------------------------
  /** The buckets that are over: every one but the last, which is the current, partial bucket. */
  function completeBuckets(series: Bucket[] | undefined): Bucket[] {
    return Array.isArray(series) ? series.slice(0, -1) : [];
  }
  function cacheable(b: Bucket): number {
    return num(b.requests) - num(b.byOutcome && b.byOutcome.passthrough);
  }
  function bucketHitRatio(b: Bucket): number | null {
    const c = cacheable(b);
    return c > 0 ? (num(b.byOutcome.hit) + num(b.byOutcome.stale)) / c : null;
  }
  function bucketOffload(b: Bucket): number | null {
    const c = cacheable(b);
    return c > 0 ? 1 - num(b.upstream) / c : null;
  }
  /**
   * Requests per second over the complete buckets of the last 30 s (by time, so a bucket missing
   * from the series counts as a quiet one), and only since the process started.
   */
  function rates(s: Stats): Rates | null {
    const series = Array.isArray(s.series) ? s.series : [];
    const newest = series[series.length - 1];
    if (newest === undefined) return null;
    const end = newest.t;
    const start = Math.max(end - RATE_WINDOW_MS, isNum(s.startedAt) ? s.startedAt : -Infinity);
    const seconds = (end - start) / 1000;
    if (!(seconds > 0)) return null;
    const sums: Record<'total' | Outcome, number> = { total: 0, hit: 0, stale: 0, miss: 0, coalesced: 0, bypass: 0, error: 0, passthrough: 0 };
    completeBuckets(series).forEach(function (b) {
      if (b.t + BUCKET_MS <= end && b.t + BUCKET_MS > end - RATE_WINDOW_MS) {
        sums.total += num(b.requests);
        OUTCOMES.forEach(function (o) {
          sums[o] += num(b.byOutcome && b.byOutcome[o]);
        });
      }
    });
    const out: Rates = { from: start, to: end, seconds: seconds, ...sums };
    let k: keyof typeof sums;
    for (k in sums) out[k] = sums[k] / seconds;
    return out;
  }

  // ---- charts -----------------------------------------------------------------------------
  interface Frame {
    width: number;
    height: number;
    pad: { l: number; r: number; t: number; b: number };
    minutes: number;
    barWidth: number;
    /** The middle of the bucket that starts at t. */
    x(t: number): number;
    /** v in [0, max] → height; max at the top. */
    y(v: number, max: number): number;
  }
  /**
   * Empties an SVG, sizes its viewBox to its box (so text is not stretched) and returns the time
   * axis shared by both charts: complete buckets from the first one (at least 5 minutes back)
   * to the start of the current bucket, with labels under it.
   */
  function frame(el: SVGSVGElement, s: Stats, buckets: Bucket[], height: number): Frame {
    while (el.firstChild) el.removeChild(el.firstChild);
    const width = Math.max(280, Math.round(el.getBoundingClientRect().width) || 800);
    const pad = { l: 48, r: 12, t: 10, b: 24 };
    el.setAttribute('viewBox', '0 0 ' + width + ' ' + height);
    const newest = Array.isArray(s.series) ? s.series[s.series.length - 1] : undefined;
    const end = newest !== undefined ? newest.t : s.now;
    const first = buckets[0];
    const span = Math.max(5 * 60000, first !== undefined ? end - first.t : 0);
    const begin = end - span;
    const f: Frame = {
      width: width,
      height: height,
      pad: pad,
      minutes: Math.round(span / 60000),
      barWidth: Math.max(1, (BUCKET_MS / span) * (width - pad.l - pad.r) - 1),
      x: function (t) {
        return pad.l + ((t + BUCKET_MS / 2 - begin) / span) * (width - pad.l - pad.r);
      },
      y: function (v, max) {
        return pad.t + (1 - Math.max(0, Math.min(1, v / max))) * (height - pad.t - pad.b);
      },
    };
    const anchors = ['start', 'middle', 'end'];
    [f.minutes, Math.round(f.minutes / 2), 0].forEach(function (m, i) {
      const label = svg('text', { x: pad.l + (1 - (m * 60000) / span) * (width - pad.l - pad.r), y: height - 6, 'text-anchor': String(anchors[i]) });
      label.textContent = m === 0 ? 'now' : '−' + m + ' min';
      el.appendChild(label);
    });
    return f;
  }
  function gridLines(el: SVGSVGElement, f: Frame, max: number, ticks: number[], format: (v: number) => string): void {
    ticks.forEach(function (v) {
      el.appendChild(svg('line', { class: 'axis', x1: f.pad.l, x2: f.width - f.pad.r, y1: f.y(v, max), y2: f.y(v, max) }));
      const label = svg('text', { x: f.pad.l - 6, y: f.y(v, max) + 4, 'text-anchor': 'end' });
      label.textContent = format(v);
      el.appendChild(label);
    });
  }
  function titled(el: SVGElement, content: string): SVGElement {
    const title = svg('title', {});
    title.textContent = content;
    el.appendChild(title);
    return el;
  }
  function showEmpty(el: SVGSVGElement, emptyEl: HTMLElement, drawn: boolean, message: string, label: string): void {
    emptyEl.hidden = drawn;
    emptyEl.textContent = drawn ? '' : message;
    el.setAttribute('aria-label', drawn ? label : 'No data yet.');
  }

  /** Hit ratio and offload per bucket, as lines broken where a bucket has nothing cacheable. */
  function drawRatioChart(s: Stats): void {
    const buckets = completeBuckets(s.series);
    const f = frame(chart, s, buckets, 220);
    gridLines(chart, f, 1, [0, 0.25, 0.5, 0.75, 1], function (v) {
      return v * 100 + '%';
    });
    const described = { hitRatio: bucketHitRatio, offload: bucketOffload };
    const latest: { hitRatio?: number; offload?: number } = {};
    (['offload', 'hitRatio'] as const).forEach(function (name) {
      let d = '';
      let prevT: number | null = null;
      buckets.forEach(function (b) {
        const v = described[name](b);
        if (v === null) {
          prevT = null;
          return;
        }
        // A missing bucket or one without cacheable requests breaks the line: no invented values.
        const x = f.x(b.t).toFixed(1),
          y = f.y(v, 1).toFixed(1);
        d += (prevT !== null && b.t - prevT <= BUCKET_MS ? ' L' : ' M') + x + ' ' + y;
        prevT = b.t;
        chart.appendChild(
          titled(
            svg('circle', { class: name, cx: x, cy: y, r: f.barWidth > 8 ? 2.5 : 1.5, 'data-series': name, 'data-t': b.t, 'data-value': v }),
            clock(b.t) + ' ' + (name === 'hitRatio' ? 'hit ratio ' : 'offload ') + pct(v),
          ),
        );
        latest[name] = v;
      });
      if (d) chart.insertBefore(svg('path', { class: 'line ' + name, d: d.trim() }), chart.querySelector('circle'));
    });
    showEmpty(
      chart,
      chartEmpty,
      chart.querySelectorAll('circle').length > 0,
      'No complete 10-second bucket with cacheable requests yet.',
      'Hit ratio and offload per 10-second bucket over the last ' +
        f.minutes +
        ' minutes; latest hit ratio ' +
        pct(latest.hitRatio) +
        ', latest offload ' +
        pct(latest.offload) +
        '.',
    );
  }

  /** Requests per second by outcome (stacked bars) and upstream requests per second (a line). */
  const STACK: { name: string; label: string; outcomes: Outcome[] }[] = [
    { name: 'cache', label: 'hit + stale', outcomes: ['hit', 'stale'] },
    { name: 'coalesced', label: 'coalesced', outcomes: ['coalesced'] },
    { name: 'miss', label: 'miss', outcomes: ['miss'] },
    { name: 'other', label: 'bypass + error', outcomes: ['bypass', 'error'] },
    { name: 'passthrough', label: 'passthrough', outcomes: ['passthrough'] },
  ];
  function niceMax(v: number): number {
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    const m = [1, 2, 5, 10].find(function (k) {
      return k * p >= v;
    });
    // NaN, as an undefined factor always gave, should rounding ever leave no step above v.
    return (m ?? NaN) * p;
  }
  function drawRateChart(s: Stats): void {
    const buckets = completeBuckets(s.series);
    const peak =
      buckets.reduce(function (m, b) {
        return Math.max(m, num(b.requests), num(b.upstream));
      }, 0) /
      (BUCKET_MS / 1000);
    const max = peak > 0 ? niceMax(peak) : 1;
    const f = frame(rateChart, s, buckets, 180);
    gridLines(rateChart, f, max, [0, max / 2, max], function (v) {
      return count(v) + '/s';
    });
    let d = '';
    let prevT: number | null = null;
    buckets.forEach(function (b) {
      if (!(num(b.requests) > 0) && !(num(b.upstream) > 0)) {
        prevT = null;
        return;
      }
      let base = 0;
      const x = f.x(b.t) - f.barWidth / 2;
      const detail = OUTCOMES.map(function (o) {
        return o + ' ' + count(num(b.byOutcome && b.byOutcome[o]));
      }).join(', ');
      STACK.forEach(function (part) {
        const n =
          part.outcomes.reduce(function (sum, o) {
            return sum + num(b.byOutcome && b.byOutcome[o]);
          }, 0) /
          (BUCKET_MS / 1000);
        if (n <= 0) return;
        const top = f.y(base + n, max),
          bottom = f.y(base, max);
        rateChart.appendChild(
          titled(
            svg('rect', {
              class: 'bar ' + part.name,
              x: x.toFixed(1),
              width: f.barWidth.toFixed(1),
              y: top.toFixed(1),
              height: Math.max(0.5, bottom - top).toFixed(1),
              'data-t': b.t,
              'data-value': n,
            }),
            clock(b.t) + ': ' + rate(num(b.requests) / (BUCKET_MS / 1000)) + ' (' + detail + '), upstream ' + rate(num(b.upstream) / (BUCKET_MS / 1000)),
          ),
        );
        base += n;
      });
      const y = f.y(num(b.upstream) / (BUCKET_MS / 1000), max).toFixed(1);
      d += (prevT !== null && b.t - prevT <= BUCKET_MS ? ' L' : ' M') + f.x(b.t).toFixed(1) + ' ' + y;
      prevT = b.t;
    });
    if (d) rateChart.appendChild(svg('path', { class: 'line upstream', d: d.trim() }));
    const lastB = buckets[buckets.length - 1];
    showEmpty(
      rateChart,
      rateChartEmpty,
      d !== '',
      'No complete 10-second bucket with requests yet.',
      'Requests per second by outcome and upstream requests per second, per 10-second bucket over the last ' +
        f.minutes +
        ' minutes; last bucket ' +
        rate(num(lastB && lastB.requests) / (BUCKET_MS / 1000)) +
        ', upstream ' +
        rate(num(lastB && lastB.upstream) / (BUCKET_MS / 1000)) +
        '.',
    );
  }
  function drawCharts(s: Stats): void {
    drawRatioChart(s);
    drawRateChart(s);
  }

  // ---- tables -----------------------------------------------------------------------------
  /**
   * One table of the top rows by upstream requests, and a last row for what they leave out
   * (`rest`, named `restName`), so that the table adds up to the cards.
   */
  function fillTop(name: string, rows: TopRow[] | undefined, key: 'operation' | 'userId', rest: Cost | undefined, restName: string): void {
    const found = stat(name);
    if (found === null) throw new Error('status page: no [data-stat="' + name + '"]');
    const tbody = found;
    while (tbody.firstChild) tbody.removeChild(tbody.firstChild);
    function addRow(label: string, r: Cost, cls: string): void {
      const tr = document.createElement('tr');
      tr.appendChild(cell('td', label, cls));
      tr.appendChild(numCell(r.upstreamRequests, count(r.upstreamRequests)));
      tr.appendChild(numCell(r.requests, count(r.requests)));
      // As the offload card: never below 0 (a row of identity look-ups has upstream requests and no requests of its own).
      const saved = num(r.requests) > 0 ? Math.max(0, 1 - num(r.upstreamRequests) / r.requests) : null;
      tr.appendChild(numCell(saved === null ? '' : saved, pct(saved)));
      tbody.appendChild(tr);
    }
    (Array.isArray(rows) ? rows : []).forEach(function (r) {
      addRow(text(r[key]), r, 'name');
    });
    if (rest && (num(rest.requests) > 0 || num(rest.upstreamRequests) > 0)) addRow(restName, rest, 'name rest');
    if (!tbody.firstChild) {
      const tr = document.createElement('tr');
      const td = cell('td', 'No requests yet.', 'empty');
      td.colSpan = 4;
      tr.appendChild(td);
      tbody.appendChild(tr);
    }
  }

  // ---- render -----------------------------------------------------------------------------
  /** The Budget card: the rate against its ceiling, where tokens come from, any pause and why, who waits, what it refused. */
  function renderBudgetCard(b: BudgetStats | undefined): void {
    const ceiling = b?.ceilingRps;
    setStat('budget.rate', isNum(b?.rateRps) ? count(b.rateRps) + ' / ' + (isNum(ceiling) ? count(ceiling) : 'learned') : '—', b?.rateRps);
    setState('budget.mode', b?.mode);
    setStat('budget.kind', text(b?.rate), b?.rate);
    const pause = b?.pause;
    let paused = b ? 'no' : '—';
    if (pause && pause.until) {
      const why =
        pause.from === 'fleet'
          ? "another replica's 429"
          : isNum(pause.retryAfterMs)
            ? 'Retry-After ' + duration(pause.retryAfterMs / 1000)
            : '429 without Retry-After';
      paused = 'until ' + clock(Date.parse(pause.until)) + ' (' + why + ')';
    }
    setStat('budget.pause', paused, pause ? pause.until : null);
    const q = b?.queued;
    setStat(
      'budget.waiting',
      q
        ? count(b?.waiting) +
            ' (client ' +
            count(q['client']) +
            ' · unverified ' +
            count(q['unverified']) +
            ' · background ' +
            count(q['background']) +
            ' · ahead ' +
            count(q['ahead']) +
            ')'
        : '—',
      b?.waiting,
    );
    const per = b?.lastMinutePerSecond;
    setStat('budget.refusedPerS', rate(per?.refused), per?.refused);
    setStat('budget.stalePerS', rate(per?.stale), per?.stale);
    setStat('budget.skippedPerS', rate(per?.skipped), per?.skipped);
  }

  function render(s: Stats): void {
    const req = s.requests || {},
      up = s.upstream || {},
      mem = s.memory || {},
      redis = s.redis || {},
      b = s.bytes || {};
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
    const sh = s.sharing || {};
    setStat('sharing.savedRequests', count(sh.savedRequests), sh.savedRequests);
    setStat('sharing.sharedHits', count(sh.sharedHits), sh.sharedHits);
    setStat('sharing.grantFills', count(sh.grantFills), sh.grantFills);

    const r = rates(s);
    const rateEl = stat('rate.total');
    if (rateEl === null) throw new Error('status page: no [data-stat="rate.total"]');
    // The window the rates cover, so a reader can recompute them from the same series.
    rateEl.setAttribute('data-from', r ? String(r.from) : '');
    rateEl.setAttribute('data-to', r ? String(r.to) : '');
    rateEl.setAttribute('data-seconds', r ? String(r.seconds) : '');
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
    const budget = up.budget ?? undefined;
    setStat('upstream.budget.rateRps', count(budget?.rateRps), budget?.rateRps);
    setState('upstream.budget.mode', budget?.mode);
    // A pause (after a 429 from the instance) shown as the seconds left; "no" when there is none.
    const pausedMs = budget?.pausedMs;
    setStat('upstream.budget.paused', isNum(pausedMs) ? (pausedMs > 0 ? Math.ceil(pausedMs / 1000) + ' s' : 'no') : '—', pausedMs);
    setStat('upstream.budget.deferredToStale', count(budget?.deferredToStale), budget?.deferredToStale);
    setStat('upstream.budget.refused', count(budget?.refused), budget?.refused);
    renderBudgetCard(budget);
    ['2xx', '3xx', '4xx', '429', '5xx', 'error'].forEach(function (c) {
      setStat('upstream.byStatusClass.' + c, count(up.byStatusClass && up.byStatusClass[c]), up.byStatusClass && up.byStatusClass[c]);
    });

    setStat('memory.entries', count(mem.entries), mem.entries);
    setStat('memory.bytes', bytes(mem.bytes), mem.bytes);
    setStat('memory.maxBytes', bytes(mem.maxBytes), mem.maxBytes);
    setStat('memory.evictions', count(mem.evictions), mem.evictions);
    const meter = byId('memory-meter', HTMLMeterElement);
    meter.max = Math.max(1, num(mem.maxBytes));
    meter.value = num(mem.bytes);
    meter.textContent = pct(num(mem.bytes) / Math.max(1, num(mem.maxBytes)));

    setState('redis.status', redis.status);
    setStat('redis.configured', redis.configured ? 'yes' : 'no', redis.configured);
    setStat('redis.detail', text(redis.detail), redis.detail);
    setStat('redis.errors', count(redis.errors), redis.errors);

    fillTop('top.operations', s.top && s.top.operations, 'operation', s.top && s.top.otherOperations, 'other operations');
    fillTop('top.users', s.top && s.top.users, 'userId', s.top && s.top.otherUsers, 'others (no user yet: identity look-ups, refused credentials)');
    drawCharts(s);
  }

  // ---- the token ---------------------------------------------------------------------------
  /** This tab's token, else the one remembered on this device, else null. */
  function storedToken(): string | null {
    return sessionStorage.getItem(TOKEN_KEY) || localStorage.getItem(TOKEN_KEY);
  }
  /** In this tab only (sessionStorage), or on this device when asked (localStorage): one place, never both. */
  function keepToken(token: string, remember: boolean): void {
    forgetToken();
    (remember ? localStorage : sessionStorage).setItem(TOKEN_KEY, token);
  }
  function forgetToken(): void {
    sessionStorage.removeItem(TOKEN_KEY);
    localStorage.removeItem(TOKEN_KEY);
  }
  /**
   * The token of a sign-in link (`#token=...`), read once: the fragment is removed from the
   * address bar and from this history entry before anything else, so it is neither shown nor
   * bookmarked nor shared with a screenshot. Null when there is none (or it is empty or garbled).
   */
  function takeTokenFromFragment(): string | null {
    const match = /(?:^#|&)token=([^&]*)/.exec(location.hash);
    if (match === null) return null;
    history.replaceState(null, '', location.pathname + location.search);
    try {
      return decodeURIComponent(match[1] || '').trim() || null;
    } catch {
      return null;
    }
  }
  /**
   * The server accepted the link's token: it takes the kept token's place, on this device if a
   * token is remembered here (a wall screen stays signed in across restarts, now with this one),
   * else in this tab.
   */
  function acceptLinkToken(token: string): void {
    linkToken = null;
    keepToken(token, localStorage.getItem(TOKEN_KEY) !== null);
  }
  /**
   * The server refused the link's token: it is dropped, the kept token (if any) is left as it was
   * and used at once, and the person who opened the link is told.
   */
  function refuseLinkToken(status: number): void {
    linkToken = null;
    const refused = "The sign-in link's token was refused (" + status + "): it is not this instance's admin.token nor its admin.viewerToken.";
    if (!storedToken()) {
      showLogin(refused + ' Enter a token.');
      return;
    }
    notice.textContent = refused + ' Still signed in with the token kept ' + (sessionStorage.getItem(TOKEN_KEY) ? 'in this tab.' : 'on this device.');
    notice.hidden = false;
    poll();
  }
  /** A link's token, at load or pasted into an open tab's address bar: tried before the kept one. */
  function signInFromFragment(): void {
    const token = takeTokenFromFragment();
    if (token === null) return;
    linkToken = token;
    notice.hidden = true;
    stop();
    poll();
  }

  // ---- polling ----------------------------------------------------------------------------
  function showLogin(message: string): void {
    stop();
    forgetToken();
    linkToken = null;
    notice.hidden = true;
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
  function showBanner(message: string): void {
    banner.textContent = message;
    banner.hidden = false;
  }
  function stop(): void {
    if (timer !== null) clearTimeout(timer);
    timer = null;
    if (inFlight) inFlight.abort();
    inFlight = null;
  }
  function schedule(): void {
    if (timer !== null) clearTimeout(timer);
    timer = setTimeout(poll, POLL_MS);
  }
  /** What a failed fetch or parse says: its message if it has one, else the value itself. */
  function messageOf(err: unknown): string {
    const message: unknown = err && typeof err === 'object' && 'message' in err ? err.message : undefined;
    return message ? String(message) : String(err);
  }
  /** What the server says to a token it does not take: unknown (401), or not allowed here (403). */
  function isRefusal(status: number): boolean {
    return status === 401 || status === 403;
  }
  function poll(): void {
    timer = null;
    const fromLink = linkToken;
    const token = fromLink || storedToken();
    if (!token) {
      showLogin('');
      return;
    }
    const controller = new AbortController();
    inFlight = controller;
    fetch('/admin/stats', { headers: { authorization: 'Bearer ' + token }, cache: 'no-store', signal: controller.signal })
      .then(function (res): Promise<void> | void {
        // A link's token unproven is dropped on a refusal; a kept one, that worked, only on a 401.
        if (fromLink !== null && isRefusal(res.status)) {
          refuseLinkToken(res.status);
          return;
        }
        if (res.status === 401) {
          showLogin("The token was refused (401): it is not this instance's admin.token nor its admin.viewerToken. Enter it again.");
          return;
        }
        if (res.status === 404) {
          body.setAttribute('data-state', 'disabled');
          showBanner('The admin API is off on this instance (404): set admin.token (TM_CACHE_ADMIN_TOKEN) to enable it.');
          schedule();
          return;
        }
        if (!res.ok) throw new Error('HTTP ' + res.status);
        // The JSON is /admin/stats' (the Stats above): the page checks each figure as it shows it.
        return res.json().then(function (s: Stats) {
          if (fromLink !== null) acceptLinkToken(fromLink);
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
      .catch(function (err: unknown) {
        if (controller.signal.aborted) return;
        body.setAttribute('data-state', 'error');
        showBanner('Cannot read /admin/stats: ' + messageOf(err) + (last ? '. Showing the figures of ' + clock(last.now) + '.' : '.') + ' Retrying every 2 s.');
        schedule();
      })
      .finally(function () {
        if (inFlight === controller) inFlight = null;
      });
  }

  loginForm.addEventListener('submit', function (e) {
    e.preventDefault();
    const token = tokenInput.value.trim();
    if (!token) return;
    keepToken(token, rememberInput.checked);
    linkToken = null;
    notice.hidden = true;
    tokenInput.value = '';
    loginError.hidden = true;
    body.setAttribute('data-state', 'loading');
    updated.textContent = 'connecting…';
    stop();
    poll();
  });
  forget.addEventListener('click', function () {
    showLogin('');
  });
  let resizeTimer: number | undefined;
  window.addEventListener('resize', function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(function () {
      if (last && !dashboard.hidden) drawCharts(last);
    }, 150);
  });

  // A fragment changed in an open tab loads nothing: read it when it changes.
  window.addEventListener('hashchange', signInFromFragment);
  linkToken = takeTokenFromFragment();
  if (linkToken || storedToken()) poll();
  else showLogin('');
})();
