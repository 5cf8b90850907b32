"""Which augmented versions each task gets: the reference builder's draws, in its order.

The reference (``dataset/build_arc_dataset.py`` of TinyRecursiveModels) seeds numpy's global
generator once (seed 42) and then, for each subset in order, shuffles the subset's task list
and gives each task its versions: up to ``5 * augment`` tries, each drawing a dihedral id
(``randint(0, 8)``) and then a permutation of colours 1-9 (``permutation(arange(1, 10))``,
0 stays); a try is kept when the augmented task (every demonstration and test pair) differs
from the original and from every version kept so far, until ``augment`` versions are kept.
Tasks whose distinct versions are fewer (few colours, symmetric grids) keep what the tries
found. Test outputs that are unknown count as ``[[0]]``, as the reference fills them.

:func:`plan_versions` makes exactly these draws with a :class:`numpy.random.RandomState`
(the generator behind ``np.random.*``) and returns, per task, the dihedral ids and colour
maps of its versions (the original first, as ``(0, identity)``); the builder then draws the
translations from the same generator (:mod:`trm.plugins.tasks.arc.source`). A try whose dihedral
id and colour map restricted to the task's colours equal an earlier try's is known to be a
duplicate without augmenting the task again: the draws are still made, only the work is saved.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np
from attrs import frozen

from trm.plugins.tasks.arc import grids
from trm.plugins.tasks.arc.tasks import ArcTask, Subset

RETRIES_FACTOR = 5
DUMMY_OUTPUT = np.zeros((1, 1), dtype=np.uint8)


@frozen(eq=False)
class TaskPlan:
    """One task's versions: ``ks[v]`` and ``colour_maps[v]`` of version ``v`` (0: original).

    ``is_test``: the task belongs to the test subset, so its test pairs go to the test split
    (otherwise they join its demonstrations in the train split).
    """

    task: ArcTask
    subset: str
    is_test: bool
    ks: np.ndarray  # [V] uint8
    colour_maps: np.ndarray  # [V, 10] uint8

    @property
    def versions(self) -> int:
        return int(self.ks.shape[0])

    def train_pairs(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The pairs of this task in the train split, in the reference's order: as its file
        lists them (a training task's test pairs first when "test" comes first there)."""
        pairs = list(self.task.train)
        if self.is_test:
            return pairs
        if self.task.test_first:
            return all_test_pairs(self.task) + pairs
        return pairs + all_test_pairs(self.task)

    def test_pairs(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The pairs of this task in the test split (none unless ``is_test``)."""
        return all_test_pairs(self.task) if self.is_test else []

    def name(self, v: int) -> str:
        """The identifier name of version ``v``: the task id for the original."""
        if v == 0:
            return self.task.task_id
        return grids.augmented_name(self.task.task_id, int(self.ks[v]), self.colour_maps[v])


def all_test_pairs(task: ArcTask) -> list[tuple[np.ndarray, np.ndarray]]:
    """The test pairs with ``[[0]]`` for an unknown output (the reference's filler)."""
    return [(i, DUMMY_OUTPUT if o is None else o) for i, o in task.test]


def _pair_digest(grid_in: np.ndarray, grid_out: np.ndarray) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for g in (grid_in, grid_out):
        h.update(bytes(g.shape))
        h.update(np.ascontiguousarray(g).tobytes())
    return h.digest()


def puzzle_key(pairs: list[tuple[np.ndarray, np.ndarray]]) -> bytes:
    """Equal for two tasks exactly when they hold the same multiset of (input, output) pairs
    (the reference's ``puzzle_hash``: sorted per-pair hashes, so pair order does not count)."""
    return b"".join(sorted(_pair_digest(a, b) for a, b in pairs))


class _Transformed:
    """A task's grids under each dihedral transform, flattened into one array per transform,
    so that one colour lookup augments the whole task and :meth:`key` hashes it."""

    def __init__(self, pairs: list[tuple[np.ndarray, np.ndarray]]) -> None:
        flat = [g for pair in pairs for g in pair]
        self.flat = []
        self.cuts = []
        for k in range(grids.NUM_DIHEDRAL):
            moved = [grids.dihedral(g, k) for g in flat]
            self.flat.append(np.concatenate([g.ravel() for g in moved]))
            bounds = np.cumsum([0] + [g.size for g in moved]).tolist()
            shapes = [bytes(g.shape) for g in moved]
            self.cuts.append(list(zip(shapes, bounds[:-1], bounds[1:], strict=True)))

    def key(self, k: int, colour_map: np.ndarray) -> bytes:
        """:func:`puzzle_key` of the task augmented by ``(k, colour_map)``."""
        data = colour_map[self.flat[k]].tobytes()
        cuts = self.cuts[k]
        digests = []
        for n in range(0, len(cuts), 2):
            h = hashlib.blake2b(digest_size=16)
            for shape, start, stop in cuts[n : n + 2]:
                h.update(shape)
                h.update(data[start:stop])
            digests.append(h.digest())
        return b"".join(sorted(digests))


def augment_task(
    pairs: list[tuple[np.ndarray, np.ndarray]], augment: int, rng: np.random.RandomState
) -> tuple[np.ndarray, np.ndarray]:
    """``(ks [V], colour_maps [V, 10])`` of the original and up to ``augment`` versions."""
    ks = [0]
    maps = [grids.IDENTITY_MAP]
    if augment <= 0:
        return np.array(ks, dtype=np.uint8), np.stack(maps)
    transformed = _Transformed(pairs)
    colours = np.unique(transformed.flat[0])
    seen_keys = {puzzle_key(pairs)}
    tried: set[tuple[int, bytes]] = {(0, colours.tobytes())}
    for _ in range(RETRIES_FACTOR * augment):
        k = int(rng.randint(0, 8))
        perm = rng.permutation(np.arange(1, 10, dtype=np.uint8))
        colour_map = np.concatenate([np.zeros(1, dtype=np.uint8), perm])
        effective = (k, colour_map[colours].tobytes())
        if effective in tried:
            continue  # the same augmented task as an earlier try: a duplicate
        tried.add(effective)
        key = transformed.key(k, colour_map)
        if key in seen_keys:
            continue
        seen_keys.add(key)
        ks.append(k)
        maps.append(colour_map)
        if len(ks) >= augment + 1:
            break
    return np.array(ks, dtype=np.uint8), np.stack(maps)


def plan_versions(
    subsets: list[Subset],
    test_subset: str,
    augment: int,
    rng: np.random.RandomState,
    log: Callable[[str], None],
) -> list[TaskPlan]:
    """Every task's versions, subsets in order, each subset's tasks in the reference's shuffled
    order (the order of the groups in the train split)."""
    plans: list[TaskPlan] = []
    short = 0
    for subset in subsets:
        tasks = list(subset.tasks)
        rng.shuffle(tasks)
        is_test = subset.name == test_subset
        for task in tasks:
            pairs = list(task.train) + all_test_pairs(task)
            ks, maps = augment_task(pairs, augment, rng)
            short += int(ks.shape[0] < augment + 1)
            plans.append(TaskPlan(task, subset.name, is_test, ks, maps))
        versions = sum(p.versions for p in plans if p.subset == subset.name)
        log(f"arc: {subset.name}: {len(tasks)} tasks, {versions} versions (originals included)")
    if short and augment:
        log(f"arc: {short} tasks have fewer than {augment} distinct augmented versions")
    return plans
