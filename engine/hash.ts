/**
 * File digests: sha256 of the raw bytes, streamed, cached by stat identity.
 *
 * The cache (`.ternforge/hash-cache.json`) maps an absolute path to (dev, ino, size, mtimeNs, ctimeNs)
 * from bigint stats plus the digest and the wall-clock moment the read began (`hashedAtNs`). An entry
 * is trusted only when the file's mtime is older than that moment minus RACY_MARGIN_NS: a rewrite in
 * the same clock tick as the read could keep every stat field equal (git's racy-index rule). To avoid
 * producing untrusted entries, a file whose mtime is that recent is read only after the margin passed.
 *
 * Small files are hashed on the main thread; big ones in a pool of worker threads (one per available
 * core), several files at once: through mmap windows when the native helper is built (engine/native/;
 * on 2 cores the read(2) copy costs about a quarter of a core), else with read(2). A mapped file that
 * another process truncates while it is hashed fails with a clear error (the helper catches the
 * SIGBUS). `hashedBytes` counts every byte read, so tests can assert a no-op run reads nothing.
 */
import { createHash } from 'node:crypto';
import { closeSync, openSync, readSync, statSync, type BigIntStats } from 'node:fs';
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import type { FileSha256 } from './digest.ts';
import { writeFileAtomicSync } from './fs-atomic.ts';
import type { HashCache } from '../schemas/generated/hash-cache.ts';
import { ENGINE_SCHEMAS, readJsonFile, type SchemaSet } from './json-io.ts';

/** Writes within this long before a read may share its clock tick (coarse kernel clocks lag ~4-10 ms). */
export const RACY_MARGIN_NS = 50_000_000n;
/** Files at least this big go to the worker pool. */
const WORKER_THRESHOLD = 4 * 1024 * 1024;
/** Read size: small enough that the bytes read are still in the core's L2 when sha256 reads them again. */
const CHUNK = 256 * 1024;
/**
 * mmap window: one map, one sha256 update, one unmap. In one series of bench:engine runs (16 x 256 MiB)
 * windows of 4-32 MiB hashed at 1.65-1.82x the single-core rate, 64 and 256 MiB at 1.54-1.56x.
 */
const WINDOW = 16 * 1024 * 1024;

type CacheEntry = HashCache['entries'][string];

/** One file's digest and size. */
export interface FileDigest {
  sha256: FileSha256;
  size: number;
}

/** Statistics of one hasher's life: what a no-op run must keep at zero. */
export interface HashStats {
  /** Bytes read and hashed (cache misses). */
  hashedBytes: number;
  /** Files hashed (cache misses). */
  hashedFiles: number;
  /** Files answered from the stat cache. */
  cachedFiles: number;
  /** Wall-clock milliseconds during which at least one file was being read and hashed. */
  busyMs: number;
  /** Of hashedBytes, those read through the native mmap helper. */
  mappedBytes: number;
}

function nowNs(): bigint {
  return BigInt(Date.now()) * 1_000_000n;
}

/**
 * Whether a cache entry still describes the file. `ctime` is compared except inside the content store
 * (`ignoreCtime`): store files are never written after they are committed, but every hard link a later
 * stage makes to them (emit, report, the published dist/ tree) bumps their ctime, which would otherwise
 * rehash every linked file on every run.
 */
function sameStat(e: CacheEntry, st: BigIntStats, ignoreCtime = false): boolean {
  return e.dev === String(st.dev) && e.ino === String(st.ino) && e.size === String(st.size) && e.mtimeNs === String(st.mtimeNs) && (ignoreCtime || e.ctimeNs === String(st.ctimeNs));
}

/**
 * The code each pool thread runs (plain CommonJS, so it needs no TypeScript loader). With the native
 * helper (`workerData.addon`, see engine/native/) a file is hashed through read-only mmap windows, so
 * sha256 reads the page cache directly; without it, or where a file cannot be mapped, through read(2)
 * into one reused buffer. The windows are unmapped as soon as they are hashed.
 */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const { createHash } = require('node:crypto');
