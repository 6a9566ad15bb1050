// The page: translate a text with POST /translate (sentence by sentence, its layout kept), its
// lines with POST /v1/translate for the cross-attention drawn; a file with POST /translate_file.
"use strict";

const $ = (id) => document.getElementById(id);
const HINT = "Hover a cell: a target piece, a source piece, and the weight it gives it.";
const UNSURE = 0.5;   // a word whose least probable piece is below this is marked
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
  $("translate-file").disabled = false;
}

// a SentencePiece piece as the word it is part of: "▁dog" -> "dog", a piece that continues a
// word -> "·s"
function word(piece) {
  if (piece.startsWith("<") && piece.endsWith(">")) return piece;
  return piece.startsWith("▁") ? piece.slice(1) || "␣" : `·${piece}`;
}

// the glossary box's lines ("source<TAB>target" or "source = target") as an object; throws
// naming a line that is neither
function glossary() {
  const terms = {};
  $("glossary").value.split("\n").forEach((line, i) => {
    if (!line.trim()) return;
    const parts = line.includes("\t") ? line.split("\t") : line.split(" = ");
    if (parts.length !== 2 || !parts[0].trim() || !parts[1].trim()) {
      throw new Error(`Glossary line ${i + 1}: write the source term, a tab or " = ", the target term.`);
    }
    terms[parts[0].trim()] = parts[1].trim();
  });
  return terms;
}

async function translate(event) {
  event.preventDefault();
  showError("");
  const text = $("source").value;
  const lines = text.split("\n").map((l) => l.trim()).filter((l) => l);
  if (!lines.length) { showError("Type a sentence first."); return; }
  let terms;
  try { terms = glossary(); } catch (error) { showError(error.message); return; }
  const model = models[Number($("pair").value)];
  $("translate").disabled = true;
  $("status").textContent = "Translating…";
  const started = performance.now();
  try {
    const [whole, data] = await Promise.all([
      call("translate", { q: text, source: model.source, target: model.target, glossary: terms }),
      call("v1/translate", {
        text: lines, source: model.source, target: model.target, attention: true,
        scores: true, nbest: Math.min(3, model.beam_size), glossary: terms,
      }).catch(() => ({ translations: [] })),  // a line too long for one search: no picture
    ]);
    $("text").textContent = whole.translatedText;
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
  $("cell").textContent = HINT;  // nothing hovered in this translation yet
  if (!results.length) { $("translation").replaceChildren(); $("heatmap").replaceChildren(); return; }
  $("translation").replaceChildren(...results.map((t, i) => {
    const item = document.createElement("li");
    item.replaceChildren(...words(t));
    if (t.confidence !== null && t.confidence !== undefined) {
      item.dataset.confidence = `confidence ${Math.round(100 * t.confidence)}%`;
    }
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

// A translation's words, each with the probability of its least probable piece (a title), those
// below UNSURE marked; its text alone where its pieces do not make its words (or no scores).
function words(t) {
  const texts = t.text.split(" ");
  if (!t.probabilities || !t.target_pieces) return [document.createTextNode(t.text)];
  const least = [];
  t.target_pieces.slice(0, -1).forEach((piece, i) => {  // not <eos>
    const p = t.probabilities[i];
    if (piece.startsWith("▁") || !least.length) least.push(p);
    else least[least.length - 1] = Math.min(least[least.length - 1], p);
  });
  if (least.length !== texts.length) return [document.createTextNode(t.text)];
  return texts.flatMap((text, i) => {
    const span = document.createElement("span");
    span.textContent = text;
    span.className = least[i] < UNSURE ? "word unsure" : "word";
    span.dataset.probability = least[i].toFixed(4);
    span.title = `probability ${Math.round(100 * least[i])}%`;
    return i ? [document.createTextNode(" "), span] : [span];
  });
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
  const src = t.source_pieces.map(word);
  const tgt = t.target_pieces.map(word);
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
      // an absolute scale, as the legend: 0 white, 1 full blue (near-uniform attention pale)
      cell.style.background = `rgba(36, 86, 199, ${Math.min(1, value).toFixed(3)})`;
      cell.title = `${target} → ${source}: ${value.toFixed(3)}`;
      cell.addEventListener("mouseenter", () => {
        $("cell").textContent = `“${target}” gives “${source}” ${value.toFixed(3)}`;
      });
      cells.push(cell);
    });
  });
  grid.replaceChildren(...cells);
}

async function translateFile(event) {
  event.preventDefault();
  showError("");
  const file = $("file").files[0];
  if (!file) { showError("Choose a file first."); return; }
  const model = models[Number($("pair").value)];
  const form = new FormData();
  form.append("file", file);
  form.append("source", model.source);
  form.append("target", model.target);
  $("translate-file").disabled = true;
  $("download").hidden = true;
  $("status").textContent = "Translating the file…";
  try {
    const response = await fetch("translate_file", { method: "POST", body: form });
    const data = await response.json();
    if (!response.ok) throw new Error(data.error || response.statusText);
    $("download").href = data.translatedFileUrl;
    $("download").hidden = false;
    $("status").textContent = "";
  } catch (error) {
    showError(error.message);
    $("status").textContent = "";
  } finally {
    $("translate-file").disabled = false;
  }
}

$("form").addEventListener("submit", translate);
$("file-form").addEventListener("submit", translateFile);
$("layer").addEventListener("change", draw);
$("source").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) $("form").requestSubmit();
});
loadModels().catch((error) => showError(`Cannot load the models: ${error.message}`));
