/**
 * Evidence holds no path of the build machine: every file of the shared tiny build's evidence (the
 * workdir's `evidence/`, each stage's `.ternforge/tiny/<stage>/evidence.json`, and `dist/tiny/evidence/`)
 * is read whole (keyData, logs, summaries, smoke.json's environment, the server's start-up report, the
 * wheel proof's command lines) and must not name the repository, the workdir, the Python venv, the
 * interpreter's installation, the home directory or the temp directory. Two builds on two machines then
 * differ only where their work did.
 *
 * Reads the build made by test/global-setup.ts ($TERNFORGE_TINY_BUILD).
 */
import { existsSync, readdirSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { describe, expect, test } from 'vitest';
import { venvPython } from '../engine/venv.ts';

const root = join(import.meta.dirname, '..');
const workdir = process.env.TERNFORGE_TINY_BUILD!;
const venv = process.env.TERNFORGE_VENV || join(root, '.ternforge', 'venv');

/** Every regular file under dir (symlinks followed, as a reviewer reading the tree would). */
function filesUnder(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir)) {
    const p = join(dir, e);
    if (statSync(p).isDirectory()) out.push(...filesUnder(p));
    else out.push(p);
  }
  return out;
}

/** The evidence files of the build: the three places a reviewer reads. */
function evidenceFiles(): string[] {
  const stages = join(workdir, '.ternforge', 'tiny');
  const records = readdirSync(stages).map((s) => join(stages, s, 'evidence.json')).filter((f) => existsSync(f));
  return [...filesUnder(join(workdir, 'evidence')), ...records, ...filesUnder(join(workdir, 'dist', 'tiny', 'evidence'))];
}

/** The base interpreter's directory of the venv (pyvenv.cfg `home`): where Python is installed here. */
function pythonHome(): string | null {
  const cfg = join(venv, 'pyvenv.cfg');
  if (!existsSync(cfg)) return null;
  return /^home\s*=\s*(.+)$/m.exec(readFileSync(cfg, 'utf8'))?.[1]?.trim() ?? null;
}

/** The absolute paths of this machine that must not appear, each with its real path too. */
function hostPaths(): Array<[string, string]> {
  const named: Array<[string, string | null]> = [
    ['repository', root],
    ['workdir', workdir],
    ['venv', venv],
    ['python installation', pythonHome() === null ? null : dirname(pythonHome()!)],
    ['home', homedir()],
    ['temp', tmpdir()],
  ];
  const out: Array<[string, string]> = [];
  for (const [what, p] of named) {
    if (p === null || p.length <= 1) continue;
    out.push([what, p]);
    if (existsSync(p) && realpathSync(p) !== p) out.push([`${what} (real path)`, realpathSync(p)]);
  }
  return out;
}

/**
 * Whether text names path as an absolute path: not continuing a name before it (`.ternforge/tmp`,
 * `<workdir>/tmp`, `~/tmp` are not the temp directory), and followed by `/`, a quote, whitespace, `:` or the end.
 */
function names(text: string, path: string): boolean {
  const esc = path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(`(?<![\\w.>~-])${esc}(?=[/"'\\s:,)]|$)`).test(text);
}

describe('evidence of a tiny build holds no path of the build machine', () => {
  test('the build is there and has evidence in all three places', () => {
    expect(workdir, 'TERNFORGE_TINY_BUILD is set by the global setup').toBeTruthy();
    const files = evidenceFiles();
    for (const must of ['evidence/smoke/smoke.json', 'evidence/smoke/startup-report.json', 'evidence/records/vendor-wheels.json', 'evidence/records/python-env.json', '.ternforge/tiny/smoke-serve/evidence.json', 'dist/tiny/evidence/smoke/smoke.json']) {
      expect(files, must).toContain(join(workdir, must));
    }
    // The interpreter really lives somewhere this test can name (else the check below proves less).
    expect(existsSync(venvPython(venv))).toBe(true);
  });

  test('no evidence file names the repository, workdir, venv, Python installation, home or temp directory', () => {
    const hosts = hostPaths();
    const found: string[] = [];
    for (const f of evidenceFiles()) {
      const text = readFileSync(f, 'utf8');
      for (const [what, p] of hosts) if (names(text, p)) found.push(`${f.slice(workdir.length + 1)}: the ${what} ${p}`);
    }
    expect(found).toEqual([]);
  });

  test('a placeholder stands only for a whole path (never `.ternforge<tmp>` from a partial match)', () => {
    const found: string[] = [];
    for (const f of evidenceFiles()) {
      const m = /[\w.-]<(?:workdir|venv|tmp|scratch|python)>/.exec(readFileSync(f, 'utf8'));
      if (m !== null) found.push(`${f.slice(workdir.length + 1)}: ${m[0]}`);
    }
    expect(found).toEqual([]);
  });

  test('smoke.json keeps the names of the environment serve.sh got, with placeholders for the places', () => {
    const smoke = JSON.parse(readFileSync(join(workdir, 'evidence', 'smoke', 'smoke.json'), 'utf8')) as { environment: Record<string, string> };
    expect(Object.keys(smoke.environment).sort()).toEqual(['HOME', 'LANG', 'PATH', 'PORT', 'TERNFORGE_STARTUP_REPORT', 'TMPDIR']);
    expect(smoke.environment.HOME).toBe('<scratch>/home');
    expect(smoke.environment.TMPDIR).toBe('<scratch>/tmp');
    expect(smoke.environment.TERNFORGE_STARTUP_REPORT).toBe('<scratch>/startup-report.json');
    const report = JSON.parse(readFileSync(join(workdir, 'evidence', 'smoke', 'startup-report.json'), 'utf8')) as { submission: string };
    expect(report.submission).toBe('<scratch>/submission');
  });

  test('the check itself sees a leak: a file naming the workdir is caught', () => {
    const leak = JSON.stringify({ dir: join(workdir, 'dist') });
    expect(hostPaths().some(([, p]) => names(leak, p))).toBe(true);
    expect(names('"<workdir>/dist"', workdir)).toBe(false);
    expect(names('/tmpfoo', '/tmp')).toBe(false);
    expect(names('"<workdir>/.ternforge/tmp/x"', '/tmp')).toBe(false);
    expect(names('--find-links /tmp/x', '/tmp')).toBe(true);
  });
});