const { openSync, readSync, closeSync, fstatSync } = require('node:fs');
const mm = workerData.addon ? require(workerData.addon) : null;
const REPORT = 64 * 1024 * 1024;
const WINDOW = ${WINDOW};
const buf = Buffer.allocUnsafe(${CHUNK});
const nextTick = () => new Promise((r) => setImmediate(r));

function viaRead(id, fd, h) {
  let size = 0, n, sinceReport = 0;
  while ((n = readSync(fd, buf, 0, buf.length, null)) > 0) {
    h.update(n === buf.length ? buf : buf.subarray(0, n));
    size += n; sinceReport += n;
    if (sinceReport >= REPORT) { parentPort.postMessage({ id, progress: sinceReport }); sinceReport = 0; }
  }
  parentPort.postMessage({ id, progress: sinceReport });
  return size;
}

async function viaMmap(id, fd, h) {
  const size = fstatSync(fd).size;
  let sinceReport = 0;
  for (let offset = 0; offset < size; offset += WINDOW) {
    const length = Math.min(WINDOW, size - offset);
    let window;
    try { window = mm.map(fd, offset, length); } catch (e) {
      if (offset === 0) return null; // cannot be mapped at all (e.g. a filesystem without mmap): read(2)
      throw e;
    }
    let lost;
    try { h.update(new Uint8Array(window)); } finally { lost = mm.unmap(window); }
    if (lost) throw new Error('the file shrank while it was hashed (another process truncated it); run again');
    sinceReport += length;
    if (sinceReport >= REPORT) {
      parentPort.postMessage({ id, progress: sinceReport }); sinceReport = 0;
      await nextTick(); // lets the unmapped windows' finalizers run
    }
  }
  parentPort.postMessage({ id, progress: sinceReport });
  return size;
}

