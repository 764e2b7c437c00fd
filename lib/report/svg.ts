/**
 * Small inline-SVG plots for the HTML report: no scripts, no fonts fetched, every element escaped.
 */

export function esc(s: unknown): string {
  return String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

const fmt = (v: number): string => (Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 1 ? v.toFixed(2) : v.toFixed(4));

/** Horizontal bars, one per item, with an optional threshold line. */
export function barChart(o: { title: string; items: Array<{ label: string; value: number; note?: string; bad?: boolean }>; max?: number; threshold?: { value: number; label: string }; unit?: string }): string {
  const labelW = Math.min(420, 12 + 6.6 * Math.max(8, ...o.items.map((i) => i.label.length)));
  const barW = 460;
  const rowH = 18;
  const h = 30 + rowH * o.items.length + 20;
  const max = o.max ?? Math.max(1e-12, ...o.items.map((i) => i.value), o.threshold?.value ?? 0) * 1.05;
  const x = (v: number): number => labelW + (barW * Math.max(0, v)) / max;
  const rows = o.items.map((it, k) => {
    const y = 30 + k * rowH;
    return `<g><title>${esc(`${it.label}: ${fmt(it.value)}${o.unit ?? ''}${it.note ? ` (${it.note})` : ''}`)}</title>` +
      `<text x="${labelW - 6}" y="${y + 12}" text-anchor="end" class="lbl">${esc(it.label)}</text>` +
      `<rect x="${labelW}" y="${y + 2}" width="${(x(it.value) - labelW).toFixed(1)}" height="${rowH - 5}" class="${it.bad ? 'bar bad' : 'bar'}"/>` +
      `<text x="${(x(it.value) + 4).toFixed(1)}" y="${y + 12}" class="val">${esc(fmt(it.value))}${esc(o.unit ?? '')}</text></g>`;
  });
  const th = o.threshold === undefined ? '' : `<line x1="${x(o.threshold.value).toFixed(1)}" x2="${x(o.threshold.value).toFixed(1)}" y1="24" y2="${h - 14}" class="thr"/><text x="${x(o.threshold.value).toFixed(1)}" y="${h - 3}" text-anchor="middle" class="val">${esc(o.threshold.label)}</text>`;
  return `<svg xmlns="http://www.w3.org/2000/svg" role="img" width="${labelW + barW + 90}" height="${h}" viewBox="0 0 ${labelW + barW + 90} ${h}"><text x="4" y="16" class="ttl">${esc(o.title)}</text>${rows.join('')}${th}</svg>`;
}

/** A dot per item along x (index), value on y: for many tensors. */
export function dotPlot(o: { title: string; items: Array<{ label: string; value: number; group: string }>; yLabel: string; max?: number }): string {
  const w = 900;
  const h = 260;
  const left = 56;
  const bottom = 30;
  const top = 26;
  const n = Math.max(1, o.items.length);
  const max = o.max ?? Math.max(1e-12, ...o.items.map((i) => i.value)) * 1.05;
  const groups = [...new Set(o.items.map((i) => i.group))].sort();
  const cls = (g: string): string => `g${groups.indexOf(g) % 6}`;
  const x = (k: number): number => left + ((w - left - 10) * (k + 0.5)) / n;
  const y = (v: number): number => top + (h - top - bottom) * (1 - Math.max(0, v) / max);
  const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => {
    const v = max * f;
    return `<line x1="${left}" x2="${w - 10}" y1="${y(v).toFixed(1)}" y2="${y(v).toFixed(1)}" class="grid"/><text x="${left - 4}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end" class="val">${esc(fmt(v))}</text>`;
  });
  const dots = o.items.map((it, k) => `<circle cx="${x(k).toFixed(1)}" cy="${y(it.value).toFixed(1)}" r="${n > 120 ? 2 : 3.5}" class="${cls(it.group)}"><title>${esc(`${it.label}: ${fmt(it.value)}`)}</title></circle>`);
  const legend = groups.map((g, k) => `<circle cx="${left + 10 + k * 150}" cy="${h - 10}" r="4" class="${cls(g)}"/><text x="${left + 18 + k * 150}" y="${h - 6}" class="val">${esc(g)}</text>`);
  return `<svg xmlns="http://www.w3.org/2000/svg" role="img" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}"><text x="4" y="16" class="ttl">${esc(o.title)}</text><text x="12" y="${(h / 2).toFixed(0)}" transform="rotate(-90 12 ${(h / 2).toFixed(0)})" text-anchor="middle" class="val">${esc(o.yLabel)}</text>${ticks.join('')}${dots.join('')}${legend.join('')}</svg>`;
}

/** The stage graph: stages in columns by depth, edges as curves with arrowheads. */
export function graphSvg(o: { order: readonly string[]; needs: ReadonlyMap<string, readonly string[]>; state: (stage: string) => 'ran' | 'placeholder' | 'absent' | 'self' }): string {
  const depth = new Map<string, number>();
  for (const n of o.order) depth.set(n, Math.max(0, ...(o.needs.get(n) ?? []).map((u) => (depth.get(u) ?? 0) + 1)));
  const cols = new Map<number, string[]>();
  for (const n of o.order) cols.set(depth.get(n)!, [...(cols.get(depth.get(n)!) ?? []), n]);
  const boxW = 98;
  const boxH = 30;
  const colW = 114;
  const rowH = 50;
  const maxRows = Math.max(...[...cols.values()].map((c) => c.length));
  const w = cols.size * colW + 20;
  const h = maxRows * rowH + 40;
  const pos = new Map<string, { x: number; y: number }>();
  for (const [d, names] of cols) names.forEach((n, k) => pos.set(n, { x: 10 + d * colW, y: 20 + k * rowH + ((maxRows - names.length) * rowH) / 2 }));
  const edges: string[] = [];
  for (const n of o.order) {
    for (const u of o.needs.get(n) ?? []) {
      const a = pos.get(u)!;
      const b = pos.get(n)!;
      const x1 = a.x + boxW;
      const y1 = a.y + boxH / 2;
      const x2 = b.x;
      const y2 = b.y + boxH / 2;
      const mx = (x1 + x2) / 2;
      edges.push(`<path d="M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2 - 2},${y2}" class="edge" marker-end="url(#arrow)"><title>${esc(`${u} -> ${n}`)}</title></path>`);
    }
  }
  const nodes = o.order.map((n) => {
    const p = pos.get(n)!;
    return `<g class="node ${o.state(n)}"><title>${esc(`${n}: ${o.state(n)}`)}</title><rect x="${p.x}" y="${p.y}" width="${boxW}" height="${boxH}" rx="6"/><text x="${p.x + boxW / 2}" y="${p.y + 19}" text-anchor="middle" font-size="10">${esc(n)}</text></g>`;
  });
  return `<svg xmlns="http://www.w3.org/2000/svg" role="img" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}"><defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" class="arrowhead"/></marker></defs>${edges.join('')}${nodes.join('')}</svg>`;
}
