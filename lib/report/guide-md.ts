/**
 * evidence/README.md: the guide rendered for a person. Timing-free and host-free, so two builds give the
 * same text apart from the digests of stages that measure a live process (smoke-serve, eval).
 */
import type { Check, EvidenceGuide } from '../../schemas/generated/evidence-guide.ts';

const mark = (c: Check): string => (c.passed === true ? 'PASS' : c.passed === false ? 'FAIL' : 'NOT SHOWN');
/** A code span that survives backticks inside the text. */
const code = (s: string): string => (s.includes('`') ? `\`\` ${s} \`\`` : `\`${s}\``);

export function renderGuide(g: EvidenceGuide): string {
  const out: string[] = [];
  out.push(`# Reviewer guide: ${g.profile}`);
  out.push('');
  out.push('Every rule of the submission contract (DESIGN.md section 2), with the claim, the files and lines that show it, what was checked when this guide was generated, and the command that re-checks it. Paths are relative to the submission root; run the commands there. Line numbers were found by searching the shipped files, so they point at the bytes you have.');
  out.push('');
  if (g.placeholders.length > 0) {
    out.push(`**Not yet implemented (placeholder stages, no evidence and no figures):** ${g.placeholders.join(', ')}.`);
    out.push('');
  }
  out.push('| rule | checks |');
  out.push('|---|---|');
  for (const r of g.rules) out.push(`| [${r.title}](#${r.id}) | ${r.checks.map(mark).join(', ') || '-'} |`);
  out.push(`| [Provenance proof](#provenance-proof) | ${g.provenance.passed ? 'PASS' : 'FAIL'} |`);
  out.push('');
  g.rules.forEach((r, i) => {
    out.push(`<a id="${r.id}"></a>`);
    out.push(`## ${i + 1}. ${r.title}`);
    out.push('');
    out.push(`**Claim.** ${r.claim}`);
    out.push('');
    out.push('**Where to look.**');
    out.push('');
    for (const c of r.citations) out.push(`- ${code(`${c.file}:${c.line}`)}: ${c.why}. ${code(c.text.length > 160 ? `${c.text.slice(0, 157)}...` : c.text)}`);
    out.push('');
    out.push('**Checked at generation.**');
    out.push('');
    for (const c of r.checks) out.push(`- ${mark(c)}: ${c.check}. ${c.detail}`);
    out.push('');
    out.push('**Re-check.**');
    out.push('');
    out.push('```sh');
    for (const cmd of r.commands) out.push(cmd);
    out.push('```');
    out.push('');
  });
  const p = g.provenance;
  out.push('<a id="provenance-proof"></a>');
  out.push(`## Provenance proof: ${p.passed ? 'PASS' : 'FAIL'}`);
  out.push('');
  out.push(`Computed from the declared stage graph and ${p.dataManifest === 'present' ? `the data manifest (${code('evidence/data_manifest.json')})` : "fetch-calib's outputs (a placeholder: no data manifest, no data)"}. A stage can read only its direct upstreams' outputs (the engine refuses anything else), so data reaches the submission only along the graph's edges.`);
  out.push('');
  p.steps.forEach((s, i) => {
    out.push(`${i + 1}. **${s.passed ? 'PASS' : 'FAIL'}: ${s.claim}.**`);
    for (const f of s.facts) out.push(`   - ${f}`);
  });
  out.push('');
  if (p.violations.length > 0) {
    out.push('**Violations:**');
    for (const v of p.violations) out.push(`- ${v.source} (${v.rule}): ${v.detail}`);
    out.push('');
  }
  out.push('## Record chain');
  out.push('');
  out.push(`Each stage's record is in ${code('evidence/records/<stage>.json')} (schema: evidence-record). A record's ${code('keyData.upstream')} holds the output digest of every stage it was built from; each equals that stage's ${code('outputDigest')}, from the checkpoint to the emitted shards.`);
  out.push('');
  out.push('| stage | outputs | built from |');
  out.push('|---|---|---|');
  for (const c of g.chain) out.push(`| ${c.stage}${c.placeholder ? ' (placeholder)' : ''} | ${code(c.outputDigest.slice(0, 16))} | ${Object.entries(c.upstream).map(([u, d]) => `${u} ${code(d.slice(0, 16))}`).join(', ') || '-'} |`);
  out.push('');
  out.push(`The HTML report (${code('evidence/report.html')}) draws the graph, the gate margins, per-tensor plots, quality, self-check timings and eval results.`);
  out.push('');
  return out.join('\n');
}
