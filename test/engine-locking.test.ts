/** Interruption and the workspace lock: SIGKILL mid-write, two concurrent runs, a dead owner, SIGINT. */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { bootId, processStartTime } from '../engine/workspace-lock.ts';
import { actions, Rig } from './fixtures/engine/rig.ts';

let rig: Rig;
beforeEach(() => {
  rig = new Rig();
});
afterEach(() => rig.cleanup());

/** A pid that surely belongs to no live process. */
function deadPid(): number {
  return Number(execFileSync('sh', ['-c', 'echo $$']).toString().trim());
}

describe('interruption and locking', () => {
  test('a stage killed with SIGKILL mid-write leaves the last good outputs and lock intact; the next run recovers', async () => {
    await rig.run('all');
    const lock = rig.read('.ternforge/tiny/lock.json');
    const outputs = rig.read('.ternforge/tiny/b/outputs/result.json');
    const evidence = rig.read('.ternforge/tiny/b/evidence.json');
    rig.setParams('b', { value: 'b2', sleepMs: 60_000 });
    const { child, done } = rig.start(['all']);
    await rig.waitForMarker('b');
    // The stage has written part of its outputs into its temp dir.
    expect(readdirSync(join(rig.workdir, '.ternforge', 'tmp')).some((d) => d.startsWith('b-'))).toBe(true);
    child.kill('SIGKILL');
    expect((await done).signal).toBe('SIGKILL');
    expect(rig.read('.ternforge/tiny/lock.json')).toBe(lock);
    expect(rig.read('.ternforge/tiny/b/outputs/result.json')).toBe(outputs);
    expect(rig.read('.ternforge/tiny/b/evidence.json')).toBe(evidence);
    expect(rig.exists('.ternforge/run.lock')).toBe(true);
    const status = await rig.run('status');
    expect(status.stdout).toBe('fresh  a\nstale  b\nstale  c\nfresh  d\n');

    rig.setParams('b', { value: 'b2' });
    const next = await rig.json('all');
    expect(next.code).toBe(0);
    expect(next.stderr).toContain(`taking over the workspace lock of dead process ${child.pid} (tsx pipeline.ts all, since `);
    expect(actions(next)).toEqual({ a: 'fresh', b: 'ran', c: 'ran', d: 'fresh' });
    expect(readdirSync(join(rig.workdir, '.ternforge', 'tmp'))).toEqual([]);
    expect(rig.exists('.ternforge/run.lock')).toBe(false);
    expect(JSON.parse(rig.read('.ternforge/tiny/b/outputs/result.json')).value).toBe('b2');
  });

  test('two concurrent runs: the second fails clearly, or waits with --wait', async () => {
    rig.setParams('a', { value: 1, sleepMs: 100_000 });
    const first = rig.start(['all']);
    await rig.waitForMarker('a');
    const second = await rig.run('all');
    expect(second.code).toBe(1);
    const lockPath = join(rig.workdir, '.ternforge', 'run.lock');
    expect(second.stderr).toMatch(
      new RegExp(`^error: the workspace is locked by pid ${first.child.pid} \\(tsx pipeline\\.ts all\\) since \\d{4}-\\d\\d-\\d\\dT[0-9:.]+Z\\n  lock file: ${lockPath.replace(/[.]/g, '\\.')}\\n  wait for it with --wait, or stop that process\\n$`),
    );
    const waiting = rig.start(['all', '--wait', '--json']);
    let stderr = '';
    waiting.child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    while (!stderr.includes('waiting for')) await sleep(50);
    expect(stderr).toContain(`waiting for the workspace lock held by pid ${first.child.pid} (tsx pipeline.ts all, since `);
    writeFileSync(join(rig.markers, 'a.release'), '');
    expect((await first.done).code).toBe(0);
    const waiter = await waiting.done;
    expect(waiter.code).toBe(0);
    expect(actions(JSON.parse(waiter.stdout))).toEqual({ a: 'fresh', b: 'fresh', c: 'fresh', d: 'fresh' });
  });

  test("a dead owner's lock is taken over", async () => {
    const pid = deadPid();
    mkdirSync(join(rig.workdir, '.ternforge'), { recursive: true });
    writeFileSync(join(rig.workdir, '.ternforge', 'run.lock'), JSON.stringify({ pid, hostname: hostname(), command: 'tsx pipeline.ts all', since: '2020-01-01T00:00:00.000Z' }));
    const r = await rig.json('all');
    expect(r.code).toBe(0);
    expect(r.stderr.split('\n')[0]).toBe(`taking over the workspace lock of dead process ${pid} (tsx pipeline.ts all, since 2020-01-01T00:00:00.000Z)`);
    expect(existsSync(join(rig.workdir, '.ternforge', 'run.lock'))).toBe(false);
  });

  test('a lock naming a live but unrelated process (pid reused, or an earlier boot) is taken over; its real owner keeps it', async () => {
    const sleeper = spawn('sleep', ['60'], { stdio: 'ignore' });
    try {
      const pid = sleeper.pid!;
      const started = processStartTime(pid)!;
      expect(started).toMatch(/^[0-9]+$/);
      const lock = join(rig.workdir, '.ternforge', 'run.lock');
      mkdirSync(join(rig.workdir, '.ternforge'), { recursive: true });
      const base = { pid, hostname: hostname(), command: 'tsx pipeline.ts all', since: '2020-01-01T00:00:00.000Z' };
      // The pid is alive, but its start time is not the lock owner's: a reused pid.
      writeFileSync(lock, JSON.stringify({ ...base, start_time: String(Number(started) + 1), boot_id: bootId() }));
      const r = await rig.json('all');
      expect(r.code).toBe(0);
      expect(r.stderr.split('\n')[0]).toBe(`taking over the workspace lock of process ${pid}, now another process (started at tick ${started}, not ${Number(started) + 1}) (tsx pipeline.ts all, since 2020-01-01T00:00:00.000Z)`);
      // Written in another boot: whatever the pid is now, it is not the owner.
      writeFileSync(lock, JSON.stringify({ ...base, start_time: started, boot_id: '00000000-0000-0000-0000-000000000000' }));
      const r2 = await rig.json('all');
      expect(r2.code).toBe(0);
      expect(r2.stderr.split('\n')[0]).toBe(`taking over the workspace lock of process ${pid} of an earlier boot (tsx pipeline.ts all, since 2020-01-01T00:00:00.000Z)`);
      // The same live process, same start time, same boot: the lock holds.
      writeFileSync(lock, JSON.stringify({ ...base, start_time: started, boot_id: bootId() }));
      const r3 = await rig.run('all');
      expect(r3.code).not.toBe(0);
      expect(r3.stderr).toContain(`the workspace is locked by pid ${pid}`);
      expect(existsSync(lock)).toBe(true);
      expect(sleeper.exitCode).toBeNull();
    } finally {
      sleeper.kill('SIGKILL');
    }
  });

  test("another host's lock is never taken over, even with a pid dead here and another boot id", async () => {
    const lock = join(rig.workdir, '.ternforge', 'run.lock');
    mkdirSync(join(rig.workdir, '.ternforge'), { recursive: true });
    const other = `not-${hostname()}.example`;
    const text = JSON.stringify({ pid: deadPid(), hostname: other, command: 'tsx pipeline.ts all', since: '2020-01-01T00:00:00.000Z', start_time: '1', boot_id: '00000000-0000-0000-0000-000000000000' });
    writeFileSync(lock, text);
    const r = await rig.run('all');
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`error: the workspace is locked by pid ${JSON.parse(text).pid} on host ${other} (tsx pipeline.ts all) since 2020-01-01T00:00:00.000Z`);
    expect(r.stderr).toContain('a lock of another host is never taken over from here');
    expect(r.stderr).not.toContain('taking over');
    expect(readFileSync(lock, 'utf8')).toBe(text); // untouched
    expect(existsSync(join(rig.markers, 'a.started'))).toBe(false);
  });

  test('SIGINT aborts the stage, removes its temp dir, releases the lock and exits 130', async () => {
    await rig.run('all');
    const lock = rig.read('.ternforge/tiny/lock.json');
    rig.setParams('c', { value: 'c2', sleepMs: 60_000 });
    const { child, done } = rig.start(['all']);
    await rig.waitForMarker('c');
    child.kill('SIGINT');
    const r = await done;
    expect(r.code).toBe(130);
    expect(r.stderr).toContain('error: interrupted during stage c; its previous outputs and lock entry are untouched\n');
    expect(rig.read('.ternforge/tiny/lock.json')).toBe(lock);
    expect(readdirSync(join(rig.workdir, '.ternforge', 'tmp')).filter((d) => d.startsWith('c-'))).toEqual([]);
    expect(rig.exists('.ternforge/run.lock')).toBe(false);
  });
});
