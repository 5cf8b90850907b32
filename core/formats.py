"""Model formats: ways of writing a trained trm model to files and reading such files back.

A plugin offers formats through the ``register_formats`` hook as instances of
:class:`ModelFormat` (a subclass overriding what the format can do). ``trm export --format
NAME`` writes one; ``trm.load``, ``trm solve``, ``trm eval`` and ``trm run --init-from`` read
one. The core knows formats only through this module and the hook: it never imports the
plugin that brings one (the built-in ``reference`` and ``hf`` come from the ``formats``
plugin, ``trm.plugins.formats``; ``onnx`` from the ``onnx`` plugin).

A format may also run a model without torch (:meth:`ModelFormat.solver`, a :class:`Solver`):
``trm solve`` and ``trm.load`` ask the plugins of the ``trm.solvers`` entry-point group
(:func:`find_solver`) before they import torch, so that path never loads it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from attrs import field, frozen

from trm.errors import TrmError

if TYPE_CHECKING:
    import os

    from torch import Tensor

    from trm.plugin_manager import TrmPluginManager
    from trm.solution import Solution


@frozen
class Exported:
    """What :meth:`ModelFormat.export` wrote, as ``trm export`` shows it: ``lines`` printed
    one by one on stderr, ``document`` the ``--json`` document on stdout."""

    lines: tuple[str, ...]
    document: dict[str, Any] = field(factory=dict)


class ExportOptions:
    """The options a format adds to ``trm export`` (:meth:`ModelFormat.add_export_options`):
    ``add_argument`` as argparse's, recording which ``--flags`` belong to the format so that
    giving one with another ``--format`` is refused in one line."""

    def __init__(self, add: Callable[..., argparse.Action]) -> None:
        self._add = add
        self.actions: list[argparse.Action] = []

    def add_argument(self, *flags: str, **kwargs: Any) -> argparse.Action:
        action = self._add(*flags, **kwargs)
        self.actions.append(action)
        return action


class Solver(Protocol):
    """A model that answers puzzles without torch (:meth:`ModelFormat.solver`).

    ``solve(puzzle)`` takes what :meth:`trm.api.model.Model.solve` takes (text in the task's
    format, or a :class:`pathlib.Path` of a file holding it) and returns the same
    :class:`trm.solution.Solution` for the same answer, TrmError with the same message for a
    bad puzzle; ``solved_with`` is the line ``trm solve`` shows on stderr after the answer."""

    @property
    def solved_with(self) -> str: ...

    def solve(self, puzzle: str | os.PathLike[str]) -> Solution: ...


class ModelFormat:
    """One format. ``name`` is what ``--format`` takes (unique across plugins), ``summary``
    one line for ``trm export --help``, ``noun`` how messages name one model of it
    ("model folder"). Every method has a default that says the format cannot do it."""

    name: str = ""
    summary: str = ""
    noun: str = "model"

    def add_export_options(self, options: ExportOptions) -> None:
        """Add this format's own ``trm export`` options (``options.add_argument``); called
        when ``trm``'s parser is built. Default: none."""

    def foreign_options_message(self, given: list[str]) -> str:
        """The one-line refusal of this format's options ``given`` (``--flags``) with another
        ``--format``."""
        verb, them = ("applies", "it") if len(given) == 1 else ("apply", "them")
        return f"{' and '.join(given)} {verb} to --format {self.name} only; leave {them} out"

    def export(
        self, pm: TrmPluginManager, source: Path, out: Path, options: argparse.Namespace
    ) -> Exported:
        """Write the model of ``source`` (a run directory or a checkpoint file) into the new
        folder ``out``; ``options`` holds ``trm export``'s parsed arguments. TrmError for
        input that cannot be written in this format, before anything is written."""
        raise TrmError(f"the {self.name} format cannot be written; give another --format")

    def is_model(self, path: Path) -> bool:
        """True when ``path`` is a whole model of this format, one :meth:`read_payload`
        reads (a damaged one too: reading it then names what is wrong). Cheap: called for
        every path ``trm.load`` and ``--init-from`` are given."""
        return False

    def read_payload(self, path: Path) -> dict[str, Any]:
        """The checkpoint payload of the model at ``path`` (the keys
        ``trm.restore.restore_model`` reads), read without unpickling code; TrmError when
        it is damaged. Called only when :meth:`is_model` said True."""
        raise TrmError(f"{path} cannot be loaded as a whole model of the {self.name} format")

    def locate(self, name: str) -> Path | None:
        """The local folder of the model ``name`` stands for when ``name`` is no path that
        exists (the ``hf`` format: a Hub repo id ``owner/name`` in the local Hugging Face
        cache), else None. Never reaches the network. TrmError when ``name`` is of this
        format's kind but cannot be found (a repo id not in the cache)."""
        return None

    def solver(self, pm: TrmPluginManager, path: Path) -> Solver | None:
        """A :class:`Solver` for ``path`` when it is a model of this format that runs without
        torch, else None (cheap: asked of every path ``trm solve`` and ``trm.load`` get).
        TrmError when ``path`` is of this format but unusable (a damaged folder). Offered by
        a plugin of the ``trm.solvers`` group, this must import no torch; ``pm`` holds the
        plugins of that group (the data sources that parse and check the puzzles)."""
        return None

    def read_weights(self, path: Path, loaded: Any) -> tuple[dict[str, Tensor], str] | None:
        """For ``--init-from``: the weights of ``path`` under trm's names and, in words, what
        they are; None when ``path`` is not of this format. ``loaded`` is what the file
        ``path`` holds (read by :func:`trm.checkpoint_file.load_weights_only`), None when
        ``path`` is a folder. TrmError when the weights are of this format but unusable.
        Asked for a path that is neither trm's own checkpoint nor a whole model."""
        return None


