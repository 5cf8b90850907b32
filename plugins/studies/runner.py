"""Running a study: trials as ordinary trm runs, an Optuna study as the shared record.

The study lives in an Optuna storage (default ``DIR/study.db``, SQLite; a database server
for several machines); each trial is a ``trm run`` into ``DIR/trials/NNNN/`` with the base
spec, the fixed overrides and its parameters as ``--set`` overrides, so it has everything a
run has (checkpoints, exact resume, the memory plan, the report). Several worker processes —
on this machine and others — may share one study: each runs one trial at a time.

Who runs what, without running a trial twice, on Optuna's own mechanisms:
- a trial is taken by moving it out of WAITING (a grid point, a retry) or by
  ``study.ask()``: the storage makes either atomic between machines; on this machine the
  taking is also serialised under ``DIR/.ask.lock``;
- a running trial beats a heartbeat in the storage (``study.heartbeat_s``); one silent for
  ``study.grace_s`` was cut off wherever it ran: the next worker that looks marks it failed
  (``optuna.storages.fail_stale_trials``) and Optuna's retry callback queues it again as a
  WAITING trial with the same parameters, which the next free worker takes;
- on this machine a trial's worker also holds a lock on ``DIR/trials/NNNN.claim``, which the
  kernel drops when the process dies: a running trial of this folder whose claim is free was
  cut off, and is queued again at once instead of after its grace period;
- a retried trial whose run directory is in this folder resumes from its newest checkpoint
  there; one cut off on another machine trains from its first step into this folder;
- a worker whose trial was taken over (its heartbeat lapsed while it still ran) stops it and
  records nothing: the storage refuses a second result and the worker goes on.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import attrs

from trm.api.arguments import override_texts
from trm.api.log import Log
from trm.api.training import RunOptions, run_training
from trm.errors import TrainingFailed, TrmError
from trm.file_lock import HeldLock, hold_lock
from trm.hardware import OWN_PROCESS_ROOT_ENV
from trm.plugins.studies.plugins import PRUNED, TAKEN_OVER, TrialPruning, WorkerShare
from trm.plugins.studies.results import StudyResult, read_study_result
from trm.plugins.studies.study_file import StudyFile

STUDY_DB = "study.db"
TRIALS_DIR = "trials"
ASK_LOCK = ".ask.lock"
# the folder's record: which study it holds, and its id (a trial's user attr "folder")
FOLDER_RECORD = "study.json"
# a worker's own exit codes (the parent reports the worst)
EXIT_OK, EXIT_STOPPED = 0, 130
# times a cut-off trial is queued again before it stays failed
MAX_RETRIES = 3
# seconds a worker waits for a study's creator to finish setting it up
SETUP_WAIT_S = 60.0
_SQLITE_HEADER = b"SQLite format 3\x00"


def storage_url(out_dir: Path, storage: str | None) -> str:
    """The Optuna storage: ``storage`` as given (a database URL Optuna takes: sqlite:///…,
    postgresql://…, mysql://…), else SQLite in ``out_dir/study.db``. ``postgresql://`` and
    ``postgres://`` without a driver name mean psycopg 3 (the ``postgres`` extra),
    whatever SQLAlchemy's default for them."""
    if storage is None:
        return f"sqlite:///{(out_dir / STUDY_DB).resolve()}"
    for scheme in ("postgresql://", "postgres://"):
        if storage.startswith(scheme):
            return "postgresql+psycopg://" + storage.removeprefix(scheme)
    return storage


def shown_url(url: str) -> str:
    """``url`` without its password, for messages."""
    head, sep, rest = url.partition("://")
    user, at, host = rest.rpartition("@")
    if not at or ":" not in user:
        return url
    return f"{head}{sep}{user.split(':', 1)[0]}:***@{host}"


def database_error(exc: BaseException) -> str:
    """A database error in one line: SQLAlchemy's first line, without its "(Background on
    this error at: …)" link or the SQL it ran."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    noise = ("(Background on", "[SQL", "[parameters")
    kept = [line for line in lines if not line.startswith(noise)]
    return (kept[0] if kept else type(exc).__name__).removesuffix(".")


def check_sqlite_file(url: str, must_hold_study: bool) -> None:
    """Refuse, without opening it, an SQLite storage that is a folder, sits in a missing
    folder, or is a file that is not an SQLite database (``must_hold_study``: also an
    empty or missing file, which opening would turn into a database)."""
    if not url.startswith("sqlite:///"):
        return
    path = Path(url.removeprefix("sqlite:///"))
    if str(path) in ("", ":memory:"):
        return
    what = f"the study database {path}"
    if path.is_dir():
        raise TrmError(f"{what} is a folder, not a database file; give another storage or --out")
    if not path.exists():
        if must_hold_study:
            raise TrmError(f"{path.parent} holds no study ({path.name} is missing)")
        if not path.parent.is_dir():
            raise TrmError(
                f"{what} cannot be created: the folder {path.parent} does not exist; create it "
                "or give another storage"
            )
        return
    try:
        with path.open("rb") as handle:
            header = handle.read(len(_SQLITE_HEADER))
    except OSError as exc:
        raise TrmError(f"{what} cannot be read ({exc.strerror or exc})") from None
    if not header and must_hold_study:
        raise TrmError(f"{what} is empty: it holds no study")
    if header and header != _SQLITE_HEADER:
        raise TrmError(
            f"{what} is not an SQLite database (another kind of file); move it away or give "
            "another --out"
        )


def make_storage(url: str, study_file: StudyFile | None) -> Any:
    """Optuna's RDBStorage at ``url``; with ``study_file``, running trials beat its
    heartbeat and a cut-off one is queued again by Optuna's retry callback. TrmError in one
    line when the database cannot be opened."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    options: dict[str, Any] = {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            if study_file is not None:
                retry = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None)
                keyword = "heartbeat_stale_trial_callback"
                if retry is None:  # Optuna before 4.9 names them "failed trial"
                    retry = optuna.storages.RetryFailedTrialCallback
                    keyword = "failed_trial_callback"
                options = {
                    "heartbeat_interval": study_file.heartbeat_s,
                    "grace_period": study_file.grace_s,
                    keyword: retry(max_retry=MAX_RETRIES),
                }
            return optuna.storages.RDBStorage(url, **options)
    except ImportError:
        raise TrmError(
            f"the storage {shown_url(url)} needs its database's Python driver, which is not "
            "installed; for postgresql:// run pip install -e '.[postgres]' in trm's checkout, "
            "for another database the driver SQLAlchemy names for its URL"
        ) from None
    except Exception as exc:  # sqlalchemy's errors for an unreachable or odd database
        raise TrmError(
            f"the storage {shown_url(url)} cannot be opened ({database_error(exc)}); give a "
            "database URL Optuna takes (sqlite:///PATH, postgresql://…, mysql://…)"
        ) from None


