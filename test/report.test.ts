/**
 * report: the real pipeline on tiny, up to `report`, in a temp workdir. The outputs are emit's tree
 * (hard links, never copies) plus evidence/; every record and the guide pass their schemas; every file
 * and line the guide cites exists and holds its anchor; `verify` passes on the result; the report stage
 * refuses a build whose data manifest wires a benchmark dataset into calibration or selection; the HTML
 * report is self-contained and renders in headless Chromium with no console message; its quality section is
 * tables (summary first, one row per tensor kind); its stage graph is layered (every edge left to right,
 * no edge through a box); and at 1280 px it needs no horizontal scroll (measured in headless Chromium).
 *
 * $TERNFORGE_REPORT_TEST_WORKDIR: check a workdir where report already ran instead of building one.
 * $TERNFORGE_REPORT_SCREENSHOT: where to keep the screenshot (default: a temp file, printed).
 */
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { sha256 } from '../engine/digest.ts';
import { formatFailure } from '../engine/format-failure.ts';
import { asEngineFailure, formatStageFailure } from '../lib/failures.ts';
import { buildGraph } from '../engine/graph.ts';
import { engineSchemaSet, SchemaSet } from '../engine/json-io.ts';
import { listFiles as listTree } from '../engine/files.ts';
import { buildReport, graphFromRecords } from '../lib/report/build.ts';
import type { DataManifest } from '../schemas/generated/data-manifest.ts';
import type { EvidenceGuide as Guide } from '../schemas/generated/evidence-guide.ts';
import { EVIDENCE_FILES, readEvidenceFiles } from '../lib/report/evidence-files.ts';
import { VOLATILE_BEGIN, VOLATILE_END } from '../lib/report/html.ts';
import { EVIDENCE_PATHS } from '../lib/report/layout.ts';
import { gatherRecords } from '../lib/report/records.ts';
import { graphSvg } from '../lib/report/svg.ts';
import { pipeline } from '../pipeline.ts';
import { REPORT_NEEDS } from '../stages/report.ts';
import type { EvidenceRecord } from '../schemas/generated/evidence-record.ts';

const root = join(import.meta.dirname, '..');
const venv = process.env.TERNFORGE_VENV || join(root, '.ternforge', 'venv');
const given = process.env.TERNFORGE_REPORT_TEST_WORKDIR;
const CHROMIUM = '/usr/bin/chromium';
let workdir: string;
let out: string;
const place = (s: string): string => join(workdir, '.ternforge', 'tiny', s);
const scratch: string[] = [];

beforeAll(() => {
  workdir = given ?? mkdtempSync(join(tmpdir(), 'ternforge-report-test-'));
  out = join(place('report'), 'outputs');
  if (given !== undefined) return;
  const cli = spawnSync(process.execPath, ['--import', 'tsx', join(root, 'pipeline.ts'), 'report', '--profile', 'tiny', '--workdir', workdir], { cwd: root, encoding: 'utf8', env: { ...process.env, TERNFORGE_VENV: venv }, timeout: 590_000, maxBuffer: 64 * 2 ** 20 });
  if (cli.status !== 0) throw new Error(`report failed (${cli.status}):\n${cli.stdout}\n${cli.stderr.slice(-6000)}`);
}, 600_000);
/** The tables of an HTML fragment, in order: class and rows of cell texts (tags stripped, entities decoded). */
function tables(html: string): Array<{ cls: string; rows: string[][] }> {
  const text = (c: string): string => c.replace(/<[^>]*>/g, '').replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&quot;/g, '"').replace(/&amp;/g, '&').trim();
  return [...html.matchAll(/<table(?: class="([^"]*)")?>([\s\S]*?)<\/table>/g)].map((t) => ({
    cls: t[1] ?? '',
    rows: [...t[2]!.matchAll(/<tr>([\s\S]*?)<\/tr>/g)].map((r) => [...r[1]!.matchAll(/<t[dh][^>]*>([\s\S]*?)<\/t[dh]>/g)].map((c) => text(c[1]!))),
  }));
}

interface Box { x: number; y: number; width: number; height: number }
type Pt = { x: number; y: number };

