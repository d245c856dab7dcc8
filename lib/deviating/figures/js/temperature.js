// The book's live widget (deviating.figures.widgets): one attention row, softmax(scores / T), with a temperature slider.
// Traits: scores (list of float), labels (list of str), temperature, t_min, t_max, step.
// Everything is computed here, in the browser, with or without a kernel.

function temperatureView(model) {
  const scores = model.get("scores"), t = model.get("temperature");
  const weights = softmax(scores, t);
  return { temperature: t, weights, entropy: entropyNats(weights), keys: model.get("labels") };
}

function barChart(view) {
  const width = 360, height = 170, left = 34, bottom = 46, top = 8;
  const n = view.weights.length, slot = (width - left) / n;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("class", "hl-bars");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `attention weights at T = ${view.temperature.toFixed(2)}: ` +
    view.keys.map((k, i) => `${k} ${view.weights[i].toFixed(3)}`).join(", "));
  const add = (tag, attrs, text) => {
    const node = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    svg.append(node);
    return node;
  };
  const plotH = height - bottom - top;
  for (const tick of [0, 0.5, 1]) {
    const y = top + plotH * (1 - tick);
    add("line", { x1: left, x2: width, y1: y, y2: y, stroke: "#ddd" });
    add("text", { x: left - 4, y: y + 4, "text-anchor": "end", "font-size": 11 }, tick.toFixed(1));
  }
  view.weights.forEach((w, i) => {
    const x = left + i * slot + slot * 0.15, bh = plotH * w;
    const bar = add("rect", { x, y: top + plotH - bh, width: slot * 0.7, height: bh, fill: "#ff7f0e",
      class: "hl-bar", "data-key": view.keys[i], "data-value": w.toPrecision(9) });
    bar.append(Object.assign(document.createElementNS(ns, "title"),
      { textContent: `${view.keys[i]}: ${w.toFixed(4)}` }));
    add("text", { x: x + slot * 0.35, y: height - bottom + 14, "text-anchor": "middle", "font-size": 11 },
      view.keys[i]);
  });
  add("text", { x: 10, y: top + plotH / 2, "font-size": 11, "text-anchor": "middle",
    transform: `rotate(-90 10 ${top + plotH / 2})` }, "weight");
  return svg;
}

function render({ model, el }) {
  addStyle();
  const root = h("div", { class: "hl-widget hl-temperature" });
  const value = h("output", { class: "hl-t-value" });
  const slider = h("input", { type: "range", min: model.get("t_min"), max: model.get("t_max"),
    step: model.get("step"), value: model.get("temperature"), "aria-label": "temperature T",
    style: { width: "min(320px, 60vw)" } });
  const title = h("div", { class: "hl-title" });
  const chart = h("div", { style: { maxWidth: "420px" } });
  root.append(h("div", { class: "hl-row" }, h("label", {}, "temperature T ", slider), value), title, chart);
  el.append(root);

  function draw() {
    const view = temperatureView(model);
    value.textContent = view.temperature.toFixed(2);
    slider.value = view.temperature;
    title.replaceChildren(h("b", {}, `T = ${view.temperature.toFixed(2)}`),
      `: entropy ${view.entropy.toFixed(2)} nats`);
    title.dataset.entropy = view.entropy.toPrecision(9);
    chart.replaceChildren(barChart(view));
    markRendered(root, view);
  }
  slider.addEventListener("input", () => {
    model.set("temperature", Number(slider.value));
    syncToKernel(model); // keep the kernel's value in step
  });
  model.on("change:temperature", draw);
  model.on("change:scores", draw);
  draw();
  return () => model.off("change:temperature", draw);
}

export default { render };