@attrs.frozen
class StudyFolder:
    """A study's folder on this machine: ``path``, and ``folder_id`` — the id its trials
    carry (user attr "folder"), so a worker knows which running trials were this folder's."""

    path: Path
    folder_id: str


def check_folder(out_dir: Path, name: str) -> str | None:
    """The id of the study folder ``out_dir`` when it holds study ``name`` (None: it holds
    no study yet); TrmError when it holds another study."""
    record = out_dir / FOLDER_RECORD
    if not record.exists():
        return None
    try:
        held = json.loads(record.read_text(encoding="utf-8"))
        held_name, folder_id = str(held["study"]), str(held["folder"])
    except (OSError, ValueError, KeyError, TypeError):
        raise TrmError(
            f"{record} is damaged; the folder {out_dir} is not a study folder trm can use: "
            "give another --out"
        ) from None
    if held_name != name:
        raise TrmError(
            f"{out_dir} holds the study {held_name!r}, not {name!r}; give this study its own "
            "--out (or name it study.name = " + json.dumps(held_name) + ")"
        )
    return folder_id


def open_study(
    study_file: StudyFile, out_dir: Path, storage: str | None
) -> tuple[Any, StudyFolder]:
    """The Optuna study of ``study_file`` in its storage, created on first use (a grid's
    first points enqueued once), and this folder's record; TrmError when the folder holds
    another study, the storage cannot be opened, or the stored study was made from another
    space, metric or direction."""
    import optuna

    folder_id = check_folder(out_dir, study_file.name)
    url = storage_url(out_dir, storage)
    check_sqlite_file(url, must_hold_study=False)
    if storage is None and folder_id is None and (out_dir / STUDY_DB).is_file():
        _refuse_other_studies(url, study_file.name, out_dir)
    with _lock(out_dir / ASK_LOCK):
        store = make_storage(url, study_file)
        try:
            try:
                study = optuna.load_study(study_name=study_file.name, storage=store)
                created = False
            except KeyError:
                study = optuna.create_study(
                    study_name=study_file.name,
                    storage=store,
                    direction=study_file.direction,
                    pruner=_pruner(study_file),
                )
                created = True
        except optuna.exceptions.DuplicatedStudyError:  # another machine created it just now
            study, created = optuna.load_study(study_name=study_file.name, storage=store), False
        except Exception as exc:
            raise TrmError(
                f"the storage {shown_url(url)} cannot be used ({database_error(exc)})"
            ) from None
        study.pruner = _pruner(study_file)
        if created:
            _set_up(study, study_file)
        else:
            _check_same_study(study, study_file, url)
        if folder_id is None:
            folder_id = uuid.uuid4().hex
            (out_dir / FOLDER_RECORD).write_text(
                json.dumps({"study": study_file.name, "folder": folder_id}) + "\n",
                encoding="utf-8",
            )
    return study, StudyFolder(out_dir, folder_id)


