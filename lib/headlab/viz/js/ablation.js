// headlab live widget (c): live ablation. Toggle any set of heads, zero or mean ablation;
// see the next-token loss per text, the top next-token predictions after the first text
// before and after, and the pattern of a chosen head, recomputed on each click. A line typed
// "text | A | B" also shows logit(A) - logit(B) after the text (core.js parseLine).
// Traits (see headlab.viz.live.AblationWidget): n_layers, n_heads, d_head, ablated, mode,
// selected, texts, top_k, tokenizer, onnx, view. With a kernel, headlab (PyTorch) computes
// `view`; on the book's website, onnxruntime-web runs the exported model in the browser.

const probsOf = (out, row, vocab) => Array.from(logSoftmaxRow(out.logits, row, vocab), Math.exp);

async function computeAblation(model, assets, memo) {
  const spec = model.get("tokenizer");
  const lines = model.get("texts").filter((t) => t.trim()).map(parseLine);
  if (!lines.length) throw new VocabError("give at least one non-empty text");
  const texts = lines.map((x) => x.text), candidates = lines.map((x) => x.candidates);
  const rows = texts.map((t) => encode(t, spec).ids);
  const pairs = candidates.map((c) => (c.length ? c.map((w) => candidateToken(w, spec)) : null));
  const contrastOf = (out) => pairs.map((p, i) => p && logitDiff(out.logits, i * out.pos + rows[i].length - 1,
    out.vocab, p[0], p[1]));
  const layers = model.get("n_layers"), heads = model.get("n_heads"), dHead = model.get("d_head");
  const shape = { layers, heads, dHead };
  const session = await loadSession(assets, model.get("onnx"));
  const key = JSON.stringify(rows);
  if (memo.key !== key) { // the clean run: once per set of texts
    const clean = await runModel(session, rows, spec.pad_id, shape, new Float32Array(layers * heads).fill(1),
      new Float32Array(layers * heads * dHead));
    Object.assign(memo, { key, clean,
      losses: nextTokenLoss(clean.logits, clean.ids, clean.mask, clean.batch, clean.pos, clean.vocab),
      mean: meanZ(clean.z, clean.mask, layers, clean.batch, clean.pos, heads, dHead),
      probs: probsOf(clean, rows[0].length - 1, clean.vocab) });
  }
  const ablated = model.get("ablated"), mode = model.get("mode"), selected = model.get("selected");
  let out = memo.clean;
  if (ablated.length) {
    const gate = new Float32Array(layers * heads).fill(1);
    for (const [l, hd] of ablated) gate[l * heads + hd] = 0;
    const replacement = mode === "mean" ? memo.mean : new Float32Array(layers * heads * dHead);
    out = await runModel(session, rows, spec.pad_id, shape, gate, replacement);
  }
  const losses = ablated.length ? nextTokenLoss(out.logits, out.ids, out.mask, out.batch, out.pos, out.vocab)
    : memo.losses;
  const probs = probsOf(out, rows[0].length - 1, out.vocab), k = model.get("top_k");
  const entry = (i) => [vocabOf(spec)[i], memo.probs[i], probs[i]];
  const n = rows[0].length;
  return {
    texts, clean: memo.losses, metric: losses, ablated, mode, selected, what: "next-token loss (nats)",
    candidates, contrast: contrastOf(out), contrast_clean: contrastOf(memo.clean),
    top: topK(memo.probs, k).map(entry), top_ablated: topK(probs, k).map(entry),
    tokens: rows[0].map((i) => vocabOf(spec)[i]),
    pattern: patternOf(out.patterns, selected[0], 0, selected[1], n, { batch: out.batch, heads, pos: out.pos }),
    error: null,
  };
}

const fmt = (v, d = 3) => h("td", { class: "hl-num", "data-value": v.toPrecision(9) }, v.toFixed(d));

