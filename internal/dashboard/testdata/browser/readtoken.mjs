// Drives the dashboard as a relay off loopback serves it, with http.read_token set:
// the dead list and bodies need the token; entered in the page, they load, and a hostile body
// and reason still render as text. Started by internal/dashboard's TestBrowserReadToken.
// Inputs (environment): BASE_URL, READ_TOKEN, SEED ({table, hostile: {msg_id, body, reason}}),
// CHROMIUM.
import { launchChromium } from './chromium.mjs';
import { until } from './poll.mjs';
import assert from 'node:assert/strict';

const base = process.env.BASE_URL;
const seed = JSON.parse(process.env.SEED);

function step(what) { console.log('step: ' + what); }

const browser = await launchChromium();
try {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 860 } });
  const page = await ctx.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/status of 401 /.test(m.text())) problems.push('console error: ' + m.text());
  });

  step('without the token, the dead list is refused and no body is shown');
  await page.goto(base);
  await until('the refusal', async () => /read token required/.test(await page.locator('#notice').textContent()));
  assert.equal(await page.locator(`tr[data-msg-id="${seed.hostile.msg_id}"]`).count(), 0);
  assert.equal(await page.locator('#token-form').isVisible(), true, 'the page does not ask for the token');
  assert.match(await page.locator('#mode').textContent(), /read-only/);

  step('with the read token, the list and the hostile body load, as text');
  await page.locator('#token').fill(process.env.READ_TOKEN);
  await page.locator('#token-use').click();
  const hostileRow = page.locator(`tr[data-msg-id="${seed.hostile.msg_id}"]`);
  await until('the hostile row', () => hostileRow.count());
  assert.equal(await hostileRow.locator('td.reason').textContent(), seed.hostile.reason);
  await hostileRow.click();
  await until('the body', async () => (await page.locator('#d-body').textContent()) === seed.hostile.body);
  assert.equal(await page.evaluate(() => window.__pwned), undefined, 'a script from the data ran');
  assert.equal(await page.locator('img, #d-body *, td.reason *').count(), 0, 'data became elements');
  assert.equal(await page.locator('#requeue-one').isVisible(), false, 'a read token offers requeue');
  assert.deepEqual(problems, []);
  console.log('browser test passed');
} finally {
  await browser.close();
}