def _refuse_other_studies(url: str, name: str, out_dir: Path) -> None:
    import optuna

    try:
        names = optuna.study.get_all_study_names(storage=make_storage(url, None))
    except TrmError:
        raise
    except Exception as exc:
        raise TrmError(f"{out_dir / STUDY_DB} cannot be read ({database_error(exc)})") from None
    others = [held for held in names if held != name]
    if others:
        raise TrmError(
            f"{out_dir} holds the study {others[0]!r}, not {name!r}; give this study its own --out"
        )


def _set_up(study: Any, study_file: StudyFile) -> None:
    """A new study's attrs and its grid's first points; "definition" is set last, so a worker
    that finds it knows the study is ready."""
    import itertools

    study.set_user_attr("started_at", time.time())
    study.set_user_attr("study_file", str(study_file.path.resolve()))
    study.set_user_attr("metric", study_file.metric)
    if study_file.is_grid:
        for point in itertools.islice(study_file.grid_points(), study_file.trials):
            study.enqueue_trial(point)
    study.set_user_attr("definition", study_file.definition())


def _check_same_study(study: Any, study_file: StudyFile, url: str) -> None:
    """Refuse a study file whose space, metric or direction differ from the stored study's
    (its trials would mean something else); wait for a study another worker is setting up."""
    deadline = time.monotonic() + SETUP_WAIT_S
    while "definition" not in study.user_attrs and "metric" not in study.user_attrs:
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    stored = study.user_attrs.get("definition")
    now = study_file.definition()
    changes = []
    stored_direction = study.direction.name.lower()
    if stored_direction != study_file.direction:
        changes.append(f"objective.direction {stored_direction!r} -> {study_file.direction!r}")
    stored_metric = (stored or {}).get("metric", study.user_attrs.get("metric"))
    if stored_metric is not None and stored_metric != study_file.metric:
        changes.append(f"objective.metric {stored_metric!r} -> {study_file.metric!r}")
    if isinstance(stored, dict) and stored.get("space") != now["space"]:
        before, after = stored.get("space") or {}, now["space"]
        for key in sorted(set(before) | set(after)):
            if before.get(key) != after.get(key):
                was, new = before.get(key, "absent"), after.get(key, "absent")
                changes.append(f"space.{key} ({was} -> {new})")
    if changes:
        raise TrmError(
            f"the study {study_file.name!r} in {shown_url(url)} was made from another study file: "
            f"{'; '.join(changes)}; undo the change, or give the changed study its own name "
            "(study.name) or --out"
        )


