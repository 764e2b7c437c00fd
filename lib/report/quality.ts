/**
 * The quality section of evidence/report.html, from evidence/quality.json (python/ternforge/quality.py):
 *
 *   1. summary: perplexity ratio first, then the perplexities, agreement, KL and the overall tensor error;
 *   2. the shards the numbers were measured on (sha256 in a wrapping monospace cell, never cut);
 *   3. per tensor kind: the per-tensor entries grouped by their name with the layer index removed
 *      (`model.language_model.layers.3.self_attn.q_proj.weight` -> `self_attn.q_proj`), one row per kind
 *      with its layers and the mean, min and max over them;
 *   4. any other field the worker wrote, as key/value rows.
 *
 * The schema (schemas/quality-report.schema.json) requires only `format` and `metrics`; everything else
 * is read defensively and shown only when it has the expected shape. Timings (`seconds`, loader phases)
 * go between the volatile markers (see html.ts).
 */
import type { QualityReport } from '../../schemas/generated/quality-report.ts';
import { esc } from './svg.ts';

export interface TensorKindRow {
  kind: string;
  count: number;
  /** Layer indices of its tensors, ascending; empty when the names carry none. */
  layers: number[];
  rel: Stats | null;
  zero: Stats | null;
}

export interface Stats {
  mean: number;
  min: number;
  max: number;
  /** Layer of the maximum, null when its name has no layer index. */
  maxLayer: number | null;
}

/** A tensor's kind and layer: the name without `model.` / `model.language_model.`, `layers.N.` and `.weight`. */
export function tensorKind(name: string): { kind: string; layer: number | null } {
  const m = /(?:^|\.)layers\.(\d+)\./.exec(name);
  const kind = name.replace(/^model\.(language_model\.)?/, '').replace(/(^|\.)layers\.\d+\./, '$1').replace(/\.weight$/, '');
  return { kind, layer: m === null ? null : Number(m[1]) };
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);
const num = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);

function stats(values: ReadonlyArray<{ v: number; layer: number | null }>): Stats | null {
  if (values.length === 0) return null;
  let top = values[0]!;
  for (const x of values) if (x.v > top.v) top = x;
  return { mean: values.reduce((a, x) => a + x.v, 0) / values.length, min: Math.min(...values.map((x) => x.v)), max: top.v, maxLayer: top.layer };
}

/** quality.json's tensors.per_tensor grouped by kind, kinds sorted by name. */
export function tensorKinds(perTensor: Readonly<Record<string, unknown>>): TensorKindRow[] {
  const groups = new Map<string, Array<{ layer: number | null; rel: number | null; zero: number | null }>>();
  for (const [name, entry] of Object.entries(perTensor)) {
    const { kind, layer } = tensorKind(name);
    const e = isObject(entry) ? entry : {};
    groups.set(kind, [...(groups.get(kind) ?? []), { layer, rel: num(e.rel_frobenius), zero: num(e.zero_share) }]);
  }
  return [...groups.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([kind, xs]) => ({
    kind,
    count: xs.length,
    layers: xs.flatMap((x) => (x.layer === null ? [] : [x.layer])).sort((a, b) => a - b),
    rel: stats(xs.flatMap((x) => (x.rel === null ? [] : [{ v: x.rel, layer: x.layer }]))),
    zero: stats(xs.flatMap((x) => (x.zero === null ? [] : [{ v: x.zero, layer: x.layer }]))),
  }));
}

/** Ascending integers as ranges: [0,1,2,5] -> "0-2, 5". */
export function layerRanges(layers: readonly number[]): string {
  const out: string[] = [];
  for (let i = 0; i < layers.length; ) {
    let j = i;
    while (j + 1 < layers.length && layers[j + 1] === layers[j]! + 1) j++;
    out.push(j === i ? String(layers[i]) : `${layers[i]}\u2013${layers[j]}`);
    i = j + 1;
  }
  return out.join(', ');
}

