/**
 * Citations into the shipped files: `file:line` found by searching for an anchor string at generation
 * time, never a hard-coded line number. A required anchor that is not found fails the report (the guide
 * would otherwise point a reviewer at the wrong line).
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Citation } from '../../schemas/generated/evidence-guide.ts';

/** Something to cite: the first line of `file` (relative to the submission root) containing `anchor`. */
export interface Anchor {
  file: string;
  anchor: string;
  /** What the cited line shows, for the reader. */
  why: string;
  /** Fail the report when the anchor is missing (default true). */
  required?: boolean;
  /** Cite every line containing the anchor, not only the first. */
  all?: boolean;
}

/** A resolved citation (schemas/evidence-guide.schema.json). */
export type { Citation };

/** An anchor that could not be found. */
export interface MissingAnchor {
  file: string;
  anchor: string;
  detail: string;
}

const linesCache = new Map<string, string[]>();

function linesOf(path: string): string[] | null {
  const known = linesCache.get(path);
  if (known !== undefined) return known;
  if (!existsSync(path)) return null;
  const lines = readFileSync(path, 'utf8').split('\n');
  linesCache.set(path, lines);
  return lines;
}

/** Resolve anchors against the tree at `root`. Optional anchors that are missing are left out. */
export function resolveAnchors(root: string, anchors: readonly Anchor[]): { citations: Citation[]; missing: MissingAnchor[] } {
  linesCache.clear();
  const citations: Citation[] = [];
  const missing: MissingAnchor[] = [];
  for (const a of anchors) {
    const lines = linesOf(join(root, a.file));
    if (lines === null) {
      if (a.required !== false) missing.push({ file: a.file, anchor: a.anchor, detail: 'file is not in the submission' });
      continue;
    }
    let found = 0;
    for (let i = 0; i < lines.length; i++) {
      if (!lines[i]!.includes(a.anchor)) continue;
      citations.push({ file: a.file, line: i + 1, anchor: a.anchor, text: lines[i]!.trim(), why: a.why });
      found++;
      if (a.all !== true) break;
    }
    if (found === 0 && a.required !== false) missing.push({ file: a.file, anchor: a.anchor, detail: 'no line contains the anchor' });
  }
  return { citations, missing };
}
