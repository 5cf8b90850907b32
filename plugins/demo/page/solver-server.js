// The served page's solver: POST api/solve, read one JSON event a line as the server computes
// each supervision step (plugins/demo/server.py).
import { PuzzleError } from "./codec.js";

export function serverSolver(card) {
  return {
    canExplore: Boolean(card.explore),
    readsPuzzles: true,
    async *solve(puzzle, { explore }) {
      const response = await fetch("api/solve", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ puzzle: puzzle.text, explore }),
      });
      if (!response.ok) {
        let message = `the server answered ${response.status}`;
        try { message = (await response.json()).message; } catch (e) { /* keep the status */ }
        throw new PuzzleError(message);
      }
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let pending = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (value) pending += decoder.decode(value, { stream: true });
        let end;
        while ((end = pending.indexOf("\n")) >= 0) {
          const event = JSON.parse(pending.slice(0, end));
          pending = pending.slice(end + 1);
          if (event.kind === "error") throw new PuzzleError(event.message);
          yield event;
        }
        if (done) break;
      }
    },
  };
}
