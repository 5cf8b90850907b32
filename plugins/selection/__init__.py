"""trm's own selection rules for test-time exploration (``--select``; docs/test-time.md).

- ``q``: the trajectory whose halting logit is highest after the last supervision step (the
  Q head as a verifier, as Probabilistic TRM selects).
- ``halt-first``: the trajectory whose halting logit first said halt, at the earliest
  supervision step (Speed is Confidence); ties go to the highest halting logit.
- ``rules``: the first trajectory, in order, whose answer the task's rules accept; when none
  does, the ``q`` choice.
- ``vote``: the answer most trajectories reached (whole answers compared); ties go to the
  answer with the highest halting logit among its trajectories.

Every rule breaks a remaining tie by the lower index, so trajectory 0 (noise-free) wins ties.
"""

from __future__ import annotations

import numpy as np
from attrs import frozen

from trm import hookimpl
from trm.data.selection import Candidates

ACTIVATION = "default"


def _highest(values: np.ndarray, among: np.ndarray) -> int:
    """The index in ``among`` (ascending indices) of the highest of ``values[among]``; the
    first of the tied."""
    return int(among[int(np.argmax(values[among]))])


@frozen
class HighestQ:
    name: str = "q"
    needs_rules: bool = False

    def pick(self, candidates: Candidates) -> int:
        return _highest(np.asarray(candidates.q_halt), np.arange(candidates.count))


@frozen
class HaltFirst:
    name: str = "halt-first"
    needs_rules: bool = False

    def pick(self, candidates: Candidates) -> int:
        steps = np.asarray(candidates.halt_steps)
        earliest = np.flatnonzero(steps == steps.min())
        return _highest(np.asarray(candidates.q_halt), earliest)


@frozen
class FirstAccepted:
    name: str = "rules"
    needs_rules: bool = True

    def pick(self, candidates: Candidates) -> int:
        check = candidates.check
        if check is not None:
            for index, answer in enumerate(candidates.answers):
                if check(candidates.question, answer):
                    return index
        return HighestQ().pick(candidates)


@frozen
class Majority:
    name: str = "vote"
    needs_rules: bool = False

    def pick(self, candidates: Candidates) -> int:
        answers = np.ascontiguousarray(candidates.answers)
        _, group, counts = np.unique(
            answers.reshape(candidates.count, -1), axis=0, return_inverse=True, return_counts=True
        )
        group = np.asarray(group).reshape(-1)
        most = np.flatnonzero(counts[group] == counts.max())  # trajectories of the top answers
        return _highest(np.asarray(candidates.q_halt), most)


@hookimpl
def selection_rules() -> list:
    return [HighestQ(), HaltFirst(), FirstAccepted(), Majority()]
