// Drives the broker panel and the message explorer of a running `outbox-relay run` in Debian's
// headless Chromium. Started twice by internal/dashboard's TestBrowserExplorer, which seeds the
// database, runs the relay and the broker, and stops the broker between the two acts. Inputs
// (environment):
//   BASE_URL  the dashboard, e.g. http://127.0.0.1:9464/ui/
//   ACT       "explore" (broker up) or "outage" (broker stopped, a topic refused)
//   SEED      JSON: explore: {table, other, order, handed, sent}; outage: {table, broker, access_key, secret}
//   SHOTS     a folder for screenshots (optional)
//   CHROMIUM  the browser (default /usr/bin/chromium)
import { launchChromium } from './chromium.mjs';
import { until } from './poll.mjs';
import assert from 'node:assert/strict';
import path from 'node:path';

const base = process.env.BASE_URL;
const act = process.env.ACT;
const seed = JSON.parse(process.env.SEED);
const shots = process.env.SHOTS || '';

function step(what) { console.log('step: ' + what); }

async function shot(page, name, locator) {
  if (shots) await (locator || page).screenshot({ path: path.join(shots, 'dashboard-' + name + '.png') });
}

async function explore(page) {
  const card = page.locator(`article[data-table="${seed.table}"]`);
  step('the broker panel shows the name server and the broker healthy');
  await until('a healthy broker', async () => (await page.locator('#b-table tr[data-state="healthy"]').count()) === 2);
  assert.equal(await page.locator('#b-summary').textContent(), 'healthy');

  step('the broker audit runs for both tables, from the relay\'s own counts');
  for (const t of [seed.table, seed.other]) {
    await until('the audit of ' + t, async () => (await page.locator(`#a-table tr[data-audit$="/${t}"][data-state="on"]`).count()) === 1);
  }
  assert.equal(await page.locator('#a-summary').textContent(), 'on');
  assert.equal(await page.locator(`#a-table tr[data-audit$="/${seed.table}"] td`).nth(8).textContent(), '', 'an audit that runs says why it is off');

  step('handed rows are counted, and the chart counts what this relay sent');
  await until('the handed count', async () => (await card.locator('[data-count="handed"] b').textContent()) === String(seed.handed));
  assert.match(await card.locator('[data-activity]').textContent(), new RegExp('this relay, last 60 min:\\s*' + seed.sent + ' sent'));
  assert.match(await card.locator('[data-table-activity]').textContent(), /the table, all relays/);

  step('handed rows are found by their status');
  await page.locator('#x-by').selectOption('');
  await page.locator('#x-status').selectOption('4');
  await page.locator('#x-search').click();
  await until('the handed rows', async () => (await page.locator('#x-results tbody tr').count()) === seed.handed);
  assert.equal(await page.locator('#x-results tbody .state.handed').count(), seed.handed);

  step('the order number finds its events in every table, in any status');
  await page.locator('#x-status').selectOption('');
  await page.locator('#x-by').selectOption('key');
  await page.locator('#x-value').fill(seed.order);
  await page.locator('#x-search').click();
  // The handed rows stay listed until the answer comes: wait for the order's own rows.
  await until('the order\'s rows', async () => (await page.locator('#x-results tbody tr[data-msg-id="payment-1001"]').count()) === 1 &&
    (await page.locator('#x-results tbody tr').count()) === 3);
  const tables = await page.locator('#x-results tbody tr td:first-child').allTextContents();
  assert.deepEqual([...new Set(tables)].sort(), [seed.other, seed.table].sort());
  assert.match(await page.locator('#x-notice').textContent(), /3 messages found \(rows created in the window/);

  step('a message\'s page shows its timeline and body, as text');
  await page.locator('tr[data-msg-id="order-paid-1001"]').click();
  await until('the timeline', () => page.locator('#row').isVisible());
  await until('the paid event', async () => (await page.locator('#r-msgid').textContent()) === 'order-paid-1001');
  const steps = await page.locator('#r-timeline li').evaluateAll((lis) => lis.map((li) => li.dataset.step));
  assert.deepEqual(steps, ['written', 'failed', 'sent', 'stored', 'audit']);
  assert.match(await page.locator('#r-timeline li[data-step="failed"]').textContent(), /no retry spent/);
  assert.match(await page.locator('#r-timeline li[data-step="stored"]').textContent(), /stored at broker \S+, queue \d+, offset \d+ \(commit log offset \d+\), topic orders/);
  assert.match(await page.locator('#r-body').textContent(), /"event":"paid"/);
  assert.equal(await page.locator('#row img, #r-body *').count(), 0, 'data became elements');
  assert.equal(await page.evaluate(() => window.__pwned), undefined, 'a script from the data ran');
  await page.locator('#row').scrollIntoViewIfNeeded();
  await shot(page, 'timeline', page.locator('#find-section'));
}

async function outage(page) {
  const card = page.locator(`article[data-table="${seed.table}"]`);
  const row = page.locator(`#b-table tr[data-broker="${seed.broker}"]`);
  step('the broker panel shows the broker failing, its circuit open, and the table\'s incident');
  await until('the failing broker', async () => (await row.getAttribute('data-state')) === 'failing');
  await until('the open circuit', async () => /^open since/.test(await row.locator('td').nth(5).textContent()));
  assert.ok((await row.locator('td').nth(7).textContent()).length > 0, 'no last error');
  await until('the incident', async () => (await page.locator('#b-notes li[data-incident]').count()) > 0);
  assert.match(await page.locator('#b-notes li[data-incident]').first().textContent(), /failing for .* rows wait, no retry spent; last error: /);
  assert.match(await page.locator('#b-summary').textContent(), /^trouble/);

  step('the refused topic names the access key, never the secret');
  const refusal = page.locator('#b-notes li[data-refusal="payments"]');
  await until('the refusal', async () => (await refusal.count()) === 1);
  assert.match(await refusal.textContent(), new RegExp('access key "' + seed.access_key + '"'));
  const html = await page.content();
  assert.ok(!html.includes(seed.secret), 'the secret key is on the page');

  step('the chart counts the failed attempts');
  await until('failed attempts in the chart', async () => {
    const m = /(\d+) failed attempts/.exec(await card.locator('[data-activity]').textContent());
    return m && Number(m[1]) > 0;
  });
  await shot(page, 'broker-outage');
}

const browser = await launchChromium();
try {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await ctx.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  page.on('console', (m) => { if (m.type() === 'error') problems.push('console error: ' + m.text()); });
  await page.goto(base);
  if (act === 'explore') await explore(page); else await outage(page);
  assert.deepEqual(problems, []);
  console.log('browser test passed (' + act + ')');
} finally {
  await browser.close();
}
