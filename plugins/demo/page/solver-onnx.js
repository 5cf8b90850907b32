// The static page's solver: the model's ONNX file (every supervision step unrolled) run by
// onnxruntime-web's WebAssembly build, shipped beside the page under ort/.
import * as ort from "./ort/ort.wasm.bundle.min.mjs";

export async function onnxSolver(card, modelFile, codec) {
  ort.env.wasm.numThreads = 1; // static hosting sends no cross-origin-isolation headers
  // the bundle holds its loader; only the WebAssembly binary is fetched, from ort/ beside it
  ort.env.wasm.wasmPaths = { wasm: new URL("./ort/ort-wasm-simd-threaded.wasm", import.meta.url).href };
  const session = await ort.InferenceSession.create(modelFile, { executionProviders: ["wasm"] });
  const n = card.seq_len;
  return {
    canExplore: false,
    lastSolveMs: null,
    async *solve(puzzle) {
      const question = codec.encodeText(puzzle.text);
      const started = performance.now();
      const feeds = {
        inputs: new ort.Tensor("int64", BigInt64Array.from(question, BigInt), [1, n]),
        puzzle_identifiers: new ort.Tensor("int64", new BigInt64Array(1), [1]), // by hand: 0
      };
      // a model without puzzle embeddings may have no use for the identifiers
      const out = await session.run(Object.fromEntries(session.inputNames.map((name) => [name, feeds[name]])));
      this.lastSolveMs = performance.now() - started;
      const answers = out.answers.data;
      const qHalt = out.q_halt.data;
      // the card's halt_rule: "q_halt > 0", or "q_halt > q_continue" (then the graph gives both)
      const qContinue = card.halt_rule === "q_halt > q_continue" ? out.q_continue.data : null;
      const steps = out.answers.dims[0];
      let previous = question;
      let haltStep = null;
      let last = null;
      for (let s = 0; s < steps; s++) {
        const tokens = Array.from(answers.subarray(s * n, (s + 1) * n), Number);
        const q = Number(qHalt[s]);
        const asks = qContinue ? q > Number(qContinue[s]) : q > 0;
        if (asks && haltStep === null) haltStep = s + 1;
        last = {
          kind: "step", step: s + 1, max_steps: steps, tokens, q_halt: q,
          halt_score: 1 / (1 + Math.exp(-q)), asks_to_halt: asks,
          changed: tokens.flatMap((t, i) => (t !== Number(previous[i]) ? [i] : [])),
          valid: codec.obeysRules(question, tokens),
        };
        previous = tokens;
        yield last;
      }
      yield { kind: "done", halt_step: haltStep ?? steps, valid: last.valid, tokens: last.tokens };
    },
  };
}
