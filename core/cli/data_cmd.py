"""``trm data build SOURCE --out DIR [options]``: build a puzzle-dataset directory.

The options after SOURCE come from the source's ``options_type``: each attrs field becomes
``--field-name`` with its type and default, so a third-party source gets a CLI for free.

Nothing is touched until every input is checked: the source, its options (and the source's
optional ``validate_options(options)``), ``--out`` and ``--seed``. The dataset is built into a
temporary sibling of ``--out`` and swapped in only when complete, so a failure or Ctrl-C leaves
``--out`` exactly as it was. ``--force`` replaces only a folder that holds a trm dataset.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

import attrs

from trm.cli.common import OneLineParser
from trm.cli.output import info
from trm.errors import TrmError
from trm.plan.dataset import BUILD_RECORD, build_options, find_data_source
from trm.plugin_manager import load_plugins

# numpy's seed range: np.random.seed accepts 0 .. 2**32 - 1.
SEED_MAX = 2**32 - 1


def register(commands: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = commands.add_parser("data", parents=[common], help="build datasets")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=OneLineParser)
    actions.required = True
    build = actions.add_parser(
        "build", parents=[common], add_help=False, help="build SOURCE's dataset into --out DIR"
    )
    build.add_argument("-h", "--help", action="store_true", help="show the source's options")
    build.add_argument("source", help="data source name, e.g. sudoku")
    build.add_argument("--out", help="output directory (required)")
    build.add_argument(
        "--seed", type=int, default=0, help=f"random seed, 0 to {SEED_MAX} (default 0)"
    )
    build.add_argument("--force", action="store_true", help="replace an existing dataset at --out")
    build.set_defaults(func=run_build, accepts_extra=True)


def _options_parser(source: Any) -> OneLineParser:
    parser = OneLineParser(
        prog=f"trm data build {source.name}",
        description=(source.options_type.__doc__ or "").strip(),
    )
    for field in attrs.fields(attrs.resolve_types(source.options_type)):
        kind = field.type
        flag = "--" + field.name.replace("_", "-")
        help_text = field.metadata.get("help", "")
        if kind is bool:
            parser.add_argument(
                flag,
                dest=field.name,
                action=argparse.BooleanOptionalAction,
                default=field.default,
                help=help_text,
            )
        else:
            parser.add_argument(
                flag,
                dest=field.name,
                type=kind,
                default=field.default,
                help=f"{help_text} (default {field.default!r})",
            )
    return parser


def is_dataset_dir(path: Path) -> bool:
    """Whether ``path`` holds a trm dataset: a split's ``dataset.json`` or a build record."""
    return (
        (path / "train" / "dataset.json").is_file()
        or (path / "test" / "dataset.json").is_file()
        or (path / BUILD_RECORD).is_file()
    )


def _check_replaceable(out: Path, shown: str, force: bool) -> None:
    """TrmError unless ``out`` is absent, an empty folder, or a dataset with ``--force``."""
    try:
        if not out.exists():
            return
        if not out.is_dir():
            raise TrmError(f"--out {shown} is a file, not a folder; choose another --out")
        if not any(out.iterdir()):
            return
    except OSError as error:
        raise TrmError(
            f"cannot read --out {shown}: {error.strerror or error}; choose another --out"
        ) from None
    if not force:
        raise TrmError(
            f"{shown} exists and is not empty; use --force to replace the dataset there, "
            "or choose another --out"
        )
    if not is_dataset_dir(out):
        raise TrmError(
            f"--force: {shown} is not a trm dataset (no train/dataset.json, test/dataset.json "
            f"or {BUILD_RECORD}), so it is left alone; choose another --out, or remove it yourself"
        )


def _check_out(given: str | None, force: bool) -> Path:
    """The absolute ``--out`` folder (symlinks followed), checked before anything is written."""
    if given is None:
        raise TrmError("trm data build: --out DIR is required; give the folder to write to")
    if not given.strip():
        raise TrmError("trm data build: --out is empty; give the folder to write to")
    try:
        out = Path(given).expanduser().resolve()
    except (OSError, RuntimeError) as error:
        raise TrmError(f"--out {given}: {error}; choose another --out") from None
    if out.parent == out:
        raise TrmError(f"--out {given} is the file-system root; choose a folder below it")
    _check_replaceable(out, given, force)
    ancestor = out.parent
    while not ancestor.exists() and ancestor.parent != ancestor:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise TrmError(f"--out {given}: {ancestor} is a file, not a folder; choose another --out")
    return out


def _make_staging(out: Path, shown: str) -> Path:
    """A new empty temporary folder beside ``out`` (creating ``out``'s parents)."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = out.with_name(f".{out.name}.building-{secrets.token_hex(4)}")
        staging.mkdir()  # the usual permissions (mkdtemp's would be 0700)
        return staging
    except OSError as error:
        raise TrmError(
            f"cannot create a folder beside --out {shown}: {error.strerror or error}; "
            "choose another --out"
        ) from None


def _swap_in(staging: Path, out: Path, shown: str, force: bool) -> None:
    """Move the built ``staging`` to ``out``; an old dataset there is set aside, then deleted.

    On any failure (Ctrl-C included) ``out`` is as it was and ``staging`` is removed.
    """
    aside: Path | None = None
    try:
        _check_replaceable(out, shown, force)  # again: something may have appeared meanwhile
        if out.exists():
            aside = out.with_name(f".{out.name}.old-{secrets.token_hex(4)}")
            os.rename(out, aside)
        os.rename(staging, out)
    except BaseException as error:
        if aside is not None and aside.exists() and not out.exists():
            try:
                os.rename(aside, out)
            except OSError:
                info(f"the old dataset is at {aside}; move it back to {shown}")
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(error, OSError):
            raise TrmError(
                f"cannot move the new dataset to --out {shown}: {error.strerror or error}; "
                "it is unchanged"
            ) from None
        raise
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
        if aside.exists():
            info(f"could not delete the old dataset set aside at {aside}; remove it yourself")


def run_build(args: argparse.Namespace) -> int:
    pm = load_plugins(args.plugins)
    source = find_data_source(pm, args.source)
    parser = _options_parser(source)
    if args.help:
        parser.print_help()
        return 0
    parsed = vars(parser.parse_args(args.extra))
    options = build_options(source, parsed, "trm data build")
    validate = getattr(source, "validate_options", None)
    if callable(validate):
        validate(options)
    if not 0 <= args.seed <= SEED_MAX:
        raise TrmError(f"--seed must be between 0 and {SEED_MAX}, got {args.seed}")
    out = _check_out(args.out, args.force)
    staging = _make_staging(out, args.out)
    try:
        source.build(options, staging, args.seed, info)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _swap_in(staging, out, args.out, args.force)
    info(f"wrote {source.name} dataset to {args.out}")
    return 0
