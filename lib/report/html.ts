/**
 * evidence/report.html: one self-contained page (inline CSS and SVG, no scripts, no external resource):
 * the stage graph, gate margins, quality numbers (summary first, then per tensor kind), per-tensor
 * reconstruction error and share of zeros, self-check (smoke) timings, eval results, the provenance
 * proof and the record chain.
 *
 * Everything that is measured on a live process or names a time (smoke timings, start and end of runs)
 * sits between `<!-- volatile:begin -->` and `<!-- volatile:end -->`, so the reproducibility check can
 * mask exactly that and nothing else.
 */
import type { Graph } from '../../engine/graph.ts';
import type { EvidenceGuide } from '../../schemas/generated/evidence-guide.ts';
import { EVIDENCE_FILES, type EvidenceFiles } from './evidence-files.ts';
import type { StageEvidence } from './records.ts';
import { qualitySection } from './quality.ts';
import { barChart, dotPlot, esc, graphSvg } from './svg.ts';

export const VOLATILE_BEGIN = '<!-- volatile:begin -->';
export const VOLATILE_END = '<!-- volatile:end -->';

const CSS = `
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px auto;max-width:1200px;color:#1d2330;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d8dde6;padding-bottom:4px}
table{border-collapse:collapse;margin:6px 0;max-width:100%}td,th{border:1px solid #d8dde6;padding:3px 8px;text-align:left;vertical-align:top;overflow-wrap:anywhere}th{background:#f2f4f8}
table.quality-summary,table.quality-shards,table.quality-kinds,table.quality-other{width:100%;table-layout:fixed}table.quality-kinds td:nth-child(n+2){font-variant-numeric:tabular-nums}
h3{font-size:15px;margin:18px 0 6px}
code{font:12px ui-monospace,Menlo,monospace;background:#f2f4f8;padding:0 3px;border-radius:3px;overflow-wrap:anywhere}code.digest{word-break:break-all}
.pass{color:#11702c;font-weight:600}.fail{color:#b3261e;font-weight:600}.na{color:#8a6d00;font-weight:600}
.note{color:#5b6475}
svg{max-width:100%;height:auto}svg text{font:11px system-ui,sans-serif;fill:#1d2330}svg .ttl{font-weight:600;font-size:12px}svg .val{fill:#5b6475}
svg .bar{fill:#4f7bd9}svg .bar.bad{fill:#d9534f}svg .thr{stroke:#b3261e;stroke-dasharray:4 3}svg .grid{stroke:#e4e7ee}
svg .edge{fill:none;stroke:#8c96a8;stroke-width:1.3}svg .arrowhead{fill:#8c96a8}
svg .node rect{fill:#e8f0fe;stroke:#4f7bd9}svg .node.placeholder rect{fill:#fff7e0;stroke:#c69500;stroke-dasharray:4 3}
svg .node.absent rect{fill:#f4f4f4;stroke:#aaa}svg .node.self rect{fill:#e6f4ea;stroke:#11702c}
svg .g0{fill:#4f7bd9}svg .g1{fill:#d9534f}svg .g2{fill:#2e9e5b}svg .g3{fill:#c69500}svg .g4{fill:#8e44ad}svg .g5{fill:#16a2b8}
`;

const mark = (p: boolean | null): string => (p === true ? '<span class="pass">pass</span>' : p === false ? '<span class="fail">FAIL</span>' : '<span class="na">not shown</span>');

/** A table with a header row; every cell escaped. */
function htmlTable(head: readonly string[], rows: ReadonlyArray<ReadonlyArray<string | number>>): string {
  return `<table><tr>${head.map((h) => `<th>${esc(h)}</th>`).join('')}</tr>${rows.map((r) => `<tr>${r.map((c) => `<td>${esc(c)}</td>`).join('')}</tr>`).join('')}</table>`;
}

function placeholderNote(stage: string, ev: Map<string, StageEvidence>): string {
  return `<p class="note">${esc(stage)} ${ev.has(stage) ? 'is still a placeholder: its outputs hold only a PLACEHOLDER file, so there are no figures to show.' : 'is not part of this build.'}</p>`;
}

