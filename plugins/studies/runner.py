"""Running a study: trials as ordinary trm runs, an Optuna study as the shared record.

The study lives in an Optuna storage (default ``DIR/study.db``, SQLite); each trial is a
``trm run`` into ``DIR/trials/NNNN/`` with the base spec, the fixed overrides and its
parameters as ``--set`` overrides, so it has everything a run has (checkpoints, exact resume,
the memory plan, the report). Several worker processes may share one study: on this machine
each runs one trial at a time with its share of the cores and memory.

Who runs what, without running a trial twice:
- a new trial comes from ``study.ask()`` (a grid's points are enqueued once, and Optuna pops a
  waiting trial atomically), taken under ``DIR/.ask.lock`` together with the trial's claim;
- a trial's claim is an exclusive ``flock`` on ``DIR/trials/NNNN.claim``, held while it runs;
  the kernel drops it when the process dies, so a RUNNING trial whose claim is free was cut
  off, and the next worker to look resumes it from its checkpoint (same trial number).
"""

from __future__ import annotations

import fcntl
import os
import shlex
import shutil
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from trm.api.arguments import override_texts
from trm.api.log import Log
from trm.api.training import RunOptions, run_training
from trm.errors import TrainingFailed, TrmError
from trm.plugins.studies.plugins import PRUNED, TrialPruning, WorkerShare
from trm.plugins.studies.results import StudyResult, read_study_result
from trm.plugins.studies.study_file import StudyFile

STUDY_DB = "study.db"
TRIALS_DIR = "trials"
ASK_LOCK = ".ask.lock"
# a worker's own exit codes (the parent reports the worst)
EXIT_OK, EXIT_STOPPED = 0, 130


def storage_url(out_dir: Path, storage: str | None) -> str:
    """The Optuna storage: ``storage`` as given (a database URL Optuna takes: sqlite:///…,
    postgresql://…, mysql://…), else SQLite in ``out_dir/study.db``."""
    return storage or f"sqlite:///{(out_dir / STUDY_DB).resolve()}"


def open_study(study_file: StudyFile, out_dir: Path, storage: str | None) -> Any:
    """The Optuna study of ``study_file`` in its storage, created on first use (a grid's
    points enqueued once); TrmError when the storage cannot be opened or holds a study of
    that name with another direction."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = storage_url(out_dir, storage)
    with _flock(out_dir / ASK_LOCK):
        try:
            study = optuna.create_study(
                study_name=study_file.name,
                storage=url,
                load_if_exists=True,
                direction=study_file.direction,
                sampler=optuna.samplers.TPESampler(seed=study_file.seed),
                pruner=_pruner(study_file),
            )
        except ValueError as exc:  # another direction than the stored study's
            raise TrmError(
                f"the study {study_file.name!r} in {url} cannot be used: {exc}"
            ) from None
        except Exception as exc:  # sqlalchemy's errors for an unreachable or odd database
            raise TrmError(
                f"the storage {url} cannot be opened ({type(exc).__name__}: {exc}); give a "
                "database URL Optuna takes (sqlite:///PATH, postgresql://…, mysql://…)"
            ) from None
        if "started_at" not in study.user_attrs:
            study.set_user_attr("started_at", time.time())
            study.set_user_attr("study_file", str(study_file.path.resolve()))
            study.set_user_attr("metric", study_file.metric)
            if study_file.is_grid:
                for point in study_file.grid_points()[: study_file.trials]:
                    study.enqueue_trial(point)
    return study


def load_study(study_dir: Path) -> tuple[StudyResult, dict[str, float]]:
    """The study stored in ``study_dir/study.db`` as rows, and Optuna's parameter
    importances ({} until two trials with different parameters finished); TrmError when the
    folder holds no study."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = storage_url(study_dir, None)
    try:
        names = optuna.study.get_all_study_names(storage=url)
    except Exception as exc:  # a damaged or foreign database file
        raise TrmError(f"{study_dir / STUDY_DB} cannot be read as a study ({exc})") from None
    if len(names) != 1:
        raise TrmError(f"{study_dir / STUDY_DB} holds {len(names)} studies; one was expected")
    study = optuna.load_study(study_name=names[0], storage=url)
    # PED-ANOVA: Optuna's own evaluator that needs no scikit-learn (fANOVA does). With too
    # few finished trials it cannot tell the parameters apart and says so: no importances.
    importances: dict[str, float] = {}
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            evaluator = optuna.importance.PedAnovaImportanceEvaluator()
            ranked = optuna.importance.get_param_importances(study, evaluator=evaluator)
        values = [float(value) for value in ranked.values()]
        told_apart = len(values) < 2 or max(values) - min(values) > 1e-9
        if told_apart and not any("will be equal" in str(w.message) for w in caught):
            importances = {key: float(value) for key, value in ranked.items()}
    except (RuntimeError, ValueError):  # too few finished trials to tell
        pass
    return read_study_result(study, study_dir), importances