/** Four significant digits, plain notation up to 1e6, exponent beyond. */
export function fmtNum(v: number): string {
  if (Number.isInteger(v) && Math.abs(v) < 1e15) return String(v);
  if (v !== 0 && (Math.abs(v) >= 1e6 || Math.abs(v) < 1e-4)) return v.toExponential(3);
  return v.toPrecision(4);
}

/** Scalar leaves of a JSON value as (path, value) rows. */
function leaves(v: unknown, prefix: string, out: Array<[string, string]>): Array<[string, string]> {
  if (isObject(v)) for (const [k, x] of Object.entries(v)) leaves(x, prefix ? `${prefix}.${k}` : k, out);
  else if (Array.isArray(v)) v.forEach((x, i) => leaves(x, `${prefix}[${i}]`, out));
  else out.push([prefix || '(value)', typeof v === 'number' ? fmtNum(v) : String(v)]);
  return out;
}

function row(cells: readonly string[], tag: 'td' | 'th' = 'td'): string {
  return `<tr>${cells.map((c) => `<${tag}>${c}</${tag}>`).join('')}</tr>`;
}

/** The quality section's HTML (without its heading). */
export function qualitySection(q: QualityReport, volatile: { begin: string; end: string }): string {
  const doc = q as unknown as Record<string, unknown>;
  const m = q.metrics as unknown as Record<string, unknown>;
  const tensors = isObject(doc.tensors) ? doc.tensors : {};
  const heldout = isObject(doc.heldout) ? doc.heldout : {};
  const loader = isObject(doc.loader) ? doc.loader : {};
  const parts: string[] = [];

  // 1. Summary.
  const summary: Array<[string, string, string]> = [
    ['perplexity ratio (ternary / reference)', fmtNum(q.metrics.ppl_ratio), 'metrics.ppl_ratio'],
    ['perplexity, ternary (packed shards)', fmtNum(q.metrics.ppl), 'metrics.ppl'],
    ['perplexity, full-precision reference', fmtNum(q.metrics.ppl_reference), 'metrics.ppl_reference'],
    ['top-1 agreement with the reference', fmtNum(q.metrics.top1_agreement), 'metrics.top1_agreement'],
    ['KL(reference \u2016 ternary), nats per position', fmtNum(q.metrics.kl), 'metrics.kl'],
  ];
  if (num(m.positions) !== null) summary.push(['positions scored', fmtNum(num(m.positions)!), 'metrics.positions']);
  if (num(heldout.sequences) !== null && num(heldout.seq_len) !== null) summary.push(['held-out sequences \u00d7 tokens', `${heldout.sequences} \u00d7 ${heldout.seq_len}${typeof heldout.role === 'string' ? ` (role ${heldout.role})` : ''}`, 'heldout']);
  if (num(tensors.count) !== null) summary.push(['ternary tensors compared', fmtNum(num(tensors.count)!), 'tensors.count']);
  if (num(tensors.mean_rel_frobenius) !== null) summary.push(['mean relative Frobenius error', fmtNum(num(tensors.mean_rel_frobenius)!), 'tensors.mean_rel_frobenius']);
  if (num(tensors.max_rel_frobenius) !== null) summary.push(['max relative Frobenius error', fmtNum(num(tensors.max_rel_frobenius)!), 'tensors.max_rel_frobenius']);
  if (typeof loader.architecture === 'string') summary.push(['loaded as', `${loader.architecture}${num(loader.loaded_count) !== null ? `, ${loader.loaded_count} tensors loaded` : ''}`, 'loader']);
  parts.push(`<table class="quality-summary"><colgroup><col style="width:42%"><col style="width:28%"><col style="width:30%"></colgroup>${row(['figure', 'value', 'field'], 'th')}${summary.map(([k, v, f]) => row([esc(k), `<b>${esc(v)}</b>`, `<code>${esc(f)}</code>`])).join('')}</table>`);

  // 2. Shards.
  const shards = Array.isArray(loader.shards) ? loader.shards.filter(isObject) : [];
  if (shards.length > 0) {
    parts.push(`<table class="quality-shards"><colgroup><col style="width:40%"><col style="width:12%"><col style="width:48%"></colgroup>${row(['shard measured', 'bytes', 'sha256'], 'th')}${shards.map((s) => row([`<code>${esc(s.file ?? '?')}</code>`, esc(s.size ?? '?'), `<code class="digest">${esc(s.sha256 ?? '?')}</code>`])).join('')}</table>`);
  }

  // Timings: volatile.
  const phases = isObject(loader.phases) ? Object.entries(loader.phases).filter(([, v]) => num(v) !== null) : [];
  if (num(doc.seconds) !== null || phases.length > 0) {
    // As the worker rounded them.
    parts.push(`${volatile.begin}<p class="note">Measured in ${num(doc.seconds) !== null ? `${esc(doc.seconds)} s` : '?'}${phases.length > 0 ? `; loader phases ${phases.map(([k, v]) => `${esc(k)} ${esc(v)} s`).join(', ')}` : ''}.</p>${volatile.end}`);
  }

  // 3. Per tensor kind.
  const kinds = isObject(tensors.per_tensor) ? tensorKinds(tensors.per_tensor) : [];
  if (kinds.length > 0) {
    const s3 = (s: Stats | null, what: 'mean' | 'min' | 'max'): string => (s === null ? '-' : fmtNum(s[what]));
    parts.push(`<h3>Per tensor kind (<code>tensors.per_tensor</code>, ${kinds.reduce((a, k) => a + k.count, 0)} tensors in ${kinds.length} kinds)</h3>`);
    parts.push(`<table class="quality-kinds"><colgroup><col style="width:22%"><col style="width:7%"><col style="width:11%"><col span="3" style="width:10%"><col span="3" style="width:10%"></colgroup>` +
      `<tr><th rowspan="2">tensor kind</th><th rowspan="2">tensors</th><th rowspan="2">layers</th><th colspan="3">relative Frobenius error</th><th colspan="3">share of zero codes</th></tr>` +
      row(['mean', 'min', 'max (layer)', 'mean', 'min', 'max'], 'th') +
      kinds.map((k) => row([`<code>${esc(k.kind)}</code>`, String(k.count), esc(layerRanges(k.layers) || '-'), s3(k.rel, 'mean'), s3(k.rel, 'min'), k.rel === null ? '-' : `${fmtNum(k.rel.max)}${k.rel.maxLayer === null ? '' : ` (${k.rel.maxLayer})`}`, s3(k.zero, 'mean'), s3(k.zero, 'min'), s3(k.zero, 'max')])).join('') +
      '</table>');
  }

  // 4. Anything else the worker wrote.
  const shown = new Set(['format', 'metrics', 'heldout', 'tensors', 'loader', 'seconds']);
  const rest: Array<[string, string]> = [];
  for (const [k, v] of Object.entries(doc)) if (!shown.has(k)) leaves(v, k, rest);
  for (const [k, v] of Object.entries(m)) if (!['ppl', 'ppl_reference', 'ppl_ratio', 'top1_agreement', 'kl', 'positions'].includes(k)) leaves(v, `metrics.${k}`, rest);
  for (const [k, v] of Object.entries(tensors)) if (!['count', 'mean_rel_frobenius', 'max_rel_frobenius', 'per_tensor'].includes(k)) leaves(v, `tensors.${k}`, rest);
  for (const [k, v] of Object.entries(loader)) if (!['architecture', 'loaded_count', 'phases', 'shards'].includes(k)) leaves(v, `loader.${k}`, rest);
  if (rest.length > 0) parts.push(`<table class="quality-other"><colgroup><col style="width:45%"><col style="width:55%"></colgroup>${row(['other field', 'value'], 'th')}${rest.map(([k, v]) => row([`<code>${esc(k)}</code>`, `<code class="digest">${esc(v)}</code>`])).join('')}</table>`);
  parts.push(`<p class="note">Format <code>${esc(q.format)}</code>; the full file is <code>evidence/quality.json</code>.</p>`);
  return parts.join('\n');
}