/** The stage graph SVG read back: boxes by stage (data-stage) and edges (data-from, data-to, points of d). */
function readGraph(svg: string): { boxes: Map<string, Box>; edges: Array<{ from: string; to: string; points: Pt[] }> } {
  const boxes = new Map([...svg.matchAll(/<rect data-stage="([^"]+)" x="([-\d.]+)" y="([-\d.]+)" width="([\d.]+)" height="([\d.]+)"/g)].map((m) => [m[1]!, { x: Number(m[2]), y: Number(m[3]), width: Number(m[4]), height: Number(m[5]) }] as const));
  const edges = [...svg.matchAll(/<path d="([^"]+)" class="edge" data-from="([^"]+)" data-to="([^"]+)"/g)].map((m) => ({ from: m[2]!, to: m[3]!, points: [...m[1]!.matchAll(/[ML]([-\d.]+),([-\d.]+)/g)].map((p) => ({ x: Number(p[1]), y: Number(p[2]) })) }));
  return { boxes, edges };
}

/** Does segment a-b pass through the inside of box r (shrunk by 0.5, so touching a side does not count)? Liang-Barsky clipping. */
function crosses(a: Pt, b: Pt, r: Box): boolean {
  const x0 = r.x + 0.5, x1 = r.x + r.width - 0.5, y0 = r.y + 0.5, y1 = r.y + r.height - 0.5;
  const dx = b.x - a.x, dy = b.y - a.y;
  let t0 = 0, t1 = 1;
  for (const [p, q] of [[-dx, a.x - x0], [dx, x1 - a.x], [-dy, a.y - y0], [dy, y1 - a.y]] as const) {
    if (p === 0) {
      if (q < 0) return false;
      continue;
    }
    const t = q / p;
    if (p < 0) t0 = Math.max(t0, t);
    else t1 = Math.min(t1, t);
    if (t0 >= t1) return false;
  }
  return true;
}

/**
 * What "laid out in layers" means for the graph drawn from `needs`: every declared edge is drawn once;
 * it leaves its source's right side and enters its target's left side; its points never go back left;
 * the source's column is left of the target's (so every path of k edges spans k+1 columns); and no
 * segment passes through a box other than its two ends. Returns the problems, [] when none.
 */
function layeredProblems(svg: string, needs: ReadonlyMap<string, readonly string[]>): string[] {
  const { boxes, edges } = readGraph(svg);
  const problems: string[] = [];
  const declared = [...needs].flatMap(([n, ups]) => ups.map((u) => `${u} -> ${n}`)).sort();
  const drawn = edges.map((e) => `${e.from} -> ${e.to}`).sort();
  if (JSON.stringify(drawn) !== JSON.stringify(declared)) problems.push(`edges drawn ${JSON.stringify(drawn)} are not the declared ${JSON.stringify(declared)}`);
  if (boxes.size !== needs.size) problems.push(`${boxes.size} boxes for ${needs.size} stages`);
  const near = (u: number, v: number): boolean => Math.abs(u - v) <= 0.11;
  for (const e of edges) {
    const a = boxes.get(e.from)!;
    const b = boxes.get(e.to)!;
    const first = e.points[0]!;
    const last = e.points.at(-1)!;
    if (!(a.x + a.width < b.x)) problems.push(`${e.from} -> ${e.to}: the source's column is not left of the target's`);
    if (!near(first.x, a.x + a.width) || first.y < a.y || first.y > a.y + a.height) problems.push(`${e.from} -> ${e.to}: does not leave ${e.from}'s right side`);
    if (!near(last.x, b.x) || last.y < b.y || last.y > b.y + b.height) problems.push(`${e.from} -> ${e.to}: does not enter ${e.to}'s left side`);
    for (let k = 0; k + 1 < e.points.length; k++) {
      if (e.points[k + 1]!.x < e.points[k]!.x - 0.11) problems.push(`${e.from} -> ${e.to}: segment ${k} goes back left`);
      for (const [n, r] of boxes) if (n !== e.from && n !== e.to && crosses(e.points[k]!, e.points[k + 1]!, r)) problems.push(`${e.from} -> ${e.to}: segment ${k} passes through ${n}`);
    }
  }
  return problems;
}

afterAll(() => {
  for (const d of scratch) rmSync(d, { recursive: true, force: true });
  if (given === undefined) rmSync(workdir, { recursive: true, force: true });
});

describe('report on tiny', () => {
  test("the outputs are emit's tree, hard-linked file by file, plus evidence/", () => {
    const emitOut = join(place('emit'), 'outputs');
    const emitted = listTree(emitOut);
    const reported = listTree(out);
    for (const f of emitted) {
      expect(reported).toContain(f);
      // Same inode: never a copy (the weights of the real model are gigabytes).
      expect({ f, ino: statSync(join(out, f)).ino }).toEqual({ f, ino: statSync(join(emitOut, f)).ino });
    }
    const added = reported.filter((f) => !emitted.includes(f));
    expect(added.every((f) => f.startsWith('evidence/'))).toBe(true);
    for (const f of [EVIDENCE_PATHS.guide, EVIDENCE_PATHS.guideJson, EVIDENCE_PATHS.html, `${EVIDENCE_PATHS.records}/emit.json`, `${EVIDENCE_PATHS.records}/python-env.json`]) expect(added).toContain(f);
  });

  test('every record validates against its schema and the records chain', () => {
    const schemas = engineSchemaSet();
    const records = listTree(join(out, EVIDENCE_PATHS.records));
    expect(records.map((r) => r.replace(/\.json$/, '')).sort()).toEqual(pipeline.stages.map((s) => s.stage.name).filter((s) => s !== 'report').sort());
    const byStage = new Map<string, EvidenceRecord>();
    for (const r of records) {
      const value = JSON.parse(readFileSync(join(out, EVIDENCE_PATHS.records, r), 'utf8')) as EvidenceRecord;
      expect({ r, errors: schemas.validate('evidence-record.schema.json', value) }).toEqual({ r, errors: [] });
      byStage.set(value.stage, value);
    }
    for (const rec of byStage.values()) for (const [up, d] of Object.entries(rec.keyData.upstream)) expect({ stage: rec.stage, up, d }).toEqual({ stage: rec.stage, up, d: byStage.get(up)!.outputDigest });
    // The report's own record, written by the engine after it ran.
    const own = JSON.parse(readFileSync(join(place('report'), 'evidence.json'), 'utf8')) as EvidenceRecord;
    expect(schemas.validate('evidence-record.schema.json', own)).toEqual([]);
    expect(Object.keys(own.keyData.upstream).sort()).toEqual([...REPORT_NEEDS].sort());
  });

  test("the graph the records show is pipeline.ts's declared graph", () => {
    const g = buildGraph(pipeline);
    if (!g.ok) throw new Error('pipeline');
    const gathered = gatherRecords({ workdir, profile: 'tiny', stages: g.value.order.filter((s) => s !== 'report'), outputsOf: (s) => join(place(s), 'outputs') });
    if (!gathered.ok) throw new Error(JSON.stringify(gathered.error));
    const fromRecords = graphFromRecords(gathered.value, 'report', REPORT_NEEDS);
    for (const s of g.value.order) expect({ s, needs: [...fromRecords.needs.get(s)!].sort() }).toEqual({ s, needs: [...g.value.needs.get(s)!].sort() });
  });

  test('guide.json passes its schema; every cited file and line exists and holds its anchor', () => {
    const guide = JSON.parse(readFileSync(join(out, EVIDENCE_PATHS.guideJson), 'utf8')) as Guide;
    expect(new SchemaSet(join(root, 'schemas')).validate('evidence-guide.schema.json', guide)).toEqual([]);
    expect(guide.rules.map((r) => r.id)).toEqual(['pinned-start', 'text-only', 'no-benchmark-data', 'served-equals-audited', 'ternary-execution', 'no-outside-apis']);
    const cited = guide.rules.flatMap((r) => r.citations);
    expect(cited.length).toBeGreaterThan(20);
    for (const c of cited) {
      const lines = readFileSync(join(out, c.file), 'utf8').split('\n');
      expect({ c: `${c.file}:${c.line}`, has: lines[c.line - 1]?.includes(c.anchor), text: lines[c.line - 1]?.trim() }).toEqual({ c: `${c.file}:${c.line}`, has: true, text: c.text });
    }
    // The README cites exactly those lines: every `path:N` in it is a citation that holds.
    const readme = readFileSync(join(out, EVIDENCE_PATHS.guide), 'utf8');
    const inReadme = [...readme.matchAll(/`([\w./-]+):(\d+)`/g)].map((m) => `${m[1]}:${m[2]}`);
    expect(inReadme.length).toBe(cited.length);
    expect(new Set(inReadme)).toEqual(new Set(cited.map((c) => `${c.file}:${c.line}`)));
    // The loader lines that skip exempt tensors and unpack codes are among them.
    expect(cited.some((c) => c.file.endsWith('loader.py') && c.text.startsWith('if is_exempt('))).toBe(true);
    expect(cited.some((c) => c.file.endsWith('loader.py') && c.text.startsWith('t = unpack_2bit('))).toBe(true);
  });

  test('placeholder stages are named as such and no figure is invented for them', () => {
    const guide = JSON.parse(readFileSync(join(out, EVIDENCE_PATHS.guideJson), 'utf8')) as Guide;
    const readme = readFileSync(join(out, EVIDENCE_PATHS.guide), 'utf8');
    const placeholders = REPORT_NEEDS.filter((s) => {
      const rec = JSON.parse(readFileSync(join(place(s), 'evidence.json'), 'utf8')) as EvidenceRecord;
      return rec.outputs.length === 1 && rec.outputs[0]!.path === 'PLACEHOLDER';
    });
    expect(guide.placeholders).toEqual(placeholders);
    if (placeholders.length > 0) expect(readme).toContain(`**Not yet implemented (placeholder stages, no evidence and no figures):** ${placeholders.join(', ')}.`);
    const html = readFileSync(join(out, EVIDENCE_PATHS.html), 'utf8');
    for (const s of placeholders) if (s === 'quality' || s === 'eval') expect(html).toContain(`${s} is still a placeholder`);
    expect(readme.split('\n')[0]).toBe('# Reviewer guide: tiny');
  });

  test('verify passes on the complete submission', () => {
    const r = spawnSync(process.execPath, ['--import', 'tsx', join(root, 'pipeline.ts'), 'verify', out], { cwd: root, encoding: 'utf8' });
    expect({ status: r.status, stderr: r.stderr }).toEqual({ status: 0, stderr: '' });
    expect(r.stdout).toContain('gate ternary-fraction');
  });

  test('the report stage refuses a build whose data manifest wires a benchmark dataset into calibration or selection', async () => {
    // A copy of this build's state in which fetch-calib "produced" a doctored data manifest.
    const wd = mkdtempSync(join(tmpdir(), 'ternforge-report-doctored-'));
    scratch.push(wd);
    const g = buildGraph(pipeline);
    if (!g.ok) throw new Error('pipeline');
    const realManifest = JSON.parse(readFileSync(join(place('fetch-calib'), 'outputs', 'data_manifest.json'), 'utf8')) as DataManifest;
    const template = realManifest.sources[0]!;
    for (const s of g.value.order.filter((x) => x !== 'report')) {
      mkdirSync(join(wd, '.ternforge', 'tiny', s), { recursive: true });
      const rec = JSON.parse(readFileSync(join(place(s), 'evidence.json'), 'utf8')) as EvidenceRecord;
      if (s === 'fetch-calib') {
        // This build's own manifest (it passes schemas/data-manifest.schema.json), its sources swapped.
        const doctored = { ...realManifest, sources: [
          { ...template, name: 'openr1', dataset: 'open-r1/OpenR1-Math-220k', config: 'default', split: 'train', role: 'calibration' },
          { ...template, name: 'gpqa-diamond', dataset: 'Idavidrein/gpqa', config: 'gpqa_diamond', split: 'train', role: 'calibration' },
          { ...template, name: 'mmlu-pro-val', dataset: 'TIGER-Lab/MMLU-Pro', config: null, split: 'validation', role: 'selection' },
        ] };
        const dir = join(wd, 'store', 'fetch-calib', rec.outputDigest);
        mkdirSync(dir, { recursive: true });
        const text = JSON.stringify(doctored, null, 2);
        writeFileSync(join(dir, 'data_manifest.json'), text);
        rec.outputs = [{ path: 'data_manifest.json', sha256: sha256(text), size: Buffer.byteLength(text) }];
        symlinkSync(dir, join(wd, '.ternforge', 'tiny', s, 'outputs'));
        writeFileSync(join(wd, '.ternforge', 'tiny', s, 'evidence.json'), JSON.stringify(rec));
      } else {
        copyFileSync(join(place(s), 'evidence.json'), join(wd, '.ternforge', 'tiny', s, 'evidence.json'));
        if (existsSync(join(place(s), 'outputs'))) symlinkSync(join(place(s), 'outputs'), join(wd, '.ternforge', 'tiny', s, 'outputs'));
      }
    }
    const dest = join(wd, 'out');
    mkdirSync(dest);
    const r = await buildReport({ profile: 'tiny', workdir: wd, root, out: dest, direct: REPORT_NEEDS, upstream: (s) => join(wd, '.ternforge', 'tiny', s, 'outputs'), log: () => {} });
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.error.reason).toBe('provenance-violation');
    const text = formatFailure(asEngineFailure('report', r.error));
    expect(text.split('\n')).toEqual([
      `stage report failed: provenance proof failed (${join(wd, '.ternforge', 'tiny', 'fetch-calib', 'outputs', 'data_manifest.json')}): benchmark or held-out data could reach quantize or a choice of defaults`,
      '  gpqa-diamond [benchmark-not-evaluation]: gpqa-diamond (Idavidrein/gpqa/gpqa_diamond, split train) is GPQA benchmark data but has role "calibration"; benchmark data may only have the role "evaluation"',
      '  mmlu-pro-val [benchmark-not-evaluation]: mmlu-pro-val (TIGER-Lab/MMLU-Pro, split validation) is MMLU-Pro benchmark data but has role "selection"; benchmark data may only have the role "evaluation"',
    ]);
    // The same build with only the clean source passes, and its guide lists the source.
    const clean = { ...realManifest, sources: [{ ...template, name: 'openr1', dataset: 'open-r1/OpenR1-Math-220k', config: 'default', split: 'train', role: 'calibration' }] };
    writeFileSync(join(wd, '.ternforge', 'tiny', 'fetch-calib', 'outputs', 'data_manifest.json'), JSON.stringify(clean, null, 2));
    const dest2 = join(wd, 'out2');
    mkdirSync(dest2);
    const r2 = await buildReport({ profile: 'tiny', workdir: wd, root, out: dest2, direct: REPORT_NEEDS, upstream: (s) => join(wd, '.ternforge', 'tiny', s, 'outputs'), log: () => {} });
    expect(r2.ok ? 'ok' : formatStageFailure(r2.error)).toBe('ok');
    expect(readFileSync(join(dest2, EVIDENCE_PATHS.guide), 'utf8')).toContain('calibration sources (fit the weights in quantize): openr1');
    // The same manifest off its schema (a role no rule knows) is refused before the proof reads it, naming the field.
    const manifestPath = join(wd, '.ternforge', 'tiny', 'fetch-calib', 'outputs', 'data_manifest.json');
    writeFileSync(manifestPath, JSON.stringify({ ...clean, sources: [{ ...clean.sources[0], role: 'training' }] }, null, 2));
    const dest3 = join(wd, 'out3');
    mkdirSync(dest3);
    const r3 = await buildReport({ profile: 'tiny', workdir: wd, root, out: dest3, direct: REPORT_NEEDS, upstream: (s) => join(wd, '.ternforge', 'tiny', s, 'outputs'), log: () => {} });
    expect(r3.ok ? 'ok' : formatStageFailure(r3.error)).toBe(`fetch-calib's data manifest fails schemas/data-manifest.schema.json\n  ${manifestPath}: /sources/0/role must be equal to one of the allowed values`);
  });

  test('an evidence file the guide reads that is off its schema, or not JSON, fails the report, naming the file and the field', () => {
    const sub = mkdtempSync(join(tmpdir(), 'ternforge-report-evidence-'));
    scratch.push(sub);
    // tiny's eval declares no sweep: every other file is in this build.
    const present = Object.values(EVIDENCE_FILES).filter(({ path }) => existsSync(join(out, path)));
    expect(Object.values(EVIDENCE_FILES).length - present.length).toBe(1);
    for (const { path } of present) {
      mkdirSync(dirname(join(sub, path)), { recursive: true });
      copyFileSync(join(out, path), join(sub, path));
    }
    // This build's own files pass.
    expect(readEvidenceFiles(sub).ok).toBe(true);
    const audit = JSON.parse(readFileSync(join(sub, 'evidence/audit.json'), 'utf8')) as { gates: Record<string, { value?: unknown }>; violations: unknown[] };
    audit.gates['ternary-fraction']!.value = String(audit.gates['ternary-fraction']!.value);
    audit.violations.push({ gate: 'weight-audit', reason: 'looks-odd' });
    writeFileSync(join(sub, 'evidence/audit.json'), JSON.stringify(audit));
    writeFileSync(join(sub, EVIDENCE_PATHS.quality), '{"format": "ternforge-quality/1", "metrics": ');
    // The eval stage's answers without the ternary model's report, and with an accuracy written as text.
    const answers = JSON.parse(readFileSync(join(sub, EVIDENCE_FILES.answers.path), 'utf8')) as { retention: Array<{ floatAccuracy: unknown }>; ternary?: unknown };
    delete answers.ternary;
    answers.retention[0]!.floatAccuracy = '1.0';
    writeFileSync(join(sub, EVIDENCE_FILES.answers.path), JSON.stringify(answers));
    const r = readEvidenceFiles(sub);
    expect(r).toEqual({
      ok: false,
      error: {
        reason: 'evidence-unverifiable',
        detail: 'evidence files the guide reads fail their schemas',
        items: [
          'evidence/audit.json (schemas/audit-report.schema.json): /gates/ternary-fraction/value must be number',
          `evidence/audit.json (schemas/audit-report.schema.json): /violations/${audit.violations.length - 1}/reason must be equal to one of the allowed values`,
          expect.stringMatching(/^evidence\/quality\.json \(schemas\/quality-report\.schema\.json\): not JSON: /),
          "evidence/eval/answers.json (schemas/answer-retention.schema.json): / must have required property 'ternary'",
          'evidence/eval/answers.json (schemas/answer-retention.schema.json): /retention/0/floatAccuracy must be number',
        ],
      },
    });
  });

  test("report.html shows the eval stage's benchmark table and answer retention per kind, inside the volatile block", () => {
    const html = readFileSync(join(out, EVIDENCE_PATHS.html), 'utf8');
    const files = readEvidenceFiles(out);
    if (!files.ok || files.value.eval === null || files.value.answers === null) throw new Error('the tiny build has no eval files');
    const section = html.slice(html.indexOf('<h2>Eval results</h2>'), html.indexOf('<h2>Provenance proof'));
    const lines = section.trimEnd().split('\n');
    expect([lines[0], lines[1], lines.at(-1)]).toEqual(['<h2>Eval results</h2>', VOLATILE_BEGIN, VOLATILE_END]);
    for (const r of files.value.eval.table.rows) expect(section).toContain(`<tr><td>${r.benchmark}</td><td>${r.questions}</td><td>${r.correct}</td>`);
    for (const r of files.value.answers.retention) expect(section).toContain(`<tr><td>${r.kind}</td><td>${r.questions}</td><td>${r.floatCorrect}</td><td>${r.ternaryCorrect}</td>`);
    expect(section).toContain('<th>ternary right</th>');
  });

  test('report.html shows quality as tables: the summary first (perplexity ratio on top), the shards with their full sha256, then one row per tensor kind', () => {
    const html = readFileSync(join(out, EVIDENCE_PATHS.html), 'utf8');
    const quality = JSON.parse(readFileSync(join(out, EVIDENCE_PATHS.quality), 'utf8')) as {
      metrics: { ppl_ratio: number; ppl: number; ppl_reference: number };
      tensors: { count: number; per_tensor: Record<string, { rel_frobenius: number; zero_share: number }> };
      loader: { shards: Array<{ file: string; sha256: string }> };
    };
    const start = html.indexOf('<h2>Quality');
    const section = html.slice(start, html.indexOf('<h2>', start + 1));
    const t = tables(section);
    expect(t.map((x) => x.cls)).toEqual(['quality-summary', 'quality-shards', 'quality-kinds']);
    // Summary first: the perplexity ratio is its first row, then the two perplexities.
    const summary = t[0]!.rows;
    expect(summary[0]).toEqual(['figure', 'value', 'field']);
    expect(summary.slice(1, 4)).toEqual([
      ['perplexity ratio (ternary / reference)', quality.metrics.ppl_ratio.toPrecision(4), 'metrics.ppl_ratio'],
      ['perplexity, ternary (packed shards)', quality.metrics.ppl.toExponential(3), 'metrics.ppl'],
      ['perplexity, full-precision reference', quality.metrics.ppl_reference.toExponential(3), 'metrics.ppl_reference'],
    ]);
    expect(summary.find((r) => r[2] === 'tensors.count')?.[1]).toBe(String(quality.tensors.count));
    // The shard's sha256 in full, in a wrapping digest cell.
    for (const sh of quality.loader.shards) {
      expect(t[1]!.rows).toContainEqual([sh.file, expect.any(String), sh.sha256]);
      expect(section).toContain(`<code class="digest">${sh.sha256}</code>`);
    }
    // Per kind: the tensor's name without the model prefix, the layer index and .weight.
    const expected = new Map<string, Array<{ layer: number; rel: number }>>();
    for (const [name, v] of Object.entries(quality.tensors.per_tensor)) {
      const m = /^model\.language_model\.layers\.(\d+)\.(.+)\.weight$/.exec(name);
      if (m === null) throw new Error(`tiny's tensor ${name} is not model.language_model.layers.N.*.weight`);
      expected.set(m[2]!, [...(expected.get(m[2]!) ?? []), { layer: Number(m[1]), rel: v.rel_frobenius }]);
    }
    const kinds = t[2]!.rows.slice(2);
    expect(kinds.map((r) => r[0])).toEqual([...expected.keys()].sort());
    for (const r of kinds) {
      const xs = expected.get(r[0]!)!;
      const top = xs.reduce((a, x) => (x.rel > a.rel ? x : a));
      expect({ kind: r[0], count: r[1], max: r[5] }).toEqual({ kind: r[0], count: String(xs.length), max: `${top.rel.toPrecision(4)} (${top.layer})` });
    }
    expect(kinds.length).toBeLessThan(Object.keys(quality.tensors.per_tensor).length);
    // No per-tensor row is left: no cell names a layer.
    expect(t.flatMap((x) => x.rows.flat()).filter((c) => /layers\.\d/.test(c))).toEqual([]);
    // The timings are volatile.
    expect(section).toMatch(new RegExp(`${VOLATILE_BEGIN}<p class="note">Measured in [^<]* s; loader phases [^<]*</p>${VOLATILE_END}`));
  });

  test("the stage graph is layered: pipeline.ts's edges, each left to right, none through a box", () => {
    const html = readFileSync(join(out, EVIDENCE_PATHS.html), 'utf8');
    const svg = html.slice(html.indexOf('<svg', html.indexOf('<h2>Stage graph</h2>')), html.indexOf('</svg>', html.indexOf('<h2>Stage graph</h2>')));
    const g = buildGraph(pipeline);
    if (!g.ok) throw new Error('pipeline');
    expect(layeredProblems(svg, g.value.needs)).toEqual([]);
    // As many columns as the longest path has stages (python-env ... report).
    const depth = new Map<string, number>();
    for (const n of g.value.order) depth.set(n, Math.max(0, ...g.value.needs.get(n)!.map((u) => depth.get(u)! + 1)));
    const { boxes } = readGraph(svg);
    expect(new Set([...boxes.values()].map((b) => b.x)).size).toBe(Math.max(...depth.values()) + 1);
    // The check sees a crossing: python-env -> fetch-model redrawn through the centre of quality's box.
    const a = boxes.get('python-env')!;
    const c = boxes.get('quality')!;
    const b = boxes.get('fetch-model')!;
    const through = svg.replace(/(<path d=")[^"]*(" class="edge" data-from="python-env" data-to="fetch-model")/, `$1M${a.x + a.width},${a.y + a.height / 2} L${c.x + c.width / 2},${c.y + c.height / 2} L${b.x},${b.y + b.height / 2}$2`);
    expect(layeredProblems(through, g.value.needs)).toContain('python-env -> fetch-model: segment 0 passes through quality');
    expect(svg).toMatch(/^<svg [^>]*viewBox="0 0 \d+ \d+"/);
  });

  test('graphSvg lays out any DAG in layers with no edge through a box', () => {
    // Random DAGs of up to 14 stages: each stage needs a random subset of the ones before it.
    const dag = fc.integer({ min: 1, max: 14 }).chain((n) => fc.tuple(...Array.from({ length: n }, (_, i) => fc.subarray(Array.from({ length: i }, (_, j) => j)))));
    fc.assert(fc.property(dag, (ups) => {
      const order = ups.map((_, i) => `s${i}`);
      const needs = new Map(ups.map((u, i) => [`s${i}`, u.map((j) => `s${j}`)] as const));
      const svg = graphSvg({ order, needs, state: () => 'ran' });
      expect(layeredProblems(svg, needs)).toEqual([]);
    }), { numRuns: 60, seed: 37 });
  });

  test('report.html needs no horizontal scroll at 1280 px (measured in headless Chromium)', () => {
    expect(existsSync(CHROMIUM), `${CHROMIUM} is missing: apt-get install -y chromium (scripts/system-deps.ts installs it)`).toBe(true);
    const tmp = mkdtempSync(join(tmpdir(), 'ternforge-chromium-width-'));
    scratch.push(tmp);
    // Only in this copy: the page's CSP (no scripts) is taken out and a script records, after load, the
    // document's scroll width, the viewport's width, and every element whose box reaches past the viewport
    // or whose content overflows its table cell.
    const probe = `<script>addEventListener('load', () => {
      const vw = document.documentElement.clientWidth;
      const wide = [...document.body.querySelectorAll('*')].filter((e) => e.getBoundingClientRect().right > vw + 0.5 || ((e.tagName === 'TD' || e.tagName === 'TH') && e.scrollWidth > e.clientWidth + 1)).map((e) => e.tagName + ': ' + (e.textContent || '').slice(0, 80));
      const out = document.createElement('pre');
      out.id = 'measure';
      out.textContent = JSON.stringify({ scrollWidth: document.documentElement.scrollWidth, clientWidth: vw, innerWidth: window.innerWidth, wide });
      document.body.append(out);
    });</script>`;
    const measure = (page: string): { scrollWidth: number; clientWidth: number; innerWidth: number; wide: string[] } => {
      const file = join(tmp, `page-${Math.random().toString(36).slice(2)}.html`);
      writeFileSync(file, page.replace(/<meta http-equiv="Content-Security-Policy"[^>]*>/, '').replace('</body>', `${probe}</body>`));
      const r = spawnSync(CHROMIUM, ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run', `--user-data-dir=${join(tmp, `profile-${Math.random().toString(36).slice(2)}`)}`, '--window-size=1280,900', '--virtual-time-budget=2000', '--dump-dom', `file://${file}`], { encoding: 'utf8', timeout: 60_000, maxBuffer: 64 * 2 ** 20 });
      expect(r.status).toBe(0);
      const m = /<pre id="measure">([^<]*)<\/pre>/.exec(r.stdout);
      if (m === null) throw new Error(`no measurement in the dumped DOM:\n${r.stdout.slice(-2000)}\n${r.stderr.slice(-2000)}`);
      return JSON.parse(m[1]!.replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&amp;/g, '&')) as { scrollWidth: number; clientWidth: number; innerWidth: number; wide: string[] };
    };
    // Control: the probe does see a page that is too wide.
    const control = measure('<!DOCTYPE html><html><body><div style="width:2000px">wide</div></body></html>');
    expect(control.innerWidth).toBe(1280);
    expect(control.scrollWidth).toBeGreaterThanOrEqual(2000);
    expect(control.wide.length).toBeGreaterThan(0);
    const page = measure(readFileSync(join(out, EVIDENCE_PATHS.html), 'utf8'));
    expect(page.innerWidth).toBe(1280);
    expect({ scrollWidth: page.scrollWidth, wide: page.wide }).toEqual({ scrollWidth: page.clientWidth, wide: [] });
  });

  test('report.html is self-contained and renders in headless Chromium with no console message', () => {
    const html = readFileSync(join(out, EVIDENCE_PATHS.html), 'utf8');
    expect(html).not.toMatch(/<script|<link|<iframe|<img|@import|url\((?!#)/i);
    expect([...html.matchAll(/(?:src|href)\s*=\s*"([^"]*)"/gi)].map((m) => m[1]).filter((u) => !u!.startsWith('#'))).toEqual([]);
    expect(html).toContain('<svg');
    expect(existsSync(CHROMIUM), `${CHROMIUM} is missing: apt-get install -y chromium`).toBe(true);
    const tmp = mkdtempSync(join(tmpdir(), 'ternforge-chromium-'));
    scratch.push(tmp);
    const shot = process.env.TERNFORGE_REPORT_SCREENSHOT ?? join(tmp, 'report.png');
    const render = (url: string, png: string): string => {
      const r = spawnSync(CHROMIUM, ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run', `--user-data-dir=${join(tmp, `profile-${Math.random().toString(36).slice(2)}`)}`, '--enable-logging=stderr', '--v=0', `--screenshot=${png}`, '--window-size=1280,2000', url], { encoding: 'utf8', timeout: 60_000 });
      expect(r.status).toBe(0);
      return r.stderr;
    };
    // Control: the harness does see a console message.
    writeFileSync(join(tmp, 'control.html'), "<!DOCTYPE html><html><body><script>console.error('control')</script></body></html>");
    expect(render(`file://${join(tmp, 'control.html')}`, join(tmp, 'control.png'))).toMatch(/CONSOLE.*"control"/);
    const stderr = render(`file://${join(out, EVIDENCE_PATHS.html)}`, shot);
    expect(stderr.split('\n').filter((l) => /CONSOLE|Refused to|Failed to load|ERR_/.test(l))).toEqual([]);
    expect(statSync(shot).size).toBeGreaterThan(20_000);
    if (process.env.TERNFORGE_REPORT_SCREENSHOT === undefined) process.stdout.write(`report screenshot: ${shot} (kept until the test ends)\n`);
  });
});
