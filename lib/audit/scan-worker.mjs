// An audit thread (plain JavaScript so it starts under any loader: tsx, vitest, node). A job is one shard:
// { path, ranges } (sorted, non-overlapping [begin, end) byte ranges of packed codes) -> { sha256, size,
// invalid }, invalid holding per range its first byte with the invalid code 0b11 in one of its 2-bit fields.
// The file is read in 256 KiB chunks straight into the WebAssembly memory of scan.wat; each chunk is hashed
// and its code bytes tested while still in this core's cache. The SIMD test clears whole 64-byte blocks; a
// flagged run, and the tail, are looked at byte by byte: a byte b holds a 0b11 field exactly when
// b & (b >> 1) & 0x55 is non-zero.
import { createHash } from 'node:crypto';
import { closeSync, openSync, readSync } from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';

const CHUNK = 256 * 1024;
const memory = new WebAssembly.Memory({ initial: CHUNK / 65536 });
const { anyInvalid } = new WebAssembly.Instance(workerData.module, { audit: { memory } }).exports;
const chunk = new Uint8Array(memory.buffer, 0, CHUNK);

function firstInvalid(start, end) {
  for (let i = start; i < end; i++) {
    const b = chunk[i];
    if ((b & (b >>> 1) & 0x55) !== 0) return i;
  }
  return -1;
}

/** First invalid byte of chunk[start, end), or -1. */
function scan(start, end) {
  const bulk = (end - start) - ((end - start) % 64);
  if (bulk > 0 && anyInvalid(start, bulk) !== 0) return firstInvalid(start, start + bulk);
  return firstInvalid(start + bulk, end);
}

function shardPass(path, ranges) {
  const h = createHash('sha256');
  const invalid = [];
  const flagged = new Set();
  const fd = openSync(path, 'r');
  let pos = 0;
  let first = 0; // first range that may intersect the current chunk
  try {
    for (;;) {
      const n = readSync(fd, chunk, 0, CHUNK, pos);
      if (n === 0) break;
      h.update(n === CHUNK ? chunk : chunk.subarray(0, n));
      const end = pos + n;
      while (first < ranges.length && ranges[first].end <= pos) first++;
      for (let k = first; k < ranges.length && ranges[k].begin < end; k++) {
        if (flagged.has(k)) continue;
        const r = ranges[k];
        const at = scan(Math.max(r.begin, pos) - pos, Math.min(r.end, end) - pos);
        if (at >= 0) {
          flagged.add(k);
          invalid.push({ tensor: r.tensor, byte: pos + at - r.begin, value: chunk[at] });
        }
      }
      pos = end;
    }
  } finally {
    closeSync(fd);
  }
  return { sha256: h.digest('hex'), size: pos, invalid };
}

parentPort.on('message', ({ id, path, ranges }) => {
  try {
    parentPort.postMessage({ id, ...shardPass(path, ranges) });
  } catch (e) {
    parentPort.postMessage({ id, error: String((e && e.message) || e) });
  }
});
