// until polls fn (which may throw) until it returns a truthy value, for up to ms; it fails
// naming what it waited for, with the last error.
export async function until(what, fn, ms = 30000) {
  const end = Date.now() + ms;
  let last;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) { last = e; }
    if (Date.now() > end) throw new Error('timed out waiting for ' + what + (last ? ': ' + last.message : ''));
    await new Promise((r) => setTimeout(r, 100));
  }
}
