// SPDX-License-Identifier: Apache-2.0
// outbox-relay dashboard. Every value from the server reaches the page as text (textContent,
// text nodes), never as markup: a message body holding <script> stays text. The token (read
// or admin) lives in sessionStorage only and goes out only in the Authorization header of the
// page's own API requests.
'use strict';

const TOKEN_KEY = 'outbox-relay-admin-token';
const $ = (id) => document.getElementById(id);

// el builds an element; children are nodes or strings (which become text nodes).
function el(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === 'class') e.className = v;
    else if (k === 'data') for (const [dk, dv] of Object.entries(v)) e.dataset[dk] = dv;
    else e[k] = v; // properties only (textContent, title, type, checked…)
  }
  for (const c of children) e.append(c);
  return e;
}

const state = { admin: false, multi: false, tables: [], dead: [], nextAfter: 0, selected: new Set(), open: null, timer: 0 };

function fmtNum(n) { return Number(n || 0).toLocaleString('en-US'); }

function fmtAge(s) {
  s = Math.max(0, Math.round(s));
  if (s < 60) return s + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm ' + (s % 60) + 's';
  if (s < 86400) return Math.floor(s / 3600) + 'h ' + Math.floor((s % 3600) / 60) + 'm';
  return Math.floor(s / 86400) + 'd ' + Math.floor((s % 86400) / 3600) + 'h';
}

function fmtTime(iso) {
  const d = new Date(iso);
  return isNaN(d) ? '' : d.toLocaleString();
}

async function getJSON(path) {
  const headers = { Accept: 'application/json' };
  if (token()) headers.Authorization = 'Bearer ' + token();
  const r = await fetch(path, { headers, cache: 'no-store', credentials: 'omit' });
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(body.error || r.status + ' ' + r.statusText);
  return body;
}

// ---- overview ----

async function refresh() {
  clearTimeout(state.timer);
  let every = 5;
  try {
    const [o, c] = await Promise.all([getJSON('api/overview'), getJSON('api/counters').catch(() => [])]);
    every = o.refresh_seconds || every;
    state.counters = c;
    renderOverview(o);
    refreshBrokers(); // explorer.js
    $('overview-error').hidden = true;
  } catch (e) {
    $('overview-error').textContent = 'Cannot load the overview: ' + e.message;
    $('overview-error').hidden = false;
  }
  state.timer = setTimeout(refresh, every * 1000);
}

function renderOverview(o) {
  const dbs = o.databases || [];
  state.multi = dbs.length > 1;
  const where = state.multi ? dbs.length + ' databases: ' + dbs.map((d) => d.name + ' (' + d.label + ')').join(', ')
    : 'database ' + o.database;
  $('where').textContent = where + ' · this relay ' + o.relay.host + ' pid ' + o.relay.pid;
  state.admin = o.admin;
  const mode = $('mode');
  mode.textContent = o.admin ? 'admin: requeue allowed with the token' : 'read-only';
  mode.className = 'badge' + (o.admin ? ' admin' : '');
  $('token-form').hidden = !o.admin && !o.read_locked;
  renderTokenState();
  for (const b of [$('requeue-selected'), $('requeue-filter'), $('requeue-one'), $('x-replay')]) b.hidden = !o.admin;
  $('updated').textContent = 'updated ' + new Date(o.now).toLocaleTimeString();
  $('tables').replaceChildren(...o.tables.map(tableCard));
  // The table selector's values are DATABASE/TABLE (neither holds a "/").
  const names = o.tables.map((t) => t.database + '/' + t.table);
  if (names.join() !== state.tables.join()) {
    state.tables = names;
    const sel = $('f-table');
    const keep = sel.value;
    sel.replaceChildren(...o.tables.map((t) => el('option', { value: t.database + '/' + t.table, textContent: tableTitle(t) })));
    if (names.includes(keep)) sel.value = keep;
    fillExplorerTables(o.tables); // explorer.js
    loadDead(false);
  }
}

// tableTitle names a table, with its database when the relay serves several.
function tableTitle(t) { return state.multi ? t.database + ' / ' + t.table : t.table; }

// chosen returns the database and table selected for the dead messages.
function chosen() {
  const v = $('f-table').value;
  const i = v.indexOf('/');
  return { database: v.slice(0, i), table: v.slice(i + 1) };
}

function count(label, value, kind, key) {
  return el('div', { class: 'count' + (kind ? ' ' + kind : ''), data: { count: key } },
    el('b', { textContent: value }), el('span', { textContent: label }));
}