def load_study(study_dir: Path) -> tuple[StudyResult, dict[str, float]]:
    """The study stored in ``study_dir/study.db`` as rows, and Optuna's parameter
    importances ({} until two trials with different parameters finished); TrmError when the
    folder holds no study. Reads only: an empty or foreign file is refused, never written."""
    import optuna

    url = storage_url(study_dir, None)
    check_sqlite_file(url, must_hold_study=True)
    store = make_storage(url, None)
    try:
        names = optuna.study.get_all_study_names(storage=store)
    except Exception as exc:  # a damaged database file
        raise TrmError(
            f"{study_dir / STUDY_DB} cannot be read as a study ({database_error(exc)})"
        ) from None
    if len(names) != 1:
        raise TrmError(f"{study_dir / STUDY_DB} holds {len(names)} studies; one was expected")
    study = optuna.load_study(study_name=names[0], storage=store)
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


def trial_seed(study_seed: int, number: int) -> int:
    """The sampler's seed for trial ``number`` of a study seeded ``study_seed``: distinct per
    trial, so workers sharing a study draw different start-up trials, and the same on every
    run of one worker."""
    digest = hashlib.sha256(f"{study_seed}:{number}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


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
    study, until its trial or time budget is spent and no trial of it runs anywhere;
    returns the study as it stands.

    ``workers`` > 1 starts that many worker processes (``trm sweep … --worker-of N``) and
    waits for them; one worker runs here. ``worker_of`` is the number of workers this
    process shares the machine with; ``plugins`` holds ``--plugins`` values every trial
    takes. A stop by SIGINT/SIGTERM leaves the running trial with its checkpoint for the
    next ``trm sweep`` on this folder; StudyStopped says so."""
    new_folder = not out_dir.exists()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TrmError(f"cannot create the study folder {out_dir} ({exc}); choose --out") from None
    try:
        study, folder = open_study(study_file, out_dir, storage)
        (out_dir / TRIALS_DIR).mkdir(exist_ok=True)
    except TrmError:
        if new_folder:  # refused input leaves nothing behind
            shutil.rmtree(out_dir, ignore_errors=True)
        raise
    except OSError as exc:
        if new_folder:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise TrmError(
            f"cannot write into the study folder {out_dir} ({exc}); choose --out"
        ) from None
    if workers > 1:
        _run_workers(study_file, out_dir, workers, storage, plugins, log)
    else:
        _work(study, study_file, folder, worker_of or 1, plugins, log)
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
    """Start ``workers`` worker processes and wait for them. SIGTERM here is passed on to
    each (they stop their trials with a checkpoint), then StudyStopped."""
    command = [
        sys.executable, "-m", "trm", "sweep", str(study_file.path), "--out", str(out_dir),
        "--worker-of", str(workers),
    ]  # fmt: skip
    if storage:
        command += ["--storage", storage]
    for value in plugins:
        command += ["--plugins", value]
    log(f"{workers} workers share the study, each with 1/{workers} of the cores and memory")
    # a worker's stdout goes to this process's stderr: the parent's stdout is its table alone
    try:
        worker_stdout: int | None = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # a stderr that is no file (captured)
        worker_stdout = None
    # the workers count each other's CPU time as trm's own, not as other load (cpu backend)
    environment = {**os.environ, OWN_PROCESS_ROOT_ENV: str(os.getpid())}
    processes = [
        subprocess.Popen(command, stdout=worker_stdout, env=environment) for _ in range(workers)
    ]
    terminated = threading.Event()

    def pass_on(signum: int, frame: Any) -> None:
        terminated.set()
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, pass_on)
    try:
        codes = [process.wait() for process in processes]
    except KeyboardInterrupt:
        codes = [process.wait() for process in processes]  # they got the signal too
        raise StudyStopped("stopped; each running trial kept its checkpoint") from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    if terminated.is_set() or EXIT_STOPPED in codes:
        raise StudyStopped("stopped; each running trial kept its checkpoint")
    failed = [code for code in codes if code != EXIT_OK]
    if failed:
        raise TrainingFailed(f"{len(failed)} of {workers} workers failed (exit {failed[0]})")


@attrs.frozen
class Claimed:
    """A trial this worker runs: the Optuna ``trial``, its ``run_dir`` and held ``claim``,
    ``resumed`` (a cut-off trial whose run directory is here: it resumes) and
    ``retried_from`` (the number of the cut-off trial it runs again; None: a first run)."""

    trial: Any
    run_dir: Path
    claim: HeldLock
    resumed: bool
    retried_from: int | None = None


# _claim's answer when nothing is free now but a trial still runs somewhere
WAIT = "wait"


def _work(
    study: Any,
    study_file: StudyFile,
    folder: StudyFolder,
    share: int,
    plugins: tuple[str, ...],
    log: Log,
) -> None:
    """One worker: take a trial (a cut-off one first, then a new one while the budget
    lasts), run it, tell the study; until none is left and none runs anywhere (a trial
    running elsewhere may still be cut off and need a worker)."""
    started = float(study.user_attrs.get("started_at", time.time()))
    said_spent = waiting_said = False
    while True:
        spent = (
            study_file.time_budget_s is not None
            and time.time() - started > study_file.time_budget_s
        )
        if spent and not said_spent:
            log(f"the study's time budget ({study_file.time_budget_s:g} s) is spent")
            said_spent = True
        claimed = _claim(study, study_file, folder, new_trials=not spent)
        if claimed is None:
            return
        if claimed == WAIT:
            if not waiting_said:
                log("waiting for the trials other workers run (one cut off is taken over)")
                waiting_said = True
            time.sleep(min(study_file.heartbeat_s, 10))
            continue
        waiting_said = False
        assert isinstance(claimed, Claimed)
        try:
            with _heartbeat(study, claimed.trial, study_file.heartbeat_s):
                _run_trial(study, study_file, claimed, share, plugins, log)
        finally:
            claimed.claim.close()


def _claim(
    study: Any, study_file: StudyFile, folder: StudyFolder, new_trials: bool
) -> Claimed | str | None:
    """The next trial for this worker, held: a queued retry of a cut-off trial first, then
    (``new_trials``) a grid point or a new trial while the budget lasts. WAIT when none is
    free but a trial runs elsewhere; None when the study is done."""
    import optuna
    from optuna.trial import TrialState

    with _lock(folder.path / ASK_LOCK):
        _requeue_cut_off(study, folder)
        trials = study.get_trials(deepcopy=False)
        retried = {n for t in trials for n in t.system_attrs.get("retry_history", [])}
        waiting = [t for t in trials if t.state == TrialState.WAITING]
        retries = [t for t in waiting if "failed_trial" in t.system_attrs]
        points = [t for t in waiting if "failed_trial" not in t.system_attrs]
        candidates = retries + (points if new_trials else [])
        trial = None
        for frozen in candidates:
            if _take_waiting(study, frozen._trial_id):
                trial = optuna.Trial(study, frozen._trial_id)
                break
        counted = sum(
            1 for t in trials if t.state != TrialState.WAITING and t.number not in retried
        )
        if (
            trial is None
            and new_trials
            and not study_file.is_grid
            and counted + len(points) < study_file.trials
        ):
            with warnings.catch_warnings():  # Optuna's note that heartbeats suit optimize()
                warnings.simplefilter("ignore", UserWarning)
                trial = study.ask()
        if trial is None:
            running = any(t.state == TrialState.RUNNING for t in trials)
            return WAIT if running or (points and new_trials) else None
        return _hold(study, study_file, folder, trial)


def _take_waiting(study: Any, trial_id: int) -> bool:
    """Move a WAITING trial to RUNNING; the storage makes it atomic: False when another
    worker took it (or finished it) first."""
    import optuna
    from optuna.trial import TrialState

    try:
        return bool(study._storage.set_trial_state_values(trial_id, state=TrialState.RUNNING))
    except optuna.exceptions.UpdateFinishedTrialError:
        return False


def _hold(study: Any, study_file: StudyFile, folder: StudyFolder, trial: Any) -> Claimed:
    """Claim ``trial`` here: its run directory (a retried trial of this folder keeps its
    own, and resumes), its claim lock, its first heartbeat and its user attrs."""
    frozen = study._storage.get_trial(trial._trial_id)
    attrs_ = frozen.user_attrs
    resumed = False
    run_dir = folder.path / TRIALS_DIR / f"{trial.number:04d}"
    if "failed_trial" in frozen.system_attrs and attrs_.get("folder") == folder.folder_id:
        own = Path(str(attrs_.get("run_dir", "")))
        if own.name and own.parent == folder.path / TRIALS_DIR:
            run_dir, resumed = own, own.is_dir()
    claim = hold_lock(run_dir.with_suffix(".claim"))
    if claim is None:  # another worker here holds it: cannot happen under .ask.lock
        raise TrmError(f"the run directory {run_dir} is claimed by another worker")
    study._storage.record_heartbeat(trial._trial_id)
    trial.set_user_attr("folder", folder.folder_id)
    trial.set_user_attr("run_dir", str(run_dir))
    retried_from = frozen.system_attrs.get("failed_trial")
    return Claimed(trial, run_dir, claim, resumed, retried_from)


def _requeue_cut_off(study: Any, folder: StudyFolder) -> None:
    """Fail the running trials whose heartbeat lapsed (Optuna queues each again), and at
    once those of this folder whose claim is free: their worker died."""
    import optuna
    from optuna.trial import TrialState

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    storage = study._storage
    callback = getattr(
        storage, "get_heartbeat_stale_trial_callback", storage.get_failed_trial_callback
    )()  # Optuna before 4.9 names it "failed trial"
    for frozen in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        run_dir = frozen.user_attrs.get("run_dir")
        if frozen.user_attrs.get("folder") != folder.folder_id or not run_dir:
            continue
        claim = hold_lock(Path(run_dir).with_suffix(".claim"))
        if claim is None:
            continue  # its worker on this machine runs it
        claim.close()
        try:
            if not storage.set_trial_state_values(frozen._trial_id, state=TrialState.FAIL):
                continue
        except optuna.exceptions.UpdateFinishedTrialError:
            continue
        if callback is not None:
            callback(study, storage.get_trial(frozen._trial_id))


@contextmanager
def _heartbeat(study: Any, trial: Any, interval_s: int) -> Iterator[None]:
    """Beat ``trial``'s heartbeat in the storage every ``interval_s`` while the block runs."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(interval_s):
            with suppress(Exception):  # a database hiccup: the next beat tries again
                study._storage.record_heartbeat(trial._trial_id)

    thread = threading.Thread(target=beat, name=f"trial-{trial.number}-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextmanager
def _lock(path: Path) -> Iterator[None]:
    """Hold ``path``'s lock (waiting for it) while the block runs."""
    held = hold_lock(path, wait=True)
    assert held is not None
    try:
        yield
    finally:
        held.close()


def trial_overrides(study_file: StudyFile, params: dict[str, Any]) -> tuple[str, ...]:
    """The ``--set`` overrides of a trial: the study's fixed ones, then its parameters. Its
    threads are the backend's plan for its worker's share of the machine (unless the spec
    or the study fixes ``runtime.threads``)."""
    return (*study_file.fixed, *override_texts(params))


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
    claimed: Claimed,
    share: int,
    plugins: tuple[str, ...],
    log: Log,
) -> None:
    """Train ``claimed``'s trial and tell the study how it ended. A trial another worker
    took over meanwhile (its heartbeat lapsed) is left to it: nothing is told twice."""
    from optuna.trial import TrialState

    trial, run_dir = claimed.trial, claimed.run_dir
    if not trial.params:  # a new trial: its sampler is seeded for it (trial_seed)
        study.sampler = _sampler(study_file, trial.number)
    params = {p.key: p.suggest(trial) for p in study_file.parameters}
    overrides = trial_overrides(study_file, params)
    _set_attr(trial, "command", trial_command(study_file, overrides))
    shown = ", ".join(f"{k}={v!r}" for k, v in params.items())
    retried = claimed.retried_from
    again = f" (trial {retried}, cut off)" if retried is not None else ""
    verb = "resuming" if claimed.resumed else "starting"
    log(f"{verb} trial {trial.number}{again}: {shown}")
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
        _set_attr(trial, "error", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        _tell(study, trial, log, state=TrialState.FAIL)
        log(f"trial {trial.number} failed: {exc}")
        return
    _set_attr(trial, "wall_s", run.summary.wall_s)
    if run.stopped in ("interrupted", "terminated"):
        raise StudyStopped(f"trial {trial.number} stopped with its checkpoint; run again to resume")
    if run.stopped == TAKEN_OVER:
        log(f"trial {trial.number} was taken over by another worker; this one goes on")
        return
    if run.stopped == PRUNED:
        if _tell(study, trial, log, state=TrialState.PRUNED):
            log(f"trial {trial.number} pruned at step {run.summary.steps}")
        return
    value = objective_value(study_file.metric, run.summary, run.metrics)
    if value is None:
        _set_attr(trial, "error", f"the run wrote no {study_file.metric}")
        _tell(study, trial, log, state=TrialState.FAIL)
        log(f"trial {trial.number} failed: the run wrote no {study_file.metric}")
        return
    if _tell(study, trial, log, values=value):
        log(f"trial {trial.number}: {study_file.metric} = {value:.6g}")


def _sampler(study_file: StudyFile, number: int) -> Any:
    import optuna

    return optuna.samplers.TPESampler(seed=trial_seed(study_file.seed, number))


def _tell(study: Any, trial: Any, log: Log, **outcome: Any) -> bool:
    """Tell the study how ``trial`` ended; False (and a line) when it was finished already —
    failed as cut off while this worker still ran it, and queued for another."""
    from optuna.trial import TrialState

    if study._storage.get_trial(trial._trial_id).state != TrialState.RUNNING:
        log(f"trial {trial.number} was taken over by another worker; its result here is not kept")
        return False
    study.tell(trial, skip_if_finished=True, **outcome)
    return True


def _set_attr(trial: Any, key: str, value: Any) -> None:
    """Set a user attr on a trial that may have been finished by another worker meanwhile."""
    import optuna

    with suppress(optuna.exceptions.UpdateFinishedTrialError, RuntimeError):
        trial.set_user_attr(key, value)


def objective_value(metric: str, summary: Any, rows: list[dict[str, Any]]) -> float | None:
    """``metric`` of a finished run: a summary.json field, or ``eval.FIELD`` of its last
    evaluation row; None when the run wrote none."""
    if metric.startswith("eval."):
        field = metric.removeprefix("eval.")
        evals = [row[field] for row in rows if row.get("kind") == "eval" and field in row]
        return float(evals[-1]) if evals else None
    value = summary.get(metric)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
