// SPDX-License-Identifier: Apache-2.0
// outbox-relay dashboard: the broker panel and the message explorer. Loaded after app.js,
// whose helpers ($, el, getJSON, fmtNum, fmtAge, fmtTime) it uses; like app.js it renders
// every value from the server as text, never as markup.
'use strict';

const STATUS_NAMES = ['pending', 'failed', 'sent', 'dead', 'handed'];
const explorer = { last: null, before: 0, loaded: false };

// ---- broker panel ----

function sinceText(iso, now) {
  const t = new Date(iso);
  if (!iso || isNaN(t) || t.getFullYear() < 2000) return '–';
  return fmtAge((now - t) / 1000) + ' ago';
}

function stateCell(s) { return el('td', {}, el('span', { class: 'state ' + s, textContent: s })); }

function brokerRow(kind, b, now) {
  const tr = el('tr', { data: { broker: b.addr, state: b.state } },
    el('td', { textContent: kind }), el('td', { textContent: b.name || '' }), el('td', { class: 'mono', textContent: b.addr }),
    stateCell(b.state), el('td', { textContent: sinceText(b.since, now) }),
    el('td', { textContent: b.circuit ? b.circuit + (b.circuit === 'open' ? ' since ' + sinceText(b.circuit_since, now) + ', one probe a second' : '') : '' }),
    el('td', { textContent: b.last_ok && new Date(b.last_ok).getFullYear() > 2000 ? sinceText(b.last_ok, now) + (b.last_duration_ms ? ' (' + b.last_duration_ms.toFixed(1) + ' ms)' : '') : '–' }),
    el('td', { class: 'reason', title: b.last_error || '', textContent: b.last_error ? b.last_error + ' (' + sinceText(b.last_error_at, now) + ')' : '' }));
  return tr;
}

function renderBrokers(p) {
  const now = new Date(p.now);
  const rows = [...p.name_servers.map((b) => brokerRow('name server', b, now)), ...p.brokers.map((b) => brokerRow('broker', b, now))];
  $('b-table').tBodies[0].replaceChildren(...rows);
  const notes = [];
  const table = (x) => (state.multi ? x.database + ' / ' : '') + x.table;
  for (const i of p.incidents) {
    const who = i.broker === 'cluster' ? 'no broker reachable (name servers or route)' : 'broker ' + i.broker;
    notes.push(el('li', { class: 'bad', data: { incident: i.broker } }, table(i) + ': ' + who + ' failing for ' + sinceText(i.since, now).replace(' ago', '') +
      ' — rows wait, no retry spent; last error: ' + i.last_error));
  }
  for (const r of p.refusals) {
    notes.push(el('li', { class: 'bad', data: { refusal: r.topic } }, table(r) + ': topic ' + r.topic + ' refused for the relay\'s configuration since ' +
      sinceText(r.since, now) + ' (access key ' + (p.access_key ? '"' + p.access_key + '"' : 'none: no ACL credentials configured') +
      ') — rows wait, none goes dead; last refusal: ' + r.last_error));
  }
  if (!p.known) notes.push(el('li', {}, 'This process does not publish: it knows nothing of the broker.'));
  $('b-notes').replaceChildren(...notes);
  const states = [...p.name_servers, ...p.brokers].map((b) => b.state);
  const bad = p.incidents.length + p.refusals.length + states.filter((s) => s === 'failing' || s === 'refusing').length;
  const slow = states.filter((s) => s === 'slow').length;
  const sum = $('b-summary');
  sum.textContent = bad ? 'trouble: ' + bad + ' problem' + (bad > 1 ? 's' : '') : slow ? 'slow' : states.length ? 'healthy' : 'no sends yet';
  sum.className = 'badge state ' + (bad ? 'failing' : slow ? 'slow' : 'healthy');
}

async function refreshBrokers() {
  refreshAudit();
  try {
    renderBrokers(await getJSON('api/brokers'));
  } catch (e) {
    $('b-notes').replaceChildren(el('li', { class: 'bad', textContent: 'Cannot load the broker panel: ' + e.message }));
  }
}