function tableCard(t) {
  const s = t.status;
  const card = el('article', { class: 'card', data: { table: t.table, database: t.database } },
    el('h2', { textContent: tableTitle(t) }),
    el('div', { class: 'counts' },
      count('pending', fmtNum(s.pending), '', 'pending'),
      count('failed, will retry', fmtNum(s.failed), s.failed ? 'warn' : '', 'failed'),
      count('dead', fmtNum(s.dead), s.dead ? 'bad' : '', 'dead'),
      count('due now (backlog)', fmtNum(s.due), '', 'due'),
      count('oldest due for', s.due ? fmtAge(s.oldest_due_age_seconds) : '–', s.oldest_due_age_seconds > 60 ? 'warn' : '', 'oldest'),
      count('sent', fmtNum(s.sent), '', 'sent'),
      count('handed (the broker delivers)', fmtNum(s.handed), '', 'handed'),
      ...(s.unknown ? [count('unknown status, never sent', fmtNum(s.unknown), 'bad', 'unknown')] : [])),
    t.partitions ? partitionLine(t.partitions) : lockLine(t.lock),
    activity(t.activity, (state.counters || []).find((c) => c.database === t.database && c.table === t.table)));
  if (t.error) card.append(el('p', { class: 'error', textContent: t.error }));
  return card;
}

function lockLine(l) {
  if (l.error) return el('p', { class: 'lock error', textContent: 'Lock ' + l.key + ': ' + l.error });
  if (!l.held) return el('p', { class: 'lock free', textContent: 'No leader: lock ' + l.key + ' is free' });
  const who = l.host ? l.host + ' (pid ' + l.pid + ')' + (l.this_relay ? ' — this relay' : '') : 'a relay that does not name itself';
  const parts = ['Leader: ' + who];
  if (l.since) parts.push('for ' + fmtAge(l.held_for_seconds));
  if (l.ttl_ms) parts.push('lock expires in ' + (l.ttl_ms / 1000).toFixed(1) + 's unless extended');
  return el('p', { class: 'lock', title: l.key, textContent: parts.join(' · ') });
}

// partitionLine summarises the locks of a partitioned table: how many partitions are held,
// by which relays, and which are not held (their rows wait).
function partitionLine(ps) {
  const by = new Map();
  const free = [];
  ps.forEach((l, i) => {
    if (l.error || !l.held) { free.push(i); return; }
    const who = l.host ? l.host + ' (pid ' + l.pid + ')' + (l.this_relay ? ' — this relay' : '') : 'a relay';
    by.set(who, (by.get(who) || []).concat(i));
  });
  const parts = [(ps.length - free.length) + ' of ' + ps.length + ' partitions held'];
  for (const [who, list] of by) parts.push(who + ': ' + list.join(', '));
  if (free.length) parts.push('not held: ' + free.join(', '));
  return el('p', { class: free.length ? 'lock free' : 'lock', textContent: parts.join(' · ') });
}

const SVG = 'http://www.w3.org/2000/svg';

// activity draws the last hour: this relay's own counters per minute (c, from
// /ui/api/counters) when it has them, else the table's samples (a); the table's figures, from
// its index and whichever relay moved the rows, follow on a line of their own.
function activity(a, c) {
  const box = el('div', { class: 'activity' });
  const own = c && c.minutes && c.minutes.length ? c : null;
  const width = own ? 60 : a.bucket_seconds;
  const perMin = 60 / (width || 60);
  const b = own ? own.minutes : (a.buckets || []);
  const mins = Math.round((b.length * width) / 60);
  const src = own || a;
  box.append(el('div', { class: 'legend', data: { activity: '' } },
    (own ? 'this relay, ' : '') + 'last ' + mins + ' min:',
    el('i', { class: 'sent' }), fmtNum(src.sent) + ' sent',
    el('i', { class: 'failed' }), fmtNum(src.failed) + (own ? ' failed attempts' : ' failed'),
    el('i', { class: 'dead' }), fmtNum(src.dead) + ' dead'));
  const w = 300, h = 48;
  const max = Math.max(1, ...b.map((x) => Math.max(x.sent, x.failed, x.dead)));
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('viewBox', '0 0 ' + w + ' ' + h);
  svg.setAttribute('preserveAspectRatio', 'none');
  svg.setAttribute('class', 'spark');
  for (const [key, color] of [['sent', '#1f7a44'], ['failed', '#a15c00'], ['dead', '#b42318']]) {
    if (b.length < 2) break;
    const pts = b.map((x, i) => ((i * w) / (b.length - 1)).toFixed(1) + ',' + (h - 2 - ((h - 4) * x[key]) / max).toFixed(1));
    const line = document.createElementNS(SVG, 'polyline');
    line.setAttribute('points', pts.join(' '));
    line.setAttribute('fill', 'none');
    line.setAttribute('stroke', color);
    line.setAttribute('stroke-width', '1.5');
    line.setAttribute('vector-effect', 'non-scaling-stroke');
    svg.append(line);
  }
  const title = document.createElementNS(SVG, 'title');
  title.textContent = 'per ' + width + 's; peak ' + fmtNum(max) + ' (' + fmtNum(max * perMin) + '/min)';
  svg.append(title);
  box.append(svg);
  if (own) {
    box.append(el('div', { class: 'table-line', data: { tableActivity: '' } }, 'the table, all relays (from its index): ' +
      fmtNum(a.sent) + ' sent, ' + fmtNum(a.failed) + ' failed, ' + fmtNum(a.dead) + ' dead'));
  }
  if (a.error) box.append(el('p', { class: 'error', textContent: 'activity: ' + a.error }));
  return box;
}

