"""The Hydra app behind ``kgreason [group=option ...]`` (and ``python -m kgreason``): compose
dataset × kg × retriever × reasoner × llm and run. ``kgreason TOOL ...`` runs a tool instead
(``kgreason --help`` lists both; the dispatch lives in :mod:`kgreason.cli`).

The configs are the clone's ``conf/`` when run from a checkout and the copy shipped inside the
wheel (``kgreason/conf``) when installed (:func:`kgreason.paths.config_dir`).
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Sequence

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from kgreason.runner.callbacks import forget_hydra_record, made_by_this_launch, restore_hydra_record
from kgreason.runner.compose import check_run, failed_marker, fetch_hint, refused_marker
from kgreason.paths import config_dir, explain_missing, inside

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
#: Hub variables the user set before starting kgreason: these always win over set_hub_mode
_USER_HUB_ENV = {v for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE") if v in os.environ}


def hub_online(cfg: DictConfig) -> bool:
    """True when the run asked for the Hugging Face Hub (``dataset.source=hub``); every other run
    is offline, so nothing is downloaded behind the user's back."""
    ds = cfg.get("dataset") or {}
    return str(ds.get("source", "") or "") == "hub"


def set_hub_mode(cfg: DictConfig) -> None:
    """Offline by default (the embedded run, tests); online only for ``source=hub``. An explicit
    ``HF_HUB_OFFLINE``/``TRANSFORMERS_OFFLINE`` in the environment always wins. Must run before
    ``huggingface_hub`` is imported (it reads the variables at import time)."""
    flag = "0" if hub_online(cfg) else "1"
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if var not in _USER_HUB_ENV:  # per job, so a sweep over source=local,hub gets each right
            os.environ[var] = flag


def debug() -> bool:
    """Tracebacks wanted: ``HYDRA_FULL_ERROR=1`` or ``kgreason --debug`` (which sets it)."""
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


#: OSError numbers that are the machine's answer, not a bug: a full disk or quota, a read-only or
#: failing file system, a permission, a path that is not what it should be (docs/running.md)
_ENVIRONMENT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EACCES, errno.EPERM,
                       errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENAMETOOLONG, errno.ELOOP, errno.EMFILE,
                       errno.ENFILE, errno.EFBIG, errno.ENOENT}


def is_user_error(e: BaseException) -> bool:
    """A configuration, data or environment error the message explains in full (a bug is not one:
    it keeps its traceback). Hydra's instantiate wraps what a constructor raised; look inside."""
    from hydra.errors import InstantiationException

    from kgreason.storage.callstore import StoreCorrupt
    from kgreason.data.base import DataError
    from kgreason.storage.embedstore import StoreNoSpace
    from kgreason.kg.cypher import GraphDBUnavailable
    from kgreason.kg.sparql import SparqlError
    from kgreason.preflight import PreflightError
    from kgreason.record import ResumeConfigMismatch
    from kgreason.runner.run import LLMUnavailable, RunFailed
    from kgreason.textio import InputFileError

    user = (PreflightError, InputFileError, DataError, ResumeConfigMismatch, StoreCorrupt, RunFailed,
            LLMUnavailable, GraphDBUnavailable, FileNotFoundError, ResumeRefused, StoreNoSpace,
            SparqlError)  # an endpoint that refuses, fails or holds no graph: its message names it
    seen = 0
    while e is not None and seen < 5:
        if isinstance(e, user):
            return True
        if isinstance(e, OSError) and e.errno in _ENVIRONMENT_ERRNOS:  # the disk or the file system said no
            return True
        if not isinstance(e, InstantiationException):
            return False
        e, seen = e.__cause__, seen + 1
    return False


def _unwrap(e: BaseException) -> str:
    """The message of what a constructor raised, without Hydra's ``Error in call to target`` wrapper."""
    from hydra.errors import InstantiationException

    while isinstance(e, InstantiationException) and e.__cause__ is not None:
        e = e.__cause__
    msg = str(e)
    return msg[1:-1] if isinstance(e, (FileNotFoundError, KeyError)) and msg[:1] == msg[-1:] == "'" else msg


#: the loggers whose INFO lines a run prints: kgreason's own and Hydra's (a launcher's "Launching
#: 2 jobs"); every other library's logger is quiet below WARNING (:class:`LibraryInfoFilter`)
OWN_LOGGERS = ("kgreason", "hydra", "hydra_plugins", "__main__")


