// headlab live widgets: what every widget shares (no DOM at import time).
// The pure functions here are unit-tested with node (tests/test_live_js.py);
// headlab.viz.live prepends this file to each widget's own module.

export const VERSION = "1.0.0";

// ------------------------------------------------------------------ numbers

/** softmax(scores / temperature), stable (subtract the max first). */
export function softmax(scores, temperature = 1) {
  if (!(temperature > 0)) throw new Error(`temperature must be positive, got ${temperature}`);
  const z = Array.from(scores, (s) => s / temperature);
  const top = Math.max(...z);
  const e = z.map((v) => Math.exp(v - top));
  const sum = e.reduce((a, b) => a + b, 0);
  return e.map((v) => v / sum);
}

/** Entropy in nats of a probability row (zeros count as 0 log 0 = 0), the book's one unit. */
export function entropyNats(w) {
  let h = 0;
  for (const p of w) if (p > 0) h -= p * Math.log(p);
  return h;
}

/** log-softmax of row `row` of a flat (rows, n) array, in float64. */
export function logSoftmaxRow(flat, row, n) {
  const off = row * n;
  let top = -Infinity;
  for (let i = 0; i < n; i++) top = Math.max(top, flat[off + i]);
  let sum = 0;
  for (let i = 0; i < n; i++) sum += Math.exp(flat[off + i] - top);
  const lse = top + Math.log(sum);
  const out = new Float64Array(n);
  for (let i = 0; i < n; i++) out[i] = flat[off + i] - lse;
  return out;
}

/** Indices of the k largest values, largest first (ties: lower index first). */
export function topK(values, k) {
  const idx = Array.from(values, (_, i) => i);
  idx.sort((a, b) => values[b] - values[a] || a - b);
  return idx.slice(0, k);
}

/**
 * Next-token loss per text, as headlab.metrics.next_token_loss: the mean over
 * positions t with tokens t and t+1 both real of -log p(ids[t+1] | ..t).
 * logits: flat (batch, pos, vocab); ids, mask: flat (batch, pos).
 */
export function nextTokenLoss(logits, ids, mask, batch, pos, vocab) {
  const out = [];
  for (let b = 0; b < batch; b++) {
    let sum = 0, n = 0;
    for (let t = 0; t + 1 < pos; t++) {
      if (!mask[b * pos + t] || !mask[b * pos + t + 1]) continue;
      const lp = logSoftmaxRow(logits, b * pos + t, vocab);
      sum -= lp[Number(ids[b * pos + t + 1])];
      n += 1;
    }
    if (n === 0) throw new Error(`text ${b + 1} is too short: the loss needs at least two tokens`);
    out.push(sum / n);
  }
  return out;
}

/**
 * Mean of every head's output z over the real tokens of the batch, as
 * HeadModel.replacements("mean"): z flat (layer, batch, pos, head, dHead) ->
 * Float32Array (layer, head, dHead).
 */
export function meanZ(z, mask, layers, batch, pos, heads, dHead) {
  const width = heads * dHead;
  const acc = new Float64Array(layers * width);
  let count = 0;
  for (let b = 0; b < batch; b++) for (let t = 0; t < pos; t++) if (mask[b * pos + t]) count += 1;
  for (let l = 0; l < layers; l++) {
    for (let b = 0; b < batch; b++) {
      for (let t = 0; t < pos; t++) {
        if (!mask[b * pos + t]) continue;
        const off = ((l * batch + b) * pos + t) * width;
        for (let i = 0; i < width; i++) acc[l * width + i] += z[off + i];
      }
    }
  }
  return Float32Array.from(acc, (v) => v / count);
}

// ------------------------------------------------------------------ tokens

/** A word outside the vocabulary (the message names every such word). */
export class VocabError extends Error {}

/**
 * Tokenization as headlab.viz.live.encode: spec = {kind, vocab, prefix: [ids], suffix: [ids], bos_id,
 * add_bos, n_ctx} from headlab.viz.live.tokenizer_spec. kind "words" (or none): a whitespace-split
 * word-level vocabulary; kind "bpe": GPT-2's byte-level BPE (spec.merges, spec.special).
 * add_bos: put bos_id first unless the ids already start with it.
 * Returns {ids, tokens}; throws VocabError naming the unknown words.
 */
