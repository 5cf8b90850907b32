// Puzzles as the model's tokens and back, from the card's grid and vocab alone (the data
// source's cell_encoding: sudoku {pad, blank, blank_chars, digits: {"1": t, ...}}, grid.box;
// maze {pad, wall, open, start, goal, path}; arc, plugins/demo/vocab.py:
// {pad, eos, colours: {"0": t, ...}}), and the task's rules.

const MAZE_CHARS = { wall: "#", open: " ", start: "S", goal: "G", path: "o" };

export class PuzzleError extends Error {}

export function makeCodec(card) {
  const task = card.task;
  const { rows, cols } = card.grid;
  const box = card.grid.box ? [card.grid.box.rows, card.grid.box.cols] : null;
  const vocab = card.vocab;
  const charOf = new Map();
  const tokenOf = new Map();
  if (task === "sudoku") {
    charOf.set(vocab.blank, ".");
    for (const ch of vocab.blank_chars ?? ".") tokenOf.set(ch, vocab.blank);
    for (const [digit, token] of Object.entries(vocab.digits)) {
      charOf.set(token, digit);
      tokenOf.set(digit, token);
    }
  } else if (task === "maze") {
    for (const [name, ch] of Object.entries(MAZE_CHARS)) {
      charOf.set(vocab[name], ch);
      tokenOf.set(ch, vocab[name]);
    }
    charOf.set(vocab.pad, ".");
  } else if (task === "arc") {
    charOf.set(vocab.pad, ".").set(vocab.eos, "#");
    for (const [colour, token] of Object.entries(vocab.colours)) {
      charOf.set(token, colour);
      tokenOf.set(colour, token);
    }
  } else {
    throw new PuzzleError(`this page does not show ${task} puzzles`);
  }
  const cells = rows * cols;
  const size = `${rows}x${cols}`;

  return {
    task, rows, cols, cells, vocab, box,
    // one character a cell, as trm solve --json's answer_cells writes them
    chars(tokens) { return Array.from(tokens, (t) => charOf.get(Number(t)) ?? "?").join(""); },

    // the token row of a Sudoku's or a maze's text; PuzzleError saying what is wrong
    encodeText(text) {
      if (task === "sudoku") {
        const found = [...text].filter((ch) => !" \t\r\n|-+".includes(ch));
        if (found.length !== cells) {
          throw new PuzzleError(`this model solves ${size} Sudoku (${cells} cells); the puzzle has ${found.length} cells (use '.' or 0 for blanks)`);
        }
        const tokens = found.map((ch, i) => {
          if (!tokenOf.has(ch)) throw new PuzzleError(`cell ${i + 1} holds '${ch}'; use digits 1-${rows} and '.' for blanks`);
          return tokenOf.get(ch);
        });
        const clash = sudokuClash(found.map((ch) => (tokenOf.get(ch) === vocab.blank ? 0 : Number(ch))), rows, box);
        if (clash) throw new PuzzleError(`the puzzle is not a valid Sudoku: ${clash}`);
        return tokens;
      }
      if (task === "maze") {
        const joined = text.replace(/\r/g, "").split("\n").map((l) => l.padEnd(cols, " ")).join("").slice(0, cells + 1);
        if (joined.length !== cells) throw new PuzzleError(`this model solves ${size} mazes (${cells} cells); the maze has ${joined.length}`);
        const tokens = [...joined].map((ch, i) => {
          const c = ch === "o" ? " " : ch;
          if (!tokenOf.has(c)) throw new PuzzleError(`cell ${i + 1} holds '${ch}'; draw walls, open cells, one start and one goal`);
          return tokenOf.get(c);
        });
        const starts = tokens.filter((t) => t === vocab.start).length;
        const goals = tokens.filter((t) => t === vocab.goal).length;
        if (starts !== 1 || goals !== 1) throw new PuzzleError(`a maze needs exactly one start and one goal; it has ${starts} and ${goals}`);
        return tokens;
      }
      return encodeArc(text, rows, vocab);
    },

    // ARC: the grid a token row holds at its top-left as {rows, cols}, null when it holds
    // none; the arc source's crop (grids.decode, the reference evaluator's), so the grid
    // shown is the one trm solve answers
    arcGridShape(tokens) { return arcCrop(tokens, rows, vocab); },

    // the task's rules on an answer: true or false, null when the page cannot judge (ARC)
    obeysRules(question, answer) {
      if (task === "sudoku") return sudokuSolves(question, answer, vocab, rows, box);
      if (task === "maze") return mazeShortestPath(question, answer, vocab, rows, cols);
      return null;
    },
  };
}

function sudokuUnits(size, [br, bc]) {
  const units = [];
  for (let r = 0; r < size; r++) units.push(["row", r + 1, [...Array(size).keys()].map((c) => r * size + c)]);
  for (let c = 0; c < size; c++) units.push(["column", c + 1, [...Array(size).keys()].map((r) => r * size + c)]);
  for (let b = 0; b < size; b++) {
    const top = Math.floor(b / (size / bc)) * br;
    const left = (b % (size / bc)) * bc;
    const cells = [];
    for (let r = 0; r < br; r++) for (let c = 0; c < bc; c++) cells.push((top + r) * size + left + c);
    units.push(["box", b + 1, cells]);
  }
  return units;
}