class LibraryInfoFilter(logging.Filter):
    """Lets through a record at WARNING or above, and any record of kgreason's or Hydra's own
    loggers (:data:`OWN_LOGGERS`). Another library's INFO and DEBUG lines are dropped: an HTTP
    client's line per request (``httpx``, ``httpx2`` under the OpenAI client, ``httpcore``,
    ``urllib3``, ``aiohttp``, and whatever a library calls its next one), a file lock's, a font
    cache's. Quieting by what a logger is (not ours), not by a list of names, is what keeps a
    renamed client quiet (issue 74: the OpenAI client's move to ``httpx2`` printed one line per
    model request, thousands per run)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return (record.levelno >= logging.WARNING or record.name == "root"
                or record.name.split(".", 1)[0] in OWN_LOGGERS)


def quiet_logs() -> None:
    """Nothing is printed per example: every handler of the root logger (Hydra's console and
    ``run.log``; a tool's stderr handler) gets :class:`LibraryInfoFilter`, so other libraries
    log at WARNING and above only (``--debug`` keeps everything); and other libraries' progress
    bars are off when kgreason's own progress is not a bar (not a terminal)."""
    from kgreason import progress

    if not debug():
        for handler in logging.getLogger().handlers:
            if not any(isinstance(f, LibraryInfoFilter) for f in handler.filters):
                handler.addFilter(LibraryInfoFilter())
    if progress.mode() != "bar":
        os.environ.setdefault("TQDM_DISABLE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


class ResumeRefused(ValueError):
    """``resume=true`` was asked for on a run dir that holds no earlier run."""


def _refuse_resume_without_run(task_overrides: Sequence[str], out_dir: Path) -> None:
    """``resume=true`` typed on the command line promises an earlier run in the dir; a mistyped
    dir would otherwise start a fresh run and exit 0 (``resume`` defaults to true, so only the
    explicit override is checked)."""
    asked = any(o.lstrip("+~").split("=", 1)[0] == "resume" and o.split("=", 1)[-1].strip().lower() == "true"
                for o in task_overrides)
    if asked and not any((out_dir / f).exists() for f in ("predictions.jsonl", "fingerprint.json")):
        raise ResumeRefused(f"resume=true, but {out_dir} holds no earlier run (no predictions.jsonl): check "
                            "hydra.run.dir; drop resume=true to start a new run there")


#: what Hydra and the tracker put in a run dir before the first example (nothing of value), and
#: the failure marker of a run that stopped there (kgreason/runner/run.py; dropped with the dir)
_START_ONLY = {".hydra", "run.log", "wandb", "failed.json"}


def _drop_empty_run_dir(out_dir: Path) -> bool:
    """Remove a run dir that holds only what a failed start wrote (Hydra's config copy, an empty
    log, an empty offline W&B run), so ``kgreason sync`` and ``tables`` never see it. Returns
    whether the dir is kept (it holds earlier rows, a record, or anything else).

    Only what this launch made is removed (issue 57, L10): a dir that was there before the launch
    (``KeepHydraRecord`` noted what it held) keeps itself and everything it held (an earlier
    ``wandb/``, ``run.log``, ``.hydra/``, ``failed.json``); only the start-up files this launch
    added are removed from it."""
    try:
        names = {p.name for p in out_dir.iterdir()}
    except OSError:
        return False
    here = Path.cwd().resolve()
    if not names <= _START_ONLY or out_dir.resolve() in (here, *here.parents, Path.home().resolve()):
        return True  # never the working dir, one above it, or home (hydra.run.dir=. in a new folder)
    seen = made_by_this_launch(out_dir)
    if seen is not None and not seen[0]:  # an earlier dir: remove only the start-up files this launch added
        for name in names - seen[1]:
            p = out_dir / name
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
        return True
    shutil.rmtree(out_dir, ignore_errors=True)
    _drop_empty_day(out_dir.parent)
    return False


def _drop_empty_day(day: Path) -> None:
    """The default layout's ``runs/<YYYY-MM-DD>/`` (and ``runs/``) left empty by a refused start's
    removed dir: removed too, so ``ls outputs/runs`` shows no day with nothing in it. Any other
    folder (a ``hydra.run.dir`` the user named) is left as it is."""
    if not (re.fullmatch(r"\d{4}-\d{2}-\d{2}", day.name) and day.parent.name == "runs"):
        return
    for d in (day, day.parent):
        try:
            d.rmdir()  # only when empty
        except OSError:
            return


def _cache_cfg(cfg: DictConfig) -> dict | None:
    """``llm_cache`` resolved (its ``dir`` is where the summary says the cache lives)."""
    try:
        node = cfg.get("llm_cache")
        return OmegaConf.to_container(node, resolve=True) if node is not None else None
    except Exception:  # noqa: BLE001 - only for the summary's wording
        return None


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="config")
def main(cfg: DictConfig) -> float | None:
    set_hub_mode(cfg)
    from kgreason.runner.run import RunInterrupted, run
    from kgreason.runs import RunDirLocked
    from kgreason.secrets import scrub_std_streams

    scrub_std_streams()  # Hydra prints a failed job's overrides to stderr, secrets included
    hc = HydraConfig.get()
    out_dir = Path(hc.runtime.output_dir)
    single = hc.mode == RunMode.RUN
    quiet_logs()
    if not single:
        from kgreason import progress

        progress.set_job(f"job {hc.job.num}" + (f": {hc.job.override_dirname}" if hc.job.override_dirname else ""))
    if hc.mode == RunMode.MULTIRUN:
        # a job's dir is <sweep dir>/<subdir>, the subdir made of the override values: a value with
        # "../" (kg.name=../../x) must not place the job's files outside the sweep dir
        inside(hc.sweep.dir, out_dir, f"hydra.sweep.subdir (here {hc.sweep.subdir!r}, made from the overrides)")
    try:
        _refuse_resume_without_run(hc.overrides.task, out_dir)
        check_run(cfg)  # an ablation a sweep axis or override would cancel: refused (kgreason/runner/compose.py)
        result = run(cfg, out_dir)
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: run() logged the one line (what was done, how to go on)
        if debug():
            raise
        # exit as a process killed by the signal would (130 for SIGINT, 143 for SIGTERM), without
        # the traceback through Hydra and the model library that would bury the line above
        raise SystemExit(128 + (e.signum if isinstance(e, RunInterrupted) else 2)) from None
    except RunDirLocked as e:  # another run writes this dir (a sweep's job too): stop at once, touch nothing
        restore_hydra_record(out_dir)  # the running launch's .hydra/, not this one's
        print(f"kgreason: error: {e}", file=sys.stderr)
        sys.exit(2)
    except Exception as e:  # noqa: BLE001 - re-raised, or told in a line or two (a user error)
        if getattr(e, "kgreason_stage", None) in (None, "startup", "claim"):
            restore_hydra_record(out_dir)  # this launch answered nothing: the dir's .hydra/ is the earlier one's
        missing = isinstance(e, FileNotFoundError) or "not found" in str(e) or "No such file" in str(e)
        hint = explain_missing(cfg, str(e)) if missing else None
        get = fetch_hint(cfg, hc.runtime.choices, str(e)) if missing else None
        if get:  # the catalog's line that gets the file (kgreason data fetch NAME / prepare NAME --from FILE)
            hint = f"{hint}\n{get}" if hint else get
        err = FileNotFoundError(f"{e}\n{hint}") if hint else e
        if single and not debug() and is_user_error(e):
            if hint is None:
                err = _unwrap(e)
            else:
                err = f"{_unwrap(e)}\n{hint}"
            # a configuration or data error: what, where, what to do; no traceback (--debug shows it)
            kept = _drop_empty_run_dir(out_dir)
            print(f"kgreason: error: {err}" + ("" if kept else "\n(nothing was run; no run dir kept)"),
                  file=sys.stderr)
            sys.exit(2)
        if not single and not debug() and is_user_error(e):
            # a sweep's job that could not run: marked failed (failed.json, read by tables/report); the
            # sweep goes on with its other jobs and ends with exit status 2 (compose.SweepCheck)
            from kgreason.preflight import PreflightError
            from kgreason.runner.run import complete_run_in

            reason = " ".join(_unwrap(e).split())
            if getattr(e, "kgreason_stage", None) is None and not complete_run_in(out_dir):
                # stopped before run(): the job dir is marked here
                stage = "startup" if isinstance(e, PreflightError) or not (out_dir / "predictions.jsonl").exists() else "run"
                failed_marker(out_dir, reason, stage)
            elif not (out_dir / "failed.json").exists():
                # run() refused the dir for what it already holds (another config, resume=false, a
                # finished run this attempt could not start on), or a check before run() stopped
                # the job on a finished run; the dir is as it was, and its rows are not a failed
                # run's. The sweep still ends with exit status 2 (SweepCheck).
                refused_marker(Path(hc.sweep.dir), out_dir, reason)
            print(f"kgreason: error: job #{hc.job.num}: {reason}", file=sys.stderr)
            return None
        if hint:
            raise err from e
        raise
    forget_hydra_record(out_dir)
    from kgreason.tables.summary import run_summary

    # the results table (kgreason/tables/summary.py); every figure is in metrics.json
    print(run_summary(out_dir, result.metrics, list(cfg.dataset.get("metrics") or []), _cache_cfg(cfg)), end="")
    key = cfg.get("optimized_metric")
    return result.metrics.get(key) if key else None