def model_formats(pm: TrmPluginManager) -> list[ModelFormat]:
    """Every format the enabled plugins offer, in the order the plugins were registered (by
    entry-point name) and each plugin lists them; TrmError when two share a name."""
    found: dict[str, ModelFormat] = {}
    for part in reversed(pm.hook.register_formats()):  # pluggy calls the last registered first
        for fmt in part or ():
            if fmt.name in found:
                raise TrmError(
                    f"two plugins offer a model format named {fmt.name!r}; switch one off "
                    "with --plugins no:NAME"
                )
            found[fmt.name] = fmt
    return list(found.values())


def located_model(pm: TrmPluginManager, name: str) -> Path | None:
    """The folder the first format that knows ``name`` locates (:meth:`ModelFormat.locate`),
    or None."""
    for fmt in model_formats(pm):
        found = fmt.locate(name)
        if found is not None:
            return found
    return None


def whole_model_format(pm: TrmPluginManager, path: Path) -> ModelFormat | None:
    """The format ``path`` is a whole model of (:meth:`ModelFormat.is_model`), or None."""
    return next((fmt for fmt in model_formats(pm) if fmt.is_model(path)), None)


def format_weights(
    pm: TrmPluginManager, path: Path, loaded: Any
) -> tuple[dict[str, Tensor], str] | None:
    """The weights of ``path`` read by the first format that knows them
    (:meth:`ModelFormat.read_weights`); when none does, the first refusal a format raised,
    else None."""
    refusal: TrmError | None = None
    for fmt in model_formats(pm):
        try:
            found = fmt.read_weights(path, loaded)
        except TrmError as exc:
            refusal = refusal or exc
            continue
        if found is not None:
            return found
    if refusal is not None:
        raise refusal
    return None


def find_solver(path: str | os.PathLike[str], requested: Any = ()) -> Solver | None:
    """The :class:`Solver` the first format of a ``trm.solvers`` plugin offers for ``path``
    (:meth:`ModelFormat.solver`), or None: ``path`` is for the torch path. Imports no torch.

    ``requested`` holds ``--plugins`` values as :func:`trm.plugin_manager.load_plugins` takes
    them; only their ``no:NAME`` parts for plugins of the group apply here (a solver needs
    no backend, tracker or other plugin of the torch path). TrmError as the format's."""
    from trm.plugin_manager import SOLVER_GROUP, load_plugins, parse_plugin_list, plugin_names

    texts = [requested] if isinstance(requested, str) else list(requested or ())
    if not all(isinstance(text, str) for text in texts):
        return None  # plugin objects (the Python API's): the torch path registers them
    _, unwanted = parse_plugin_list(texts)
    known = set(plugin_names(SOLVER_GROUP))
    pm = load_plugins([f"no:{name}" for name in unwanted if name in known], group=SOLVER_GROUP)
    for fmt in model_formats(pm):
        found = fmt.solver(pm, Path(path).expanduser())
        if found is not None:
            return found
    return None
