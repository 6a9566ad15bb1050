// The page: translate with POST /v1/translate and draw the cross-attention it returns.
"use strict";

const $ = (id) => document.getElementById(id);
let models = [];
let results = null;   // the last response's translations
let chosen = 0;       // which sentence's attention is drawn

async function call(path, body) {
  const response = await fetch(path, body === undefined ? {} : {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  });
  const data = await response.json();
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
}

function showError(message) {
  $("error").textContent = message || "";
  $("error").hidden = !message;
}

async function loadModels() {
  models = await call("v1/models");
  $("pair").replaceChildren(...models.map((m, i) => {
    const option = document.createElement("option");
    option.value = i;
    option.textContent = `${m.source_name} → ${m.target_name}`;
    return option;
  }));
  $("translate").disabled = false;  // only now is there a model to ask
}

async function translate(event) {
  event.preventDefault();
  showError("");
  const lines = $("source").value.split("\n").map((l) => l.trim()).filter((l) => l);
  if (!lines.length) { showError("Type a sentence first."); return; }
  const model = models[Number($("pair").value)];
  $("translate").disabled = true;
  $("status").textContent = "Translating…";
  const started = performance.now();
  try {
    const data = await call("v1/translate", {
      text: lines, source: model.source, target: model.target, attention: true,
      nbest: Math.min(3, model.beam_size),
    });
    results = data.translations;
    chosen = 0;
    show();
    $("status").textContent = `${((performance.now() - started) / 1000).toFixed(2)} s`;
  } catch (error) {
    showError(error.message);
    $("status").textContent = "";
  } finally {
    $("translate").disabled = false;
  }
}

function show() {
  $("result").hidden = false;
  $("translation").replaceChildren(...results.map((t, i) => {
    const item = document.createElement("li");
    item.textContent = t.text;
    item.className = i === chosen ? "chosen" : "";
    item.addEventListener("click", () => { chosen = i; show(); });
    return item;
  }));
  const others = results[chosen].nbest.slice(1).map((h) => h.text)
    .filter((text, i, all) => text !== results[chosen].text && all.indexOf(text) === i);
  $("alternatives").replaceChildren(...others.map((text) => {
    const item = document.createElement("li");
    item.textContent = text;
    return item;
  }));
  $("alternatives-box").hidden = !others.length;
  const layers = results[chosen].layers || [];
  const current = $("layer").value;
  $("layer").replaceChildren(...["all", ...layers].map((layer) => {
    const option = document.createElement("option");
    option.value = layer;
    option.textContent = layer === "all" ? "all, averaged" : `${layer + 1} of ${layers.length}`;
    return option;
  }));
  if ([...$("layer").options].some((o) => o.value === current)) $("layer").value = current;
  draw();
}

function weights(t) {
  // (layers, T, S) -> (T, S): the chosen layer, or the mean of all
  const layer = $("layer").value;
  if (layer !== "all") return t.attention[t.layers.indexOf(Number(layer))];
  return t.attention[0].map((row, i) => row.map((_, j) =>
    t.attention.reduce((sum, l) => sum + l[i][j], 0) / t.attention.length));
}

function draw() {
  const t = results[chosen];
  const grid = $("heatmap");
  if (!t.attention) { grid.replaceChildren(); return; }
  const w = weights(t);
  const top = Math.max(...w.flat(), 1e-9);  // colours relative to the largest weight shown
  const src = t.source_pieces;
  const tgt = t.target_pieces;
  grid.style.gridTemplateColumns = `max-content repeat(${src.length}, minmax(1.6rem, 1fr))`;
  const cells = [document.createElement("span")];
  for (const piece of src) {
    const head = document.createElement("span");
    head.className = "piece column";
    head.textContent = piece;
    cells.push(head);
  }
  tgt.forEach((target, i) => {
    const head = document.createElement("span");
    head.className = "piece row-head";
    head.textContent = target;
    cells.push(head);
    src.forEach((source, j) => {
      const cell = document.createElement("span");
      const value = w[i][j];
      cell.className = "cell";
      cell.setAttribute("role", "gridcell");
      cell.dataset.weight = value.toFixed(4);
      cell.style.background = `rgba(36, 86, 199, ${(value / top).toFixed(3)})`;
      cell.title = `${target} → ${source}: ${value.toFixed(3)}`;
      cell.addEventListener("mouseenter", () => {
        $("cell").textContent = `“${target}” gives “${source}” ${value.toFixed(3)}`;
      });
      cells.push(cell);
    });
  });
  grid.replaceChildren(...cells);
}

$("form").addEventListener("submit", translate);
$("layer").addEventListener("change", draw);
$("source").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) $("form").requestSubmit();
});
loadModels().catch((error) => showError(`Cannot load the models: ${error.message}`));
