/**
 * No tracked file points outside the repository, and the docs' relative links resolve.
 *
 * A clone of the project has only what git tracks: a path into the `shared` folder beside the repository (the
 * workspace the project was built in), or a markdown link that climbs above the repository root, names
 * nothing there.
 * Every tracked text file is scanned for
 *   - the workspace's shared folder by name (SHARED and SHARED_DOCS below);
 *   - a relative path in quotes, backticks or parentheses that, resolved from the file's own folder,
 *     leaves the repository root;
 *   - a markdown link (inline or reference-style) whose relative target leaves the root.
 * Every relative markdown link of README.md, docs/*.md and the other tracked markdown files must name a
 * tracked file or a folder holding tracked files.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join, posix } from 'node:path';
import { describe, expect, test } from 'vitest';

const root = join(import.meta.dirname, '..');

function trackedFiles(): string[] {
  return execFileSync('git', ['ls-files', '-z'], { cwd: root, encoding: 'utf8', maxBuffer: 64 * 2 ** 20 })
    .split('\0')
    .filter((f) => f.length > 0);
}

/** A tracked file's text, or null for a binary file (a NUL byte) or one missing from the work tree. */
function readText(file: string): string | null {
  const path = join(root, file);
  if (!existsSync(path)) return null;
  const bytes = readFileSync(path);
  if (bytes.subarray(0, 8192).includes(0)) return null;
  return bytes.toString('utf8');
}

/** `target` resolved from the folder of `file` (both relative to the root), or null when it leaves the root. */
export function resolveInRepo(file: string, target: string): string | null {
  const joined = posix.normalize(posix.join(posix.dirname(file), target));
  return joined === '..' || joined.startsWith('../') ? null : joined;
}

// Names built from parts, so this file does not match itself.
const SHARED = ['..', 'shared'].join('/');
const SHARED_DOCS = ['DESIGN.md', 'STYLE.md'].map((d) => ['shared', d].join('/'));

/** A relative path that climbs (two dots and a slash, repeated) opened by a quote, a backtick or a parenthesis. */
const QUOTED_PARENT_PATH = /(?<=["'`(])(?:\.\.\/)+[^\s"'`()]*/g;
/** Inline markdown links and images, `[text](target "title")`, and reference definitions, `[id]: target`. */
const INLINE_LINK = /!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+["'][^)]*["'])?\s*\)/g;
const REFERENCE_LINK = /^\s{0,3}\[[^\]\n]+\]:\s*<?(\S+?)>?(?:\s|$)/gm;

/** Markdown without fenced code blocks and inline code spans (a link there is text, not a link). */
function withoutCode(markdown: string): string {
  return markdown.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '').replace(/(`+)[^`][\s\S]*?\1/g, '');
}

/** Every link target in a markdown text, as written. */
export function markdownLinks(markdown: string): string[] {
  const text = withoutCode(markdown);
  return [...text.matchAll(INLINE_LINK), ...text.matchAll(REFERENCE_LINK)].map((m) => m[1]!);
}

/** A link to a web page, a mail address or an anchor of the same page: nothing to resolve in the repository. */
function isExternalOrAnchor(target: string): boolean {
  return /^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith('#');
}

/** The repository path a relative link names (fragment and query dropped, %-escapes decoded). */
function linkPath(target: string): string {
  return decodeURIComponent(target.replace(/[#?].*$/, ''));
}

/** Each reference in `text` (the content of tracked file `file`) that points outside the repository. */
export function escapingReferences(file: string, text: string): string[] {
  const found: string[] = [];
  const lines = text.split('\n');
  lines.forEach((line, i) => {
    const at = `${file}:${i + 1}`;
    if (line.includes(SHARED)) found.push(`${at}: names ${SHARED}`);
    for (const name of SHARED_DOCS) if (line.includes(name)) found.push(`${at}: names ${name}`);
    for (const m of line.matchAll(QUOTED_PARENT_PATH)) {
      if (resolveInRepo(file, m[0]) === null) found.push(`${at}: ${m[0]} leaves the repository`);
    }
  });
  for (const target of markdownLinks(text)) {
    if (isExternalOrAnchor(target)) continue;
    const path = linkPath(target);
    if (path.startsWith('/')) found.push(`${file}: link ${target} is an absolute path`);
    else if (resolveInRepo(file, path) === null) found.push(`${file}: link ${target} leaves the repository`);
  }
  return found;
}

/** Each relative markdown link of `file` that names neither a tracked file nor a folder of tracked files. */
export function brokenLinks(file: string, text: string, tracked: ReadonlySet<string>): string[] {
  const folders = new Set<string>();
  for (const f of tracked) for (let d = posix.dirname(f); d !== '.'; d = posix.dirname(d)) folders.add(d);
  const broken: string[] = [];
  for (const target of markdownLinks(text)) {
    if (isExternalOrAnchor(target)) continue;
    const path = linkPath(target);
    if (path === '') continue;
    const resolved = path.startsWith('/') ? null : resolveInRepo(file, path);
    const name = resolved?.replace(/\/$/, '');
    if (name === undefined || (!tracked.has(name) && !folders.has(name))) broken.push(`${file}: ${target}`);
  }
  return broken;
}

describe('the scanner', () => {
  test('finds what the README said before it was fixed', () => {
    const before = 'The contract (packing, manifest, gates, stage graph) is `' + SHARED + '/DESIGN.md`; this README says how to use';
    expect(escapingReferences('README.md', before).length).toBeGreaterThan(0);
    const climbing = ['..', '..', 'elsewhere', 'DESIGN.md'].join('/');
    expect(escapingReferences('docs/x.md', `see [the brief](${climbing})`)).toContain('docs/x.md: link ../../elsewhere/DESIGN.md leaves the repository');
    expect(escapingReferences('docs/x.md', 'see [the manual](../README.md) and `../README.md`')).toEqual([]);
    expect(escapingReferences('a.ts', "import { x } from '../b.ts';")).toEqual(['a.ts:1: ../b.ts leaves the repository']);
  });

  test('reads links outside code only, and checks that they name tracked files', () => {
    const tracked = new Set(['README.md', 'docs/DESIGN.md', 'engine/README.md']);
    const text = '[d](docs/DESIGN.md#2-x) [e](engine/) [w](https://example.org) [a](#top) `[n](nowhere.md)`\n[gone](docs/gone.md)\n';
    expect(brokenLinks('README.md', text, tracked)).toEqual(['README.md: docs/gone.md']);
  });
});

describe('the repository', () => {
  const files = trackedFiles();
  const tracked = new Set(files);

  test('no tracked file points outside the repository', () => {
    const found: string[] = [];
    for (const file of files) {
      const text = readText(file);
      if (text !== null) found.push(...escapingReferences(file, text));
    }
    expect(found).toEqual([]);
  });

  test("every relative link of the tracked markdown files (README.md, docs/*.md among them) names a tracked file", () => {
    const markdown = files.filter((f) => f.endsWith('.md'));
    expect(markdown).toContain('README.md');
    expect(markdown).toContain('docs/DESIGN.md');
    expect(markdown).toContain('docs/experiments.md');
    const broken: string[] = [];
    for (const file of markdown) {
      const text = readText(file);
      if (text !== null) broken.push(...brokenLinks(file, text, tracked));
    }
    expect(broken).toEqual([]);
  });
});
