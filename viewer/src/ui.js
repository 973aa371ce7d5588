// The viewer page: reads the embedded (or dropped) .jaxpr file with
// reader.js and shows the program. The graph is laid out in layers (an
// equation sits one layer below the lowest of its inputs' producers) and
// drawn virtualized: only what lies in the viewport is in the DOM, so a
// 4,000-equation program pans and zooms smoothly. Sub-jaxprs expand in place.
(function () {
'use strict';
const R = window.JaxprReader;
const SVGNS = 'http://www.w3.org/2000/svg';
const $ = (id) => document.getElementById(id);
const NODE_H = 26, GAP_X = 18, GAP_Y = 46, PAD = 14, HEAD = 22;

let prog = null, fileName = '', expanded = new Set(), layout = null, selected = null;
let view = {x: 0, y: 0, k: 1}, uses = new Map(), renderQueued = false;

// JAX's variable names: a, b, ..., z, ba, bb, ... in binding order.
function varName(n) {
  let s = '';
  do { s = String.fromCharCode(97 + (n % 26)) + s; n = Math.floor(n / 26); } while (n > 0);
  return s;
}

function el(tag, attrs, parent, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}
function h(tag, attrs, parent, text) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}

// ------------------------------------------------------------- values
function num(x) {
  if (typeof x === 'bigint') return x.toString();
  if (typeof x === 'number') return Number.isInteger(x) && !Object.is(x, -0) ? String(x) : String(x);
  if (Array.isArray(x)) return `${num(x[0])}${x[1] < 0 || Object.is(x[1], -0) ? '' : '+'}${num(x[1])}j`;
  return String(x);
}
function firstValues(arr, n) {
  try {
    const vals = prog.arrayValues(arr, n);
    return vals.map(v => typeof v === 'boolean' ? (v ? 'True' : 'False') : num(v)).join(', ');
  } catch (e) { return `(${e.message})`; }
}
function arrayText(arr) {
  const count = arr.aval.kind === 'array' ? arr.aval.shape.reduce((a, b) => a * b, 1) : 1;
  const vals = firstValues(arr, 6);
  return `${R.avalText(arr.aval)} [${vals}${count > 6 ? ', …' : ''}]`;
}
function valueText(v) {
  if (v === null) return 'None';
  if (typeof v === 'boolean') return v ? 'True' : 'False';
  if (typeof v === 'number' || typeof v === 'bigint') return num(v);
  if (typeof v === 'string') return `'${v}'`;
  if (Array.isArray(v)) return `(${v.map(valueText).join(', ')}${v.length === 1 ? ',' : ''})`;
  if ('jaxpr' in v) return `{ J${v.jaxpr} }`;
  if ('closed_jaxpr' in v) return `{ J${prog.closed(v.closed_jaxpr).jaxpr} }`;
  if ('array' in v) return arrayText(v.array);
  if ('aval' in v) return R.avalText(v.aval);
  if ('record' in v) return `${v.record}(${v.fields.map(valueText).join(', ')})`;
  if ('enum' in v) return `${v.enum}.${v.member}`;
  if ('dtype' in v) return v.dtype;
  if ('codec' in v) return `<rule ${valueText(v.codec)}>`;
  if ('frozenset' in v) return `frozenset{${v.frozenset.map(valueText).join(', ')}}`;
  if ('complex' in v) return num(v.complex);
  if ('primitive' in v) return v.primitive;
  if ('dim' in v) return v.dim;
  if ('big' in v) return v.big;
  if ('type' in v) return typeof v.type === 'string' ? v.type : v.type.numpy;
  if ('treedef' in v) return `PyTreeDef(${v.treedef.kind})`;
  return JSON.stringify(v);
}

// The sub-jaxprs an equation's params refer to: [{label, jaxpr}].
function subJaxprs(eqn) {
  const out = [];
  const walk = (v, label) => {
    if (v === null || typeof v !== 'object') return;
    if (Array.isArray(v)) { v.forEach((x, i) => walk(x, `${label}[${i}]`)); return; }
    if ('jaxpr' in v) out.push({label, jaxpr: v.jaxpr});
    else if ('closed_jaxpr' in v) out.push({label, jaxpr: prog.closed(v.closed_jaxpr).jaxpr});
    else if ('record' in v) v.fields.forEach((x, i) => walk(x, `${label}.${i}`));
    else if ('codec' in v) walk(v.codec, label);
    else if ('frozenset' in v) v.frozenset.forEach((x, i) => walk(x, `${label}{${i}}`));
  };
  for (const [name, v] of eqn.params) walk(v, name);
  return out;
}

// ------------------------------------------------------------- layout
// Lays out jaxpr j (its inputs, equations and outputs) with its top-left at
// (0, 0); expanded equations hold their sub-jaxprs' layouts. Returns
// {w, h, nodes, edges} in local coordinates; ids are paths ("3", "3/0/5").
function layoutJaxpr(j, prefix, depth) {
  const nodes = [], edges = [];
  const producer = new Map();  // variable number -> node
  const layerOf = new Map();
  const inputs = j.constvars.concat(j.invars);
  const layers = [[]];
  inputs.forEach((a, v) => {
    const n = {kind: 'in', id: `${prefix}in${v}`, label: `${varName(v)}${v < j.constvars.length ? ' (const)' : ''}`,
               w: 0, h: NODE_H, layer: 0, vars: [v]};
    producer.set(v, n); layers[0].push(n); nodes.push(n);
  });
  for (const e of j.eqns) {
    let layer = 1;
    for (const r of e.ins) if (typeof r === 'number') layer = Math.max(layer, producer.get(r).layer + 1);
    const id = `${prefix}${e.index}`;
    const subs = subJaxprs(e);
    const n = {kind: 'eqn', id, eqn: e, jaxpr: j, layer, subs, label: e.primitive, depth};
    if (subs.length && expanded.has(id)) {
      n.children = subs.map((s, k) => Object.assign({label: s.label, jaxpr: s.jaxpr},
                                                    layoutJaxpr(prog.jaxpr(s.jaxpr), `${id}/${k}/`, depth + 1)));
    }
    (layers[layer] = layers[layer] || []).push(n);
    nodes.push(n);
    for (const o of e.outs) producer.set(o.v, n);
  }
  // Each input sits just above its first consumer, not all in one first
  // row (a model's hundreds of weights would otherwise span the page).
  const firstUse = new Map();
  for (const n of nodes) {
    if (n.kind === 'eqn') for (const r of n.eqn.ins) if (typeof r === 'number' && r < inputs.length) firstUse.set(r, Math.min(firstUse.get(r) || Infinity, n.layer));
  }
  layers[0] = [];
  for (const n of nodes) {
    if (n.kind !== 'in') continue;
    const use = firstUse.get(n.vars[0]);
    n.layer = use === undefined ? 0 : use - 1;
    layers[n.layer] = layers[n.layer] || [];
    layers[n.layer].unshift(n);
  }
  for (const row of layers) if (row) row.sort((a, b) => (a.kind === 'in' ? -1 : 0) - (b.kind === 'in' ? -1 : 0));
  const outLayer = layers.length;
  j.outvars.forEach((r, k) => {
    const n = {kind: 'out', id: `${prefix}out${k}`, label: `out ${k}`, h: NODE_H, layer: outLayer, ref: r};
    (layers[outLayer] = layers[outLayer] || []).push(n);
    nodes.push(n);
  });
  // Sizes, then positions, layer by layer.
  for (const n of nodes) {
    if (n.children) {
      let w = 0, hh = 0;
      for (const c of n.children) { w += c.w + PAD; hh = Math.max(hh, c.h); }
      n.w = Math.max(w + PAD, 120); n.h = hh + HEAD + PAD + 16;
    } else {
      n.w = Math.max(44, 7.2 * (n.label.length + (n.subs && n.subs.length ? 2 : 0)) + 16);
      n.h = NODE_H;
    }
  }
  let y = PAD, width = 0;
  for (const row of layers) {
    if (!row) continue;
    let x = PAD, rowH = 0;
    for (const n of row) { n.x = x; n.y = y; x += n.w + GAP_X; rowH = Math.max(rowH, n.h); }
    width = Math.max(width, x);
    y += rowH + GAP_Y;
  }
  // Edges: one per use of a variable.
  const edge = (from, to, v) => edges.push({from, to, label: R.avalText(j.avals[v]), v});
  for (const n of nodes) {
    if (n.kind === 'eqn') n.eqn.ins.forEach(r => { if (typeof r === 'number') edge(producer.get(r), n, r); });
    if (n.kind === 'out' && typeof n.ref === 'number') edge(producer.get(n.ref), n, n.ref);
  }
  return {w: width, h: y, nodes, edges};
}

// Absolute coordinates of everything, nested layouts flattened.
function flatten(l, ox, oy, out, parent) {
  for (const n of l.nodes) {
    const a = {n, x: ox + n.x, y: oy + n.y, w: n.w, h: n.h, parent};
    n.abs = a;
    out.nodes.push(a);
    a.frames = [];
    if (n.children) {
      let cx = a.x + PAD;
      n.children.forEach((c, k) => {
        a.frames.push({x: cx, y: a.y + HEAD + 12, w: c.w, h: c.h, label: `${c.label}: J${c.jaxpr}${(uses.get(c.jaxpr) || 0) > 1 ? ` · shared by ${uses.get(c.jaxpr)} equations` : ''}`});
        flatten(c, cx, a.y + HEAD + 12, out, n.id);
        cx += c.w + PAD;
      });
    }
  }
  for (const e of l.edges) out.edges.push(e);
}

function relayout() {
  const root = prog.jaxpr(prog.root().jaxpr);
  const l = layoutJaxpr(root, '', 0);
  const flat = {nodes: [], edges: [], frames: []};
  flatten(l, 0, 0, flat, null);
  layout = Object.assign(flat, {w: l.w, h: l.h, top: l});
  window.jaxprViewer.layoutNodes = flat.nodes.length;
  queueRender();
}

// -------------------------------------------------------------- render
function queueRender() {
  if (renderQueued) return;
  renderQueued = true;
  requestAnimationFrame(() => { renderQueued = false; render(); });
}

function render() {
  const svg = $('graph'), g = $('viewport');
  g.setAttribute('transform', `translate(${view.x},${view.y}) scale(${view.k})`);
  const W = svg.clientWidth, H = svg.clientHeight;
  const x0 = -view.x / view.k, y0 = -view.y / view.k, x1 = x0 + W / view.k, y1 = y0 + H / view.k;
  const visible = (x, y, w, hh) => x + w >= x0 && x <= x1 && y + hh >= y0 && y <= y1;
  const frag = document.createDocumentFragment();
  const detail = view.k > 0.35;
  let drawn = 0;
  // Expanded equations are backgrounds: drawn before the edges inside them.
  const drawNode = (a) => {
    const n = a.n;
    const cls = `node ${n.kind}${n.children ? ' open' : ''}${selected === n.id ? ' selected' : ''}${n.match ? ' match' : ''}`;
    const grp = el('g', {class: cls, 'data-id': n.id, 'data-kind': n.kind}, frag);
    if (n.kind === 'eqn') { grp.setAttribute('data-prim', n.label); if (a.parent !== null) grp.setAttribute('data-parent', a.parent); }
    el('rect', {x: a.x, y: a.y, width: a.w, height: a.h, rx: n.kind === 'eqn' ? 4 : 12}, grp);
    if (detail || n.children) {
      el('text', {x: a.x + 8, y: a.y + 17, class: 'nlabel'}, grp, n.label);
      if (n.subs && n.subs.length) {
        el('text', {x: a.x + a.w - 14, y: a.y + 17, class: 'toggle', 'data-toggle': n.id}, grp, n.children ? '−' : '+');
      }
    }
    drawn++;
  };
  for (const a of layout.nodes) {
    if (!a.n.children || !visible(a.x, a.y, a.w, a.h)) continue;
    drawNode(a);
    for (const f of a.frames) {
      el('rect', {x: f.x, y: f.y, width: f.w, height: f.h, class: 'frame'}, frag);
      if (detail) el('text', {x: f.x + 4, y: f.y - 3, class: 'framelabel'}, frag, f.label);
    }
  }
  // Zoomed far out, thousands of edges are an unreadable grey and cost most
  // of a frame: then they are drawn as straight lines, without labels.
  const far = view.k < 0.3;
  for (const e of layout.edges) {
    const a = e.from.abs, b = e.to.abs;
    const ax = a.x + a.w / 2, ay = a.y + a.h, bx = b.x + b.w / 2, by = b.y;
    if (!visible(Math.min(ax, bx), Math.min(ay, by), Math.abs(bx - ax), Math.abs(by - ay))) continue;
    if (far) { el('path', {d: `M${ax},${ay}L${bx},${by}`, class: 'edge'}, frag); continue; }
    const my = (ay + by) / 2;
    el('path', {d: `M${ax},${ay} C${ax},${my} ${bx},${my} ${bx},${by}`, class: 'edge'}, frag);
    if (detail && view.k > 0.6) el('text', {x: (ax + bx) / 2 + 3, y: my, class: 'elabel'}, frag, e.label);
  }
  for (const a of layout.nodes) {
    if (!a.n.children && visible(a.x, a.y, a.w, a.h)) drawNode(a);
  }
  g.replaceChildren(frag);
  window.jaxprViewer.drawnNodes = drawn;
}

function fit() {
  const svg = $('graph');
  const k = Math.min(1.2, Math.max(0.02, Math.min(svg.clientWidth / (layout.w + 20), svg.clientHeight / (layout.h + 20))));
  // A tall graph (thousands of layers) starts readable at its top instead.
  view = k < 0.3 ? {k: 0.8, x: 10, y: 10} : {k, x: 10, y: 10};
  queueRender();
}

function center(id) {
  const a = layout.nodes.find(a => a.n.id === id);
  if (!a) return;
  const svg = $('graph');
  view.k = Math.max(view.k, 0.8);
  view.x = svg.clientWidth / 2 - (a.x + a.w / 2) * view.k;
  view.y = svg.clientHeight / 2 - (a.y + a.h / 2) * view.k;
  queueRender();
}

// --------------------------------------------------------- interaction
function findNode(id) { const a = layout.nodes.find(a => a.n.id === id); return a && a.n; }

function toggle(id) {
  if (expanded.has(id)) { for (const k of [...expanded]) if (k === id || k.startsWith(id + '/')) expanded.delete(k); }
  else expanded.add(id);
  relayout();
}

function select(id) {
  selected = id;
  const n = findNode(id);
  const box = $('selection');
  box.replaceChildren();
  if (!n) return;
  queueRender();
  if (n.kind !== 'eqn') { h('div', {}, box, n.label); return; }
  const e = n.eqn;
  h('div', {class: 'title'}, box, `${e.primitive}  (equation ${e.index} of ${n.jaxpr.index === prog.root().jaxpr ? 'the top level' : `J${n.jaxpr.index}`})`);
  const outs = e.outs.map(o => `${o.dropped ? '_' : varName(o.v)}:${R.avalText(o.aval)}`).join(' ');
  const ins = e.ins.map(r => typeof r === 'number' ? `${varName(r)}:${R.avalText(n.jaxpr.avals[r])}` : `${valueText(r.literal.python !== undefined ? r.literal.python : {array: r.literal})}`).join(' ');
  h('div', {class: 'mono'}, box, `${outs} = ${e.primitive} ${ins}`);
  if (e.nameStack) h('div', {class: 'muted'}, box, `name stack: ${e.nameStack}`);
  if (e.effects.length) h('div', {class: 'muted'}, box, `effects: ${e.effects.map(x => x.name).join(', ')}`);
  const t = h('table', {class: 'params'}, box);
  for (const [name, v] of e.params) {
    const tr = h('tr', {}, t);
    h('td', {}, tr, name);
    h('td', {class: 'mono'}, tr, valueText(v));
  }
  if (n.subs.length) {
    const b = h('button', {}, box, expanded.has(id) ? 'collapse' : 'expand sub-jaxprs');
    b.onclick = () => { toggle(id); select(id); };
  }
}

function searchAll(q) {
  q = q.trim().toLowerCase();
  const results = [];
  if (!q) return results;
  // Every equation of the program reachable by expansion, with its path.
  const seen = new Set();
  const walk = (j, prefix, depth) => {
    if (depth > 12) return;
    for (const e of j.eqns) {
      const id = `${prefix}${e.index}`;
      const names = e.outs.map(o => varName(o.v)).concat(e.ins.filter(r => typeof r === 'number').map(varName));
      if (e.primitive.toLowerCase().includes(q) || names.includes(q)) results.push({id, e, j});
      if (results.length > 500) return;
      const subs = subJaxprs(e);
      subs.forEach((s, k) => {
        const key = `${prefix}|${s.jaxpr}`;
        if (seen.has(key)) return;
        seen.add(key);
        walk(prog.jaxpr(s.jaxpr), `${id}/${k}/`, depth + 1);
      });
    }
  };
  walk(prog.jaxpr(prog.root().jaxpr), '', 0);
  return results;
}

function showSearch() {
  const q = $('search').value;
  const results = searchAll(q);
  const list = $('results');
  list.replaceChildren();
  for (const a of layout.nodes) a.n.match = false;
  h('div', {class: 'muted', id: 'result-count'}, list, q.trim() ? `${results.length}${results.length > 500 ? '+' : ''} matches` : '');
  for (const r of results.slice(0, 200)) {
    const item = h('div', {class: 'result', 'data-id': r.id}, list,
                   `${r.e.outs.map(o => varName(o.v)).join(' ')} = ${r.e.primitive}  [${r.id}]`);
    item.onclick = () => goTo(r.id);
    const n = findNode(r.id);
    if (n) n.match = true;
  }
  window.jaxprViewer.lastResults = results.length;
  queueRender();
}

// Expands the ancestors of node `id` and centers it.
function goTo(id) {
  const parts = id.split('/');
  for (let k = 2; k < parts.length; k += 2) expanded.add(parts.slice(0, k - 1).join('/'));
  relayout();
  select(id);
  center(id);
}

function installPanZoom() {
  const svg = $('graph');
  let drag = null;
  svg.addEventListener('mousedown', (ev) => {
    const t = ev.target;
    if (t.dataset && t.dataset.toggle) { toggle(t.dataset.toggle); return; }
    const node = t.closest && t.closest('g.node');
    if (node) { select(node.dataset.id); return; }
    drag = {x: ev.clientX, y: ev.clientY, vx: view.x, vy: view.y};
  });
  svg.addEventListener('dblclick', (ev) => {
    const node = ev.target.closest && ev.target.closest('g.node');
    if (node && findNode(node.dataset.id).subs) toggle(node.dataset.id);
  });
  window.addEventListener('mousemove', (ev) => {
    if (!drag) return;
    view.x = drag.vx + ev.clientX - drag.x; view.y = drag.vy + ev.clientY - drag.y;
    queueRender();
  });
  window.addEventListener('mouseup', () => { drag = null; });
  svg.addEventListener('wheel', (ev) => {
    ev.preventDefault();
    const r = svg.getBoundingClientRect(), mx = ev.clientX - r.left, my = ev.clientY - r.top;
    const k = Math.min(4, Math.max(0.02, view.k * Math.exp(-ev.deltaY * 0.0015)));
    view.x = mx - (mx - view.x) * k / view.k; view.y = my - (my - view.y) * k / view.k; view.k = k;
    queueRender();
  }, {passive: false});
  window.addEventListener('resize', queueRender);
}

// ------------------------------------------------------------ panels
function section(title, parent) {
  const d = h('details', {open: ''}, parent);
  h('summary', {}, d, title);
  return h('div', {class: 'body'}, d);
}

function fillPanels() {
  const side = $('side');
  side.replaceChildren();
  const p = prog.producer();
  const info = section('File', side);
  h('div', {}, info, `${fileName} · format version ${p.format_version}`);
  h('div', {class: 'muted'}, info, `written by jaxpr_io ${p.jaxpr_io_version}, jax ${p.jax_version}, jaxlib ${p.jaxlib_version}`);
  for (const [k, v] of prog.metadata()) h('div', {class: 'mono'}, info, `${k}: ${v}`);
  if (prog.msg.symbolic_constraints.length) h('div', {class: 'mono'}, info, `constraints: ${prog.msg.symbolic_constraints.join(', ')}`);

  const root = prog.root(), j = prog.jaxpr(root.jaxpr);
  const sig = section('Signature', side);
  const paths = R.inputPaths(prog.inTree()), outPaths = R.leafPaths(prog.outTree(), 'out');
  const t = h('table', {id: 'signature'}, sig);
  j.invars.forEach((a, i) => {
    const tr = h('tr', {}, t);
    h('td', {}, tr, `in ${varName(j.constvars.length + i)}`); h('td', {class: 'mono'}, tr, paths[i] || ''); h('td', {class: 'mono'}, tr, R.avalText(a));
  });
  j.outvars.forEach((r, i) => {
    const tr = h('tr', {}, t);
    const a = typeof r === 'number' ? j.avals[r] : r.literal.aval;
    h('td', {}, tr, `out ${i}`); h('td', {class: 'mono'}, tr, outPaths[i] || ''); h('td', {class: 'mono'}, tr, R.avalText(a));
  });

  // Every distinct jaxpr, how many equations use each, primitive counts.
  uses = new Map();
  const counts = new Map(), order = [root.jaxpr], seen = new Set([root.jaxpr]);
  let total = 0;
  for (let k = 0; k < order.length; k++) {
    for (const e of prog.jaxpr(order[k]).eqns) {
      counts.set(e.primitive, (counts.get(e.primitive) || 0) + 1); total++;
      for (const s of subJaxprs(e)) {
        uses.set(s.jaxpr, (uses.get(s.jaxpr) || 0) + 1);
        if (!seen.has(s.jaxpr)) { seen.add(s.jaxpr); order.push(s.jaxpr); }
      }
    }
  }
  const cnt = section(`Equations: ${total} in ${order.length} jaxprs (top level ${j.eqns.length})`, side);
  const ct = h('table', {id: 'counts'}, cnt);
  for (const [name, n] of [...counts].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))) {
    const tr = h('tr', {}, ct);
    h('td', {class: 'mono'}, tr, name); h('td', {class: 'num'}, tr, String(n));
  }
  const defs = section(`Sub-jaxprs: ${order.length - 1} definitions`, side);
  for (const k of order.slice(1, 300)) {
    const sj = prog.jaxpr(k);
    h('div', {class: 'mono'}, defs, `J${k}: ${sj.invars.length} in, ${sj.outvars.length} out, ${sj.eqns.length} equations, used by ${uses.get(k)}`);
  }

  const consts = section('Constants', side);
  const ctab = h('table', {id: 'constants'}, consts);
  let constBytes = 0, nconst = 0;
  const closedSeen = new Set();
  const addConsts = (c, where) => {
    if (closedSeen.has(c.index)) return;
    closedSeen.add(c.index);
    c.consts.forEach((arr, i) => {
      nconst++; constBytes += arr.nbytes || 0;
      if (nconst > 500) return;
      const tr = h('tr', {}, ctab);
      h('td', {}, tr, `${where} const ${i}`);
      h('td', {class: 'num'}, tr, `${(arr.nbytes || 0).toLocaleString()} B`);
      h('td', {class: 'mono'}, tr, arrayText(arr));
    });
  };
  addConsts(root, 'top');
  for (let i = 0; i < prog.msg.closed_jaxprs.length; i++) {
    const c = prog.closed(i);
    if (seen.has(c.jaxpr)) addConsts(c, `J${c.jaxpr}`);
  }
  consts.parentNode.querySelector('summary').textContent = `Constants: ${nconst}, ${constBytes.toLocaleString()} bytes`;
  window.jaxprViewer.totalEquations = total;
  window.jaxprViewer.topEquations = j.eqns.length;
}

