"""Choosing one answer among a puzzle's trajectories (test-time exploration's selection).

A selection rule is a plugin's object (the ``selection_rules`` hook) with a ``name``
(what ``--select`` takes), ``needs_rules`` (True: it asks the task's rules, so a task whose
answers cannot be judged from the question refuses it) and ``pick(candidates) -> int``, the
index of the chosen trajectory. trm's own rules (plugins/selection) are ``q``, ``halt-first``,
``rules`` and ``vote``; docs/test-time.md says what each does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from attrs import frozen

from trm.errors import TrmError

# The selection a task gets when its data source names none (``default_selection``).
DEFAULT_SELECTION = "q"
# The key prefix of the per-N figures an explored evaluation adds (``explore@4/q``: the exact
# accuracy with rule q choosing among the first 4 trajectories), and the name that stands for
# the oracle there (right when any of them is). ``trm report`` reads them.
CURVE_PREFIX = "explore@"
ORACLE = "oracle"


@frozen
class Candidates:
    """One puzzle's trajectories, trajectory 0 the noise-free one: ``question`` [seq_len]
    tokens, ``answers`` [N, seq_len] tokens (read after every supervision step),
    ``halt_steps`` [N] the first supervision step (1-based) at which each trajectory's
    halting logit said halt (``max_steps`` when it never did), ``q_halt`` [N] each
    trajectory's halting logit after the last step, ``check(question, answer)`` the task's
    rules (None: its answers cannot be judged from the question)."""

    question: np.ndarray
    answers: np.ndarray
    halt_steps: np.ndarray
    q_halt: np.ndarray
    max_steps: int
    check: Callable[[np.ndarray, np.ndarray], bool] | None = None

    @property
    def count(self) -> int:
        return int(self.answers.shape[0])

    def first(self, count: int) -> Candidates:
        """The first ``count`` trajectories (what an exploration of ``count`` would have)."""
        return Candidates(
            self.question,
            self.answers[:count],
            self.halt_steps[:count],
            self.q_halt[:count],
            self.max_steps,
            self.check,
        )


class SelectionRule(Protocol):
    """What ``selection_rules`` returns a list of (see the module docstring)."""

    name: str
    needs_rules: bool

    def pick(self, candidates: Candidates) -> int: ...


def offered_rules(pm: Any) -> dict[str, SelectionRule]:
    """Every plugin's selection rules by name; TrmError for two rules of one name or a rule
    without a name or a ``pick``."""
    rules: dict[str, SelectionRule] = {}
    for offered in pm.hook.selection_rules():
        for rule in offered or ():
            name = getattr(rule, "name", None)
            if not isinstance(name, str) or not callable(getattr(rule, "pick", None)):
                raise TrmError(
                    f"a plugin's selection rule {rule!r} has no name or no pick(candidates); "
                    "see docs/plugins.md (selection_rules)"
                )
            if name in rules:
                raise TrmError(f"two plugins offer the selection rule {name!r}; switch one off")
            rules[name] = rule
    return rules


def rules_judge_answers(source: Any) -> bool:
    """True when ``source``'s ``check_answer`` judges an answer from the question alone (False
    for a source that says ``rules_judge_answers = False``: ARC, whose check looks the answer
    up among known solutions)."""
    return callable(getattr(source, "check_answer", None)) and bool(
        getattr(source, "rules_judge_answers", True)
    )


def find_selection_rule(pm: Any, name: str | None, source: Any, where: str) -> SelectionRule:
    """The rule ``name`` (None or empty: the source's ``default_selection``, else
    :data:`DEFAULT_SELECTION`); TrmError naming ``where`` for an unknown name, or a rule that
    needs the task's rules for a source whose answers cannot be judged from the question."""
    rules = offered_rules(pm)
    if not name:
        name = str(getattr(source, "default_selection", None) or DEFAULT_SELECTION)
    rule = rules.get(name)
    if rule is None:
        known = ", ".join(sorted(rules)) or "none (no plugin offers one)"
        raise TrmError(f"{where} {name!r}: no such selection rule; choose one of {known}")
    if getattr(rule, "needs_rules", False) and not rules_judge_answers(source):
        task = getattr(source, "name", "this")
        raise TrmError(
            f"{where} {name}: the {task} task has no rules that judge an answer from the "
            "question; choose q, halt-first or vote"
        )
    return rule


def checked_pick(rule: SelectionRule, candidates: Candidates) -> int:
    """``rule.pick(candidates)``, checked: TrmError naming the rule when it answers anything but
    the index of one of the trajectories."""
    chosen = rule.pick(candidates)
    if isinstance(chosen, bool) or not isinstance(chosen, (int, np.integer)):
        raise TrmError(
            f"selection rule {rule.name!r} answered {chosen!r}, not a trajectory's index"
        )
    if not 0 <= int(chosen) < candidates.count:
        raise TrmError(
            f"selection rule {rule.name!r} answered {int(chosen)}, not an index of the "
            f"{candidates.count} trajectories"
        )
    return int(chosen)