// ---- broker audit ----

function auditRow(a, now) {
  const repaired = fmtNum(a.repaired) + (a.repaired_ordered ? ' (' + fmtNum(a.repaired_ordered) + ' ordered)' : '');
  return el('tr', { data: { audit: a.database + '/' + a.table, state: a.state } },
    el('td', { textContent: (state.multi ? a.database + ' / ' : '') + a.table }), stateCell(a.state),
    el('td', { textContent: fmtNum(a.checked) }), el('td', { class: a.missing ? 'bad' : '', textContent: fmtNum(a.missing) }),
    el('td', { textContent: repaired }), el('td', { textContent: fmtNum(a.unknown) }),
    el('td', { textContent: a.state === 'on' ? (a.lag_seconds > 0 ? fmtAge(a.lag_seconds) : 'caught up') : '–' }),
    el('td', { textContent: a.last_round ? sinceText(a.last_round, now) : '–' }),
    el('td', { class: 'reason', title: a.why || '', textContent: a.why || '' }));
}

function renderAudit(p) {
  const now = new Date();
  $('a-table').tBodies[0].replaceChildren(...p.tables.map((a) => auditRow(a, now)));
  const notes = [];
  if (!p.known) notes.push(el('li', {}, 'This process runs no relay: it knows nothing of the broker audit.'));
  const off = p.tables.filter((a) => a.state === 'off').length;
  const missing = p.tables.reduce((n, a) => n + a.missing, 0);
  if (missing) notes.push(el('li', { class: 'bad' }, fmtNum(missing) + ' acknowledged message' + (missing > 1 ? 's' : '') +
    ' the broker no longer held since this process started: made due again and sent again with their msg_id and keys.'));
  $('a-notes').replaceChildren(...notes);
  const sum = $('a-summary');
  sum.textContent = !p.tables.length ? 'unknown' : off ? 'off for ' + off + ' table' + (off > 1 ? 's' : '') : missing ? 'found losses' : 'on';
  sum.className = 'badge state ' + (off || missing ? 'failing' : p.tables.length ? 'healthy' : 'slow');
}

async function refreshAudit() {
  try {
    renderAudit(await getJSON('api/audit'));
  } catch (e) {
    $('a-notes').replaceChildren(el('li', { class: 'bad', textContent: 'Cannot load the broker audit: ' + e.message }));
  }
}

// ---- message explorer ----

function fillExplorerTables(tables) {
  const sel = $('x-table');
  const keep = sel.value;
  sel.replaceChildren(el('option', { value: '', textContent: 'every table' }),
    ...tables.map((t) => el('option', { value: t.database + '/' + t.table, textContent: tableTitle(t) })));
  if ([...sel.options].some((o) => o.value === keep)) sel.value = keep;
}

function searchParams() {
  const p = new URLSearchParams();
  const by = $('x-by').value;
  const v = $('x-value').value.trim();
  if (by && v) p.set(by, v);
  for (const [k, id] of [['topic', 'x-topic'], ['tag', 'x-tag'], ['status', 'x-status']]) if ($(id).value.trim()) p.set(k, $(id).value.trim());
  const t = $('x-table').value;
  if (t) { const i = t.indexOf('/'); p.set('database', t.slice(0, i)); p.set('table', t.slice(i + 1)); }
  const epoch = (id) => ($(id).value ? Math.floor(new Date($(id).value).getTime() / 1000) : 0);
  const to = epoch('x-to') || Math.floor(Date.now() / 1000) + 60;
  const from = epoch('x-from') || to - 86400 - 60;
  if (!(by === 'msg_id' || by === 'sharding_key') || !v) { p.set('from', String(from)); p.set('to', String(to)); }
  p.set('limit', '50');
  return p;
}

