/**
 * `npm run verify-repro [-- --target <stage>] [--profile tiny] [--keep]`: two clean builds of one profile
 * from this checkout, in two fresh temp workdirs (the venv is shared through TERNFORGE_VENV, so none is
 * rebuilt), then a stage-by-stage comparison of outputs and evidence records that masks only the declared
 * volatile fields (lib/report/repro.ts). Prints what is identical, what was equal only after masking (and
 * which mask), and what differs. Exit 0 when nothing differs, 1 otherwise, 2 when a build fails.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { compareBuilds, describeComparison, type Build } from '../lib/report/repro.ts';

const root = join(import.meta.dirname, '..');

export interface ReproOptions {
  profile: string;
  target: string;
  /** Keep the two workdirs (printed) instead of deleting them. */
  keep: boolean;
  log: (line: string) => void;
}

/** Build `target` in a fresh workdir; returns the workdir, or the CLI's output on failure. */
export function cleanBuild(profile: string, target: string, label: string): { ok: true; workdir: string } | { ok: false; workdir: string; output: string } {
  const workdir = mkdtempSync(join(tmpdir(), `ternforge-repro-${label}-`));
  const venv = process.env.TERNFORGE_VENV || join(root, '.ternforge', 'venv');
  const r = spawnSync(process.execPath, ['--import', 'tsx', join(root, 'pipeline.ts'), target, '--profile', profile, '--workdir', workdir], {
    cwd: root,
    encoding: 'utf8',
    env: { ...process.env, TERNFORGE_VENV: venv },
    maxBuffer: 64 * 2 ** 20,
  });
  if (r.status !== 0) return { ok: false, workdir, output: `${r.stdout}\n${r.stderr}`.slice(-4000) };
  return { ok: true, workdir };
}

export function verifyRepro(o: ReproOptions): number {
  const builds: Build[] = [];
  try {
    for (const label of ['a', 'b']) {
      const t0 = performance.now();
      o.log(`build ${label}: ${o.target} (${o.profile}) in a clean workdir...`);
      const b = cleanBuild(o.profile, o.target, label);
      builds.push({ workdir: b.workdir, profile: o.profile });
      if (!b.ok) {
        o.log(`build ${label} failed:\n${b.output}`);
        return 2;
      }
      o.log(`build ${label}: ${b.workdir} (${((performance.now() - t0) / 1000).toFixed(0)} s)`);
    }
    const entries = compareBuilds(builds[0]!, builds[1]!);
    o.log(describeComparison(entries));
    return entries.some((e) => e.status !== 'identical' && e.status !== 'volatile') ? 1 : 0;
  } finally {
    if (o.keep) o.log(`kept: ${builds.map((b) => b.workdir).join(' ')}`);
    else for (const b of builds) rmSync(b.workdir, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const args = process.argv.slice(2);
  const opt = (name: string, dflt: string): string => {
    const i = args.indexOf(name);
    return i >= 0 && args[i + 1] !== undefined ? args[i + 1]! : dflt;
  };
  process.exitCode = verifyRepro({ profile: opt('--profile', 'tiny'), target: opt('--target', 'report'), keep: args.includes('--keep'), log: (l) => process.stdout.write(`${l}\n`) });
}