def _pruner(study_file: StudyFile) -> Any:
    import optuna

    if study_file.pruner == "none" or study_file.eval_metric is None:
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(
        n_startup_trials=study_file.startup_trials, n_warmup_steps=study_file.warmup_steps
    )


def run_study(
    study_file: StudyFile,
    out_dir: Path,
    workers: int,
    storage: str | None,
    log: Log,
    worker_of: int | None = None,
    plugins: tuple[str, ...] = (),
) -> StudyResult:
    """Run ``study_file``'s trials into ``out_dir`` with ``workers`` processes sharing the
    study, until its trial or time budget is spent; returns the study as it stands.

    ``workers`` > 1 starts that many worker processes (``trm sweep … --worker-of N``) and
    waits for them; one worker runs here. ``worker_of`` is the number of workers this
    process shares the machine with; ``plugins`` holds ``--plugins`` values every trial
    takes. A stop by SIGINT/SIGTERM leaves the running trial with
    its checkpoint for the next ``trm sweep`` on this folder; TrainingStopped says so."""
    new_folder = not out_dir.exists()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / TRIALS_DIR).mkdir(exist_ok=True)
    except OSError as exc:
        raise TrmError(f"cannot create the study folder {out_dir} ({exc}); choose --out") from None
    try:
        study = open_study(study_file, out_dir, storage)
    except TrmError:
        if new_folder:  # refused input leaves nothing behind
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    if workers > 1:
        _run_workers(study_file, out_dir, workers, storage, plugins, log)
    else:
        _work(study, study_file, out_dir, worker_of or 1, plugins, log)
    return read_study_result(study, out_dir)


class StudyStopped(Exception):
    """A signal stopped a trial: it keeps its checkpoint and the study resumes it."""


def _run_workers(
    study_file: StudyFile,
    out_dir: Path,
    workers: int,
    storage: str | None,
    plugins: tuple[str, ...],
    log: Log,
) -> None:
    command = [
        sys.executable, "-m", "trm", "sweep", str(study_file.path), "--out", str(out_dir),
        "--worker-of", str(workers),
    ]  # fmt: skip
    if storage:
        command += ["--storage", storage]
    for value in plugins:
        command += ["--plugins", value]
    log(f"{workers} workers share the study, each with 1/{workers} of the cores and memory")
    processes = [subprocess.Popen(command) for _ in range(workers)]
    codes = []
    try:
        codes = [process.wait() for process in processes]
    except KeyboardInterrupt:
        codes = [process.wait() for process in processes]  # they got the signal too
        raise StudyStopped("stopped; each running trial kept its checkpoint") from None
    if EXIT_STOPPED in codes:
        raise StudyStopped("a worker was stopped; its trial kept its checkpoint")
    failed = [code for code in codes if code != EXIT_OK]
    if failed:
        raise TrainingFailed(f"{len(failed)} of {workers} workers failed (exit {failed[0]})")


def _work(
    study: Any,
    study_file: StudyFile,
    out_dir: Path,
    share: int,
    plugins: tuple[str, ...],
    log: Log,
) -> None:
    """One worker: claim a trial (a cut-off one first, else a new one), run it, tell the
    study; until the budget is spent."""
    started = float(study.user_attrs.get("started_at", time.time()))
    while True:
        if (
            study_file.time_budget_s is not None
            and time.time() - started > study_file.time_budget_s
        ):
            log(f"the study's time budget ({study_file.time_budget_s:g} s) is spent")
            return
        claimed = _claim(study, study_file, out_dir)
        if claimed is None:
            return
        trial, claim, resumed = claimed
        try:
            _run_trial(study, study_file, trial, out_dir, share, resumed, plugins, log)
        finally:
            claim.close()


def _claim(study: Any, study_file: StudyFile, out_dir: Path) -> tuple[Any, IO[str], bool] | None:
    """The next trial for this worker with its held claim, and whether it resumes a cut-off
    one; None when the budget is spent."""
    import optuna
    from optuna.trial import TrialState

    with _flock(out_dir / ASK_LOCK):
        trials = study.get_trials(deepcopy=False)
        for frozen in trials:
            if frozen.state == TrialState.RUNNING:
                claim = _try_claim(out_dir, frozen.number)
                if claim is not None:
                    # Optuna names a stored trial by its id, which FrozenTrial keeps private
                    return optuna.Trial(study, frozen._trial_id), claim, True
        waiting = sum(1 for t in trials if t.state == TrialState.WAITING)
        if study_file.is_grid and not waiting:
            return None  # every point of the grid was taken
        if not study_file.is_grid and len(trials) - waiting >= study_file.trials:
            return None
        trial = study.ask()
        claim = _try_claim(out_dir, trial.number)
        if claim is None:  # cannot happen while .ask.lock is held: nobody knew the number
            raise TrmError(f"trial {trial.number} is claimed by another worker")
        return trial, claim, False