async function find(more) {
  const p = more ? explorer.last : searchParams();
  if (more) p.set('before', String(explorer.before)); else p.delete('before');
  explorer.last = p;
  try {
    const a = await getJSON('api/search?' + p);
    const rows = a.messages.map((m) => {
      const tr = el('tr', { data: { msgId: m.msg_id, id: String(m.id) } },
        el('td', { textContent: (state.multi ? m.database + ' / ' : '') + m.table }), el('td', { class: 'mono', textContent: m.id }),
        el('td', { class: 'mono', textContent: m.msg_id }), stateCell(m.status_name), el('td', { textContent: m.topic }),
        el('td', { textContent: m.tag }), el('td', { class: 'mono', textContent: m.msg_keys }), el('td', { textContent: fmtTime(m.create_time) }),
        el('td', { textContent: m.retry_count + '/' + (m.max_retry_count + 1) }),
        el('td', { class: 'reason', title: m.fail_reason, textContent: m.fail_reason }));
      tr.addEventListener('click', () => openRow(m.database, m.table, m.id));
      return tr;
    });
    if (more) $('x-results').tBodies[0].append(...rows); else $('x-results').tBodies[0].replaceChildren(...rows);
    explorer.before = a.before;
    $('x-more').hidden = !a.before;
    const n = $('x-results').tBodies[0].rows.length;
    let text = fmtNum(n) + ' message' + (n === 1 ? '' : 's') + ' found (' + planText(a.plan) + ')';
    if (a.scanned) text += '; read ' + a.scanned;
    if (a.more && a.more.length) text += '; more in ' + a.more.join(', ') + ': choose the table to page';
    $('x-notice').textContent = text;
    $('x-notice').className = '';
    if (n === 1 && !more) openRow(a.messages[0].database, a.messages[0].table, a.messages[0].id);
  } catch (e) {
    $('x-notice').textContent = 'Cannot search: ' + e.message;
    $('x-notice').className = 'error';
  }
}

function planText(plan) {
  return { msg_id: 'by its unique msg_id', sharding_key: 'through the sharding key index', window: 'rows created in the window, newest first' }[plan] || plan;
}

async function openRow(database, table, id) {
  try {
    const m = await getJSON('api/row?' + new URLSearchParams({ database, table, id: String(id) }));
    $('r-msgid').textContent = m.msg_id;
    $('r-status').textContent = m.status_name;
    $('r-status').className = 'badge state ' + m.status_name;
    $('r-replay').hidden = !state.admin || m.status !== 2;
    explorer.open = { database: m.database, table: m.table, id: m.id, msgId: m.msg_id };
    $('r-timeline').replaceChildren(...m.timeline.map((e) => el('li', { class: e.kind, data: { step: e.step } },
      e.at ? el('time', { textContent: fmtTime(e.at) }) : '', el('b', { textContent: e.step }), ' ' + e.detail)));
    const fields = [['table', (state.multi ? m.database + ' / ' : '') + m.table], ['id', m.id], ['topic', m.topic], ['tag', m.tag],
      ['keys', m.msg_keys], ['sharding key', m.sharding_key], ['status', m.status + ' (' + m.status_name + ')'],
      ['tries', m.retry_count + ' of ' + (m.max_retry_count + 1)], ['reason', m.fail_reason], ['created', fmtTime(m.create_time)],
      ['updated', fmtTime(m.update_time)], ['next_retry_time', m.next_retry_time ? fmtTime(new Date(m.next_retry_time)) + ' (' + m.next_retry_time + ')' : '0'],
      ['sent_time', m.sent_time ? fmtTime(new Date(m.sent_time)) : '0'], ['properties', m.properties]];
    $('r-fields').replaceChildren(...fields.flatMap(([k, v]) => [el('dt', { textContent: k }), el('dd', { textContent: String(v ?? '') })]));
    $('r-size').textContent = fmtNum(m.content_chars) + ' characters' + (m.truncated ? ', first ' + fmtNum(m.content.length) + ' shown' : '');
    $('r-body').textContent = m.content; // text, never markup
    $('row').hidden = false;
  } catch (e) {
    $('x-notice').textContent = 'Cannot open message ' + id + ': ' + e.message;
    $('x-notice').className = 'error';
  }
}

// ---- replay (admin token): the dry run's count is confirmed before anything is sent ----