// --------------------------------------------------------------- load
function load(bytes, name) {
  const t0 = performance.now();
  $('error').textContent = '';
  try {
    prog = new R.Program(bytes);
    fileName = name;
    prog.jaxpr(prog.root().jaxpr);
  } catch (e) {
    $('error').textContent = `Cannot read ${name}: ${e.message}`;
    window.jaxprViewer.error = e.message;
    return;
  }
  const t1 = performance.now();
  expanded = new Set(); selected = null;
  document.title = `${name} — jaxpr viewer`;
  fillPanels();
  relayout();
  fit();
  $('selection').replaceChildren(h('div', {class: 'muted'}, null, 'Click an equation to see its params; + expands a sub-jaxpr.'));
  requestAnimationFrame(() => requestAnimationFrame(() => {
    window.jaxprViewer.timings = {decode_ms: t1 - t0, render_ms: performance.now() - t1};
    window.jaxprViewer.ready = true;
  }));
}

function decodeBase64(text) {
  const bin = atob(text.replace(/\s+/g, ''));
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

window.jaxprViewer = {ready: false, expand: (id) => { expanded.add(id); relayout(); }, toggle, select, goTo,
                      search: (q) => { $('search').value = q; showSearch(); },
                      load: (bytes, name) => load(bytes, name || 'file.jaxpr')};

window.addEventListener('DOMContentLoaded', () => {
  installPanZoom();
  $('search').addEventListener('input', showSearch);
  $('fit').onclick = fit;
  $('open').onchange = (ev) => {
    const f = ev.target.files[0];
    if (f) f.arrayBuffer().then(b => load(new Uint8Array(b), f.name));
  };
  document.body.addEventListener('dragover', (ev) => { ev.preventDefault(); document.body.classList.add('dragging'); });
  document.body.addEventListener('dragleave', () => document.body.classList.remove('dragging'));
  document.body.addEventListener('drop', (ev) => {
    ev.preventDefault();
    document.body.classList.remove('dragging');
    const f = ev.dataTransfer.files[0];
    if (f) f.arrayBuffer().then(b => load(new Uint8Array(b), f.name));
  });
  const embedded = $('jaxpr-file');
  // The shipped page holds the placeholder; jaxpr-load --html fills it.
  if (embedded && embedded.textContent.trim() && embedded.textContent.trim() !== '/*DATA*/') load(decodeBase64(embedded.textContent), embedded.dataset.name || 'file.jaxpr');
  else $('selection').textContent = 'Drop a .jaxpr file here, or open one.';
});
})();
