// Drives the dashboard of a running `outbox-relay run` in Debian's headless Chromium.
// Started by internal/dashboard's TestBrowser, which seeds the database, starts the relay and
// a broker, and checks the database and the broker afterwards. Inputs (environment):
//   BASE_URL     the dashboard, e.g. http://127.0.0.1:9464/ui/
//   OTHER_URL    a page of another site, to send cross-site requests from
//   ADMIN_TOKEN  the relay's http.admin_token
//   SEED         JSON: {table, counts: {pending, failed, sent, dead}, hostile: {msg_id, body, reason},
//                selected: [msg_id, msg_id], reason_filter, reason_count}
//   SHOTS        a folder for screenshots (optional)
//   CHROMIUM     the browser (default /usr/bin/chromium)
import { launchChromium } from './chromium.mjs';
import { until } from './poll.mjs';
import assert from 'node:assert/strict';
import path from 'node:path';

const base = process.env.BASE_URL;
const seed = JSON.parse(process.env.SEED);
const token = process.env.ADMIN_TOKEN;
const shots = process.env.SHOTS || '';
const table = seed.table;
const fmt = (n) => n.toLocaleString('en-US');

function step(what) { console.log('step: ' + what); }

// shot saves the viewport, or one element of the page, as docs/img/dashboard-<name>.png does.
async function shot(page, name, locator) {
  if (shots) await (locator || page).screenshot({ path: path.join(shots, 'dashboard-' + name + '.png') });
}

const browser = await launchChromium();
try {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  const page = await ctx.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  // Console errors fail the test (a CSP violation shows there), except the refusals the test
  // provokes: 401 without the token, 409 asking to confirm a filter's count.
  page.on('console', (m) => {
    if (m.type() === 'error' && !/status of (401|409) /.test(m.text())) problems.push('console error: ' + m.text());
  });
  page.on('dialog', (d) => { problems.push('unexpected browser dialog: ' + d.message()); d.dismiss(); });
  const card = page.locator(`article[data-table="${table}"]`);
  const countOf = (key) => card.locator(`[data-count="${key}"] b`).textContent();

  step('the page loads and shows the seeded counts');
  await page.goto(base);
  await until('the counts of ' + table, async () => (await countOf('sent')) === fmt(seed.counts.sent));
  for (const [key, n] of Object.entries(seed.counts)) assert.equal(await countOf(key), fmt(n), key);
  assert.match(await card.locator('.lock').textContent(), /Leader: .*\(pid \d+\) — this relay · for /);
  assert.match(await page.locator('#mode').textContent(), /admin/);
  await shot(page, 'overview');

  step('a hostile body and reason render as text, and no script runs');
  const hostileRow = page.locator(`tr[data-msg-id="${seed.hostile.msg_id}"]`);
  await until('the hostile row', () => hostileRow.count());
  assert.equal(await hostileRow.locator('td.reason').textContent(), seed.hostile.reason);
  await hostileRow.click();
  await until('the body', async () => (await page.locator('#d-body').textContent()) === seed.hostile.body);
  assert.equal(await page.evaluate(() => window.__pwned), undefined, 'a script from the data ran');
  assert.equal(await page.locator('img, #d-body *, td.reason *').count(), 0, 'data became elements');
  await shot(page, 'dead', page.locator('#dead-section'));

  step('requeue without the token is refused');
  await page.locator('#requeue-one').click();
  await until('the refusal', async () => /Refused \(401\)/.test(await page.locator('#notice').textContent()));
  const direct = await page.evaluate(async (t) => (await fetch('api/requeue', {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ table: t, filter: {}, confirm: 1 }),
  })).status, table);
  assert.equal(direct, 401);

  step('another site cannot requeue, even knowing the token');
  const other = await ctx.newPage();
  await other.goto(process.env.OTHER_URL);
  const crossSite = await other.evaluate(async ({ url, t, tok, id }) => {
    const out = {};
    // A "simple" request goes out without a preflight; the server refuses it (cross-site,
    // no token), and the browser hides the answer (Cross-Origin-Resource-Policy).
    await fetch(url, { method: 'POST', mode: 'no-cors', headers: { 'Content-Type': 'text/plain' },
      body: JSON.stringify({ table: t, msg_ids: [id] }) }).catch(() => {});
    // With the token the request needs a CORS preflight, which the relay never grants.
    try {
      const r = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: 'Bearer ' + tok },
        body: JSON.stringify({ table: t, msg_ids: [id] }) });
      out.status = r.status;
    } catch (e) { out.blocked = true; }
    return out;
  }, { url: new URL('api/requeue', base).href, t: table, tok: token, id: seed.hostile.msg_id });
  assert.deepEqual(crossSite, { blocked: true });
  await other.close();
  const stillDead = await page.evaluate(async (q) => (await (await fetch('api/dead?' + q)).json()).messages.map((m) => m.msg_id),
    new URLSearchParams({ table }).toString());
  assert.ok(stillDead.includes(seed.hostile.msg_id), 'the refused requeues changed the row');

  step('with the token, the row is requeued and the running relay delivers it');
  await page.locator('#token').fill(token);
  await page.locator('#token-use').click();
  assert.equal(await page.locator('#token').isHidden(), true);
  assert.equal(await page.evaluate(() => document.body.textContent.includes(sessionStorage.getItem('outbox-relay-admin-token'))), false,
    'the token is shown');
  await page.locator('#requeue-one').click();
  await until('the requeue', async () => /Requeued 1 message/.test(await page.locator('#notice').textContent()));
  await until('the row gone from the dead list', async () => (await hostileRow.count()) === 0);
  await until('the relay to send it', async () => (await countOf('sent')) === fmt(seed.counts.sent + 1));

  step('a selection of several asks for confirmation');
  for (const id of seed.selected) await page.locator(`tr[data-msg-id="${id}"] input[type=checkbox]`).check();
  await page.locator('#requeue-selected').click();
  await until('the confirmation', () => page.locator('#confirm').isVisible());
  assert.match(await page.locator('#confirm-text').textContent(), new RegExp('Requeue ' + seed.selected.length + ' dead messages'));
  await shot(page, 'confirm');
  await page.locator('#confirm-ok').click();
  await until('the selection requeued', async () => new RegExp('Requeued ' + seed.selected.length + ' messages').test(await page.locator('#notice').textContent()));

  step('a filter asks to confirm the number of rows it matches');
  await page.locator('#f-reason').fill(seed.reason_filter);
  await page.locator('#f-search').click();
  await until('the filtered list', async () => (await page.locator('#dead-count').textContent()).startsWith(seed.reason_count + ' dead'));
  await page.locator('#requeue-filter').click();
  await until('the confirmation', () => page.locator('#confirm').isVisible());
  assert.match(await page.locator('#confirm-text').textContent(), new RegExp('Requeue all ' + seed.reason_count + ' dead messages'));
  await page.locator('#confirm-ok').click();
  await until('the filter requeued', async () => new RegExp('Requeued ' + seed.reason_count + ' messages').test(await page.locator('#notice').textContent()));

  const total = seed.counts.sent + seed.counts.dead;
  await until('every dead row sent', async () => (await countOf('sent')) === fmt(total) && (await countOf('dead')) === '0', 60000);
  await page.locator('#f-reason').fill('');
  await page.locator('#f-search').click();
  assert.deepEqual(problems, []);
  console.log('browser test passed');
} finally {
  await browser.close();
}