parentPort.on('message', async ({ id, path }) => {
  try {
    const h = createHash('sha256');
    const fd = openSync(path, 'r');
    let size, mapped = false;
    try {
      size = mm ? await viaMmap(id, fd, h) : null;
      mapped = size !== null;
      if (!mapped) size = viaRead(id, fd, h);
    } finally { closeSync(fd); }
    parentPort.postMessage({ id, sha256: h.digest('hex'), size, mapped });
  } catch (e) {
    parentPort.postMessage({ id, error: String(e && e.message || e) });
  }
});
`;

type WorkerReply = { id: number; progress?: number; sha256?: string; size?: number; mapped?: boolean; error?: string };

/** A lazily started pool of hashing threads. */
class HashPool {
  readonly #size: number;
  readonly #idle: Worker[] = [];
  readonly #all: Worker[] = [];
  readonly #waiting: Array<(w: Worker) => void> = [];
  #nextId = 0;

  /** The native mmap helper each thread loads, or null to read files with read(2). */
  readonly #addon: string | null;

  constructor(size: number, addon: string | null) {
    this.#size = Math.max(1, size);
    this.#addon = addon;
  }

  async hash(path: string, onProgress: (bytes: number) => void): Promise<{ sha256: string; size: number; mapped: boolean }> {
    const worker = await this.#take();
    const id = this.#nextId++;
    try {
      return await new Promise((resolve, reject) => {
        const onMessage = (m: WorkerReply): void => {
          if (m.id !== id) return;
          if (m.progress) onProgress(m.progress);
          if (m.error !== undefined) done(() => reject(new Error(`hashing ${path}: ${m.error}`)));
          else if (m.sha256 !== undefined) done(() => resolve({ sha256: m.sha256!, size: m.size!, mapped: m.mapped === true }));
        };
        const onError = (e: Error): void => done(() => reject(e));
        const done = (f: () => void): void => {
          worker.off('message', onMessage);
          worker.off('error', onError);
          f();
        };
        worker.on('message', onMessage);
        worker.on('error', onError);
        worker.postMessage({ id, path });
      });
    } finally {
      this.#give(worker);
    }
  }

  #take(): Promise<Worker> {
    const w = this.#idle.pop();
    if (w !== undefined) return Promise.resolve(w);
    if (this.#all.length < this.#size) {
      const created = new Worker(WORKER_SOURCE, { eval: true, workerData: { addon: this.#addon } });
      created.unref();
      this.#all.push(created);
      return Promise.resolve(created);
    }
    return new Promise((resolve) => this.#waiting.push(resolve));
  }

  #give(w: Worker): void {
    const next = this.#waiting.shift();
    if (next !== undefined) next(w);
    else this.#idle.push(w);
  }

  async close(): Promise<void> {
    await Promise.all(this.#all.map((w) => w.terminate()));
    this.#all.length = 0;
    this.#idle.length = 0;
  }
}

/** A file hasher with a persisted stat cache. One per run. */
export class FileHasher {
  readonly #cachePath: string;
  readonly #schemas: SchemaSet;
  readonly #entries: Record<string, CacheEntry>;
  readonly #pool: HashPool;
  readonly #inflight = new Map<string, Promise<FileDigest>>();
  #dirty = false;
  /** How big files are read: through the native mmap helper, or with read(2). */
  readonly hashIo: 'mmap' | 'read';
  readonly stats: HashStats = { hashedBytes: 0, hashedFiles: 0, cachedFiles: 0, busyMs: 0, mappedBytes: 0 };
  #reading = 0;
  #busySince = 0;
  /** Progress line on stderr while big files are hashed (only when stderr is a terminal). */
  readonly #progress: { total: number; done: number; files: number; shown: boolean };

  /** Directory prefix of the immutable content store (see sameStat). */
  readonly #storePrefix: string | undefined;

  /**
   * `poolSize`: hashing threads (default: one per core). `storeDir`: the content store (see sameStat).
   * `addon`: the native mmap helper's path (engine/native/addon.ts), or null (default) for read(2).
   */
  constructor(cachePath: string, schemas: SchemaSet, o: { poolSize?: number; storeDir?: string; addon?: string | null } = {}) {
    const { poolSize = availableParallelism(), storeDir, addon = null } = o;
    this.#cachePath = cachePath;
    this.#storePrefix = storeDir === undefined ? undefined : storeDir.endsWith('/') ? storeDir : `${storeDir}/`;
    this.#schemas = schemas;
    const read = readJsonFile<HashCache>(cachePath, schemas, ENGINE_SCHEMAS.hashCache);
    // A corrupt cache is only a cache: start empty (and overwrite it on save).
    this.#entries = read.ok && read.value !== null ? read.value.entries : {};
    if (!read.ok) this.#dirty = true;
    this.hashIo = addon === null ? 'read' : 'mmap';
    this.#pool = new HashPool(poolSize, addon);
    this.#progress = { total: 0, done: 0, files: 0, shown: false };
  }

  /** sha256 and size of a file; from the cache when its stat identity is unchanged and trusted. */
  hash(path: string): Promise<FileDigest> {
    const running = this.#inflight.get(path);
    if (running !== undefined) return running;
    const p = this.#hash(path).finally(() => this.#inflight.delete(path));
    this.#inflight.set(path, p);
    return p;
  }

  /** Hash many files at once (the pool keeps every core busy). */
  hashAll(paths: readonly string[]): Promise<FileDigest[]> {
    return Promise.all(paths.map((p) => this.hash(p)));
  }

  async #hash(path: string): Promise<FileDigest> {
    const st = statSync(path, { bigint: true });
    const hit = this.#entries[path];
    const inStore = this.#storePrefix !== undefined && path.startsWith(this.#storePrefix);
    if (hit !== undefined && sameStat(hit, st, inStore) && st.mtimeNs < BigInt(hit.hashedAtNs) - RACY_MARGIN_NS) {
      this.stats.cachedFiles++;
      return { sha256: hit.sha256 as FileSha256, size: Number(st.size) };
    }
    // Too recent to trust a later stat match: wait until the margin has passed, then read.
    const wait = st.mtimeNs + RACY_MARGIN_NS - nowNs();
    if (wait >= 0n) await new Promise((r) => setTimeout(r, Number(wait / 1_000_000n) + 2));
    const hashedAtNs = nowNs();
    let digest: { sha256: string; size: number; mapped?: boolean };
    if (this.#reading++ === 0) this.#busySince = performance.now();
    try {
      if (Number(st.size) >= WORKER_THRESHOLD) {
        this.#progress.total += Number(st.size);
        digest = await this.#pool.hash(path, (n) => this.#showProgress(n));
        this.#progress.files++;
        this.#showProgress(0);
      } else {
        digest = hashSmall(path);
      }
    } finally {
      if (--this.#reading === 0) this.stats.busyMs += performance.now() - this.#busySince;
    }
    this.stats.hashedBytes += digest.size;
    if (digest.mapped === true) this.stats.mappedBytes += digest.size;
    this.stats.hashedFiles++;
    const after = statSync(path, { bigint: true });
    const entry: CacheEntry = {
      dev: String(after.dev), ino: String(after.ino), size: String(after.size), mtimeNs: String(after.mtimeNs), ctimeNs: String(after.ctimeNs),
      hashedAtNs: String(hashedAtNs), sha256: digest.sha256,
    };
    // Cache only when the file did not change while it was read.
    if (sameStat(entry, st) && Number(after.size) === digest.size) {
      this.#entries[path] = entry;
      this.#dirty = true;
    }
    return { sha256: digest.sha256 as FileSha256, size: digest.size };
  }

  #showProgress(bytes: number): void {
    this.#progress.done += bytes;
    if (!process.stderr.isTTY) return;
    const gib = (n: number): string => (n / 2 ** 30).toFixed(2);
    process.stderr.write(`\rhashing ${gib(this.#progress.done)}/${gib(this.#progress.total)} GiB (${this.#progress.files} files done)   `);
    this.#progress.shown = true;
  }

  /**
   * A directory was renamed (temp dir -> store): carry its files' entries over. A rename keeps each
   * file's dev, inode, mtime and ctime, so the entries stay valid under the new path.
   */
  moveDir(from: string, to: string): void {
    const prefix = from.endsWith('/') ? from : `${from}/`;
    for (const p of Object.keys(this.#entries)) {
      if (!p.startsWith(prefix)) continue;
      this.#entries[`${to}/${p.slice(prefix.length)}`] = this.#entries[p]!;
      delete this.#entries[p];
      this.#dirty = true;
    }
  }

  /** Forget cached digests under a directory (after gc deleted it). */
  forgetUnder(dir: string): void {
    const prefix = dir.endsWith('/') ? dir : `${dir}/`;
    for (const p of Object.keys(this.#entries)) {
      if (p.startsWith(prefix)) {
        delete this.#entries[p];
        this.#dirty = true;
      }
    }
  }

  /** Persist the cache (only when something changed) and stop the pool. */
  async close(): Promise<void> {
    if (this.#progress.shown) process.stderr.write('\n');
    await this.#pool.close();
    if (this.#dirty) {
      const sorted: Record<string, CacheEntry> = {};
      for (const k of Object.keys(this.#entries).sort()) sorted[k] = this.#entries[k]!;
      const cache: HashCache = { schema: 1, entries: sorted };
      // Validated as written, like the lock file (a bug caught here; the validator compiled for the next run).
      const errors = this.#schemas.validate(ENGINE_SCHEMAS.hashCache, cache);
      if (errors.length > 0) throw new Error(`the hash cache breaks ${ENGINE_SCHEMAS.hashCache}: ${errors.join('; ')}`);
      writeFileAtomicSync(this.#cachePath, JSON.stringify(cache));
      this.#dirty = false;
    }
  }
}

function hashSmall(path: string): { sha256: string; size: number } {
  const h = createHash('sha256');
  const fd = openSync(path, 'r');
  const buf = Buffer.allocUnsafe(Math.min(CHUNK, 1024 * 1024));
  let size = 0;
  try {
    let n: number;
    while ((n = readSync(fd, buf, 0, buf.length, null)) > 0) {
      h.update(n === buf.length ? buf : buf.subarray(0, n));
      size += n;
    }
  } finally {
    closeSync(fd);
  }
  return { sha256: h.digest('hex'), size };
}

