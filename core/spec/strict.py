"""The strict converter: TOML data into attrs classes, and refusals in the user's words.

An unknown key, a value of the wrong type (no coercion: ``"5"`` is not a number, ``true`` not
a number either) raises :class:`~trm.errors.TrmError` naming the key path (``train.lr``),
what was expected and what was given: ``train.lr: expected a number, got the text 'abc'``.
"""

from __future__ import annotations

import types
import typing
from typing import Any

import attrs
import cattrs
import cattrs.cols
import cattrs.gen
import cattrs.v

from trm.errors import TrmError


def _strict_converter() -> cattrs.Converter:
    """A converter that refuses unknown keys and never coerces between types. What it
    refuses raises TypeError("got …"), which :func:`_format_problem` words."""
    conv = cattrs.Converter(forbid_extra_keys=True)

    def exact(kind: type, accept: tuple[type, ...]):
        def structure(value: Any, _type: type) -> Any:
            if (isinstance(value, bool) and kind is not bool) or not isinstance(value, accept):
                raise TypeError(f"got {value_words(value)}")
            return kind(value)

        return structure

    def tables_only(cls: type) -> Any:
        inner = cattrs.gen.make_dict_structure_fn(cls, conv, _cattrs_forbid_extra_keys=True)

        def structure(value: Any, _type: type) -> Any:
            if not isinstance(value, dict):
                raise TypeError(f"got {value_words(value)}")
            return inner(value, _type)

        return structure

    def lists_only(kind: Any) -> Any:
        inner = (
            cattrs.cols.homogenous_tuple_structure_factory(kind, conv)
            if typing.get_origin(kind) is tuple
            else cattrs.cols.list_structure_factory(kind, conv)
        )

        def structure(value: Any, _type: type) -> Any:
            if not isinstance(value, (list, tuple)):  # text is iterable, but no list
                raise TypeError(f"got {value_words(value)}")
            return inner(value, _type)

        return structure

    conv.register_structure_hook_factory(attrs.has, tables_only)
    conv.register_structure_hook_factory(_is_list_type, lists_only)
    conv.register_structure_hook(int, exact(int, (int,)))
    conv.register_structure_hook(float, exact(float, (int, float)))
    conv.register_structure_hook(bool, exact(bool, (bool,)))
    conv.register_structure_hook(str, exact(str, (str,)))
    conv.register_structure_hook_func(
        lambda t: t == dict[str, Any], lambda v, _t: _require_table(v)
    )
    return conv


def _is_list_type(kind: Any) -> bool:
    """``list[X]`` or ``tuple[X, ...]``: what a TOML array structures into."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    return origin is list or (origin is tuple and args[-1:] == (...,))


def _require_table(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"got {value_words(value)}")
    return dict(value)


def value_words(value: Any) -> str:
    """A TOML value as the user wrote it: ``true``, ``5``, ``"abc"``, a list, a table."""
    if value is None:
        return "null"  # JSON's and YAML's (TOML has none)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return f"the text {value!r}"
    if isinstance(value, (list, tuple)):
        return f"a list ({len(value)} item{'s' if len(value) != 1 else ''})"
    if isinstance(value, dict):
        return "a table"
    return "a value of another kind"


_TYPE_WORDS = {int: "whole number", float: "number", str: "text", bool: "true or false"}


def _type_words(kind: Any, many: bool = False) -> str:
    """A spec type in TOML's words: ``a number``, ``a list of tables``, ``a table``."""
    if kind is type(None):
        return "nothing"
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        given = [a for a in args if a is not type(None)]
        words = " or ".join(_type_words(a, many) for a in given)
        return words + (" (or leave the key out)" if len(given) < len(args) else "")
    if origin in (list, tuple):
        return f"a list of {_type_words(args[0], many=True)}" if args else "a list"
    if origin is dict or kind is dict or attrs.has(kind):
        noun = "table"
    elif kind in _TYPE_WORDS:
        noun = _TYPE_WORDS[kind]
    else:
        noun = getattr(kind, "__name__", str(kind))
    if noun == "true or false":
        return "true or false values" if many else noun
    return f"{noun}s" if many else f"a {noun}"


def _format_problem(exc: BaseException, kind: Any) -> str:
    """cattrs' message for one refused value, in the user's words: ``expected a number, got
    the text 'abc'`` (see :func:`structure_strict`)."""
    said = str(exc)
    if kind is not None and isinstance(exc, (TypeError, ValueError, AttributeError)):
        got = f", {said}" if said.startswith("got ") else ""
        return f"expected {_type_words(kind)}{got}"
    return cattrs.v.format_exception(exc, kind)


CONVERTER = _strict_converter()


def structure_strict(data: dict[str, Any], cls: type, where: str, root: str = "") -> Any:
    """Structure ``data`` into attrs class ``cls`` or raise TrmError naming the key path.

    ``where`` names the origin (a file, ``--set``); ``root`` prefixes key paths
    (``data.generate``) for nested option tables.
    """
    try:
        return CONVERTER.structure(data, cls)
    except cattrs.ClassValidationError as exc:
        lines = cattrs.transform_error(exc, format_exception=_format_problem)
        problems = [_rewrite_path(line, root) for line in lines]
        raise TrmError(f"{where}: {'; '.join(problems)}") from exc


def _rewrite_path(line: str, root: str) -> str:
    """Turn cattrs' ``msg @ $.a.b`` into ``a.b: msg`` (prefixed with ``root``)."""
    message, _, path = line.rpartition(" @ ")
    if not path:
        return line
    key = path.removeprefix("$").lstrip(".")
    key = ".".join(p for p in (root, key) if p)
    if message.startswith("extra fields found"):
        names = message.split("(", 1)[-1].rstrip(")")
        return f"unknown key(s) {names} in [{key or 'top level'}]; check the spelling"
    return f"{key}: {message}"


def structure_value(value: Any, kind: Any, where: str, key: str) -> Any:
    """One value as ``kind`` (``float``, ``int | None``) by the strict converter, or
    TrmError ``where: key: expected …, got …`` in :func:`structure_strict`'s words."""
    try:
        return CONVERTER.structure(value, kind)
    except (TypeError, ValueError, cattrs.BaseValidationError) as exc:
        raise TrmError(f"{where}: {key}: {_format_problem(exc, kind)}") from None
