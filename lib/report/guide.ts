/**
 * The reviewer guide: for each rule of DESIGN.md section 2, the claim, the files and lines that show it
 * (anchors searched in the shipped files at generation time), the checks computed from the evidence,
 * and the commands that re-check it. Written as evidence/guide.json (schemas/evidence-guide.schema.json)
 * and rendered as evidence/README.md.
 *
 * Checks never invent figures: a check whose evidence is absent (a placeholder stage, a file not shipped)
 * says so and is neither passed nor failed (`passed: null`); a check whose evidence contradicts the rule
 * fails the report.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { listFiles } from '../../engine/files.ts';
import { resolveAnchors, type Anchor, type MissingAnchor } from './citations.ts';
import { contract, isExemptName } from '../contract.ts';
import { EVIDENCE_PATHS } from './layout.ts';
import type { ProvenanceProof } from './provenance.ts';
import type { Check, EvidenceGuide, Rule } from '../../schemas/generated/evidence-guide.ts';
import type { StageEvidence } from './records.ts';
import type { EvidenceFiles } from './evidence-files.ts';
import type { QuantizationManifest } from '../../schemas/generated/manifest.ts';

/** The pinned checkpoint of the product profile (DESIGN.md section 1). */
export const PINNED: Readonly<Record<string, { base_model: string; revision: string }>> = {
  'qwen3.5-4b': { base_model: 'Qwen/Qwen3.5-4B', revision: '851bf6e806efd8d0a36b00ddf55e13ccb7b8cd0a' },
};


/** Patterns in shipped server code that would reach a network service. */
export const NETWORK_CLIENT = /\b(import|from)\s+(requests|httpx|aiohttp|openai|anthropic|urllib3|http\.client|urllib\.request)\b|https?:\/\/(?!localhost|127\.0\.0\.1|0\.0\.0\.0)/;

export interface GuideInputs {
  profile: string;
  /** The complete submission tree (report's outputs, with evidence/ filled). */
  submission: string;
  evidence: readonly StageEvidence[];
  proof: ProvenanceProof;
  /** The submission's JSON evidence, checked (readEvidenceFiles). */
  files: EvidenceFiles;
}

const SERVER = 'server/ternforge_server';

function filesUnder(root: string, dir: string): string[] {
  return existsSync(join(root, dir)) ? listFiles(join(root, dir)).map((f) => `${dir}/${f}`) : [];
}