function sudokuClash(digits, size, box) {
  for (const [name, number, cells] of sudokuUnits(size, box)) {
    const seen = new Set();
    for (const i of cells) {
      if (digits[i] === 0) continue;
      if (seen.has(digits[i])) return `digit ${digits[i]} appears twice in ${name} ${number}`;
      seen.add(digits[i]);
    }
  }
  return null;
}

function sudokuSolves(question, answer, vocab, size, box) {
  const digitOf = new Map(Object.entries(vocab.digits).map(([d, t]) => [t, Number(d)]));
  const digits = Array.from(answer, (t) => digitOf.get(Number(t)) ?? 0);
  if (digits.some((d) => d === 0)) return false;
  for (let i = 0; i < digits.length; i++) {
    const given = Number(question[i]);
    if (given !== vocab.blank && digitOf.get(given) !== digits[i]) return false;
  }
  return sudokuClash(digits, size, box) === null;
}

// True when the answer's path cells, with start and goal, form a simple start-goal path
// through open cells whose length is the shortest (the maze source's "optimal").
function mazeShortestPath(question, answer, vocab, rows, cols) {
  const q = Array.from(question, Number);
  const a = Array.from(answer, Number);
  const start = q.indexOf(vocab.start);
  const goal = q.indexOf(vocab.goal);
  const onPath = new Set([start, goal]);
  for (let i = 0; i < a.length; i++) {
    if (a[i] !== vocab.path) continue;
    if (q[i] === vocab.wall || q[i] === vocab.pad) return false;
    onPath.add(i);
  }
  const neighbours = (i) => {
    const r = Math.floor(i / cols), c = i % cols, out = [];
    if (r > 0) out.push(i - cols);
    if (c < cols - 1) out.push(i + 1);
    if (r < rows - 1) out.push(i + cols);
    if (c > 0) out.push(i - 1);
    return out;
  };
  for (const i of onPath) {
    const degree = neighbours(i).filter((n) => onPath.has(n)).length;
    if (degree !== (i === start || i === goal ? 1 : 2)) return false;
  }
  // connected: walk from start over path cells
  const seen = new Set([start]);
  const todo = [start];
  while (todo.length) for (const n of neighbours(todo.pop())) if (onPath.has(n) && !seen.has(n)) { seen.add(n); todo.push(n); }
  if (seen.size !== onPath.size) return false;
  // shortest: breadth-first distance through non-wall cells
  const dist = new Map([[start, 0]]);
  const queue = [start];
  while (queue.length) {
    const i = queue.shift();
    for (const n of neighbours(i)) if (!dist.has(n) && q[n] !== vocab.wall && q[n] !== vocab.pad) { dist.set(n, dist.get(i) + 1); queue.push(n); }
  }
  return dist.get(goal) === onPath.size - 1;
}

// An ARC task JSON (its first test input), JSON rows, or lines of digits, placed at the
// canvas's top-left with the end-of-grid row and column, as the arc source encodes it.
function encodeArc(text, side, vocab) {
  let grid;
  const stripped = text.trim();
  if (stripped.startsWith("{") || stripped.startsWith("[")) {
    let value;
    try { value = JSON.parse(stripped); } catch (e) { throw new PuzzleError(`the task is not valid JSON (${e.message})`); }
    if (!Array.isArray(value)) {
      const task = value.test ? value : Object.values(value)[0];
      if (!task || !Array.isArray(task.test) || !task.test.length) throw new PuzzleError('an ARC task holds {"train": [...], "test": [{"input": ...}]}');
      value = task.test[0].input;
    }
    grid = value;
  } else {
    grid = stripped.split("\n").map((l) => l.replace(/[ ,]/g, "")).filter(Boolean).map((l) => [...l].map(Number));
  }
  if (!Array.isArray(grid) || !grid.length || !grid.every((r) => Array.isArray(r) && r.length === grid[0].length && r.every((c) => Number.isInteger(c) && c >= 0 && c <= 9))) {
    throw new PuzzleError("the grid must be rows of equal length holding colours 0-9");
  }
  const h = grid.length, w = grid[0].length;
  if (h > side || w > side) throw new PuzzleError(`a ${h}x${w} grid does not fit this model's ${side}x${side} canvas`);
  const tokens = new Array(side * side).fill(vocab.pad);
  for (let r = 0; r < h; r++) for (let c = 0; c < w; c++) tokens[r * side + c] = vocab.colours[String(grid[r][c])];
  if (h < side) for (let c = 0; c < w; c++) tokens[h * side + c] = vocab.eos;
  if (w < side) for (let r = 0; r < h; r++) tokens[r * side + w] = vocab.eos;
  return tokens;
}

// Going down the rows, the usable width is the run of colour tokens from column 0, never wider
// than the rows above; the grid is the largest-area rectangle rows x width (the first when
// areas tie); null when the top-left token is not a colour.
function arcCrop(tokens, side, vocab) {
  const colours = new Set(Object.values(vocab.colours));
  let best = { area: 0, rows: 0, cols: 0 };
  let width = side;
  for (let r = 0; r < side; r++) {
    let run = 0;
    while (run < width && colours.has(Number(tokens[r * side + run]))) run++;
    width = run;
    if ((r + 1) * width > best.area) best = { area: (r + 1) * width, rows: r + 1, cols: width };
    if (width === 0) break;
  }
  return best.area ? { rows: best.rows, cols: best.cols } : null;
}
