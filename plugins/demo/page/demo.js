// The demo page: an editor for the model's task, a solve button, and each supervision
// step's answer shown in turn (its halting score, the cells it changed, the rules' verdict).
// The solver is the server's (trm demo) or the ONNX file's in this browser (trm demo --static),
// as trm-demo.json says.
import { makeCodec, PuzzleError } from "./codec.js";

const $ = (id) => document.getElementById(id);
const query = new URLSearchParams(location.search);
// Milliseconds between two steps on screen (?delay=0 shows them as fast as they come).
const STEP_DELAY_MS = Number(query.get("delay") ?? 350);

const status = (state, text) => { $("status").dataset.state = state; $("status").textContent = text; };
const say = (text) => { $("message").textContent = text; };

async function readJson(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: ${response.status}`);
  return response.json();
}

async function start() {
  const settings = await readJson("trm-demo.json");
  const inBrowser = settings.solver === "onnx";
  const card = inBrowser ? await readJson(settings.card) : settings;
  const codec = makeCodec(card);
  const where = inBrowser ? "in this browser (onnxruntime-web, WebAssembly)" : "on the trm demo server";
  $("model-line").textContent = `${settings.model.name} solves ${settings.puzzle}, ` +
    `thinking for up to ${card.steps} supervision steps, ${where}.`;
  const editor = makeEditor(codec);
  $("clear").onclick = () => { editor.clear(); say(""); };
  let solver;
  if (inBrowser) {
    status("loading", "loading the model into onnxruntime-web (this can take a while)");
    solver = await (await import("./solver-onnx.js")).onnxSolver(card, settings.model_file, codec);
  } else {
    solver = (await import("./solver-server.js")).serverSolver(card);
  }
  $("explore-label").hidden = !solver.canExplore;
  $("solve").onclick = () => solve(codec, solver, editor);
  $("solve").disabled = false;
  status("ready", "ready");
}

// ---- editors -------------------------------------------------------------------------------

function makeEditor(codec) {
  if (codec.task === "sudoku") return sudokuEditor(codec);
  if (codec.task === "maze") return mazeEditor(codec);
  return arcEditor(codec);
}

function gridElement(codec, extraClass) {
  const grid = document.createElement("div");
  grid.className = `grid ${codec.task} ${extraClass ?? ""}`;
  grid.style.gridTemplateColumns = `repeat(${codec.cols}, auto)`;
  return grid;
}

function sudokuBoxClasses(codec, i) {
  const boxes = codec.box ?? [codec.rows, codec.cols];
  const r = Math.floor(i / codec.cols), c = i % codec.cols, out = [];
  if ((c + 1) % boxes[1] === 0 && c + 1 < codec.cols) out.push("box-right");
  if ((r + 1) % boxes[0] === 0 && r + 1 < codec.rows) out.push("box-bottom");
  return out;
}

function sudokuEditor(codec) {
  const grid = gridElement(codec);
  const inputs = [];
  for (let i = 0; i < codec.cells; i++) {
    const cell = document.createElement("div");
    cell.className = ["cell", ...sudokuBoxClasses(codec, i)].join(" ");
    const input = document.createElement("input");
    input.maxLength = 1;
    input.inputMode = "numeric";
    input.setAttribute("aria-label", `row ${Math.floor(i / codec.cols) + 1} column ${(i % codec.cols) + 1}`);
    input.addEventListener("keydown", (e) => {
      const moves = { ArrowLeft: -1, ArrowRight: 1, ArrowUp: -codec.cols, ArrowDown: codec.cols };
      if (moves[e.key] !== undefined) inputs[(i + moves[e.key] + codec.cells) % codec.cells].focus();
    });
    input.addEventListener("paste", (e) => {
      const text = e.clipboardData.getData("text");
      if (text.replace(/[\s|+-]/g, "").length > 1) { e.preventDefault(); fill(text); }
    });
    cell.append(input);
    grid.append(cell);
    inputs.push(input);
  }
  const paste = document.createElement("textarea");
  paste.id = "paste";
  paste.rows = 3;
  paste.placeholder = `or paste a puzzle: ${codec.cells} cells, digits and '.' for blanks`;
  // the text solved: the pasted text as pasted (a puzzle of another size is refused saying
  // so), until a cell is typed in
  let pasted = "";
  paste.addEventListener("input", () => fill(paste.value));
  grid.addEventListener("input", () => { pasted = ""; paste.value = ""; });
  function fill(text) {
    const cells = [...text].filter((ch) => !" \t\r\n|-+".includes(ch));
    inputs.forEach((input, i) => { input.value = cells[i] && cells[i] !== "." && cells[i] !== "0" ? cells[i] : ""; });
    pasted = text;
  }
  $("editor").replaceChildren(grid, paste);
  return {
    text: () => pasted.trim() ? pasted : inputs.map((input) => input.value.trim() || ".").join(""),
    clear: () => { inputs.forEach((input) => { input.value = ""; }); paste.value = ""; pasted = ""; },
  };
}

function mazeEditor(codec) {
  const tools = document.createElement("div");
  tools.className = "tools";
  let tool = "#";
  for (const [ch, label] of [["#", "wall"], [" ", "open"], ["S", "start"], ["G", "goal"]]) {
    const button = document.createElement("label");
    button.innerHTML = `<input type="radio" name="tool" ${ch === "#" ? "checked" : ""}> ${label} `;
    button.querySelector("input").onchange = () => { tool = ch; };
    tools.append(button);
  }
  const chars = new Array(codec.cells).fill(" ");
  const grid = gridElement(codec);
  const cells = chars.map((_, i) => {
    const cell = document.createElement("div");
    cell.dataset.index = i;
    grid.append(cell);
    return cell;
  });
  let drawing = false;
  const paint = (i) => {
    if (tool === "S" || tool === "G") chars.forEach((ch, j) => { if (ch === tool) chars[j] = " "; });
    chars[i] = tool;
    draw();
  };
  grid.addEventListener("mousedown", (e) => { if (e.target.dataset.index) { drawing = true; paint(Number(e.target.dataset.index)); } });
  grid.addEventListener("mouseover", (e) => { if (drawing && e.target.dataset.index && tool === "#") paint(Number(e.target.dataset.index)); });
  document.addEventListener("mouseup", () => { drawing = false; });
  const draw = () => cells.forEach((cell, i) => { cell.className = `cell ${mazeClass(chars[i])}`; cell.textContent = chars[i] === "S" || chars[i] === "G" ? chars[i] : ""; });
  const paste = document.createElement("textarea");
  paste.id = "paste";
  paste.rows = 4;
  paste.placeholder = `or paste a maze: ${codec.rows} lines of ${codec.cols} characters ('#' wall, ' ' open, S, G)`;
  paste.addEventListener("input", () => {
    const joined = paste.value.replace(/\r/g, "").split("\n").map((l) => l.padEnd(codec.cols, " ")).join("");
    for (let i = 0; i < codec.cells; i++) chars[i] = "#SG".includes(joined[i]) ? joined[i] : " ";
    draw();
  });
  draw();
  $("editor").replaceChildren(tools, grid, paste);
  return {
    text: () => Array.from({ length: codec.rows }, (_, r) => chars.slice(r * codec.cols, (r + 1) * codec.cols).join("")).join("\n"),
    clear: () => { chars.fill(" "); paste.value = ""; draw(); },
  };
}

function mazeClass(ch) {
  return { "#": "wall", S: "start", G: "goal", o: "path" }[ch] ?? "open";
}

function arcEditor(codec) {
  const file = document.createElement("input");
  file.type = "file";
  file.id = "task-file";
  file.accept = ".json,application/json";
  const preview = document.createElement("div");
  let text = "";
  file.onchange = async () => {
    text = file.files.length ? await file.files[0].text() : "";
    say("");
    try {
      preview.replaceChildren(renderGrid(codec, codec.encodeText(text), []));
    } catch (e) {
      preview.replaceChildren();
      say(e.message);
    }
  };
  const hint = document.createElement("p");
  hint.textContent = "Choose an ARC task file (JSON); its first test input is solved.";
  $("editor").replaceChildren(hint, file, preview);
  return { text: () => text, clear: () => { file.value = ""; text = ""; preview.replaceChildren(); } };
}

// ---- showing answers -----------------------------------------------------------------------

const ARC_COLOURS = ["#000", "#0074d9", "#ff4136", "#2ecc40", "#ffdc00", "#aaa", "#f012be", "#ff851b", "#7fdbff", "#870c25"];

function renderGrid(codec, tokens, changed, question) {
  const chars = codec.chars(tokens);
  const changedSet = new Set(changed);
  let rows = codec.rows, cols = codec.cols;
  const grid = gridElement(codec);
  if (codec.task === "arc") { // crop the canvas to the grid at its top-left, as trm solve does
    const shape = codec.arcGridShape(tokens);
    if (!shape) {
      grid.dataset.empty = "";
      grid.textContent = "no grid: the top-left cell holds no colour";
      return grid;
    }
    ({ rows, cols } = shape);
  }
  grid.dataset.cols = cols;
  grid.style.gridTemplateColumns = `repeat(${cols}, auto)`;
  const givenChars = question ? codec.chars(question) : null;
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < cols; c++) {
      const i = r * codec.cols + c;
      const ch = chars[i];
      const cell = document.createElement("div");
      const classes = ["cell"];
      if (codec.task === "sudoku") {
        cell.textContent = ch === "." ? "" : ch;
        classes.push(...sudokuBoxClasses(codec, i));
        if (givenChars && givenChars[i] !== ".") classes.push("given");
      } else if (codec.task === "maze") {
        classes.push(mazeClass(ch));
        cell.textContent = ch === "S" || ch === "G" ? ch : "";
      } else {
        cell.style.background = ARC_COLOURS[Number(ch)];
        cell.dataset.colour = ch;
      }
      if (changedSet.has(i)) classes.push("changed");
      cell.className = classes.join(" ");
      grid.append(cell);
    }
  }
  return grid;
}

function verdictText(valid) {
  if (valid === null || valid === undefined) return ["the rules cannot judge this task's answer here", ""];
  return valid ? ["obeys the rules", "valid"] : ["breaks the rules", "invalid"];
}

function showStep(codec, question, event, row) {
  $("answer").replaceChildren(renderGrid(codec, event.tokens, event.changed, question));
  $("step-title").textContent = `after step ${event.step} of ${event.max_steps}`;
  $("halt-meter").value = event.halt_score;
  $("halt-value").textContent = `${event.halt_score.toFixed(3)}${event.asks_to_halt ? " (asks to halt)" : ""}`;
  const [text, cls] = verdictText(event.valid);
  $("verdict").textContent = `The answer ${text}; ${event.changed.length} cells changed.`;
  $("verdict").className = cls;
  document.querySelectorAll("#steps tbody tr").forEach((tr) => tr.classList.toggle("shown", tr === row));
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function solve(codec, solver, editor) {
  say("");
  const text = editor.text();
  let question = null;
  try {
    question = codec.encodeText(text);
  } catch (e) {
    if (!solver.readsPuzzles) { // the server reads the puzzle itself and says what is wrong
      say(e.message);
      status("error", "the puzzle was refused");
      return;
    }
  }
  const explore = Number($("explore").value) || 1;
  $("solve").disabled = true;
  $("steps").querySelector("tbody").replaceChildren();
  $("explored").hidden = true;
  $("answer").removeAttribute("data-cells");
  status("solving", "solving");
  let shownAt = 0;
  try {
    for await (const event of solver.solve({ text }, { explore })) {
      if (event.kind === "step") {
        const wait = shownAt + STEP_DELAY_MS - performance.now();
        if (wait > 0) await sleep(wait);
        shownAt = performance.now();
        const row = document.createElement("tr");
        const [rules] = verdictText(event.valid);
        row.innerHTML = `<td>${event.step}</td><td>${event.halt_score.toFixed(3)}</td><td>${event.changed.length}</td><td>${rules}</td>`;
        row.onclick = () => showStep(codec, question, event, row);
        $("steps").querySelector("tbody").append(row);
        showStep(codec, question, event, row);
      } else if (event.kind === "done") {
        $("answer").dataset.cells = codec.chars(event.tokens);
        if (event.explored) showExplored(codec, question, event.explored);
        const [rules] = verdictText(event.valid);
        const ms = solver.lastSolveMs;
        $("status").dataset.solveMs = ms ?? "";
        status("done", `done: the model asked to halt at step ${event.halt_step}; the answer ${rules}` +
          (ms ? ` (the graph ran in ${ms.toFixed(0)} ms)` : ""));
        $("status").dataset.solveMs = ms ?? "";
      }
    }
  } catch (e) {
    say(e instanceof PuzzleError ? e.message : `the solve failed: ${e.message}`);
    status("error", "the puzzle was refused");
  } finally {
    $("solve").disabled = false;
  }
}

function showExplored(codec, question, explored) {
  const body = $("explored").querySelector("tbody");
  body.replaceChildren(...explored.trajectories.map((t, i) => {
    const row = document.createElement("tr");
    row.innerHTML = `<td>${i + 1}${i === 0 ? " (plain)" : ""}</td><td>${t.halt_step}</td><td>${t.q_halt.toFixed(3)}</td><td>${t.valid ? "yes" : "no"}</td><td>${t.chosen ? "chosen" : ""}</td>`;
    return row;
  }));
  const grid = renderGrid(codec, explored.tokens, [], question);
  $("explored-answer").replaceChildren(grid);
  $("explored-answer").dataset.cells = codec.chars(explored.tokens);
  $("explored").hidden = false;
}

start().catch((e) => { say(`the page could not start: ${e.message}`); status("error", "failed to start"); });