def _try_claim(out_dir: Path, number: int) -> IO[str] | None:
    handle = (out_dir / TRIALS_DIR / f"{number:04d}.claim").open("a+")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}\n")
    handle.flush()
    return handle


@contextmanager
def _flock(path: Path) -> Iterator[None]:
    with path.open("a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def trial_overrides(study_file: StudyFile, params: dict[str, Any], threads: int) -> tuple[str, ...]:
    """The ``--set`` overrides of a trial: the study's fixed ones, the trial's parameters, and
    its threads (unless fixed), so that ``trm run`` with them trains the same steps."""
    texts = [*study_file.fixed, *override_texts(params)]
    fixed_threads = any(text.split("=", 1)[0].strip() == "runtime.threads" for text in texts)
    if not fixed_threads and study_file.base.runtime.threads == 0:
        texts.append(f"runtime.threads={threads}")
    return tuple(texts)


def trial_command(study_file: StudyFile, overrides: tuple[str, ...]) -> str:
    """The ``trm run`` command that trains the trial's run again, step for step (add
    ``--out DIR``: the trial's own folder would resume the trial)."""
    words = ["trm", "run", study_file.spec]
    for text in overrides:
        words += ["--set", text]
    if study_file.max_steps is not None:
        words += ["--max-steps", str(study_file.max_steps)]
    return shlex.join(words)


def _run_trial(
    study: Any,
    study_file: StudyFile,
    trial: Any,
    out_dir: Path,
    share: int,
    resumed: bool,
    plugins: tuple[str, ...],
    log: Log,
) -> None:
    from optuna.trial import TrialState

    params = (
        dict(trial.params) if resumed else {p.key: p.suggest(trial) for p in study_file.parameters}
    )
    run_dir = out_dir / TRIALS_DIR / f"{trial.number:04d}"
    threads = max(1, _cores() // share)
    overrides = trial_overrides(study_file, params, threads)
    trial.set_user_attr("run_dir", str(run_dir))
    trial.set_user_attr("command", trial_command(study_file, overrides))
    verb = "resuming" if resumed else "starting"
    shown = ", ".join(f"{k}={v!r}" for k, v in params.items())
    log(f"{verb} trial {trial.number}: {shown}")
    pruning = TrialPruning(trial, study_file.eval_metric)
    options = RunOptions(
        spec=study_file.spec,
        plugins=(*plugins, "no:progress") if share > 1 else plugins,
        overrides=overrides,
        out=run_dir,
        max_steps=study_file.max_steps,
        plugin_objects=(("trial-pruning", pruning), ("worker-share", WorkerShare(share))),
    )
    try:
        run = run_training(options, log)
    except (TrmError, TrainingFailed) as exc:
        trial.set_user_attr("error", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        study.tell(trial, state=TrialState.FAIL)
        log(f"trial {trial.number} failed: {exc}")
        return
    trial.set_user_attr("wall_s", run.summary.wall_s)
    if run.stopped in ("interrupted", "terminated"):
        raise StudyStopped(f"trial {trial.number} stopped with its checkpoint; run again to resume")
    if run.stopped == PRUNED:
        study.tell(trial, state=TrialState.PRUNED)
        log(f"trial {trial.number} pruned at step {run.summary.steps}")
        return
    value = objective_value(study_file.metric, run.summary, run.metrics)
    if value is None:
        trial.set_user_attr("error", f"the run wrote no {study_file.metric}")
        study.tell(trial, state=TrialState.FAIL)
        log(f"trial {trial.number} failed: the run wrote no {study_file.metric}")
        return
    study.tell(trial, value)
    log(f"trial {trial.number}: {study_file.metric} = {value:.6g}")


def _cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS
        return os.cpu_count() or 1


def objective_value(metric: str, summary: Any, rows: list[dict[str, Any]]) -> float | None:
    """``metric`` of a finished run: a summary.json field, or ``eval.FIELD`` of its last
    evaluation row; None when the run wrote none."""
    if metric.startswith("eval."):
        field = metric.removeprefix("eval.")
        evals = [row[field] for row in rows if row.get("kind") == "eval" and field in row]
        return float(evals[-1]) if evals else None
    value = summary.get(metric)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
