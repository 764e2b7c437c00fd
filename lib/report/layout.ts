/**
 * What the report stage adds to the emitted submission, written once:
 *
 *   evidence/README.md            the reviewer guide (rules -> files:lines -> commands, provenance proof)
 *   evidence/guide.json           the same, as data (schemas/evidence-guide.schema.json)
 *   evidence/report.html          self-contained HTML report (inline CSS and SVG, no scripts, no network)
 *   evidence/records/<stage>.json every stage's evidence record (schemas/evidence-record.schema.json)
 *   evidence/<stage files>        upstream reports, hard-linked when the stage produced them (table below)
 */

/** Paths inside the submission. */
export const EVIDENCE_PATHS = {
  guide: 'evidence/README.md',
  guideJson: 'evidence/guide.json',
  html: 'evidence/report.html',
  records: 'evidence/records',
  dataManifest: 'evidence/data_manifest.json',
  quantizeReport: 'evidence/quantize_report.json',
  quality: 'evidence/quality.json',
  smoke: 'evidence/smoke/smoke.json',
  startupReport: 'evidence/smoke/startup-report.json',
  eval: 'evidence/eval',
} as const;

/**
 * Upstream files copied (hard-linked) into evidence/ when present: name in the submission <- (stage,
 * path in its outputs). A directory source takes every file under it.
 */
export const EXTRA_EVIDENCE: ReadonlyArray<{ name: string; stage: string; path: string }> = [
  { name: EVIDENCE_PATHS.dataManifest, stage: 'fetch-calib', path: 'data_manifest.json' },
  { name: EVIDENCE_PATHS.quantizeReport, stage: 'quantize', path: 'quantize_report.json' },
  { name: EVIDENCE_PATHS.quality, stage: 'quality', path: 'quality.json' },
  { name: EVIDENCE_PATHS.smoke, stage: 'smoke-serve', path: 'smoke.json' },
  { name: EVIDENCE_PATHS.startupReport, stage: 'smoke-serve', path: 'startup-report.json' },
  { name: 'evidence/smoke/serve.log', stage: 'smoke-serve', path: 'serve.log' },
  { name: EVIDENCE_PATHS.eval, stage: 'eval', path: '.' },
];
