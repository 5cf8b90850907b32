"""The Python API's arguments, taken as a Python caller writes them, turned into what the
commands share: ``overrides={"train.lr": 3e-4}``, ``plugins=["mkl", MyLogger()]``,
``disable=["progress"]``, ``out=Path(...)``.

Every refusal is a :class:`~trm.errors.TrmError` that names the argument. The messages the
shared code writes for the command line (``--out``, ``--set``) are said in the API's words by
:func:`python_errors`.
"""

from __future__ import annotations

import re
import types
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import tomli_w
import tomllib

from trm.errors import TrmError
from trm.hookspecs import PROJECT_NAME

# the attribute pluggy's HookimplMarker("trm") puts on a function it marks
_IMPL_ATTRIBUTE = f"{PROJECT_NAME}_impl"

# command-line flag -> the API argument that carries it
_FLAG_WORDS = {
    "out": "out",
    "resume": "resume",
    "max-steps": "max_steps",
    "set": "overrides",
    "plugins": "plugins",
    "mode": "mode",
}
_FLAG = re.compile(r"(?:argument )?--(" + "|".join(map(re.escape, _FLAG_WORDS)) + r")\b:?")


def in_python_words(message: str) -> str:
    """``message`` with the command line's flags named as the API's arguments:
    "argument --mode: invalid choice" -> "mode: invalid choice", "--set train.lr: …" ->
    "overrides train.lr: …", "--out runs/x is …" -> "out runs/x is …"."""
    return _FLAG.sub(
        lambda m: _FLAG_WORDS[m.group(1)] + (":" if m.group(0).endswith(":") else ""), message
    )


@contextmanager
def python_errors() -> Iterator[None]:
    """Re-raise a TrmError from inside as the same class, its message in the API's words."""
    try:
        yield
    except TrmError as exc:
        worded = in_python_words(str(exc))
        if worded == str(exc):
            raise
        raise type(exc)(worded) from None


def override_texts(overrides: Mapping[str, Any] | Iterable[str] | None) -> tuple[str, ...]:
    """``overrides`` as ``KEY=VALUE`` texts the spec reader applies in order.

    A mapping ``{"train.lr": 3e-4, "data.generate.count": 256}`` (values as TOML has them:
    numbers, strings, booleans, lists, tables) or an iterable of ``"KEY=VALUE"`` texts, as
    ``--set`` takes them; None is none. TrmError for anything else."""
    if overrides is None:
        return ()
    if isinstance(overrides, Mapping):
        return tuple(_override_text(key, value) for key, value in overrides.items())
    if isinstance(overrides, (str, bytes)) or not isinstance(overrides, Iterable):
        raise TrmError(
            "overrides takes a dict of spec keys and values, e.g. "
            f"overrides={{'train.lr': 3e-4}} (or a list of 'KEY=VALUE' texts), not "
            f"{type(overrides).__name__}"
        )
    texts = tuple(overrides)
    for text in texts:
        if not isinstance(text, str):
            raise TrmError(
                f"overrides: {text!r} is not a 'KEY=VALUE' text; use a dict for values, "
                "e.g. overrides={'train.lr': 3e-4}"
            )
    return texts


def _override_text(key: object, value: object) -> str:
    if not isinstance(key, str) or not key:
        raise TrmError(f"overrides: the key {key!r} is not a spec key such as 'train.lr'")
    if isinstance(value, Mapping):
        raise TrmError(f"overrides[{key!r}]: set a table's keys one by one ('{key}.KEY')")
    if isinstance(value, str) and value == value.strip() and _reads_as_text(value):
        return f"{key}={value}"  # as one types it: --set runtime.device=cpu
    try:
        rendered = tomli_w.dumps({"v": value}).removeprefix("v = ").rstrip("\n")
    except TypeError:
        raise TrmError(
            f"overrides[{key!r}]: {value!r} is not a spec value (a number, text, true/false "
            "or a list of these)"
        ) from None
    return f"{key}={rendered}"


