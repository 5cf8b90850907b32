"""Environment variables that must be set before torch initialises, and the re-launch that
sets them (a helper for the cpu, mkl and mps backends; not a plugin itself).

Thread pools (OpenMP, MKL, Accelerate) and the MPS CPU fallback read their variables once,
when their library loads, which happens when ``trm`` imports torch. A plugin that needs them
calls :func:`ensure_env` (or :func:`relaunch_if_missing`): when they are missing and the
process is the ``trm`` command, it re-executes the same command with them set
(``TRM_RELAUNCHED`` records their names, so a variable is never asked for twice); elsewhere
(trm used as a library, under pytest) it returns the ``export`` line to use instead.
Variables the user set are never overridden.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

RELAUNCH_MARK = "TRM_RELAUNCHED"
NO_RELAUNCH = "TRM_NO_RELAUNCH"


def missing_env(wanted: dict[str, str]) -> dict[str, str]:
    """The entries of ``wanted`` whose variable is not set at all in this process."""
    return {k: v for k, v in wanted.items() if k not in os.environ}


def launched_as_command() -> bool:
    """Whether this process is the ``trm`` command (console script or ``python -m trm``)."""
    program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    if program in ("trm", "trm.exe"):
        return True
    main = sys.modules.get("__main__")
    return getattr(main, "__package__", None) == "trm"


def export_line(env: dict[str, str]) -> str:
    """``export A=1 B=2`` for a POSIX shell."""
    return "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))


def relaunched_names() -> set[str]:
    """Variables earlier re-launches of this command set (recorded in ``TRM_RELAUNCHED``)."""
    return {n for n in os.environ.get(RELAUNCH_MARK, "").split(",") if n}


def relaunch(env: dict[str, str]) -> None:
    """Replace this process by the same ``trm`` command with ``env`` added (does not return)."""
    sys.stdout.flush()
    sys.stderr.flush()
    names = ",".join(sorted(relaunched_names() | set(env)))
    new_env = {**os.environ, **env, RELAUNCH_MARK: names}
    os.execve(sys.executable, [sys.executable, "-m", "trm", *sys.argv[1:]], new_env)


def can_relaunch(missing: dict[str, str]) -> bool:
    """The ``trm`` command, no earlier re-launch set any of ``missing`` (so re-launches
    always end), ``TRM_NO_RELAUNCH`` unset, not Windows (where exec starts a separate process
    and the shell would return early)."""
    return (
        launched_as_command()
        and not relaunched_names() & set(missing)
        and not os.environ.get(NO_RELAUNCH)
        and sys.platform != "win32"
    )


def relaunch_if_missing(wanted: dict[str, str], who: str, why: str) -> dict[str, str]:
    """Re-launch with the missing part of ``wanted`` when :func:`can_relaunch` (does not
    return then); otherwise return what is missing (empty when all is set)."""
    missing = missing_env(wanted)
    if missing and can_relaunch(missing):
        print(
            f"trm: {who}: re-launching with {' '.join(f'{k}={v}' for k, v in missing.items())} "
            f"({why})",
            file=sys.stderr,
        )
        relaunch(missing)
    return missing


def ensure_env(wanted: dict[str, str], who: str, why: str) -> list[str]:
    """Make ``wanted`` take effect for this run, or say how; returns notices for the user.

    All set already: a notice saying so. Some missing and :func:`can_relaunch`: re-launch
    (does not return). Otherwise: a notice with the ``export`` line that would do it.
    """
    missing = relaunch_if_missing(wanted, who, why)
    if not missing:
        in_effect = " ".join(f"{k}={os.environ[k]}" for k in sorted(wanted))
        return [f"{who}: {in_effect} ({why})"]
    return [f"{who}: {why}: not in effect in this process; run `{export_line(missing)}` first"]
