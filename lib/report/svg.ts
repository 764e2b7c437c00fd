/**
 * Small inline-SVG plots for the HTML report: no scripts, no fonts fetched, every element escaped.
 */
import dagre from '@dagrejs/dagre';

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

/** A node of the laid-out stage graph: its box (top-left corner and size). */
export interface GraphBox {
  x: number;
  y: number;
  width: number;
  height: number;
}

/**
 * The stage graph laid out by layers with dagre (@dagrejs/dagre), left to right: every stage in a column
 * right of all of its upstreams (network-simplex layering: longest paths set the number of columns,
 * edges kept short), the order within a column chosen to reduce crossings. dagre gives an edge that
 * spans several columns one dummy node per column it passes (and per gap), placed in the column's order with
 * spacing like a node; the edge is drawn through those lanes:
 *
 *   leave the source's right side, cross each gap between columns diagonally (nothing is drawn there),
 *   cross each column it passes horizontally at its dummy node's height (a free lane, edgesep from any
 *   box), enter the target's left side.
 *
 * So no edge passes behind a box. An edge's port on a side is spread over the side's height, in the
 * order of where the edge comes from or goes to, so edges into one stage do not meet in one point.
 */
export function layoutGraph(o: { order: readonly string[]; needs: ReadonlyMap<string, readonly string[]>; boxW: number; boxH: number }): { boxes: Map<string, GraphBox>; edges: Array<{ from: string; to: string; points: Point[] }>; width: number; height: number } {
  const g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir: 'LR', ranker: 'network-simplex', nodesep: 14, edgesep: 10, ranksep: 28, marginx: 8, marginy: 8 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const n of o.order) g.setNode(n, { width: o.boxW, height: o.boxH });
  for (const n of o.order) for (const u of o.needs.get(n) ?? []) g.setEdge(u, n);
  dagre.layout(g);
  const boxes = new Map<string, GraphBox>();
  for (const n of o.order) {
    const v = g.node(n) as { x: number; y: number; width: number; height: number };
    boxes.set(n, { x: v.x - v.width / 2, y: v.y - v.height / 2, width: v.width, height: v.height });
  }
  // dagre's points: the two box intersections and, between them, one point per dummy node.
  const routes: Array<{ from: string; to: string; lanes: Point[] }> = g.edges().map((e: { v: string; w: string }) => ({ from: e.v, to: e.w, lanes: ((g.edge(e) as { points?: Point[] }).points ?? []).slice(1, -1) }));
  const box = (n: string): GraphBox => boxes.get(n)!;
  // The columns' centres: dagre also puts dummy nodes in ranks between the columns (it doubles the ranks
  // to make room for edge labels); a lane point there is in a gap and is kept as it is.
  const columns = [...new Set(o.order.map((n) => centre(box(n)).x))];
  // Ports: out of `from`'s right side in the order of the next point's height, into `to`'s left side
  // in the order of the previous point's height.
  const portY = new Map<string, number>();
  for (const n of o.order) {
    const b = box(n);
    const outs = routes.filter((r) => r.from === n).map((r) => ({ r, y: (r.lanes[0] ?? centre(box(r.to))).y }));
    const ins = routes.filter((r) => r.to === n).map((r) => ({ r, y: (r.lanes.at(-1) ?? centre(box(r.from))).y }));
    for (const [side, list] of [['out', outs], ['in', ins]] as const) {
      list.sort((p, q) => p.y - q.y);
      list.forEach((x, k) => portY.set(`${side} ${x.r.from} ${x.r.to}`, b.y + (b.height * (k + 1)) / (list.length + 1)));
    }
  }
  const edges = routes.map((r) => {
    const a = box(r.from);
    const b = box(r.to);
    const points: Point[] = [{ x: a.x + a.width, y: portY.get(`out ${r.from} ${r.to}`)! }];
    for (const p of r.lanes) {
      if (columns.some((c) => Math.abs(c - p.x) < 0.5)) points.push({ x: p.x - o.boxW / 2, y: p.y }, { x: p.x + o.boxW / 2, y: p.y });
      else points.push(p);
    }
    points.push({ x: b.x, y: portY.get(`in ${r.from} ${r.to}`)! });
    return { from: r.from, to: r.to, points };
  });
  const label = g.graph() as { width?: number; height?: number };
  return { boxes, edges, width: Math.ceil(label.width ?? 0), height: Math.ceil(label.height ?? 0) };
}

interface Point {
  x: number;
  y: number;
}

const centre = (b: GraphBox): Point => ({ x: b.x + b.width / 2, y: b.y + b.height / 2 });

/** The stage graph (see layoutGraph): boxes carry data-stage, edges data-from / data-to, for the tests. */
export function graphSvg(o: { order: readonly string[]; needs: ReadonlyMap<string, readonly string[]>; state: (stage: string) => 'ran' | 'placeholder' | 'absent' | 'self' }): string {
  const boxW = 92;
  const boxH = 28;
  const { boxes, edges, width, height } = layoutGraph({ order: o.order, needs: o.needs, boxW, boxH });
  const f = (v: number): string => String(Math.round(v * 10) / 10);
  const paths = edges.map((e) => `<path d="${e.points.map((p, k) => `${k === 0 ? 'M' : 'L'}${f(p.x)},${f(p.y)}`).join(' ')}" class="edge" data-from="${esc(e.from)}" data-to="${esc(e.to)}" marker-end="url(#arrow)"><title>${esc(`${e.from} -> ${e.to}`)}</title></path>`);
  const nodes = o.order.map((n) => {
    const b = boxes.get(n)!;
    return `<g class="node ${o.state(n)}"><title>${esc(`${n}: ${o.state(n)}`)}</title><rect data-stage="${esc(n)}" x="${f(b.x)}" y="${f(b.y)}" width="${f(b.width)}" height="${f(b.height)}" rx="6"/><text x="${f(b.x + b.width / 2)}" y="${f(b.y + b.height / 2 + 4)}" text-anchor="middle" font-size="11">${esc(n)}</text></g>`;
  });
  return `<svg xmlns="http://www.w3.org/2000/svg" role="img" class="stage-graph" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}"><defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" class="arrowhead"/></marker></defs>${paths.join('')}${nodes.join('')}</svg>`;
}