export function renderHtml(o: { guide: EvidenceGuide; evidence: readonly StageEvidence[]; graph: Graph; self: string; files: EvidenceFiles }): string {
  const ev = new Map(o.evidence.map((e) => [e.stage, e]));
  const parts: string[] = [];
  // The submission's JSON evidence, read once and checked against its schemas (lib/report/evidence-files.ts).
  const { manifest, audit, quantizeReport: qr, quality, smoke } = o.files;
  parts.push(`<h1>ternforge report: ${esc(o.guide.profile)}</h1><p class="note">${esc(manifest?.base_model ?? '?')} @ ${esc(manifest?.revision ?? '?')}, method ${esc(manifest?.method ?? '?')}. Generated from the evidence records in <code>evidence/records/</code>; the reviewer guide is <code>evidence/README.md</code>.</p>`);
  if (o.guide.placeholders.length > 0) parts.push(`<p class="na">Placeholder stages (no evidence yet): ${esc(o.guide.placeholders.join(', '))}</p>`);

  // Stage graph
  parts.push('<h2>Stage graph</h2>');
  parts.push(graphSvg({ order: o.graph.order, needs: o.graph.needs, state: (s) => (s === o.self ? 'self' : ev.get(s)?.placeholder ? 'placeholder' : ev.has(s) ? 'ran' : 'absent') }));
  parts.push('<p class="note">Blue: ran; dashed yellow: placeholder; green: this stage.</p>');

  // Rules
  parts.push('<h2>Reviewer rules</h2><table><tr><th>rule</th><th>checks</th><th>cited lines</th></tr>');
  for (const r of o.guide.rules) {
    const checks = r.checks.map((c) => `${mark(c.passed)} ${esc(c.check)}`).join('<br>');
    parts.push(`<tr><td>${esc(r.title)}</td><td>${checks}</td><td>${r.citations.map((c) => `<code>${esc(`${c.file}:${c.line}`)}</code>`).join(' ')}</td></tr>`);
  }
  parts.push('</table>');

  // Gates
  parts.push('<h2>Gate margins</h2>');
  if (audit !== null) {
    const tf = audit.gates['ternary-fraction'];
    const sp = audit.gates['stored-parameters'];
    const items = [];
    const wa = audit.gates['weight-audit'];
    items.push({ label: `ternary fraction (> ${tf.threshold})`, value: tf.value, bad: !tf.pass });
    parts.push(barChart({ title: 'Gate 1: ternary fraction of the audited parameters', items, max: 1, threshold: { value: tf.threshold, label: `threshold ${tf.threshold}` } }));
    parts.push(barChart({ title: 'Gate 2: stored / original parameters', items: [{ label: `stored ratio (<= ${sp.threshold})`, value: sp.ratio, bad: !sp.pass }], max: 1.25, threshold: { value: sp.threshold, label: `threshold ${sp.threshold}` } }));
    const rows: Array<[string, boolean, number, number | string]> = [['ternary-fraction', tf.pass, tf.value, tf.margin], ['stored-parameters', sp.pass, sp.ratio, sp.margin], ['weight-audit', wa.pass, wa.violations, '']];
    parts.push(`<table><tr><th>gate</th><th>result</th><th>value</th><th>margin</th></tr>${rows.map(([g, pass, value, margin]) => `<tr><td>${esc(g)}</td><td>${mark(pass)}</td><td>${esc(value)}</td><td>${esc(margin)}</td></tr>`).join('')}</table>`);
  } else parts.push(placeholderNote('audit', ev));

  // Quality
  parts.push('<h2>Quality (held-out, from the packed shards)</h2>');
  parts.push(quality !== null ? qualitySection(quality, { begin: VOLATILE_BEGIN, end: VOLATILE_END }) : placeholderNote('quality', ev));

  // Per-tensor plots
  parts.push('<h2>Per-tensor reconstruction error and share of zeros</h2>');
  const tern = Object.entries(qr?.tensors ?? {}).filter(([, t]) => typeof t.rel_error === 'number' || typeof t.zero_fraction === 'number');
  if (tern.length > 0) {
    const group = (n: string): string => (n.match(/\.(mlp|linear_attn|self_attn)\./)?.[1] ?? 'other');
    const short = (n: string): string => n.replace(/^model\.language_model\./, '').replace(/\.weight$/, '');
    const errs = tern.filter(([, t]) => typeof t.rel_error === 'number').map(([n, t]) => ({ label: short(n), value: t.rel_error!, group: group(n) }));
    const zeros = tern.filter(([, t]) => typeof t.zero_fraction === 'number').map(([n, t]) => ({ label: short(n), value: t.zero_fraction!, group: group(n) }));
    if (errs.length > 0) parts.push(errs.length <= 40 ? barChart({ title: 'Relative reconstruction error ||W - T*s|| / ||W|| per ternary tensor (quantize_report.json)', items: errs }) : dotPlot({ title: 'Relative reconstruction error per ternary tensor (quantize_report.json)', items: errs, yLabel: 'rel. error' }));
    if (zeros.length > 0) parts.push(zeros.length <= 40 ? barChart({ title: 'Share of zero codes per ternary tensor', items: zeros, max: 1 }) : dotPlot({ title: 'Share of zero codes per ternary tensor', items: zeros, yLabel: 'zero share', max: 1 }));
    const floats = Object.entries(qr?.tensors ?? {}).filter(([, t]) => t.encoding === 'float').length;
    parts.push(`<p class="note">${tern.length} ternary tensor(s) plotted; ${floats} tensor(s) kept in float.</p>`);
  } else parts.push(placeholderNote('quantize', ev));

  // Smoke
  parts.push('<h2>Self-check (smoke-serve): gates 4-6 and timings</h2>');
  if (smoke !== null) {
    parts.push(`<table><tr><th>gate</th><th>name</th><th>status</th><th>detail</th></tr>${(smoke.gates ?? []).map((g) => `<tr><td>${g.gate}</td><td>${esc(g.name)}</td><td>${g.status === 'passed' ? mark(true) : g.status === 'failed' ? mark(false) : esc(g.status)}</td><td>${VOLATILE_BEGIN}${esc(g.detail ?? '')}${VOLATILE_END}</td></tr>`).join('')}</table>`);
    parts.push(VOLATILE_BEGIN);
    const phases = Object.entries(smoke.startup?.phases ?? {}).map(([k, v]) => ({ label: k, value: v }));
    if (smoke.startup?.health_200_s != null) phases.push({ label: '/health 200 after', value: smoke.startup.health_200_s });
    if (phases.length > 0) parts.push(barChart({ title: 'Start-up (seconds; gate 4 limit 300 s)', items: phases, unit: ' s' }));
    if (smoke.load != null) {
      parts.push(barChart({ title: `Load: ${smoke.load.ok}/${smoke.load.concurrency} replies ok`, items: [{ label: 'wall time', value: smoke.load.wall_s }, ...(smoke.load.health_during?.p99_ms !== undefined ? [{ label: '/health p99 under load', value: smoke.load.health_during.p99_ms / 1000 }] : [])], unit: ' s' }));
      parts.push(`<p>finish_reason counts ${esc(JSON.stringify(smoke.load.finish_reasons))}; ${esc(smoke.load.tokens_per_s ?? '?')} completion tokens/s; network isolation: ${esc(smoke.isolation?.network_namespace ?? '?')}</p>`);
    }
    parts.push(VOLATILE_END);
  } else parts.push(placeholderNote('smoke-serve', ev));

  // Eval: measured on a live server, so all of it is volatile.
  parts.push('<h2>Eval results</h2>');
  const { eval: evalReport, answers, sweep } = o.files;
  if (evalReport !== null || answers !== null) {
    parts.push(VOLATILE_BEGIN);
    if (evalReport !== null) {
      const t = evalReport.table;
      const h = evalReport.harness;
      parts.push(`<h3>Graded benchmarks (<code>${esc(EVIDENCE_FILES.eval.path)}</code>)${h === undefined ? '' : `, asked and scored by lm-eval ${esc(h.lmEval)} (math-verify ${esc(h.mathVerify)})`}: mean normalised score ${esc(t.meanScore.toFixed(1))}${t.missing.length > 0 ? `, no questions of ${esc(t.missing.join(', '))}` : ''}</h3>`);
      parts.push(htmlTable(['benchmark', 'n', 'right', 'accuracy', 'score', 'cut off', 'timed out', 'errors', 'server fallbacks', 'mean tokens', 'p50 / p95 latency (ms)'], t.rows.map((r) => [r.benchmark, r.questions, r.correct, r.accuracy.toFixed(3), r.score.toFixed(1), r.truncations, r.timeouts, r.errors, r.fallbacks ?? '-', r.meanCompletionTokens === null ? '-' : r.meanCompletionTokens.toFixed(1), `${Math.round(r.p50LatencyMs)} / ${Math.round(r.p95LatencyMs)}`])));
      if (h !== undefined) parts.push(htmlTable(['benchmark', 'lm-eval task', 'runs', 'filter', 'metric', "lm-eval's own value"], h.tasks.map((x) => [x.benchmark, x.task, x.referenceTask ?? 'ours, in its format', x.filter, x.metric, x.lmEvalValue === null ? '-' : x.lmEvalValue.toFixed(3)])));
      const g = evalReport.grade;
      if (g !== undefined) {
        const f = (x: number | null): string => (x === null ? '-' : x.toFixed(3));
        const pct = (x: number | null): string => (x === null ? '-' : x.toFixed(1));
        parts.push(`<h3>Predicted grade: ${esc(pct(g.meanGrader))} with the grader's ceilings, ${esc(pct(g.meanMeasured))} with the measured ones (the full-precision model, same run)</h3>`);
        parts.push(htmlTable(['benchmark', 'chance', 'ternary', 'float (measured ceiling)', 'grader ceiling', 'score', 'score (measured ceiling)'], g.rows.map((r) => [r.benchmark, f(r.floor), f(r.ternaryAccuracy), f(r.floatAccuracy), f(r.graderCeiling), pct(r.scoreGrader), pct(r.scoreMeasured)])));
      }
    }
    if (answers !== null) {
      parts.push(`<h3>Answer retention (<code>${esc(EVIDENCE_FILES.answers.path)}</code>): ${esc(answers.ternary.set.questions)} open-answer questions of <code>${esc(answers.ternary.set.path)}</code>, asked of this submission and of the full-precision model</h3>`);
      parts.push(htmlTable(['kind', 'n', 'float right', 'ternary right', 'both right', 'float acc.', 'ternary acc.', 'retention'], answers.retention.map((r) => [r.kind, r.questions, r.floatCorrect, r.ternaryCorrect, r.bothCorrect, r.floatAccuracy.toFixed(3), r.ternaryAccuracy.toFixed(3), r.retention === null ? '-' : r.retention.toFixed(3)])));
    }
    if (sweep !== null) {
      parts.push(`<h3>Sweep of <code>${esc(sweep.parameter)}</code> on selection sets (<code>${esc(EVIDENCE_FILES.sweep.path)}</code>): chose ${esc(sweep.chosen)} (${esc(sweep.rule)})</h3>`);
      parts.push(htmlTable(['value', 'mean score', 'mean accuracy', 'cut off', 'timed out', 'mean tokens'], sweep.points.map((p) => [p.value, p.meanScore.toFixed(1), p.meanAccuracy.toFixed(3), p.truncations, p.timeouts, p.meanCompletionTokens === null ? '-' : p.meanCompletionTokens.toFixed(1)])));
    }
    parts.push(VOLATILE_END);
  } else parts.push(placeholderNote('eval', ev));

  // Provenance
  const p = o.guide.provenance;
  parts.push(`<h2>Provenance proof: ${p.passed ? mark(true) : mark(false)}</h2><ol>`);
  for (const s of p.steps) parts.push(`<li>${mark(s.passed)} ${esc(s.claim)}<ul>${s.facts.map((f) => `<li>${esc(f)}</li>`).join('')}</ul></li>`);
  parts.push('</ol>');

  // Chain
  parts.push('<h2>Record chain</h2><table><tr><th>stage</th><th>mode</th><th>key</th><th>outputs</th><th>built from</th></tr>');
  for (const c of o.guide.chain) parts.push(`<tr><td>${esc(c.stage)}${c.placeholder ? ' <span class="na">(placeholder)</span>' : ''}</td><td>${esc(c.outputMode)}</td><td><code>${esc(c.key.slice(0, 16))}</code></td><td><code>${esc(c.outputDigest.slice(0, 16))}</code></td><td>${Object.entries(c.upstream).map(([u, d]) => `${esc(u)} <code>${esc(d.slice(0, 12))}</code>`).join('<br>')}</td></tr>`);
  parts.push('</table>');
  parts.push(`${VOLATILE_BEGIN}<p class="note">Runs: ${o.evidence.map((e) => `${esc(e.stage)} ${esc(e.record.startedAt)}`).join('; ')}</p>${VOLATILE_END}`);

  return `<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:"><title>ternforge report: ${esc(o.guide.profile)}</title><style>${CSS}</style></head><body>\n${parts.join('\n')}\n</body></html>\n`;
}