export function encode(text, spec) {
  if (typeof text !== "string" || !text.trim()) throw new VocabError("give a non-empty text");
  if (!spec._index) spec._index = new Map(vocabOf(spec).map((tok, i) => [tok, i]));
  let body;
  if (spec.kind === "bpe") body = bpeEncode(text, spec);
  else {
    const words = text.trim().split(/\s+/);
    const unknown = words.filter((w) => !spec._index.has(w));
    if (unknown.length) {
      const names = [...new Set(unknown)].map((w) => `'${w}'`).join(", ");
      throw new VocabError(`not in the vocabulary: ${names}; use words of the book's synthetic language`);
    }
    body = words.map((w) => spec._index.get(w));
  }
  let ids = [...spec.prefix, ...body, ...spec.suffix];
  if (spec.add_bos && ids[0] !== spec.bos_id) ids = [spec.bos_id, ...ids];
  if (spec.n_ctx && ids.length > spec.n_ctx) {
    throw new VocabError(`the text has ${ids.length} tokens, more than the model's n_ctx = ${spec.n_ctx}`);
  }
  return { ids, tokens: ids.map((i) => vocabOf(spec)[i]) };
}

// GPT-2's pre-tokenizer (headlab.viz.live.BPE_SPLIT) and its printable stand-in for each byte
const BPE_SPLIT = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;
export const BYTE_CHARS = (() => {
  const out = new Array(256);
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const kept = (b >= 33 && b < 127) || (b >= 161 && b < 173) || (b >= 174);
    out[b] = String.fromCharCode(kept ? b : 256 + extra++);
  }
  return out;
})();

const escapeRe = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

function bpeEncode(text, spec) {
  if (!spec._ranks) {
    const flat = spec.merges.split(" ");
    spec._ranks = new Map();
    for (let r = 0; 2 * r + 1 < flat.length; r++) spec._ranks.set(flat[2 * r] + " " + flat[2 * r + 1], r);
  }
  const special = spec.special || {}, names = Object.keys(special);
  const pieces = names.length ? text.split(new RegExp("(" + names.map(escapeRe).join("|") + ")")) : [text];
  const utf8 = new TextEncoder(), ids = [];
  for (const piece of pieces) {
    if (Object.hasOwn(special, piece)) { ids.push(special[piece]); continue; }
    for (const word of piece.match(BPE_SPLIT) || []) {
      let parts = Array.from(utf8.encode(word), (b) => BYTE_CHARS[b]);
      while (parts.length > 1) { // merge the best-ranked adjacent pair until none is ranked
        let best = -1, bestRank = Infinity;
        for (let i = 0; i + 1 < parts.length; i++) {
          const r = spec._ranks.get(parts[i] + " " + parts[i + 1]);
          if (r !== undefined && r < bestRank) { bestRank = r; best = i; }
        }
        if (best < 0) break;
        parts.splice(best, 2, parts[best] + parts[best + 1]);
      }
      for (const p of parts) ids.push(spec._index.get(p));
    }
  }
  return ids;
}

// ------------------------------------------------------------------ typed lines: "text | A | B"

/** A string as Python's repr writes it (the messages here equal headlab's, word for word). */
export function pyRepr(s) {
  if (s.includes("'") && !s.includes('"')) return `"${s}"`;
  return `'${s.replace(/\\/g, "\\\\").replace(/'/g, "\\'")}'`;
}

/**
 * A typed line as {text, candidates}, as headlab.viz.live.parse_line: "text | A | B" gives the
 * text (its trailing spaces dropped) and [A, B], the two candidate next tokens whose logit
 * difference the widget shows; a line without "|" gives {text: line, candidates: []}.
 * Throws VocabError naming the line unless exactly two non-empty candidates follow a text.
 */
