// The book's live widget (deviating.figures.widgets): adjustable heads. Choose 1, 2, 4 or 8 heads (d_head follows),
// a layer and a sentence; see every head's attention pattern.
// Traits (see deviating.figures.widgets.HeadsWidget): head_counts, n_heads, n_layers, layer, text, texts,
// notes, d_heads, tokenizer, onnx, view. With a kernel, headlab (PyTorch) computes `view`;
// on the book's website, onnxruntime-web runs the exported models here, in the browser.

async function computeHeads(model, assets) {
  const n = model.get("n_heads"), layer = model.get("layer"), key = String(n);
  const file = (model.get("onnx") || {})[key];
  if (!file) throw new Error(`the ${n}-head model has no export on this page; run the notebook to use it`);
  const { ids, tokens } = encode(model.get("text"), model.get("tokenizer"));
  const layers = model.get("n_layers"), dHead = model.get("d_heads")[key];
  const session = await loadSession(assets, file);
  const out = await runModel(session, [ids], model.get("tokenizer").pad_id, { layers, heads: n, dHead },
    new Float32Array(layers * n).fill(1), new Float32Array(layers * n * dHead));
  const dims = { batch: 1, heads: n, pos: out.pos };
  const pattern = Array.from({ length: n }, (_, head) => patternOf(out.patterns, layer, 0, head, ids.length, dims));
  return { n_heads: n, d_head: dHead, layer, tokens, pattern, error: null };
}

function render({ model, el }) {
  addStyle();
  const assets = siteAssets();
  const root = h("div", { class: "hl-widget hl-heads" });
  const headsRow = h("div", { class: "hl-row", role: "group", "aria-label": "number of heads" }, "heads");
  const layerRow = h("div", { class: "hl-row", role: "group", "aria-label": "layer" }, "layer");
  const listId = `hl-texts-${Math.random().toString(36).slice(2)}`;
  const input = h("input", { type: "text", list: listId, value: model.get("text"), "aria-label": "sentence",
    spellcheck: "false" });
  const datalist = h("datalist", { id: listId }, model.get("texts").map((t) => h("option", { value: t })));
  const status = h("div", { class: "hl-status", "aria-live": "polite" });
  const caption = h("div", { class: "hl-caption" });
  const grid = h("div", { class: "hl-grid" });
  const hover = h("div", { class: "hl-status" }, "hover over a pattern to read a weight");
  const focus = h("div", { class: "hl-focus" });
  root.append(headsRow, layerRow, h("label", { style: { display: "block" } }, "sentence (press Enter) ", input), datalist, status, caption,
    colorBar(), grid, hover, focus);
  el.append(root);
  let focused = 0, pending = 0;

  function buttons(row, options, current, label, onPick) {
    row.replaceChildren(row.firstChild);
    for (const v of options) {
      row.append(h("button", { class: "hl-choice", type: "button", "aria-pressed": String(v === current),
        "data-value": v, title: label(v), onclick: () => onPick(v) }, String(v)));
    }
  }

  function drawControls() {
    buttons(headsRow, model.get("head_counts"), model.get("n_heads"), (v) => `${v} head${v > 1 ? "s" : ""}`,
      (v) => change({ n_heads: v }));
    buttons(layerRow, Array.from({ length: model.get("n_layers") }, (_, i) => i), model.get("layer"),
      (v) => `layer ${v}`, (v) => change({ layer: v }));
  }

  function draw() {
    drawControls();
    const saved = model.get("view") || {};
    const view = saved.pattern && !Array.isArray(saved.pattern) ? { ...saved, pattern: unpack(saved.pattern) } : saved;
    if (view.error) {
      status.replaceChildren(h("span", { class: "hl-error" }, view.error));
      markRendered(root, view);
      return;
    }
    status.textContent = "";
    if (!view.pattern) return;
    const note = (model.get("notes") || {})[String(view.n_heads)];
    caption.replaceChildren(h("b", {}, `${view.n_heads} head${view.n_heads > 1 ? "s" : ""} of d_head = ${view.d_head}`),
      `, layer ${view.layer}${note ? ": " + note : ""}`);
    const size = view.n_heads === 1 ? 240 : view.n_heads === 2 ? 190 : 150;
    grid.style.gridTemplateColumns = `repeat(auto-fill, minmax(${size}px, max-content))`;
    focused = Math.min(focused, view.n_heads - 1);
    grid.replaceChildren(...view.pattern.map((m, head) => {
      const name = `head ${view.layer}.${head}`;
      const canvas = patternCanvas(m, view.tokens, size, name, hover);
      canvas.addEventListener("click", () => { focused = head; drawFocus(view); });
      return h("figure", { "data-head": head }, canvas, h("figcaption", {}, name));
    }));
    drawFocus(view);
    markRendered(root, view);
  }

  function drawFocus(view) {
    const name = `head ${view.layer}.${focused}`;
    focus.replaceChildren(h("div", { class: "hl-status" }, `${name} with its tokens (click another pattern to enlarge it)`),
      labelledPattern(view.pattern[focused], view.tokens, name));
  }

  async function change(values) {
    for (const [k, v] of Object.entries(values)) model.set(k, v);
    drawControls();
    if (!assets) { // a kernel computes the view and sends it back
      syncToKernel(model);
      return;
    }
    const ticket = ++pending;
    status.textContent = globalThis.__headlabOrtReady ? "" : "loading the model into your browser…";
    let view;
    try {
      view = await computeHeads(model, assets);
      globalThis.__headlabOrtReady = true;
      // the other head counts load in the background, so switching to them is quick too
      for (const file of Object.values(model.get("onnx") || {})) loadSession(assets, file);
    } catch (err) {
      view = { ...(model.get("view") || {}), error: err instanceof VocabError ? err.message : `error: ${err.message}` };
      if (!(err instanceof VocabError)) console.warn(err);
    }
    if (ticket !== pending) return; // a later move has superseded this one
    const before = root.dataset.renders;
    model.set("view", view);
    if (root.dataset.renders === before) draw(); // Backbone fires no change for an equal view
  }

  const submit = () => { if (input.value !== model.get("text")) change({ text: input.value }); };
  input.addEventListener("change", submit);
  input.addEventListener("keydown", (ev) => {
    ev.stopPropagation(); // keys typed here are not notebook shortcuts (JupyterLab, Colab)
    if (ev.key === "Enter") submit();
  });
  root.addEventListener("pointerenter", () => assets && loadOrt(assets), { once: true });
  model.on("change:view", draw);
  draw();
  return () => model.off("change:view", draw);
}

export default { render };
