/**
 * Reproducibility: compare two builds of one profile (two workdirs, same commit) stage by stage, outputs
 * and evidence records, masking only the declared volatile fields below. Every masked difference is
 * reported with the mask that hid it, so nothing is hidden silently.
 *
 * Declared volatile (VOLATILE):
 *  - record fields: startedAt, endedAt, host, command (argv: holds the workdir), log (lines carry durations,
 *    ports and temp paths), restoredFrom (whether this build ran a stage or restored it from the run cache);
 *  - JSON keys anywhere: timestamps and durations (`*_s`, `*_ms`, `*Ms`, `since`, `phases`, `tokens_per_s`),
 *    what a live process or the host decides (`environment`, `log_tail`, `probes`, `failures`, `published`,
 *    `cache`);
 *  - report.html between `<!-- volatile:begin -->` and `<!-- volatile:end -->`;
 *  - whole files: a served process's own log (`serve.log`);
 *  - the workdir's absolute path (host), shown as `<workdir>`; random temp dir names (`<tmp>`);
 *  - durations written into JSON strings (`after 63.5 s`, `12 ms`), shown as `<duration>`;
 *  - digests of anything above: a file equal after masking but not in raw bytes is volatile, and so are its
 *    sha256, its stage's output digest and every key built on it (labelled, e.g. `<volatile:smoke-serve.outputs>`).
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { basename, join, relative } from 'node:path';
import { VOLATILE_BEGIN, VOLATILE_END } from './html.ts';

export const VOLATILE = {
  recordFields: ['startedAt', 'endedAt', 'host', 'command', 'log', 'restoredFrom'],
  jsonKeys: ['since', 'phases', 'tokens_per_s', 'environment', 'log_tail', 'probes', 'failures', 'published', 'cache'],
  jsonKeyPattern: /(_s|_ms|Ms)$/,
  wholeFiles: ['serve.log'],
} as const;

/** How one path compares. */
export interface ReproEntry {
  stage: string;
  path: string;
  status: 'identical' | 'volatile' | 'differs' | 'only-in-a' | 'only-in-b';
  /** For `volatile`: the masks that made it equal; for `differs`: the first differing line. */
  detail?: string;
}

export interface Build {
  workdir: string;
  profile: string;
}

const sha = (b: Buffer | string): string => createHash('sha256').update(b).digest('hex');

function tree(dir: string): string[] {
  if (!existsSync(dir)) return [];
  const out: string[] = [];
  const walk = (d: string): void => {
    for (const e of readdirSync(d).sort()) {
      const p = join(d, e);
      if (statSync(p).isDirectory()) walk(p);
      else out.push(relative(dir, p));
    }
  };
  walk(dir);
  return out.sort();
}

type Rec = { stage: string; outputMode: string; key: string; outputDigest: string; keyData: { upstream: Record<string, string> } };

function readRecord(b: Build, stage: string): Rec | null {
  const p = join(b.workdir, '.ternforge', b.profile, stage, 'evidence.json');
  return existsSync(p) ? (JSON.parse(readFileSync(p, 'utf8')) as Rec) : null;
}

/** Stages with a record in a build, upstream first. */
export function stagesOf(b: Build): string[] {
  const dir = join(b.workdir, '.ternforge', b.profile);
  const recs = new Map<string, Rec>();
  for (const s of existsSync(dir) ? readdirSync(dir) : []) {
    const r = readRecord(b, s);
    if (r !== null) recs.set(s, r);
  }
  const order: string[] = [];
  const visit = (s: string): void => {
    if (order.includes(s) || !recs.has(s)) return;
    for (const u of Object.keys(recs.get(s)!.keyData.upstream)) visit(u);
    order.push(s);
  };
  [...recs.keys()].sort().forEach(visit);
  return order;
}

/** Masks applied to one text; returns the masked text and the names of the masks that changed it. */
class Normalizer {
  /** digest -> label, for both builds. */
  readonly labels = new Map<string, string>();
  constructor(readonly a: Build, readonly b: Build) {}

