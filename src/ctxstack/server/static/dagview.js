// DAG mode you can see: the plan as a small graph, live from the SSE events.
//
// A `plan` step event draws a round (a replan draws a new one under the previous): one
// node per step, placed in columns by dependency depth, with an arrow from each
// dependency. `dag_step` events move a node through waiting → running → done / failed /
// skipped. Clicking (or Enter on) a node shows its task and result below the graph. The
// same events are stored with the answer, so a reload draws the same graph.

import { el } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
const NODE_W = 156;
const NODE_H = 44;
const GAP_X = 34;
const GAP_Y = 10;
const PAD = 6;
let graphs = 0;

function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

// A node label of at most n characters, the "…" included (the SVG boxes have a fixed width).
function fitLabel(text, n) {
  const s = String(text ?? "");
  return s.length > n ? `${s.slice(0, n - 1)}…` : s;
}

/** Column (dependency depth) of every step; unknown or cyclic dependencies count as 0. */
export function levels(steps) {
  const byId = new Map(steps.map((s) => [s.id, s]));
  const memo = new Map();
  const depth = (id, seen) => {
    if (memo.has(id)) return memo.get(id);
    if (seen.has(id) || !byId.has(id)) return -1;
    seen.add(id);
    const deps = byId.get(id).dependencies || [];
    const value = deps.length ? 1 + Math.max(...deps.map((d) => depth(d, seen))) : 0;
    memo.set(id, Math.max(0, value));
    return memo.get(id);
  };
  return new Map(steps.map((s) => [s.id, depth(s.id, new Set())]));
}

class Round {
  constructor(container, round, steps, onSelect) {
    this.round = round;
    this.steps = steps;
    this.nodes = new Map();
    this.info = new Map(steps.map((s) => [s.id, { ...s, status: "waiting", result: null }]));
    this.root = el("div", "dag-round");
    this.root.dataset.round = String(round);
    this.root.append(el("div", "dag-round-title", round > 1 ? `Replan · round ${round}` : "Plan"));
    const scroll = el("div", "dag-scroll");
    scroll.append(this.draw(onSelect));
    this.detail = el("div", "dag-detail");
    this.detail.hidden = true;
    this.root.append(scroll, this.detail);
    container.append(this.root);
  }

  draw(onSelect) {
    const depth = levels(this.steps);
    const columns = [];
    for (const step of this.steps) {
      const col = depth.get(step.id);
      (columns[col] ||= []).push(step);
    }
    const rows = Math.max(1, ...columns.map((c) => (c ? c.length : 0)));
    const width = PAD * 2 + columns.length * NODE_W + Math.max(0, columns.length - 1) * GAP_X;
    const height = PAD * 2 + rows * NODE_H + (rows - 1) * GAP_Y;
    const root = svg("svg", { class: "dag-graph", width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
    root.setAttribute("aria-label", `Plan with ${this.steps.length} steps`);
    const marker = `dag-arrow-${(graphs += 1)}`;
    const defs = svg("defs");
    const arrow = svg("marker", { id: marker, viewBox: "0 0 8 8", refX: 7, refY: 4, markerWidth: 7, markerHeight: 7, orient: "auto" });
    arrow.append(svg("path", { d: "M0,0 L8,4 L0,8 z", class: "dag-arrow" }));
    defs.append(arrow);
    root.append(defs);
    const at = new Map();
    columns.forEach((col, c) => (col || []).forEach((step, r) => {
      at.set(step.id, { x: PAD + c * (NODE_W + GAP_X), y: PAD + r * (NODE_H + GAP_Y) });
    }));
    for (const step of this.steps) {
      for (const dep of step.dependencies || []) {
        const a = at.get(dep);
        const b = at.get(step.id);
        if (!a || !b) continue;
        const x1 = a.x + NODE_W;
        const y1 = a.y + NODE_H / 2;
        const x2 = b.x - 2;
        const y2 = b.y + NODE_H / 2;
        const mid = (x1 + x2) / 2;
        root.append(svg("path", { class: "dag-edge", d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`, "marker-end": `url(#${marker})` }));
      }
    }
    for (const step of this.steps) {
      const { x, y } = at.get(step.id);
      const g = svg("g", { class: "dag-node status-waiting", transform: `translate(${x},${y})`, tabindex: 0, role: "button" });
      g.dataset.step = step.id;
      g.append(svg("title", {}, `${step.id}: ${step.task}`));
      g.append(svg("rect", { width: NODE_W, height: NODE_H, rx: 8 }));
      g.append(svg("text", { x: 10, y: 17, class: "dag-node-id" }, `${fitLabel(step.id, 10)} · waiting`));
      g.append(svg("text", { x: 10, y: 34, class: "dag-node-task" }, fitLabel(step.task, 24)));
      const open = () => onSelect(this, step.id);
      g.addEventListener("click", open);
      g.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); open(); } });
      this.nodes.set(step.id, g);
      root.append(g);
    }
    return root;
  }

  update(data) {
    const info = this.info.get(data.id) || { id: data.id, task: data.task || "", dependencies: [] };
    info.status = data.status || "running";
    if (data.result != null) info.result = data.result;
    if (data.task) info.task = data.task;
    this.info.set(data.id, info);
    const node = this.nodes.get(data.id);
    if (node) {
      node.setAttribute("class", `dag-node status-${info.status}`);
      node.querySelector(".dag-node-id").textContent = `${fitLabel(data.id, 10)} · ${info.status}`;
    }
    if (this.selected === data.id) this.show(data.id);
  }

  show(id) {
    const info = this.info.get(id);
    if (!info) return;
    this.selected = id;
    for (const [key, node] of this.nodes) node.classList.toggle("selected", key === id);
    this.detail.hidden = false;
    const deps = (info.dependencies || []).length ? ` · after ${info.dependencies.join(", ")}` : "";
    this.detail.replaceChildren(
      el("div", "dag-detail-head", `Step ${id} · ${info.status}${deps}`),
      el("div", "dag-detail-task", info.task || ""),
      el("pre", "dag-detail-result", info.result ?? (info.status === "waiting" || info.status === "running"
        ? "No result yet." : "No result.")),
    );
  }
}

/** The plan view of one DAG turn (all its rounds). */
export class PlanView {
  constructor(container) {
    this.root = el("div", "dag-plan");
    container.append(this.root);
    this.rounds = [];
  }

  plan(data) {
    const steps = Array.isArray(data?.steps) ? data.steps.filter((s) => s && s.id) : [];
    const round = new Round(this.root, Number(data?.round || this.rounds.length + 1), steps,
      (r, id) => r.show(id));
    this.rounds.push(round);
  }

  step(data) {
    const wanted = data?.round != null ? Number(data.round) : null;
    const round = [...this.rounds].reverse().find((r) => wanted == null || r.round === wanted)
      || this.rounds[this.rounds.length - 1];
    round?.update(data);
    return Boolean(round);
  }
}