export function parseLine(line) {
  const [text, ...rest] = line.split("|");
  const candidates = rest.map((c) => c.trim());
  if (!candidates.length) return { text: line, candidates };
  if (candidates.length !== 2 || !candidates.every(Boolean) || !text.trim()) {
    const found = candidates.filter(Boolean);
    const problem = !text.trim() ? "no text before '|'" : `${found.length} candidates [${found.map(pyRepr).join(", ")}], not 2`;
    throw new VocabError(`${pyRepr(line.trim())}: ${problem}; write the text, then two candidate next tokens ` +
      "after '|', e.g. 'When Mary and John went out, John gave a drink to | Mary | John'");
  }
  return { text: text.trimEnd(), candidates };
}

/**
 * The token id of a candidate, as headlab.viz.live.candidate_token: the one token of " " + word
 * (the word after a space), or of the characters between the quotes of a word written in double
 * quotes ('"."': a full stop with no space). Throws VocabError unless it is exactly one token.
 */
export function candidateToken(word, spec) {
  const quoted = word.length > 1 && word[0] === '"' && word[word.length - 1] === '"';
  if (!spec._bare) spec._bare = { ...spec, prefix: [], suffix: [], add_bos: false, n_ctx: null };
  const piece = quoted ? word.slice(1, -1) : " " + word;
  const ids = piece.trim() ? encode(piece, spec._bare).ids : []; // a quoted "" or " " is no token: named below
  if (ids.length !== 1) {
    const parts = ids.map((i) => pyRepr(tokenText(vocabOf(spec)[i], spec))).join(" + ");
    throw new VocabError(`candidate ${pyRepr(word)} is ${ids.length} tokens for this model (${parts}), not one: ` +
      "the logit difference compares two single next tokens; choose a word the tokenizer keeps whole (a more frequent one)");
  }
  return ids[0];
}

/** logit(a) - logit(b) in row `row` of flat (rows, vocab) logits. */
export function logitDiff(logits, row, vocab, a, b) {
  return logits[row * vocab + a] - logits[row * vocab + b];
}

/** A token as the reader should see it: a byte-level BPE token decoded to its text ("Ġsaid" -> " said"). */
export function tokenText(token, spec) {
  if (!spec || spec.kind !== "bpe" || Object.hasOwn(spec.special || {}, token)) return token;
  if (!spec._bytes) spec._bytes = new Map(BYTE_CHARS.map((c, b) => [c, b]));
  const bytes = Uint8Array.from(Array.from(token), (c) => spec._bytes.get(c) ?? 63);
  return new TextDecoder().decode(bytes);
}

/** The tokens by id (spec.vocab is one space-separated string: no token holds whitespace). */
export function vocabOf(spec) {
  if (!spec._vocab) spec._vocab = typeof spec.vocab === "string" ? spec.vocab.split(" ") : spec.vocab;
  return spec._vocab;
}

/**
 * An array saved by headlab.viz.live.packed ({shape, float32: base64}) as nested arrays;
 * nested arrays are returned as they are.
 */
export function unpack(value) {
  if (!value || Array.isArray(value)) return value;
  const bytes = Uint8Array.from(atob(value.float32), (c) => c.charCodeAt(0));
  const flat = new Float32Array(bytes.buffer);
  const nest = (offset, dims) => {
    if (dims.length === 1) return Array.from(flat.subarray(offset, offset + dims[0]));
    const step = dims.slice(1).reduce((a, b) => a * b, 1);
    return Array.from({ length: dims[0] }, (_, i) => nest(offset + i * step, dims.slice(1)));
  };
  return nest(0, value.shape);
}

/** Right-pad rows of ids: {ids: BigInt64Array, mask: BigInt64Array, batch, pos, lengths}. */
export function padBatch(rows, padId) {
  const batch = rows.length, pos = Math.max(...rows.map((r) => r.length));
  const ids = new BigInt64Array(batch * pos).fill(BigInt(padId));
  const mask = new BigInt64Array(batch * pos);
  rows.forEach((r, b) => r.forEach((id, t) => { ids[b * pos + t] = BigInt(id); mask[b * pos + t] = 1n; }));
  return { ids, mask, batch, pos, lengths: rows.map((r) => r.length) };
}

