// The audit's code scanner thread (plain JavaScript so it starts under any loader: tsx, vitest, node).
// It shares the reader's ring buffer (a SharedArrayBuffer) and, for each job, reports per segment the
// offset of the first byte holding the invalid code 0b11 in any of its four 2-bit fields, or -1.
// A byte b holds a 0b11 field exactly when b & (b >> 1) & 0b01010101 is non-zero; on 32-bit words the
// same test runs on four bytes at once with the mask 0x55555555.
import { parentPort, workerData } from 'node:worker_threads';

const bytes = new Uint8Array(workerData.buffer);
const words = new Int32Array(workerData.buffer, 0, workerData.buffer.byteLength >> 2);

function firstInvalid(start, end) {
  for (let i = start; i < end; i++) {
    const b = bytes[i];
    if ((b & (b >>> 1) & 0x55) !== 0) return i;
  }
  return -1;
}

/** First invalid byte offset in [start, end), or -1. */
function scan(start, end) {
  let i = start;
  const head = Math.min(end, (start + 3) & ~3);
  if (firstInvalid(i, head) >= 0) return firstInvalid(i, head);
  i = head;
  const wEnd = end >> 2;
  let w = i >> 2;
  let a = 0, b = 0, c = 0, d = 0;
  for (; w + 4 <= wEnd; w += 4) {
    const x = words[w], y = words[w + 1], z = words[w + 2], u = words[w + 3];
    a |= x & (x >>> 1);
    b |= y & (y >>> 1);
    c |= z & (z >>> 1);
    d |= u & (u >>> 1);
  }
  for (; w < wEnd; w++) {
    const x = words[w];
    a |= x & (x >>> 1);
  }
  if (((a | b | c | d) & 0x55555555) !== 0) return firstInvalid(i, end);
  return firstInvalid(Math.max(i, wEnd << 2), end);
}

parentPort.on('message', (job) => {
  const found = job.segments.map(([start, end]) => scan(start, end));
  parentPort.postMessage({ id: job.id, found });
});
