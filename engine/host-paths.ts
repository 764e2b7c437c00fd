/**
 * Writing the build machine's paths as names (`<workdir>`, `.`, `~`, `<tmp>`, ...) in evidence, so two
 * builds on two machines differ only where their work did.
 */

/**
 * text with each of places' paths written as its name, in one pass, longest path first, and only where
 * the text names that path: not inside a longer name (`/tmp` in `/tmpfs` or in `<workdir>/.ternforge/tmp`
 * stays), and never inside or right after a name already written (`<scratch>/tmp` keeps its `/tmp`, also
 * when the text is passed again).
 */
export function withPlaceholders(text: string, places: ReadonlyArray<readonly [string, string]>): string {
  const sorted = places.filter(([p]) => p.length > 1).sort((a, b) => b[0].length - a[0].length);
  if (sorted.length === 0) return text;
  const esc = (p: string): string => p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const names = new Map(sorted);
  const pattern = new RegExp(`(?<![\\w.>~-])(?:${sorted.map(([p]) => esc(p)).join('|')})(?![\\w.-])`, 'g');
  return text.replace(pattern, (m) => names.get(m) ?? m);
}