function xnotice(text, kind) {
  $('x-notice').textContent = text;
  $('x-notice').className = kind || '';
}

async function postReplay(body) {
  const headers = { 'Content-Type': 'application/json' };
  if (token()) headers.Authorization = 'Bearer ' + token();
  const r = await fetch('api/replay', { method: 'POST', headers, body: JSON.stringify(body), credentials: 'omit' });
  return { status: r.status, body: await r.json().catch(() => ({})) };
}

// replayFilter is the explorer form's selection as a replay request, or an error text.
function replayFilter() {
  const t = $('x-table').value;
  if (!t) return 'choose a table to replay from';
  const i = t.indexOf('/');
  const body = { database: t.slice(0, i), table: t.slice(i + 1) };
  const by = $('x-by').value;
  const v = $('x-value').value.trim();
  if (by === 'msg_id' && v) return { ...body, msg_ids: [v] };
  const f = { topic: $('x-topic').value.trim(), tag: $('x-tag').value.trim() };
  if (by === 'key' && v) f.key = v;
  if (by === 'sharding_key' && v) f.sharding_key = v;
  const epoch = (id) => ($(id).value ? Math.floor(new Date($(id).value).getTime() / 1000) : 0);
  f.since = epoch('x-from');
  f.until = epoch('x-to');
  return { ...body, filter: f };
}

async function replay(body, what) {
  let r = await postReplay(body);
  if (r.status === 409 && typeof r.body.count === 'number') {
    if (r.body.count === 0) { xnotice('No sent message matches: nothing to replay.', ''); return; }
    const n = fmtNum(r.body.count);
    if (!(await confirmDialog('Replay ' + n + ' sent message' + (r.body.count === 1 ? '' : 's') + ' of ' + body.table + ' ' + what +
      '? Dry run: ' + n + ' counted. Each copy keeps its msg_id and keys: consumers that kept their dedupe state skip it.'))) return;
    r = await postReplay({ ...body, confirm: r.body.count });
  }
  if (r.status !== 202) { xnotice('Replay refused (' + r.status + '): ' + (r.body.error || 'error'), 'error'); return; }
  xnotice('Replay ' + r.body.run_id + ' started: ' + fmtNum(r.body.counted) + ' message(s), sent at the rate limit.', '');
  await watchReplay(r.body.run_id);
}

// watchReplay polls the run until it ends, then says what it sent and refreshes the open message.
async function watchReplay(runID) {
  for (;;) {
    const runs = await getJSON('api/replay');
    const run = runs.find((x) => x.run_id === runID);
    if (!run) return;
    if (run.state !== 'running') {
      xnotice('Replay ' + runID + ' ' + run.state + ': sent ' + fmtNum(run.sent) + ' of ' + fmtNum(run.counted) + ' counted' +
        (run.skipped ? ', skipped ' + fmtNum(run.skipped) : '') + (run.error ? ': ' + run.error : '') + '.', run.state === 'done' ? 'ok' : 'error');
      if (explorer.open && !$('row').hidden) await openRow(explorer.open.database, explorer.open.table, explorer.open.id);
      return;
    }
    xnotice('Replay ' + runID + ' running: sent ' + fmtNum(run.sent) + ' of ' + fmtNum(run.counted) + '.', '');
    await new Promise((res) => setTimeout(res, 500));
  }
}

document.addEventListener('DOMContentLoaded', () => {
  $('r-replay').addEventListener('click', () => {
    const o = explorer.open;
    replay({ database: o.database, table: o.table, msg_ids: [o.msgId] }, 'with msg_id ' + o.msgId);
  });
  $('x-replay').addEventListener('click', () => {
    const body = replayFilter();
    if (typeof body === 'string') { xnotice('Cannot replay: ' + body, 'error'); return; }
    replay(body, body.msg_ids ? 'with msg_id ' + body.msg_ids[0] : 'matching the search (sent in the time window)');
  });
  $('find').addEventListener('submit', (ev) => { ev.preventDefault(); $('row').hidden = true; find(false); });
  $('x-more').addEventListener('click', () => find(true));
});