  text(t: string, side: 'a' | 'b', file: string): { text: string; masks: string[] } {
    const masks = new Set<string>();
    let out = t;
    if ((VOLATILE.wholeFiles as readonly string[]).includes(basename(file))) return { text: '<volatile file>', masks: ['whole file (process log)'] };
    const wd = side === 'a' ? this.a.workdir : this.b.workdir;
    const real = realpathSync(wd);
    for (const p of new Set([wd, real])) {
      if (out.includes(p)) {
        out = out.split(p).join('<workdir>');
        masks.add('workdir path');
      }
    }
    const tmpNames = /(\.ternforge\/tmp\/[\w-]+-|\/tmp\/ternforge-[a-z-]+-)[A-Za-z0-9]{6}\b/g;
    if (tmpNames.test(out)) {
      out = out.replace(tmpNames, '$1<tmp>');
      masks.add('temp dir name');
    }
    if (file.endsWith('.html') && out.includes(VOLATILE_BEGIN)) {
      const re = new RegExp(`${escapeRe(VOLATILE_BEGIN)}[\\s\\S]*?${escapeRe(VOLATILE_END)}`, 'g');
      const next = out.replace(re, '<volatile/>');
      if (next !== out) masks.add('html volatile section');
      out = next;
    }
    if (file.endsWith('.json')) {
      try {
        const v = JSON.parse(out) as unknown;
        const isRecord = file.endsWith('evidence.json') || file.includes('evidence/records/');
        const masked = maskJson(v, isRecord, masks, 0, this.labels);
        out = JSON.stringify(masked, null, 1);
      } catch {
        /* not JSON: compared as text */
      }
    }
    if (this.labels.size > 0) {
      out = out.replace(/\b([0-9a-f]{64}|[0-9a-f]{16}|[0-9a-f]{12})\b/g, (m) => {
        const l = this.labels.get(m);
        if (l === undefined) return m;
        masks.add('volatile digest');
        return l;
      });
    }
    return { text: out, masks: [...masks].sort() };
  }

  label(digestA: string, digestB: string, label: string): void {
    for (const d of [digestA, digestB]) {
      this.labels.set(d, label);
      this.labels.set(d.slice(0, 16), label);
      this.labels.set(d.slice(0, 12), label);
    }
  }
}

