// Drives the dashboard of a relay serving two databases (shop-a and shop-b, each with a dead
// row of the same msg_id) in Debian's headless Chromium. Started by internal/dashboard's
// TestBrowserTwoDatabases, which checks afterwards that only shop-b's row was requeued and
// delivered. Inputs (environment): BASE_URL, ADMIN_TOKEN, SEED (JSON: {table, msg_id}),
// CHROMIUM.
import { launchChromium } from './chromium.mjs';
import { until } from './poll.mjs';
import assert from 'node:assert/strict';

const base = process.env.BASE_URL;
const seed = JSON.parse(process.env.SEED);

const browser = await launchChromium();
try {
  const page = await (await browser.newContext()).newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  page.on('console', (m) => { if (m.type() === 'error') problems.push('console error: ' + m.text()); });
  await page.goto(base);

  console.log('step: a card per database and table, named by both');
  const card = (db) => page.locator(`article[data-database="${db}"][data-table="${seed.table}"]`);
  await until('both cards', async () => (await card('shop-a').count()) === 1 && (await card('shop-b').count()) === 1);
  assert.equal(await card('shop-b').locator('h2').textContent(), 'shop-b / ' + seed.table);
  assert.match(await page.locator('#where').textContent(), /2 databases: shop-a \(.*\), shop-b \(/);
  const options = await page.locator('#f-table option').allTextContents();
  assert.deepEqual(options, ['shop-a / ' + seed.table, 'shop-b / ' + seed.table]);

  console.log("step: shop-b's dead row is listed and requeued in shop-b");
  await page.locator('#f-table').selectOption('shop-b/' + seed.table);
  const row = page.locator(`tr[data-msg-id="${seed.msg_id}"]`);
  await until('the dead row of shop-b', () => row.count());
  await row.click();
  await until('the body of shop-b', async () => (await page.locator('#d-body').textContent()) === 'from shop-b');
  await page.locator('#token').fill(process.env.ADMIN_TOKEN);
  await page.locator('#token-use').click();
  await page.locator('#requeue-one').click();
  await until('the requeue', async () => /Requeued 1 message/.test(await page.locator('#notice').textContent()));
  await until("shop-b's row sent", async () => (await card('shop-b').locator('[data-count="sent"] b').textContent()) === '1');
  assert.equal(await card('shop-a').locator('[data-count="dead"] b').textContent(), '1');
  assert.deepEqual(problems, []);
  console.log('browser test passed');
} finally {
  await browser.close();
}