def _reads_as_text(value: str) -> bool:
    """Whether ``--set KEY=value`` reads ``value`` back as this very text: it is no TOML
    value (a number, true, a quoted string …), so the reader keeps it as text."""
    if not value:
        return False
    try:
        tomllib.loads(f"v = {value}")
    except tomllib.TOMLDecodeError:
        return True
    return False


def plugin_arguments(
    plugins: Iterable[Any] | None, disable: Iterable[str] | None
) -> tuple[tuple[str, ...], tuple[tuple[str, Any], ...]]:
    """The plugins a call switches on and off: (the names as the plugin list reads them, the
    in-process plugin objects with the names they run under).

    ``plugins`` holds installed plugins' names (``"mkl"``) and plugin objects or modules
    whose methods carry ``@trm.hookimpl`` (registered for this call only, like a callback);
    ``disable`` holds names to switch off (``"progress"``). ``"no:NAME"`` in ``plugins``
    still switches NAME off. None is none. TrmError for anything else."""
    names: list[str] = []
    objects: list[tuple[str, Any]] = []
    for index, item in enumerate(_items(plugins, "plugins", "plugins=['mkl', MyLogger()]")):
        if isinstance(item, str):
            names.append(item)
            continue
        if isinstance(item, type):
            raise TrmError(
                f"plugins[{index}]: {item.__name__} is a class; pass an instance, "
                f"plugins=[{item.__name__}()]"
            )
        if not _has_hookimpls(item):
            raise TrmError(
                f"plugins[{index}]: {item!r} has no method marked @trm.hookimpl; a plugin "
                "object implements hooks (docs/plugins.md)"
            )
        objects.append((_object_name(item, {name for name, _ in objects}), item))
    for item in _items(disable, "disable", "disable=['progress']"):
        if not isinstance(item, str):
            raise TrmError(f"disable takes plugin names, e.g. disable=['progress']; got {item!r}")
        names.append(f"no:{item}")
    return tuple(names), tuple(objects)


def _items(values: Iterable[Any] | None, what: str, example: str) -> list[Any]:
    if values is None:
        return []
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TrmError(f"{what} takes a list, e.g. {example}; got {values!r}")
    return list(values)


def _has_hookimpls(plugin: object) -> bool:
    owner = plugin if isinstance(plugin, types.ModuleType) else type(plugin)
    return any(hasattr(getattr(owner, name, None), _IMPL_ATTRIBUTE) for name in dir(owner))


def _object_name(plugin: object, taken: set[str]) -> str:
    """The name an in-process plugin runs under: its module's or class's name, numbered
    when two of one class are given."""
    base = plugin.__name__ if isinstance(plugin, types.ModuleType) else type(plugin).__name__
    name, number = base, 2
    while name in taken:
        name, number = f"{base}-{number}", number + 1
    return name


def path_argument(value: Path | str | None, what: str) -> Path | None:
    """A path argument (``out``) as a Path; None stays None. TrmError for another type or an
    empty text (which would mean the current folder)."""
    if value is None:
        return None
    if not isinstance(value, (str, Path)):
        raise TrmError(f"{what} must be a path (str or pathlib.Path), not {type(value).__name__}")
    if not str(value).strip():
        raise TrmError(f"{what} is empty; give a folder, e.g. {what}='runs/mine'")
    return Path(value)


def text_argument(value: object, what: str, choices: Iterable[str] = ()) -> str:
    """A text argument (``mode``, ``resume``) checked for type (and for ``choices`` when
    given); TrmError naming the argument."""
    if isinstance(value, Path):
        value = str(value)
    if not isinstance(value, str):
        raise TrmError(f"{what} must be text, not {type(value).__name__}")
    allowed = tuple(choices)
    if allowed and value not in allowed:
        raise TrmError(
            f"{what}: invalid choice: {value!r} (choose from {', '.join(map(repr, allowed))})"
        )
    return value
