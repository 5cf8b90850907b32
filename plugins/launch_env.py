"""Environment variables that must be set before torch initialises, and the re-launch that
sets them (a helper for the mkl and mps backends; not a plugin itself).

Thread pools (OpenMP, MKL, Accelerate) and the MPS CPU fallback read their variables once,
when their library loads, which happens when ``trm`` imports torch. A plugin that needs them
calls :func:`ensure_env`: when they are missing and the process is the ``trm`` command, it
re-executes the same command with them set (once, marked by ``TRM_RELAUNCHED``); elsewhere
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


def relaunch(env: dict[str, str]) -> None:
    """Replace this process by the same ``trm`` command with ``env`` added (does not return)."""
    sys.stdout.flush()
    sys.stderr.flush()
    new_env = {**os.environ, **env, RELAUNCH_MARK: "1"}
    os.execve(sys.executable, [sys.executable, "-m", "trm", *sys.argv[1:]], new_env)


def ensure_env(wanted: dict[str, str], who: str, why: str) -> list[str]:
    """Make ``wanted`` take effect for this run, or say how; returns notices for the user.

    All set already: a notice saying so. Some missing and this is the ``trm`` command, not
    re-launched before and ``TRM_NO_RELAUNCH`` unset: re-launch (does not return). Otherwise:
    a notice with the ``export`` line that would do it.
    """
    missing = missing_env(wanted)
    if not missing:
        in_effect = " ".join(f"{k}={os.environ[k]}" for k in sorted(wanted))
        return [f"{who}: {in_effect} ({why})"]
    if (
        launched_as_command()
        and os.environ.get(RELAUNCH_MARK) != "1"
        and not os.environ.get(NO_RELAUNCH)
    ):
        print(
            f"trm: {who}: re-launching with {' '.join(f'{k}={v}' for k, v in missing.items())} "
            f"({why})",
            file=sys.stderr,
        )
        relaunch(missing)
    return [f"{who}: {why}: not in effect in this process; run `{export_line(missing)}` first"]