// ------------------------------------------------------------------ where the page lives

/**
 * On the book's website: the URL of its _static/headlab/ folder (the onnxruntime-web
 * copy, the ONNX exports); null elsewhere (a notebook with a kernel).
 */
export function siteAssets(doc = globalThis.document) {
  const script = doc?.querySelector?.('script[src*="vendored/requirejs/require.js"]');
  if (!script || !doc.querySelector('script[type="application/vnd.jupyter.widget-state+json"]')) return null;
  return script.src.replace(/vendored\/requirejs\/require\.js.*$/, "headlab/");
}

/** onnxruntime-web from the site's own copy, loaded once per page (single-threaded wasm). */
export function loadOrt(assets) {
  const g = globalThis;
  if (!g.__headlabOrt) {
    g.__headlabOrt = import(assets + "ort/ort.wasm.bundle.min.mjs").then((ort) => {
      ort.env.wasm.numThreads = 1; // no SharedArrayBuffer on a static site
      ort.env.wasm.wasmPaths = { wasm: assets + "ort/ort-wasm-simd-threaded.wasm" };
      ort.env.logLevel = "error";
      return ort;
    });
  }
  return g.__headlabOrt;
}

/** An inference session for one exported model, created once per page. */
export function loadSession(assets, file) {
  const g = globalThis;
  g.__headlabSessions = g.__headlabSessions || new Map();
  if (!g.__headlabSessions.has(file)) {
    g.__headlabSessions.set(file, loadOrt(assets).then((ort) =>
      ort.InferenceSession.create(assets + "onnx/" + file, { executionProviders: ["wasm"] })
        .then((session) => ({ ort, session }))));
  }
  return g.__headlabSessions.get(file);
}

/**
 * Run an export (headlab.models.onnx): rows of ids, gate (layers*heads), replacement
 * (layers*heads*dHead). Returns {logits, patterns, z, batch, pos, mask} as flat arrays.
 */
export async function runModel({ ort, session }, rows, padId, shape, gate, replacement) {
  const { layers, heads, dHead } = shape;
  const b = padBatch(rows, padId);
  const feeds = {
    input_ids: new ort.Tensor("int64", b.ids, [b.batch, b.pos]),
    attention_mask: new ort.Tensor("int64", b.mask, [b.batch, b.pos]),
    gate: new ort.Tensor("float32", gate, [layers, heads]),
    replacement: new ort.Tensor("float32", replacement, [layers, heads, dHead]),
  };
  const out = await session.run(feeds);
  return { logits: out.logits.data, patterns: out.patterns.data, z: out.z.data, batch: b.batch,
    pos: b.pos, mask: b.mask, ids: b.ids, vocab: out.logits.dims[2] };
}

/** Row q, columns 0..n-1 of head h of layer l, batch row b, from flat patterns. */
export function patternOf(patterns, l, b, h, n, dims) {
  const { batch, heads, pos } = dims;
  const out = [];
  for (let q = 0; q < n; q++) {
    const off = (((l * batch + b) * heads + h) * pos + q) * pos;
    out.push(Array.from(patterns.subarray(off, off + n)));
  }
  return out;
}

// ------------------------------------------------------------------ drawing

