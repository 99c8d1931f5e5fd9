// The demo page: asks /v1/answer (explain=true) or /v1/choose and draws the result.
// Plain DOM, no framework, no network beyond this server.
"use strict";
let kind = "extractive";

const $ = (id) => document.getElementById(id);
const fmt = (x, d = 3) => (x === null || x === undefined ? "–" : Number(x).toFixed(d));

function el(tag, props = {}, text) {
  const e = document.createElement(tag);
  Object.assign(e, props);
  if (text !== undefined) e.textContent = text;
  return e;
}

async function loadModel() {
  const r = await fetch("/healthz");
  const h = await r.json();
  kind = h.kind;
  $("model").textContent = `${h.task} model, step ${h.step}, head ${h.head}` +
    (h.explain ? " (co-attention shading on)" : "");
  if (kind === "multiple_choice") {
    $("options-box").hidden = false;
    $("options").required = true;
    $("submit").textContent = "Choose";
  }
}

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = false;
}

// The passage with every sub-token shaded by its co-attention score (POS tag on hover) and the
// answer span outlined; the text between tokens (spaces) is kept as written.
function drawPassage(passage, tokens, start, end) {
  const box = $("tokens");
  box.replaceChildren();
  if (!tokens) {
    box.textContent = passage;
    return;
  }
  let at = 0;
  for (const t of tokens) {
    if (t.start > at) box.append(document.createTextNode(passage.slice(at, t.start)));
    const span = el("span", { className: "tok" }, passage.slice(t.start, t.end));
    if (t.score !== null) {
      span.style.backgroundColor = `rgba(74, 123, 208, ${(0.05 + 0.75 * t.score).toFixed(3)})`;
      span.dataset.score = t.score.toFixed(3);
    }
    span.title = `${t.pos ? "POS " + t.pos + ", " : ""}co-attention ${fmt(t.score)}`;
    if (t.pos) span.dataset.pos = t.pos;
    if (start !== null && t.start >= start && t.end <= end) span.classList.add("answer");
    box.append(span);
    at = Math.max(at, t.end);
  }
  if (at < passage.length) box.append(document.createTextNode(passage.slice(at)));
}

function drawAnswer(passage, a) {
  const p = $("answer");
  p.replaceChildren();
  if (a.no_answer) {
    const why = a.no_candidate
      ? "no candidate span in the passage"
      : `null score − best span score = ${fmt(a.null_score_diff)} > δ`;
    p.append(el("span", { className: "none" }, "No answer"), ` (${why})`);
  } else {
    p.append(el("mark", { id: "answer-text" }, a.answer),
      ` probability ${fmt(a.probability)}, characters ${a.start}–${a.end}` +
      (a.null_score_diff !== null ? `, null − best = ${fmt(a.null_score_diff)}` : ""));
  }
  $("shading-hint").textContent = a.tokens && a.tokens.length && a.tokens[0].score !== null
    ? "(shaded by co-attention score; hover a word for its POS tag)" : "";
  drawPassage(passage, a.tokens, a.no_answer ? null : a.start, a.end);
  const body = $("nbest").querySelector("tbody");
  body.replaceChildren();
  a.nbest.forEach((c, i) => {
    const tr = el("tr");
    const bar = el("span", { className: "bar" });
    bar.style.width = `${(c.probability * 6).toFixed(2)}rem`;
    const prob = el("td", { className: "num" });
    prob.append(bar, fmt(c.probability));
    tr.append(el("td", {}, String(i + 1)), el("td", {}, c.text === "" ? "(no answer)" : c.text),
      prob, el("td", { className: "num" }, fmt(c.score, 2)));
    body.append(tr);
  });
}

function drawChoice(passage, options, c) {
  $("answer").replaceChildren(el("mark", { id: "answer-text" }, c.option),
    ` (option ${c.index + 1}, probability ${fmt(c.probabilities[c.index])})`);
  drawPassage(passage, null);
  const body = $("nbest").querySelector("tbody");
  body.replaceChildren();
  options.forEach((o, i) => {
    const tr = el("tr");
    tr.append(el("td", {}, String(i + 1)), el("td", {}, o),
      el("td", { className: "num" }, fmt(c.probabilities[i])),
      el("td", { className: "num" }, fmt(c.logits[i], 2)));
    body.append(tr);
  });
}

async function ask(event) {
  event.preventDefault();
  $("error").hidden = true;
  const passage = $("passage").value, question = $("question").value;
  const choice = kind === "multiple_choice";
  const options = $("options").value.split("\n").map((s) => s.trim()).filter((s) => s);
  const body = choice ? { passage, question, options }
    : { question, context: passage, explain: true, top_k: 5 };
  $("submit").disabled = true;
  try {
    const r = await fetch(choice ? "/v1/choose" : "/v1/answer", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
    });
    const out = await r.json();
    if (!r.ok) {
      showError(`${r.status}: ${out.error || JSON.stringify(out)}`);
      return;
    }
    $("result").hidden = false;
    if (choice) drawChoice(passage, options, out); else drawAnswer(passage, out);
    document.body.dataset.answered = "true";
  } catch (e) {
    showError(String(e));
  } finally {
    $("submit").disabled = false;
  }
}

$("ask").addEventListener("submit", ask);
loadModel().catch((e) => showError(`cannot reach the server: ${e}`));