function escapeRe(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

const DURATION = /\b\d+(\.\d+)? ?(s|ms)\b/g;

function maskJson(v: unknown, isRecord: boolean, masks: Set<string>, depth: number, labels: ReadonlyMap<string, string>): unknown {
  if (Array.isArray(v)) return v.map((x) => maskJson(x, isRecord, masks, depth + 1, labels));
  if (typeof v === 'string' && new RegExp(DURATION.source).test(v)) {
    masks.add('duration in text');
    return v.replace(DURATION, '<duration>');
  }
  if (v === null || typeof v !== 'object') return v;
  const out: Record<string, unknown> = {};
  const o = v as Record<string, unknown>;
  // A listing entry of a volatile file: its size goes with its (labelled) digest.
  const volatileEntry = typeof o.sha256 === 'string' && labels.has(o.sha256) && 'size' in o;
  for (const [k, x] of Object.entries(o)) {
    if ((isRecord && depth === 0 && (VOLATILE.recordFields as readonly string[]).includes(k)) || (VOLATILE.jsonKeys as readonly string[]).includes(k) || VOLATILE.jsonKeyPattern.test(k) || (volatileEntry && k === 'size')) {
      out[k] = '<volatile>';
      masks.add(`field ${k}`);
    } else out[k] = maskJson(x, isRecord, masks, depth + 1, labels);
  }
  return out;
}

function firstDiff(x: string, y: string): string {
  const a = x.split('\n');
  const b = y.split('\n');
  for (let i = 0; i < Math.max(a.length, b.length); i++) if (a[i] !== b[i]) return `line ${i + 1}: ${JSON.stringify((a[i] ?? '').slice(0, 200))} vs ${JSON.stringify((b[i] ?? '').slice(0, 200))}`;
  return 'same after masking';
}

/**
 * Compare two builds: for each stage (upstream first) its outputs file by file, then its record.
 * In-place stages (python-env: the shared venv) are compared by record only.
 */
export function compareBuilds(a: Build, b: Build): ReproEntry[] {
  const n = new Normalizer(a, b);
  const entries: ReproEntry[] = [];
  const stages = stagesOf(a);
  for (const s of stagesOf(b)) if (!stages.includes(s)) entries.push({ stage: s, path: '(stage)', status: 'only-in-b' });
  for (const stage of stages) {
    const ra = readRecord(a, stage)!;
    const rb = readRecord(b, stage);
    if (rb === null) {
      entries.push({ stage, path: '(stage)', status: 'only-in-a' });
      continue;
    }
    let volatileOutputs = ra.outputMode === 'uncached';
    if (ra.outputMode !== 'in-place') {
      const da = join(a.workdir, '.ternforge', a.profile, stage, 'outputs');
      const db = join(b.workdir, '.ternforge', b.profile, stage, 'outputs');
      const fa = tree(da);
      const fb = tree(db);
      for (const f of [...new Set([...fa, ...fb])].sort()) {
        if (!fa.includes(f) || !fb.includes(f)) {
          entries.push({ stage, path: f, status: fa.includes(f) ? 'only-in-a' : 'only-in-b' });
          volatileOutputs = true;
          continue;
        }
        const ba = readFileSync(join(da, f));
        const bb = readFileSync(join(db, f));
        if (ba.equals(bb)) {
          entries.push({ stage, path: f, status: 'identical' });
          continue;
        }
        const na = n.text(ba.toString('utf8'), 'a', f);
        const nb = n.text(bb.toString('utf8'), 'b', f);
        if (na.text === nb.text) {
          entries.push({ stage, path: f, status: 'volatile', detail: [...new Set([...na.masks, ...nb.masks])].join(', ') });
          n.label(sha(ba), sha(bb), `<volatile:${stage}/${f}>`);
          volatileOutputs = true;
        } else entries.push({ stage, path: f, status: 'differs', detail: firstDiff(na.text, nb.text) });
      }
    }
    if (volatileOutputs && ra.outputDigest !== rb.outputDigest) n.label(ra.outputDigest, rb.outputDigest, `<volatile:${stage}.outputs>`);
    // The key: equal once volatile upstream digests are labelled?
    if (ra.key !== rb.key) {
      const ka = n.text(JSON.stringify(ra.keyData), 'a', 'key.json').text;
      const kb = n.text(JSON.stringify(rb.keyData), 'b', 'key.json').text;
      if (ka === kb) n.label(ra.key, rb.key, `<volatile:${stage}.key>`);
    }
    const ta = readFileSync(join(a.workdir, '.ternforge', a.profile, stage, 'evidence.json'), 'utf8');
    const tb = readFileSync(join(b.workdir, '.ternforge', b.profile, stage, 'evidence.json'), 'utf8');
    if (ta === tb) entries.push({ stage, path: 'evidence.json', status: 'identical' });
    else {
      const na = n.text(ta, 'a', 'evidence.json');
      const nb = n.text(tb, 'b', 'evidence.json');
      entries.push(na.text === nb.text ? { stage, path: 'evidence.json', status: 'volatile', detail: [...new Set([...na.masks, ...nb.masks])].join(', ') } : { stage, path: 'evidence.json', status: 'differs', detail: firstDiff(na.text, nb.text) });
    }
  }
  return entries;
}

/** A readable summary: identical count, then each volatile path with its masks, then each difference. */
export function describeComparison(entries: readonly ReproEntry[]): string {
  const lines: string[] = [];
  const count = (s: ReproEntry['status']): number => entries.filter((e) => e.status === s).length;
  lines.push(`${count('identical')} identical, ${count('volatile')} equal after masking declared volatile fields, ${count('differs') + count('only-in-a') + count('only-in-b')} different`);
  for (const e of entries.filter((x) => x.status === 'volatile')) lines.push(`  volatile  ${e.stage}/${e.path}: ${e.detail}`);
  for (const e of entries.filter((x) => x.status !== 'volatile' && x.status !== 'identical')) lines.push(`  ${e.status.toUpperCase()}  ${e.stage}/${e.path}${e.detail ? `: ${e.detail}` : ''}`);
  return lines.join('\n');
}