function lossTable(view) {
  return h("table", { class: "hl-losses" },
    h("tr", {}, h("th", {}, "text"), h("th", {}, "clean"), h("th", {}, "ablated"), h("th", {}, "change")),
    view.texts.map((t, i) => h("tr", { "data-text": i },
      h("td", { title: t, class: "hl-text" }, t),
      fmt(view.clean[i]), fmt(view.metric[i]), fmt(view.metric[i] - view.clean[i]))));
}

/** logit(A) - logit(B) after each text that names two candidates; null when none does. */
function contrastTable(view) {
  const named = view.texts.map((t, i) => i).filter((i) => view.candidates?.[i]?.length);
  if (!named.length) return null;
  return h("table", { class: "hl-contrast" },
    h("tr", {}, h("th", {}, "text"), h("th", {}, "A − B"), h("th", {}, "clean"), h("th", {}, "ablated"),
      h("th", {}, "change")),
    named.map((i) => h("tr", { "data-text": i },
      h("td", { title: view.texts[i], class: "hl-text" }, view.texts[i]),
      h("td", { class: "hl-pair" }, ...view.candidates[i].map((c, k) => h("span", { style: { whiteSpace: "nowrap" } },
        k ? ` − ${c}` : c))),
      fmt(view.contrast_clean[i]), fmt(view.contrast[i]), fmt(view.contrast[i] - view.contrast_clean[i]))));
}

function topTable(rows, which, caption, spec) {
  return h("table", { class: "hl-top", "data-top": which },
    h("caption", {}, caption),
    h("tr", {}, h("th", {}, "token"), h("th", {}, "clean"), h("th", {}, "ablated")),
    rows.map(([tok, a, b]) => h("tr", { "data-token": tok },
      h("td", { class: "hl-token", title: tok }, JSON.stringify(tokenText(tok, spec))), fmt(a), fmt(b))));
}

