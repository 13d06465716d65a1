// The txmq dashboard (docs/dashboard.md): plain JavaScript, no framework, no build step.
// Every value from the server is put on the page as text (textContent, attributes), never as
// HTML, so payloads and names cannot inject markup.
'use strict';

(function () {
  const REFRESH_MS = 5000;
  const HOUR = 3600;
  const SVG = 'http://www.w3.org/2000/svg';

  const state = {
    selected: null, // {topic, group}
    timer: null,
    busy: false,
    overview: null,
    search: '', // a part of topics' names
    offset: 0, // the page's first topic among those found
  };
  const PAGE = 50;

  // --- Small helpers ---------------------------------------------------------------------------

  function $(id) {
    return document.getElementById(id);
  }

  // el('td', {class: 'num'}, 'text', child, ...): strings become text nodes.
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      node.setAttribute(name, value === true ? '' : String(value));
    }
    for (const child of children) {
      if (child === undefined || child === null) continue;
      node.append(typeof child === 'string' || typeof child === 'number' ? String(child) : child);
    }
    return node;
  }

  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function count(n) {
    return Number(n).toLocaleString('en-US');
  }

  // Counts of deep queues are estimates (docs/metrics.md): shown with "≈".
  function approx(group, n) {
    return group.estimated ? `\u2248${count(n)}` : count(n);
  }

  function age(seconds) {
    if (!seconds) return '—';
    if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
    if (seconds < 120) return `${seconds.toFixed(seconds < 10 ? 1 : 0)} s`;
    if (seconds < 7200) return `${Math.round(seconds / 60)} min`;
    if (seconds < 172800) return `${(seconds / 3600).toFixed(1)} h`;
    return `${(seconds / 86400).toFixed(1)} d`;
  }

  function rate(r) {
    if (r === null || r === undefined) return '—';
    if (r === 0) return '0';
    return r < 10 ? r.toFixed(2) : count(Math.round(r));
  }

  function bytes(n) {
    if (n < 1024) return `${n} B`;
    if (n < 1048576) return `${(n / 1024).toFixed(n < 10240 ? 1 : 0)} KiB`;
    return `${(n / 1048576).toFixed(1)} MiB`;
  }

  function time(ms) {
    const d = new Date(ms);
    const today = new Date();
    const hms = d.toLocaleTimeString('en-GB', {hour12: false});
    return d.toDateString() === today.toDateString() ? hms : `${d.toISOString().slice(0, 10)} ${hms}`;
  }

  function seconds(s) {
    if (!s) return '0';
    return age(s);
  }

  async function api(path, options) {
    const response = await fetch(path, Object.assign({credentials: 'same-origin', cache: 'no-store'}, options));
    let body = null;
    try {
      body = await response.json();
    } catch (e) {
      body = null;
    }
    if (!response.ok) {
      throw new Error((body && body.error) || `${response.status} ${response.statusText}`);
    }
    return body;
  }

  function post(path, payload) {
    return api(path, {
      method: 'POST',
      headers: {'Content-Type': 'application/json', 'X-Txmq-Dashboard': '1'},
      body: JSON.stringify(payload),
    });
  }

  function query(params) {
    return new URLSearchParams(params).toString();
  }

  function setStatus(text, error) {
    const s = $('status');
    s.textContent = text;
    s.classList.toggle('error', !!error);
  }

  // --- Selection (kept in the address: #topic=NAME&group=GROUP) -------------------------------

  function readHash() {
    const p = new URLSearchParams(location.hash.slice(1));
    const topic = p.get('topic');
    state.selected = topic ? {topic, group: p.get('group') || 'default'} : null;
  }

  function select(topic, group) {
    location.hash = query({topic, group});
  }

  // --- The overview table ----------------------------------------------------------------------

  function renderOverview(data) {
    const body = $('topics').tBodies[0];
    const rows = [];
    for (const topic of data.topics) {
      topic.groups.forEach((g, i) => {
        const selected = state.selected && state.selected.topic === topic.name && state.selected.group === g.name;
        const link = el('a', {href: `#${query({topic: topic.name, group: g.name})}`, class: 'select'},
          el('span', {class: 'topic'}, topic.name), ' / ', el('span', {class: 'group'}, g.name));
        rows.push(el('tr', {
          'data-topic': topic.name,
          'data-group': g.name,
          class: [selected ? 'selected' : '', i === 0 ? 'first' : ''].join(' ').trim() || null,
        },
        el('td', {class: 'name'}, link),
        el('td', {class: 'num ready'}, approx(g, g.ready)),
        el('td', {class: 'num in-flight'}, approx(g, g.in_flight)),
        el('td', {class: 'num delayed'}, approx(g, g.delayed)),
        el('td', {class: 'num waiting'}, approx(g, g.waiting_on_key)),
        el('td', {class: g.dead > 0 ? 'num dead has-dead' : 'num dead'}, approx(g, g.dead)),
        el('td', {class: 'num'}, age(g.oldest_ready_age_seconds)),
        el('td', {class: 'num'}, age(g.lag_seconds)),
        el('td', {class: 'num sent-rate'}, rate(g.rates.sent)),
        el('td', {class: 'num finished-rate'}, rate(g.rates.finished))));
      });
    }
    body.replaceChildren(...rows);
    $('no-topics').hidden = data.all_topics > 0;
    $('no-match').hidden = data.all_topics === 0 || data.total > 0;
    const first = data.total === 0 ? 0 : data.offset + 1;
    const last = Math.min(data.offset + data.limit, data.total);
    $('page-info').textContent = data.search
      ? `${count(first)}\u2013${count(last)} of ${count(data.total)} topics matching \u201c${data.search}\u201d (${count(data.all_topics)} in all)`
      : `${count(first)}\u2013${count(last)} of ${count(data.total)} topics`;
    $('prev-page').disabled = data.offset === 0;
    $('next-page').disabled = data.offset + data.limit >= data.total;
  }

  // --- Charts: SVG drawn here, no library ---------------------------------------------------------

  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function tickLabel(v) {
    if (v >= 1e6) return `${+(v / 1e6).toFixed(1)}M`;
    if (v >= 1e3) return `${+(v / 1e3).toFixed(1)}k`;
    return `${+v.toFixed(2)}`;
  }

  // series: [{label, cls, value(point) -> number or null}]
  function lineChart(container, legend, points, now, series) {
    // Drawn at the size shown, so that its text stays legible on a phone.
    const W = Math.max(280, Math.round(container.clientWidth || 600)), H = 190, L = 46, R = 10, T = 10, B = 24;
    // The last hour, or less while the samples cover less (at least 5 minutes).
    const first = points.find((p) => p.at >= now - HOUR);
    const span = first ? Math.min(HOUR, Math.max(300, Math.ceil((now - first.at) / 300) * 300)) : HOUR;
    const labels = W < 450 ? 2 : 4;
    const every = [1, 2, 5, 10, 15, 20, 30, 60].find((m) => (span / 60) / m <= labels) || 60; // minutes
    const root = svg('svg', {viewBox: `0 0 ${W} ${H}`, class: 'chart-svg', role: 'img'});
    const x = (t) => L + ((t - (now - span)) / span) * (W - L - R);
    let max = 0;
    for (const p of points) {
      for (const s of series) {
        const v = s.value(p);
        if (v !== null && v > max) max = v;
      }
    }
    const top = niceMax(max);
    const y = (v) => H - B - (v / top) * (H - T - B);
    for (let i = 0; i <= 4; i++) {
      const v = (top * i) / 4;
      root.append(svg('line', {x1: L, x2: W - R, y1: y(v), y2: y(v), class: 'grid'}));
      root.append(svg('text', {x: L - 6, y: y(v) + 4, class: 'tick', 'text-anchor': 'end'}, tickLabel(v)));
    }
    for (let m = Math.floor(span / 60 / every) * every; m >= 0; m -= every) {
      const t = now - m * 60;
      root.append(svg('line', {x1: x(t), x2: x(t), y1: T, y2: H - B, class: 'grid'}));
      root.append(svg('text', {x: x(t), y: H - 6, class: 'tick', 'text-anchor': m === 0 ? 'end' : 'middle'},
        m === 0 ? 'now' : `−${m} min`));
    }
    for (const s of series) {
      let d = '';
      let pen = false;
      let run = 0; // points in the current stretch: a lone point is drawn as a dot
      for (const p of points) {
        if (p.at < now - span) continue;
        const v = s.value(p);
        if (v === null || v === undefined) {
          if (run === 1) d += 'h0.01';
          pen = false;
          run = 0;
          continue;
        }
        d += `${pen ? 'L' : 'M'}${x(p.at).toFixed(1)},${y(v).toFixed(1)}`;
        pen = true;
        run++;
      }
      if (run === 1) d += 'h0.01';
      if (d) root.append(svg('path', {d, class: `line ${s.cls}`}));
    }
    if (points.length < 2) {
      root.append(svg('text', {x: (L + W - R) / 2, y: (T + H - B) / 2, class: 'empty', 'text-anchor': 'middle'},
        'collecting samples (one every 10 s while the dashboard is open)'));
    }
    container.replaceChildren(root);
    const caption = container.parentElement.querySelector('.span');
    if (caption) caption.textContent = span === HOUR ? 'last hour' : `last ${span / 60} min`;
    legend.replaceChildren(...series.map((s) => {
      const last = points.length ? s.value(points[points.length - 1]) : null;
      return el('span', {class: `key ${s.cls}`}, el('i'), `${s.label} ${last === null ? '—' : tickLabel(last)}`);
    }));
  }

  // --- The selected group -------------------------------------------------------------------------

  function renderSettings(settings) {
    const s = settings;
    const items = [
      ['lease', seconds(s.lease_seconds)],
      ['max attempts', s.max_attempts === 0 ? 'never dead-lettered' : String(s.max_attempts)],
      ['max payload', bytes(s.max_payload_bytes)],
      ['dedup window', seconds(s.dedup_window_seconds)],
      ['retry', `${seconds(s.retry_initial_seconds)} × ${s.retry_multiplier} up to ${seconds(s.retry_max_seconds)}, jitter ${s.retry_jitter}`],
      ['partitions', String(s.partitions)],
      ['archive', s.archive_seconds ? seconds(s.archive_seconds) : 'off'],
      ['dead letters go to', s.dead_letter_topic ? `topic ${s.dead_letter_topic}` : 'its own dead-letter table'],
      ['retention', s.retention_seconds ? seconds(s.retention_seconds) : 'until acknowledged'],
      ['created', time(s.created_at)],
    ];
    $('settings').replaceChildren(...items.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
  }

  function renderInFlight(data) {
    const now = data.now;
    $('inflight-count').textContent = data.messages.length >= data.limit ? `(first ${data.limit})` : `(${data.messages.length})`;
    $('inflight').tBodies[0].replaceChildren(...data.messages.map((m) => el('tr', {'data-id': m.id},
      el('td', {class: 'num'}, m.id),
      el('td', {class: 'owner'}, m.owner),
      el('td', {class: 'num'}, String(m.attempt)),
      el('td', {}, `${time(m.lease_expires_at)} (in ${age(Math.max(0, (m.lease_expires_at - now) / 1000))})`))));
    if (!data.messages.length) {
      $('inflight').tBodies[0].replaceChildren(el('tr', {}, el('td', {colspan: 4, class: 'none'}, 'none')));
    }
  }

  function deadButton(label, cls, id, action) {
    const b = el('button', {type: 'button', class: cls, 'data-id': id}, label);
    b.addEventListener('click', action);
    return b;
  }

  function renderDead(data) {
    const sel = state.selected;
    $('dead-count').textContent = data.messages.length >= data.limit ? `(first ${data.limit})` : `(${data.messages.length})`;
    const rows = data.messages.map((m) => {
      const payload = el('pre', {class: `payload ${m.preview_kind}`}, m.preview);
      const info = el('div', {class: 'meta'}, `${bytes(m.size)}${m.preview_kind === 'hex' ? ', binary (hex)' : ''}${m.truncated ? ', cut' : ''}`);
      const attrs = Object.entries(m.attributes).map(([name, a]) =>
        el('div', {class: 'attr'}, el('b', {}, name), ` (${a.type}): `, a.value + (a.truncated ? '…' : '')));
      const requeue = deadButton('Requeue', 'requeue', m.id, () => changeDead('requeue', sel, m.id));
      const remove = deadButton('Delete', 'delete', m.id, (e) => {
        const b = e.currentTarget;
        if (b.dataset.armed !== '1') { // two clicks: no dialog, and nothing goes by accident
          b.dataset.armed = '1';
          b.textContent = 'Really delete?';
          setTimeout(() => { b.dataset.armed = ''; b.textContent = 'Delete'; }, 5000);
          return;
        }
        changeDead('delete', sel, m.id);
      });
      return el('tr', {'data-id': m.id},
        el('td', {class: 'num'}, m.id),
        el('td', {class: 'payload-cell'}, payload, info, ...attrs),
        el('td', {}, m.key === null ? '—' : m.key),
        el('td', {class: 'num'}, String(m.attempts)),
        el('td', {}, time(m.died_at)),
        el('td', {class: 'owner'}, m.last_owner || '—'),
        el('td', {class: 'actions'}, requeue, remove));
    });
    if (!rows.length) rows.push(el('tr', {}, el('td', {colspan: 7, class: 'none'}, 'none')));
    $('dead').tBodies[0].replaceChildren(...rows);
  }

  async function changeDead(action, sel, id) {
    const msg = $('dead-message');
    try {
      const r = await post(`/ui/api/dead/${action}`, {topic: sel.topic, group: sel.group, ids: [id]});
      const n = action === 'requeue' ? r.requeued : r.deleted;
      msg.textContent = n ? `Message ${id} ${action === 'requeue' ? 'requeued: claimable again at attempt 1' : 'deleted'}.`
        : `Message ${id} was no dead letter any more.`;
      msg.classList.remove('error');
    } catch (e) {
      msg.textContent = `${action} of ${id} failed: ${e.message}`;
      msg.classList.add('error');
    }
    msg.hidden = false;
    refresh();
  }

  async function renderDetail(overview) {
    const sel = state.selected;
    const section = $('detail');
    if (!sel) {
      section.hidden = true;
      return;
    }
    const topic = overview.selected;
    section.hidden = false;
    $('detail-title').textContent = `${sel.topic} / ${sel.group}`;
    if (!topic) {
      $('settings').replaceChildren(el('dt', {}, 'topic'), el('dd', {}, 'does not exist (any more)'));
      return;
    }
    renderSettings(topic.settings);
    const q = query({topic: sel.topic, group: sel.group});
    const [history, inflight, dead] = await Promise.all([
      api(`/ui/api/history?${q}`), api(`/ui/api/inflight?${q}`), api(`/ui/api/dead?${q}`)]);
    if (state.selected !== sel) return; // another one was chosen meanwhile
    const now = overview.now;
    lineChart($('depth-chart'), $('depth-legend'), history.points, now, [
      {label: 'ready', cls: 's-ready', value: (p) => p.ready},
      {label: 'in flight', cls: 's-in-flight', value: (p) => p.in_flight},
      {label: 'delayed', cls: 's-delayed', value: (p) => p.delayed},
      {label: 'waiting on key', cls: 's-waiting', value: (p) => p.waiting_on_key},
      {label: 'dead', cls: 's-dead', value: (p) => p.dead},
    ]);
    lineChart($('rate-chart'), $('rate-legend'), history.points, now, [
      {label: 'sent/s', cls: 's-sent', value: (p) => p.rates.sent},
      {label: 'finished/s', cls: 's-finished', value: (p) => p.rates.finished},
    ]);
    renderInFlight(inflight);
    renderDead(dead);
  }

  // --- Refreshing ----------------------------------------------------------------------------------

  async function refresh() {
    if (state.busy) {
      state.again = true; // once this one is done
      return;
    }
    state.busy = true;
    state.again = false;
    clearTimeout(state.timer);
    try {
      const params = {search: state.search, offset: state.offset, limit: PAGE};
      if (state.selected) params.selected = state.selected.topic;
      const overview = await api(`/ui/api/overview?${query(params)}`);
      state.overview = overview;
      renderOverview(overview);
      await renderDetail(overview);
      const when = new Date(overview.now * 1000).toLocaleTimeString('en-GB', {hour12: false});
      setStatus(overview.error ? `database: ${overview.error}` : `updated ${when}`, !!overview.error);
      document.body.dataset.loaded = '1';
    } catch (e) {
      setStatus(`refresh failed: ${e.message}`, true);
    } finally {
      state.busy = false;
      if (state.again) refresh();
      else schedule();
    }
  }

  function schedule() {
    clearTimeout(state.timer);
    if ($('auto').checked && !document.hidden) state.timer = setTimeout(refresh, REFRESH_MS);
  }

  document.addEventListener('DOMContentLoaded', () => {
    readHash();
    $('refresh').addEventListener('click', refresh);
    $('auto').addEventListener('change', schedule);
    let typing = null;
    $('search').addEventListener('input', () => {
      clearTimeout(typing);
      typing = setTimeout(() => {
        state.search = $('search').value.trim().toLowerCase().slice(0, 64);
        state.offset = 0;
        refresh();
      }, 250);
    });
    $('prev-page').addEventListener('click', () => {
      state.offset = Math.max(0, state.offset - PAGE);
      refresh();
    });
    $('next-page').addEventListener('click', () => {
      state.offset += PAGE;
      refresh();
    });
    document.addEventListener('visibilitychange', () => (document.hidden ? clearTimeout(state.timer) : refresh()));
    window.addEventListener('hashchange', () => {
      readHash();
      $('dead-message').hidden = true;
      refresh();
    });
    refresh();
  });
})();
