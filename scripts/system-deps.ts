// The Debian packages the test suite needs, installed when missing: `npm test` runs this first (pretest),
// so README's test command works on a fresh machine, and `.ci/run` needs no list of its own.
//   chromium    renders evidence/report.html in test/report.test.ts
//   bubblewrap  the code sandbox that runs model-written code in the eval stage (lib/eval/code-sandbox.ts)
// Without root or apt-get it names what is missing and exits 1; it never lets a test skip silently.
import { existsSync } from 'node:fs';
import { spawnSync } from 'node:child_process';

export const SYSTEM_PACKAGES: ReadonlyArray<{ pkg: string; binary: string }> = [
  { pkg: 'chromium', binary: '/usr/bin/chromium' },
  { pkg: 'bubblewrap', binary: '/usr/bin/bwrap' },
];

const missing = SYSTEM_PACKAGES.filter((p) => !existsSync(p.binary));
if (missing.length > 0) {
  const names = missing.map((p) => p.pkg);
  const canApt = process.getuid?.() === 0 && spawnSync('apt-get', ['--version']).status === 0;
  if (!canApt) {
    console.error(`error: the tests need Debian packages that are missing: ${names.join(', ')}\n` +
      `  install them with: sudo apt-get install -y ${names.join(' ')}`);
    process.exit(1);
  }
  console.log(`system-deps: installing ${names.join(', ')} with apt-get`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  for (const args of [['update', '-qq'], ['install', '-y', '-qq', ...names]]) {
    const r = spawnSync('apt-get', args, { stdio: ['ignore', 'ignore', 'inherit'], env });
    if (r.status !== 0) {
      console.error(`error: apt-get ${args.join(' ')} failed (exit ${r.status ?? r.signal})`);
      process.exit(1);
    }
  }
  const still = missing.filter((p) => !existsSync(p.binary));
  if (still.length > 0) {
    console.error(`error: after apt-get install, still missing: ${still.map((p) => p.binary).join(', ')}`);
    process.exit(1);
  }
}