/** Build the guide, and the anchors that could not be found (the caller fails on those). */
export function buildGuide(inp: GuideInputs): { guide: EvidenceGuide; missing: MissingAnchor[]; failed: string[] } {
  const sub = inp.submission;
  const ev = new Map(inp.evidence.map((e) => [e.stage, e]));
  // Read once, each checked against its schema (lib/report/evidence-files.ts); null where absent.
  const manifest: Partial<QuantizationManifest> = inp.files.manifest ?? {};
  const { source, audit, startup, smoke } = inp.files;
  const recordsDir = 'evidence/records';
  const hasData = existsSync(join(sub, EVIDENCE_PATHS.dataManifest));
  const placeholder = (s: string): boolean => ev.get(s)?.placeholder ?? false;
  const absent = (s: string, what: string): Check => ({ check: what, passed: null, detail: `${s} is ${ev.has(s) ? 'a placeholder (its outputs hold only a PLACEHOLDER file)' : 'not in this build'}: not shown` });

  const rules: Rule[] = [];
  const anchors = new Map<string, Anchor[]>();

  // 1. pinned start
  {
    const checks: Check[] = [];
    const origin = source?.origin ?? null;
    if (origin === null) checks.push({ check: 'manifest names the fetched checkpoint', passed: null, detail: 'evidence/source.json has no origin' });
    else {
      const same = origin.base_model === manifest.base_model && origin.revision === manifest.revision;
      checks.push({ check: 'manifest names the fetched checkpoint', passed: same, detail: `manifest ${manifest.base_model}@${manifest.revision}; source.json ${String(origin.base_model)}@${String(origin.revision)} (${String(origin.kind)})` });
    }
    const pin = PINNED[inp.profile];
    if (pin !== undefined) checks.push({ check: 'the checkpoint is the pinned one', passed: manifest.base_model === pin.base_model && manifest.revision === pin.revision, detail: `pinned ${pin.base_model}@${pin.revision}` });
    else checks.push({ check: 'the checkpoint is the pinned one', passed: null, detail: `profile ${inp.profile} is a stand-in for the pinned ${PINNED['qwen3.5-4b']!.base_model}@${PINNED['qwen3.5-4b']!.revision} (origin: ${String(origin?.kind ?? 'unknown')} ${String(origin?.base_model ?? '')}); the qwen3.5-4b profile fetches the pinned revision` });
    const q = ev.get('quantize');
    const fm = ev.get('fetch-model');
    if (q !== undefined && fm !== undefined) {
      const weightsFrom = Object.keys(q.record.keyData.upstream).filter((u) => u !== 'python-env' && u !== 'fetch-calib');
      checks.push({ check: 'quantize read the fetched checkpoint and no other weights', passed: q.record.keyData.upstream['fetch-model'] === fm.record.outputDigest && weightsFrom.length === 1, detail: `quantize's upstreams: ${Object.keys(q.record.keyData.upstream).join(', ')}; fetch-model outputs ${fm.record.outputDigest.slice(0, 16)}…` });
    }
    anchors.set('pinned-start', [
      { file: 'quantization_manifest.json', anchor: '"base_model"', why: 'the base model the weights were quantized from' },
      { file: 'quantization_manifest.json', anchor: '"revision"', why: 'its revision' },
      { file: 'evidence/source.json', anchor: '"base_model"', why: 'what fetch-model fetched (or generated), with the sha256 of every file' },
      { file: 'evidence/source.json', anchor: '"revision"', why: 'the fetched revision' },
      { file: `${recordsDir}/fetch-model.json`, anchor: '"outputDigest"', why: "fetch-model's output digest" },
      { file: `${recordsDir}/quantize.json`, anchor: '"fetch-model": "', why: "quantize's key holds that same digest: it was built from exactly those files" },
    ]);
    rules.push({
      id: 'pinned-start',
      title: 'Quantized from the pinned checkpoint only',
      claim: 'The weights were quantized from the checkpoint fetch-model fetched and hash-checked, and from no other weights: quantize\'s key holds fetch-model\'s output digest, and no other upstream of quantize carries model weights.',
      citations: [],
      checks,
      commands: [`grep -n '"base_model"\\|"revision"' quantization_manifest.json evidence/source.json`, `grep -n '"outputDigest"' evidence/records/fetch-model.json && grep -n '"fetch-model": "' evidence/records/quantize.json   # the two digests are equal`],
    });
  }

  // 2. text-only
  {
    const names = Object.entries(manifest.tensors ?? {});
    const exempt = names.filter(([n, t]) => t.exempt === true || isExemptName(n)).map(([n]) => n);
    const checks: Check[] = [{ check: 'vision tower and MTP tensors are marked exempt in the manifest', passed: true, detail: `${exempt.length} exempt tensor(s) of ${names.length}` }];
    if (startup?.loaded !== undefined) {
      const loadedExempt = startup.loaded.filter((l) => isExemptName(l.name));
      checks.push({ check: 'the server loaded no exempt tensor', passed: loadedExempt.length === 0, detail: `start-up report: ${startup.loaded.length} loaded, ${startup.skipped_exempt?.length ?? 0} skipped as exempt${loadedExempt.length > 0 ? `; LOADED: ${loadedExempt.slice(0, 5).join(', ')}` : ''}` });
    } else checks.push(placeholder('smoke-serve') || !ev.has('smoke-serve') ? absent('smoke-serve', 'the server loaded no exempt tensor') : { check: 'the server loaded no exempt tensor', passed: null, detail: 'smoke-serve kept no start-up report' });
    anchors.set('text-only', [
      { file: `${SERVER}/${contract().submission.contract}`, anchor: '"exempt_prefixes":', why: 'the exempt prefixes (vision tower, MTP): schemas/contract.json, shipped with the server' },
      { file: `${SERVER}/contract.py`, anchor: 'EXEMPT_PREFIXES: tuple', why: 'the server reads them from the shipped contract' },
      { file: `${SERVER}/loader.py`, anchor: 'def is_exempt(', why: 'exempt by flag or by prefix' },
      { file: `${SERVER}/loader.py`, anchor: 'if is_exempt(name, entry):', why: 'the loader skips every exempt tensor' },
      { file: `${SERVER}/loader.py`, anchor: 'report.skipped_exempt.append(name)', why: 'and records it in the start-up report' },
      { file: `${SERVER}/loader.py`, anchor: 'Qwen3_5ForCausalLM(config)', why: 'the model built is the text-only causal LM', required: false },
      { file: EVIDENCE_PATHS.startupReport, anchor: '"skipped_exempt"', why: 'what the served process skipped', required: false },
    ]);
    rules.push({
      id: 'text-only',
      title: 'Text-only inference (no vision tower, no MTP)',
      claim: 'The server builds the text-only causal LM and never reads a vision-tower or MTP tensor: the loader skips every tensor the manifest marks exempt or whose name starts with an exempt prefix.',
      citations: [],
      checks,
      commands: [`grep -n exempt_prefixes ${SERVER}/${contract().submission.contract}`, `grep -n "EXEMPT_PREFIXES\\|is_exempt\\|skipped_exempt" ${SERVER}/loader.py`, `grep -c '"exempt": true' quantization_manifest.json`],
    });
  }

  // 3. no benchmark data
  {
    const p = inp.proof;
    const checks: Check[] = p.steps.map((s) => ({ check: s.claim, passed: s.passed, detail: s.facts.join('; ') }));
    anchors.set('no-benchmark-data', [
      { file: EVIDENCE_PATHS.dataManifest, anchor: '"role":', why: 'each declared source\'s role', required: false, all: true },
      { file: EVIDENCE_PATHS.dataManifest, anchor: '"split":', why: 'each declared source\'s split', required: false, all: true },
      { file: `${recordsDir}/quantize.json`, anchor: '"fetch-calib": "', why: "the data quantize could read: fetch-calib's outputs, by digest" },
      { file: `${recordsDir}/fetch-calib.json`, anchor: '"outputDigest"', why: "fetch-calib's output digest" },
    ]);
    rules.push({
      id: 'no-benchmark-data',
      title: 'No benchmark data used to fit or select anything',
      claim: `Nothing with the role evaluation, no benchmark data and no validation/test split reached quantize or any choice of defaults (proof below, computed from the stage graph and ${hasData ? 'the data manifest' : "fetch-calib's outputs, which are a placeholder: no data was used at all"}).`,
      citations: [],
      checks,
      commands: [hasData ? `grep -n '"dataset"\\|"split"\\|"role"' ${EVIDENCE_PATHS.dataManifest}` : `cat evidence/records/fetch-calib.json   # outputs: only PLACEHOLDER`, 'npx tsx pipeline.ts dag   # the edges the proof walks'],
    });
  }

  // 4. served weights are the audited weights
  {
    const checks: Check[] = [];
    const emitRec = ev.get('emit')?.record;
    for (const s of manifest.shards ?? []) {
      const a = audit?.shards?.find((x) => x.file === s.file);
      const listed = emitRec?.outputs.find((o) => o.path === s.file);
      const ok = a !== undefined && a.sha256 === s.sha256 && a.sha256_ok === true && listed !== undefined && listed.sha256 === s.sha256;
      checks.push({ check: `${s.file}: manifest sha256 = audited sha256 = emitted file`, passed: ok, detail: `manifest ${s.sha256.slice(0, 16)}…, audit ${a?.sha256?.slice(0, 16) ?? 'absent'}… (ok: ${String(a?.sha256_ok)}), emit ${listed?.sha256.slice(0, 16) ?? 'absent'}…` });
      if (startup?.shards !== undefined) {
        const st = startup.shards.find((x) => x.file === s.file);
        checks.push({ check: `${s.file}: the server verified the same sha256 at start-up`, passed: st?.sha256 === s.sha256, detail: `start-up report ${st?.sha256.slice(0, 16) ?? 'absent'}…` });
      }
    }
    if (startup?.shards === undefined) checks.push(absent('smoke-serve', 'the server verified the shards at start-up'));
    anchors.set('served-equals-audited', [
      { file: 'quantization_manifest.json', anchor: '"sha256":', why: 'the sha256 of each shard, as packed', all: true },
      { file: 'evidence/audit.json', anchor: '"sha256_ok": true', why: 'the audit re-hashed each shard', all: true },
      { file: `${SERVER}/loader.py`, anchor: 'def verify_shards(', why: 'at start-up the server checks each shard' },
      { file: `${SERVER}/loader.py`, anchor: 'digest = sha256_file(path)', why: 'hashes it' },
      { file: `${SERVER}/loader.py`, anchor: 'if digest != s["sha256"]:', why: 'and refuses to serve on a mismatch' },
      { file: `${SERVER}/loader.py`, anchor: 'report.shards = verify_shards(sub, manifest)', why: 'before any tensor is read' },
    ]);
    rules.push({
      id: 'served-equals-audited',
      title: 'The server uses exactly the audited weights',
      claim: 'The shards the server loads are the shards the audit checked: the manifest, the audit report and the emitted files agree on every sha256, and the server refuses to start when a shard differs from the manifest.',
      citations: [],
      checks,
      commands: ['sha256sum weights/*.safetensors', `grep -n '"sha256"' quantization_manifest.json evidence/audit.json`, `npx tsx pipeline.ts verify dist/${inp.profile}`],
    });
  }

  // 5. ternary execution
  {
    const tensors = Object.entries(manifest.tensors ?? {});
    const packed = tensors.filter(([, t]) => t.encoding === 'packed_2bit');
    const withFloat = packed.filter(([, t]) => t.data_key !== undefined || t.codes_key === undefined || t.scale_key === undefined);
    const checks: Check[] = [
      { check: 'every ternary tensor is stored only as codes and scales (no float copy)', passed: withFloat.length === 0, detail: `${packed.length} packed_2bit tensor(s)${withFloat.length > 0 ? `; with a float key: ${withFloat.slice(0, 5).map(([n]) => n).join(', ')}` : ''}` },
    ];
    const tf = audit?.gates?.['ternary-fraction'];
    if (tf !== undefined) checks.push({ check: 'ternary fraction gate (audit)', passed: tf.pass, detail: `${tf.value?.toFixed(4)} > ${contract().gates.ternary_fraction_min} (margin ${tf.margin?.toFixed(4)})` });
    const wa = audit?.gates?.['weight-audit'];
    if (wa !== undefined) checks.push({ check: 'weight audit: the manifest matches the stored bytes', passed: wa.pass, detail: `${wa.violations ?? 0} violation(s)` });
    anchors.set('ternary-execution', [
      { file: 'quantization_manifest.json', anchor: '"formula":', why: 'the convention W = (c - 1) * scale' },
      { file: `${SERVER}/packing.py`, anchor: 'def unpack_2bit(', why: 'codes -> ternary t in {-1, 0, 1} (code 3 refused)' },
      { file: `${SERVER}/packing.py`, anchor: 'def dequantize(', why: 'W = t * scale per group' },
      { file: `${SERVER}/packing.py`, anchor: 'w = t.to(torch.float32).reshape(', why: 'the multiplication itself' },
      { file: `${SERVER}/loader.py`, anchor: 'codes, scale = got[entry["codes_key"]]', why: 'the loader reads the stored codes and scales' },
      { file: `${SERVER}/loader.py`, anchor: 't = unpack_2bit(codes, shape[1])', why: 'unpacks them' },
      { file: `${SERVER}/loader.py`, anchor: 'w = dequantize(t, scale, g, want_dtype)', why: 'and computes W from them: no float copy exists to substitute' },
      { file: `${SERVER}/engine_vllm.py`, anchor: 'verify_shards(sub, manifest)', why: 'the bf16 checkpoint vLLM serves on a GPU is written only from shards whose sha256 matches', required: false },
      { file: `${SERVER}/engine_vllm.py`, anchor: 'w = dequantize(unpack_2bit(codes, shape[1]), scale, g, dtype)', why: 'with W computed from the codes by the same functions', required: false },
    ]);
    rules.push({
      id: 'ternary-execution',
      title: 'Ternary execution: W = T * scale from the stored codes',
      claim: 'Every ternary weight the model computes with is rebuilt at start-up from the stored 2-bit codes and per-group scales; the shards hold no float copy of a ternary tensor.',
      citations: [],
      checks,
      commands: [`grep -n "unpack_2bit\\|dequantize(" ${SERVER}/loader.py ${SERVER}/packing.py`, `npx tsx pipeline.ts verify dist/${inp.profile}`],
    });
  }

  // 6. no outside model APIs
  {
    const shipped = ['serve.sh', ...filesUnder(sub, 'server').filter((f) => f.endsWith('.py'))];
    const hits: Anchor[] = [];
    for (const f of shipped) {
      const lines = readFileSync(join(sub, f), 'utf8').split('\n');
      lines.forEach((l) => {
        const m = NETWORK_CLIENT.exec(l);
        if (m !== null && !hits.some((h) => h.file === f && h.anchor === m[0])) hits.push({ file: f, anchor: m[0], why: 'network-capable code: review', all: true });
      });
    }
    const checks: Check[] = [{ check: 'the shipped server code and serve.sh import no network client and name no outside URL', passed: hits.length === 0, detail: hits.length === 0 ? `${shipped.length} file(s) scanned` : `found: ${hits.map((h) => `${h.file}: ${h.anchor}`).join('; ')}` }];
    if (smoke?.isolation !== undefined) checks.push({ check: 'smoke-serve ran the server with no network', passed: smoke.isolation.network_namespace === true ? true : null, detail: smoke.isolation.network_namespace === true ? 'network namespace with only loopback up' : `not isolated: ${smoke.isolation.reason ?? 'unknown'}` });
    else checks.push(absent('smoke-serve', 'smoke-serve ran the server with no network'));
    anchors.set('no-outside-apis', [
      { file: 'serve.sh', anchor: 'HF_HUB_OFFLINE=1', why: 'the hub and transformers are forced offline' },
      { file: 'serve.sh', anchor: '--no-index --find-links "$WHEELS"', why: 'wheels install from wheels/ only' },
      { file: `${SERVER}/app.py`, anchor: 'Route(', why: 'the API is served locally (starlette routes)', required: false, all: true },
      ...hits,
    ]);
    rules.push({
      id: 'no-outside-apis',
      title: 'No use of outside model APIs',
      claim: 'Every answer is generated by the local model: the server code imports no HTTP client and calls no outside service, and serve.sh runs offline.',
      citations: [],
      checks,
      commands: [`grep -rnE "https?://|import (requests|httpx|aiohttp|openai|anthropic)|urllib.request" server/ serve.sh || echo "no network client"`],
    });
  }

  const missing: MissingAnchor[] = [];
  for (const r of rules) {
    const resolved = resolveAnchors(sub, anchors.get(r.id) ?? []);
    r.citations = resolved.citations;
    missing.push(...resolved.missing);
  }
  const failed = rules.flatMap((r) => r.checks.filter((c) => c.passed === false).map((c) => `${r.id}: ${c.check}: ${c.detail}`));
  const chain: EvidenceGuide['chain'] = inp.evidence.map((e) => ({ stage: e.stage, key: e.record.key, outputDigest: e.record.outputDigest, outputMode: e.record.outputMode, placeholder: e.placeholder, upstream: e.record.keyData.upstream }));
  // The schema holds exactly the six rules of DESIGN.md section 2, in this order.
  const [r1, r2, r3, r4, r5, r6, ...extra] = rules;
  if (r6 === undefined || extra.length > 0) throw new Error(`the guide has ${rules.length} rules, not 6`);
  return { guide: { format: 'ternforge-guide/1', profile: inp.profile, rules: [r1!, r2!, r3!, r4!, r5!, r6], provenance: inp.proof, chain, placeholders: inp.evidence.filter((e) => e.placeholder).map((e) => e.stage) }, missing, failed };
}
