// launchChromium starts Debian's Chromium (CHROMIUM, default /usr/bin/chromium) headless
// through playwright-core; Playwright's own browser downloads are never used.
import { chromium } from 'playwright-core';

export function launchChromium() {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--no-first-run'],
  });
}