/** Create an element: h("div", {class: "x", onclick: f}, child, "text", ...). */
export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "style" && typeof v === "object") Object.assign(node.style, v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) if (c !== null && c !== undefined && c !== false) {
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

// matplotlib's "Blues" (ColorBrewer), the colour map of the book's pattern figures
const BLUES = [[247, 251, 255], [222, 235, 247], [198, 219, 239], [158, 202, 225], [107, 174, 214],
  [66, 146, 198], [33, 113, 181], [8, 81, 156], [8, 48, 107]];

export function blues(v) {
  const x = Math.min(1, Math.max(0, v)) * (BLUES.length - 1);
  const i = Math.min(BLUES.length - 2, Math.floor(x)), f = x - i;
  const c = BLUES[i].map((a, k) => Math.round(a + f * (BLUES[i + 1][k] - a)));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

/**
 * An attention pattern (rows: queries, columns: keys) on a canvas `size` CSS px wide,
 * with a hover read-out "query -> key: weight" written into `readout`.
 */
export function patternCanvas(matrix, tokens, size, title, readout) {
  const n = matrix.length;
  const canvas = h("canvas", { class: "hl-pattern", role: "img",
    "aria-label": `${title}: attention pattern over ${n} tokens (rows: queries, columns: keys)` });
  const ratio = globalThis.devicePixelRatio || 1;
  canvas.width = Math.round(size * ratio);
  canvas.height = Math.round(size * ratio);
  canvas.style.width = canvas.style.height = `${size}px`;
  const ctx = canvas.getContext("2d");
  const cell = canvas.width / n;
  for (let q = 0; q < n; q++) for (let k = 0; k < n; k++) {
    ctx.fillStyle = k > q ? "#ffffff" : blues(matrix[q][k]);
    ctx.fillRect(k * cell, q * cell, Math.ceil(cell), Math.ceil(cell));
  }
  if (readout) {
    canvas.addEventListener("mousemove", (ev) => {
      const r = canvas.getBoundingClientRect();
      const k = Math.floor(((ev.clientX - r.left) / r.width) * n);
      const q = Math.floor(((ev.clientY - r.top) / r.height) * n);
      if (q < 0 || k < 0 || q >= n || k >= n) return;
      readout.textContent = k > q ? `${title}: ${tokens[q]} cannot see the later ${tokens[k]}`
        : `${title}: ${tokens[q]} → ${tokens[k]}: ${matrix[q][k].toFixed(3)}`;
    });
  }
  return canvas;
}

/**
 * A larger pattern on a canvas, with the tokens on both axes (up to 40 tokens; more get
 * axis titles only, like headlab.viz.figures.plot_pattern), `width` CSS px at most
 * (less on a narrow screen). Hovering shows "query → key: weight" as the canvas's title.
 */
export function labelledPattern(matrix, tokens, title, width = 420) {
  const n = matrix.length, labels = n <= 40;
  const avail = Math.min(width, (globalThis.innerWidth || width) - 40);
  const fs = 11;
  const margin = labels ? Math.min(90, 10 + 6.5 * Math.max(...tokens.map((t) => String(t).length))) : 22;
  const cell = Math.max(3, Math.floor((avail - margin) / n)), size = margin + cell * n;
  const canvas = h("canvas", { class: "hl-labelled", role: "img",
    "aria-label": `${title}: attention pattern over ${n} tokens, rows are queries, columns are keys` });
  const ratio = globalThis.devicePixelRatio || 1;
  canvas.width = Math.round(size * ratio);
  canvas.height = Math.round(size * ratio);
  canvas.style.width = canvas.style.height = `${size}px`;
  const ctx = canvas.getContext("2d");
  ctx.scale(ratio, ratio);
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, size, size);
  for (let q = 0; q < n; q++) for (let k = 0; k <= q; k++) {
    ctx.fillStyle = blues(matrix[q][k]);
    ctx.fillRect(margin + k * cell, margin + q * cell, cell, cell);
  }
  ctx.strokeStyle = "#999";
  ctx.strokeRect(margin - 0.5, margin - 0.5, cell * n + 1, cell * n + 1);
  ctx.fillStyle = "#222";
  ctx.font = `${labels ? Math.min(fs, Math.max(9, cell * 0.85)) : fs}px sans-serif`;
  ctx.textBaseline = "middle";
  if (labels) {
    ctx.textAlign = "right";
    tokens.forEach((t, i) => ctx.fillText(String(t), margin - 3, margin + (i + 0.5) * cell));
    tokens.forEach((t, i) => {
      ctx.save();
      ctx.translate(margin + (i + 0.5) * cell, margin - 3);
      ctx.rotate(-Math.PI / 2);
      ctx.textAlign = "left";
      ctx.fillText(String(t), 0, 0);
      ctx.restore();
    });
  } else {
    ctx.textAlign = "center";
    ctx.fillText("key position", margin + (cell * n) / 2, 10);
    ctx.save();
    ctx.translate(10, margin + (cell * n) / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.fillText("query position", 0, 0);
    ctx.restore();
  }
  canvas.addEventListener("mousemove", (ev) => {
    const r = canvas.getBoundingClientRect();
    const k = Math.floor((ev.clientX - r.left - margin) / cell), q = Math.floor((ev.clientY - r.top - margin) / cell);
    canvas.title = q >= 0 && k >= 0 && q < n && k <= q ? `${tokens[q]} → ${tokens[k]}: ${matrix[q][k].toFixed(3)}` : "";
  });
  return canvas;
}

/** A horizontal colour bar for weights 0..1. */
export function colorBar(label = "attention weight") {
  const stops = BLUES.map((c, i) => `rgb(${c}) ${(100 * i) / (BLUES.length - 1)}%`).join(", ");
  return h("div", { class: "hl-colorbar" },
    h("span", {}, "0"),
    h("span", { class: "hl-colorbar-ramp", style: { background: `linear-gradient(to right, ${stops})` } }),
    h("span", {}, "1"),
    h("span", { class: "hl-colorbar-label" }, label));
}

/** Send changed traits to the kernel, if there is one (a static page has no comm: nothing to do). */
export function syncToKernel(model) {
  try {
    model.save_changes();
  } catch (err) {
    // @jupyter-widgets/base throws "no comm channel defined" on a page without a kernel
  }
}

/** Tell the page (and tests) that the widget shows a new state. */
export function markRendered(root, view) {
  root.__headlabView = view;
  root.dataset.renders = String(Number(root.dataset.renders || 0) + 1);
}

export const CSS = `
.hl-widget { font-size: 14px; line-height: 1.4; max-width: 100%; }
.hl-widget .hl-row { display: flex; flex-wrap: wrap; gap: 6px 14px; align-items: center; margin: 4px 0; }
.hl-widget button.hl-choice { min-width: 2.6em; padding: 2px 8px; border: 1px solid #9ab; background: #fff;
  border-radius: 4px; cursor: pointer; font: inherit; }
.hl-widget button.hl-choice[aria-pressed="true"] { background: #2171b5; color: #fff; border-color: #2171b5; }
.hl-widget .hl-error { color: #a40000; font-weight: 600; }
.hl-widget .hl-status { color: #555; font-size: 12px; min-height: 1.4em; }
.hl-widget .hl-colorbar { display: flex; align-items: center; gap: 6px; font-size: 12px; margin: 4px 0; }
.hl-widget .hl-colorbar-ramp { display: inline-block; width: 140px; height: 10px; border: 1px solid #ccc; }
.hl-widget .hl-grid { display: grid; gap: 10px; grid-template-columns: repeat(auto-fill, minmax(150px, 1fr)); }
.hl-widget figure { margin: 0; }
.hl-widget figcaption { font-size: 12px; color: #333; }
.hl-widget table { border-collapse: collapse; font-size: 13px; margin: 0 !important; }
.hl-widget td, .hl-widget th { padding: 1px 8px 1px 0; text-align: left; }
.hl-widget td.hl-num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.hl-widget th { white-space: nowrap; }
.hl-widget td.hl-text { max-width: min(24em, 40vw); overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.hl-widget table caption { caption-side: top; text-align: left; font-weight: 600; max-width: 16em; }
.hl-widget .hl-tables { margin: 4px 0 8px; }
.hl-widget .hl-tables > * { margin-bottom: 6px !important; }
.hl-widget .hl-contrast td.hl-text { max-width: min(24em, 20vw); }
.hl-widget input[type="text"], .hl-widget textarea { width: 100%; box-sizing: border-box; font: inherit; }
`;

/** Add the shared stylesheet once per document. */
export function addStyle() {
  if (document.getElementById("headlab-live-css")) return;
  document.head.append(h("style", { id: "headlab-live-css" }, CSS));
}