// ---- dead messages ----

function filterValues() {
  const epoch = (id) => {
    const v = $(id).value;
    return v ? String(Math.floor(new Date(v).getTime() / 1000)) : '';
  };
  return { topic: $('f-topic').value.trim(), tag: $('f-tag').value.trim(), reason: $('f-reason').value.trim(),
    after: epoch('f-after'), before: epoch('f-before') };
}

async function loadDead(more) {
  if (!$('f-table').value) return;
  const p = new URLSearchParams({ ...chosen(), ...filterValues(), limit: '50' });
  if (more) p.set('after_id', String(state.nextAfter));
  try {
    const page = await getJSON('api/dead?' + p);
    if (!more) { state.dead = []; state.selected.clear(); }
    state.dead.push(...page.messages);
    state.nextAfter = page.next_after_id;
    $('dead-count').textContent = fmtNum(page.count) + ' dead message' + (page.count === 1 ? '' : 's') + ' match';
    renderDead();
  } catch (e) {
    notice('Cannot list dead messages: ' + e.message, 'bad');
  }
}

function renderDead() {
  const rows = state.dead.map((m) => {
    const box = el('input', { type: 'checkbox', checked: state.selected.has(m.msg_id) });
    box.setAttribute('aria-label', 'select ' + m.msg_id);
    box.addEventListener('click', (ev) => ev.stopPropagation());
    box.addEventListener('change', () => {
      if (box.checked) state.selected.add(m.msg_id); else state.selected.delete(m.msg_id);
      renderSelection();
    });
    const tr = el('tr', { class: state.open === m.id ? 'open' : '', data: { msgId: m.msg_id } },
      el('td', {}, box), el('td', { class: 'mono', textContent: m.id }), el('td', { class: 'mono', textContent: m.msg_id }),
      el('td', { textContent: m.topic }), el('td', { textContent: m.tag }),
      el('td', { class: 'reason', title: m.fail_reason, textContent: m.fail_reason }),
      el('td', { textContent: m.retry_count + '/' + (m.max_retry_count + 1) }),
      el('td', { textContent: fmtTime(m.update_time) }));
    tr.addEventListener('click', () => openMessage(m.id));
    return tr;
  });
  $('dead').tBodies[0].replaceChildren(...rows);
  $('more').hidden = !state.nextAfter;
  renderSelection();
}

function renderSelection() {
  const n = state.selected.size;
  $('requeue-selected').disabled = n === 0;
  $('requeue-selected').textContent = 'Requeue selected' + (n ? ' (' + n + ')' : '');
  $('select-all').checked = n > 0 && n === state.dead.length;
}

async function openMessage(id) {
  try {
    const m = await getJSON('api/message?' + new URLSearchParams({ ...chosen(), id: String(id) }));
    state.open = m.id;
    $('d-msgid').textContent = m.msg_id;
    const fields = [['id', m.id], ['topic', m.topic], ['tag', m.tag], ['keys', m.msg_keys], ['sharding key', m.sharding_key],
      ['reason', m.fail_reason], ['tries', m.retry_count + ' of ' + (m.max_retry_count + 1)],
      ['created', fmtTime(m.create_time)], ['died', fmtTime(m.update_time)], ['properties', m.properties]];
    $('d-fields').replaceChildren(...fields.flatMap(([k, v]) => [el('dt', { textContent: k }), el('dd', { textContent: String(v ?? '') })]));
    $('d-size').textContent = fmtNum(m.content_chars) + ' characters' + (m.truncated ? ', first ' + fmtNum(m.content.length) + ' shown' : '');
    $('d-body').textContent = m.content; // text, never markup
    $('detail').hidden = false;
    renderDead();
  } catch (e) {
    notice('Cannot open message ' + id + ': ' + e.message, 'bad');
  }
}

