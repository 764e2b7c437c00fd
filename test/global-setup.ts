/**
 * One real `tiny` build to `report` for the whole suite (the longest part of it: serve.sh installs the
 * wheels and smoke-serve serves 16 requests). The emit, smoke-serve, eval and report tests check that
 * build instead of making one each. Set TERNFORGE_TINY_BUILD to a workdir to reuse (and keep) a build.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const root = join(import.meta.dirname, '..');

export default function setup(): () => void {
  const given = process.env.TERNFORGE_TINY_BUILD;
  const workdir = given ?? mkdtempSync(join(tmpdir(), 'ternforge-tiny-build-'));
  const venv = process.env.TERNFORGE_VENV || join(root, '.ternforge', 'venv');
  const t0 = Date.now();
  const cli = spawnSync(process.execPath, ['--import', 'tsx', join(root, 'pipeline.ts'), 'report', '--profile', 'tiny', '--workdir', workdir], {
    cwd: root,
    encoding: 'utf8',
    env: { ...process.env, TERNFORGE_VENV: venv },
    timeout: 900_000,
    maxBuffer: 64 * 2 ** 20,
  });
  if (cli.status !== 0) throw new Error(`the shared tiny build failed (${cli.status}):\n${cli.stdout}\n${cli.stderr.slice(-8000)}`);
  // A warning Node prints (a listener leak, a deprecation) is a defect of ours, caught here on a real run.
  const warnings = cli.stderr.split('\n').filter((l) => /^\(node:\d+\) \w*Warning/.test(l));
  if (warnings.length > 0) throw new Error(`the shared tiny build printed Node warnings:\n${warnings.join('\n')}`);
  process.stderr.write(`shared tiny build in ${workdir}: ${((Date.now() - t0) / 1000).toFixed(0)} s\n`);
  // The test workers inherit these.
  process.env.TERNFORGE_TINY_BUILD = workdir;
  process.env.TERNFORGE_EMIT_TEST_WORKDIR = workdir;
  process.env.TERNFORGE_REPORT_TEST_WORKDIR = workdir;
  return () => {
    if (given === undefined) rmSync(workdir, { recursive: true, force: true });
  };
}
