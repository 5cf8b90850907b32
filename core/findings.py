"""What a plugin finds wrong in a finished run (the ``run_findings`` hook): the end of
``trm run`` prints each as a warning line and lists it in summary.json's ``findings``."""

from __future__ import annotations

from typing import Any

from attrs import frozen


@frozen
class Finding:
    """One problem found in a run: ``kind`` (a word: "leak", "slowdown"), the ``step`` where it
    began, a one-line ``message``, a ``suggestion`` of what to check and the ``figures``
    behind it (numbers with units in their names)."""

    kind: str
    step: int
    message: str
    suggestion: str
    figures: dict[str, float]

    def to_json(self) -> dict[str, Any]:
        """The finding as summary.json's ``findings`` list holds it (the figures inline)."""
        return {
            "kind": self.kind,
            "step": self.step,
            "message": self.message,
            "suggestion": self.suggestion,
            **self.figures,
        }

    def line(self) -> str:
        """The finding as one line for a terminal."""
        return f"warning: {self.message}; {self.suggestion}"