// ---- requeue ----

function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }

function renderTokenState() {
  const has = token() !== '';
  $('token').hidden = has;
  $('token-use').hidden = has;
  $('token-forget').hidden = !has;
}

function notice(text, kind) {
  const n = $('notice');
  n.textContent = text;
  n.className = kind || '';
}

function confirmDialog(text) {
  const d = $('confirm');
  $('confirm-text').textContent = text;
  return new Promise((resolve) => {
    const done = (v) => { d.close(); $('confirm-ok').onclick = $('confirm-cancel').onclick = null; resolve(v); };
    $('confirm-ok').onclick = () => done(true);
    $('confirm-cancel').onclick = () => done(false);
    d.oncancel = () => resolve(false);
    d.showModal();
  });
}

async function postRequeue(body) {
  const headers = { 'Content-Type': 'application/json' };
  if (token()) headers.Authorization = 'Bearer ' + token();
  const r = await fetch('api/requeue', { method: 'POST', headers, body: JSON.stringify(body), credentials: 'omit' });
  return { status: r.status, body: await r.json().catch(() => ({})) };
}

async function requeue(body, n, what) {
  const table = state.multi ? body.database + ' / ' + body.table : body.table;
  if (n > 1 && !(await confirmDialog('Requeue ' + fmtNum(n) + ' dead messages of ' + table + '? ' + what))) return;
  let r = await postRequeue(body);
  if (r.status === 409) { // a filter: the server tells how many rows it matches now
    if (r.body.count === 0) { notice('No dead message matches the filter.', ''); return; }
    if (!(await confirmDialog('Requeue all ' + fmtNum(r.body.count) + ' dead messages of ' + table + ' matching the filter?'))) return;
    r = await postRequeue({ ...body, confirm: r.body.count });
  }
  if (r.status !== 200) {
    notice('Refused (' + r.status + '): ' + (r.body.error || 'error'), 'bad');
    return;
  }
  const skipped = Object.keys(r.body.skipped || {}).length;
  const n1 = r.body.requeued.length === 1;
  notice('Requeued ' + fmtNum(r.body.requeued.length) + ' message' + (n1 ? '' : 's') +
    (skipped ? ', ' + skipped + ' left alone (no longer dead)' : '') + '. The leading relay sends ' + (n1 ? 'it' : 'them') + ' on its next poll.', 'ok');
  if (r.body.requeued.includes($('d-msgid').textContent)) $('detail').hidden = true;
  await loadDead(false);
  refresh();
}

function init() {
  $('token-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const v = $('token').value.trim();
    $('token').value = '';
    if (v) sessionStorage.setItem(TOKEN_KEY, v);
    renderTokenState();
    loadDead(false); // a read token unlocks the dead list
  });
  $('token-forget').addEventListener('click', () => { sessionStorage.removeItem(TOKEN_KEY); renderTokenState(); });
  $('filters').addEventListener('submit', (ev) => { ev.preventDefault(); $('detail').hidden = true; loadDead(false); });
  $('f-table').addEventListener('change', () => { $('detail').hidden = true; loadDead(false); });
  $('f-clear').addEventListener('click', () => {
    for (const id of ['f-topic', 'f-tag', 'f-reason', 'f-after', 'f-before']) $(id).value = '';
    loadDead(false);
  });
  $('more').addEventListener('click', () => loadDead(true));
  $('select-all').addEventListener('change', () => {
    state.selected = new Set($('select-all').checked ? state.dead.map((m) => m.msg_id) : []);
    renderDead();
  });
  $('requeue-one').addEventListener('click', () =>
    requeue({ ...chosen(), msg_ids: [$('d-msgid').textContent] }, 1, ''));
  $('requeue-selected').addEventListener('click', () =>
    requeue({ ...chosen(), msg_ids: [...state.selected] }, state.selected.size, 'They get a fresh retry budget.'));
  $('requeue-filter').addEventListener('click', () =>
    requeue({ ...chosen(), filter: filterValues() }, 0, ''));
  refresh();
}

document.addEventListener('DOMContentLoaded', init);