function render({ model, el }) {
  addStyle();
  const assets = siteAssets();
  const root = h("div", { class: "hl-widget hl-ablation" });
  const grid = h("div", { class: "hl-heads-grid", role: "group", "aria-label": "heads to ablate" });
  const modeRow = h("div", { class: "hl-row", role: "group", "aria-label": "ablation mode" });
  const select = h("select", { "aria-label": "head whose pattern is shown" });
  const textarea = h("textarea", { rows: Math.min(6, model.get("texts").length + 1), "aria-label": "texts, one per line",
    spellcheck: "false", style: { fontSize: "13px" } });
  textarea.value = model.get("texts").join("\n");
  const status = h("div", { class: "hl-status", "aria-live": "polite" });
  const summary = h("div", { class: "hl-summary" });
  const tables = h("div", { class: "hl-tables" });
  const patternBox = h("div", { class: "hl-pattern-box" });
  root.append(h("div", {}, h("b", {}, "Click heads to ablate them"), " (rows: layers, columns: heads)"), grid,
    modeRow, h("div", { class: "hl-row" }, h("label", {}, "show the pattern of head ", select)),
    h("label", { style: { display: "block" } }, "texts, one per line (click outside to run them); end a line with ",
      h("code", { style: { whiteSpace: "nowrap" } }, "| A | B"), " to compare two next tokens", textarea),
    status, summary, tables, patternBox);
  el.append(root);
  const memo = {};
  let pending = 0;
  const L = model.get("n_layers"), H = model.get("n_heads");
  grid.style.cssText = `display:grid;gap:3px;grid-template-columns:repeat(${H}, minmax(2.6em, 3.2em));margin:4px 0`;
  for (let l = 0; l < L; l++) for (let hd = 0; hd < H; hd++) select.append(h("option", { value: `${l}.${hd}` }, `${l}.${hd}`));

  function drawControls() {
    const ablated = new Set(model.get("ablated").map(([l, hd]) => `${l}.${hd}`));
    grid.replaceChildren();
    for (let l = 0; l < L; l++) for (let hd = 0; hd < H; hd++) {
      const name = `${l}.${hd}`, on = ablated.has(name);
      grid.append(h("button", { class: "hl-choice", type: "button", "aria-pressed": String(on), "data-head": name,
        title: `${on ? "restore" : "ablate"} head ${name}`, onclick: () => toggle(l, hd) }, name));
    }
    modeRow.replaceChildren("mode", ...["zero", "mean"].map((m) => h("button", { class: "hl-choice", type: "button",
      "data-mode": m, "aria-pressed": String(model.get("mode") === m), onclick: () => change({ mode: m }) }, m)));
    select.value = model.get("selected").join(".");
  }

  function draw() {
    drawControls();
    const spec = model.get("tokenizer");
    const saved = model.get("view") || {};
    const view = saved.pattern && !Array.isArray(saved.pattern) ? { ...saved, pattern: unpack(saved.pattern) } : saved;
    if (view.error) {
      status.replaceChildren(h("span", { class: "hl-error" }, view.error));
      markRendered(root, view);
      return;
    }
    status.textContent = "";
    if (!view.metric) return;
    const names = view.ablated.map((x) => x.join(".")).join(", ") || "none";
    summary.replaceChildren(h("b", {}, "ablated: "), names, view.ablated.length ? ` (${view.mode} ablation)` : "");
    summary.dataset.ablated = names;
    const contrast = contrastTable(view);
    tables.replaceChildren(...[
      contrast && h("div", {}, h("b", {}, "logit difference"), " logit(A) − logit(B) of the next token " +
        "after the text (above 0: the model prefers A)"), contrast,
      h("div", {}, h("b", {}, view.what || "next-token loss (nats)")), lossTable(view),
      view.top?.length && h("div", { class: "hl-row", style: { alignItems: "flex-start", gap: "6px 28px" } },
        topTable(view.top, "clean", "top next tokens after text 1, clean model", spec),
        topTable(view.top_ablated, "ablated", "… and after the ablation", spec))].filter(Boolean));
    const name = `head ${view.selected.join(".")}`;
    patternBox.replaceChildren(h("div", { class: "hl-status" }, `${name} on text 1` +
      (view.ablated.length ? " (with the ablation applied)" : "")), colorBar(),
      labelledPattern(view.pattern, view.tokens.map((tok) => tokenText(tok, spec)), name, 380));
    markRendered(root, view);
  }

  function toggle(l, hd) {
    const key = `${l}.${hd}`;
    const current = model.get("ablated").filter(([a, b]) => `${a}.${b}` !== key);
    if (current.length === model.get("ablated").length) current.push([l, hd]);
    current.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    change({ ablated: current });
  }

  async function change(values) {
    for (const [k, v] of Object.entries(values)) model.set(k, v);
    drawControls(); // the controls follow at once; the numbers follow the computation
    if (!assets) {
      syncToKernel(model);
      return;
    }
    const ticket = ++pending;
    status.textContent = globalThis.__headlabOrtReady ? "" : "loading the model into your browser…";
    let view;
    try {
      view = await computeAblation(model, assets, memo);
      globalThis.__headlabOrtReady = true;
    } catch (err) {
      view = { ...(model.get("view") || {}), error: err instanceof VocabError ? err.message : `error: ${err.message}` };
      if (!(err instanceof VocabError)) console.warn(err);
    }
    if (ticket !== pending) return; // a later move has superseded this one
    const before = root.dataset.renders;
    model.set("view", view);
    if (root.dataset.renders === before) draw(); // Backbone fires no change for an equal view
  }

  select.addEventListener("change", () => change({ selected: select.value.split(".").map(Number) }));
  textarea.addEventListener("change", () => change({ texts: textarea.value.split("\n").filter((t) => t.trim()) }));
  textarea.addEventListener("keydown", (ev) => ev.stopPropagation()); // Shift+Enter here is a new line, not "run cell"
  root.addEventListener("pointerenter", () => assets && loadOrt(assets), { once: true });
  model.on("change:view", draw);
  draw();
  return () => model.off("change:view", draw);
}

export default { render };
