// Keeps the dashboard open in headless Chromium for SECONDS_OPEN seconds, letting it refresh
// itself, for BenchmarkDashboardCost. Inputs: BASE_URL, SECONDS_OPEN, CHROMIUM.
import { launchChromium } from './chromium.mjs';

const browser = await launchChromium();
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
  let refreshes = 0;
  page.on('response', (r) => { if (r.url().endsWith('/api/overview')) refreshes++; });
  await page.goto(process.env.BASE_URL);
  await page.locator('article[data-table]').first().waitFor();
  console.log('page open');
  await new Promise((r) => setTimeout(r, Number(process.env.SECONDS_OPEN || 60) * 1000));
  console.log(refreshes + ' overview refreshes');
} finally {
  await browser.close();
}
