// Drives the dashboard's replay of a running `outbox-relay run` in Debian's headless Chromium.
// Started by internal/dashboard's TestBrowserReplay, which seeds and sends an order's events
// and checks the broker and the rows afterwards. Inputs (environment):
//   BASE_URL     the dashboard, e.g. http://127.0.0.1:9464/ui/
//   ADMIN_TOKEN  the relay's http.admin_token
//   SEED         JSON: {table, order, one, events}
//   SHOTS        a folder for screenshots (optional)
//   CHROMIUM     the browser (default /usr/bin/chromium)
import { launchChromium } from './chromium.mjs';
import { until } from './poll.mjs';
import assert from 'node:assert/strict';
import path from 'node:path';

const base = process.env.BASE_URL;
const seed = JSON.parse(process.env.SEED);
const shots = process.env.SHOTS || '';

function step(what) { console.log('step: ' + what); }

// confirmed waits for the confirmation dialog, checks its text and accepts it.
async function confirmed(page, re) {
  await until('the confirmation', () => page.locator('#confirm').isVisible());
  assert.match(await page.locator('#confirm-text').textContent(), re);
  await page.locator('#confirm-ok').click();
}

const browser = await launchChromium();
try {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await ctx.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  // 409 is the server asking to confirm the dry run's count.
  page.on('console', (m) => { if (m.type() === 'error' && !/status of 409 /.test(m.text())) problems.push('console error: ' + m.text()); });
  await page.goto(base);

  step('with the admin token, a sent message\'s page offers its replay');
  await page.locator('#token').fill(process.env.ADMIN_TOKEN);
  await page.locator('#token-use').click();
  await until('the admin mode', async () => /admin/.test(await page.locator('#mode').textContent()));
  await page.locator('#x-table').selectOption({ label: seed.table });
  await page.locator('#x-by').selectOption('msg_id');
  await page.locator('#x-value').fill(seed.one);
  await page.locator('#x-search').click();
  await until('the message', async () => (await page.locator('#r-msgid').textContent()) === seed.one && page.locator('#row').isVisible());
  assert.equal(await page.locator('#r-replay').isVisible(), true);

  step('the dry run\'s count is confirmed, then the message is replayed and its timeline shows it');
  await page.locator('#r-replay').click();
  await confirmed(page, /Replay 1 sent message of .* Dry run: 1 counted/);
  await until('the replay\'s end', async () => /done: sent 1 of 1 counted/.test(await page.locator('#x-notice').textContent()));
  await until('the replayed step', async () => (await page.locator('#r-timeline li[data-step="replayed"]').count()) === 1);
  assert.match(await page.locator('#r-timeline li[data-step="replayed"]').textContent(), /re-published by dashboard replay r[0-9a-f]+/);
  if (shots) await page.locator('#find-section').screenshot({ path: path.join(shots, 'dashboard-replay.png') });

  step('the order\'s events are replayed by the search\'s filter, after the count');
  await page.locator('#x-by').selectOption('key');
  await page.locator('#x-value').fill(seed.order);
  await page.locator('#x-replay').click();
  await confirmed(page, new RegExp('Replay ' + seed.events + ' sent messages of .* Dry run: ' + seed.events + ' counted'));
  await until('the replay\'s end', async () => new RegExp('done: sent ' + seed.events + ' of ' + seed.events + ' counted').test(await page.locator('#x-notice').textContent()));
  assert.deepEqual(problems, []);
  console.log('browser test passed (replay)');
} finally {
  await browser.close();
}
