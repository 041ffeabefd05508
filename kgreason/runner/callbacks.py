"""Hydra callbacks of every kgreason run (wired in ``conf/hydra/default.yaml``).

* At the start of a sweep: a SIGTERM to the sweep's own process also ends the launcher's worker
  processes (joblib/loky kept them alive, idle, about 1 GB each with a model loaded), then exits as
  a terminated process would. Each job's own run writes its partial metrics on the SIGTERM it gets.
* At the end of a sweep: the sweep dir and the commands that turn it into tables, since
  ``kgreason tables`` and ``kgreason report`` need that dir and Hydra never prints it.
* Before a run or a sweep: the ``.hydra/*.yaml`` of every run dir it will write into, as they
  are (``KeepHydraRecord``). Hydra rewrites them before any kgreason code runs, so a launch that
  kgreason then refuses the dir (another config, its lock held, a start-up check) would leave its
  own config beside rows it never wrote; they are put back as they were. A sweep whose every
  job was refused also gets its ``multirun.yaml`` back.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig


def end_workers(timeout: float = 5.0) -> int:
    """End this process's child processes (the launcher's workers and what they started): SIGTERM,
    then SIGKILL for those still alive after ``timeout`` s. Returns how many there were. Called from
    a signal handler, so it takes no lock of the launcher's (the executor's own shutdown may hold one)."""
    import psutil

    try:
        kids = psutil.Process().children(recursive=True)
    except psutil.Error:
        return 0
    for k in kids:
        try:
            k.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(kids, timeout=timeout)
    for k in alive:
        try:
            k.kill()
        except psutil.Error:
            pass
    return len(kids)


def next_steps(sweep_dir: str) -> str:
    """The sweep's last lines: its dir (relative to the working directory when inside it, as the
    README writes it) and the tables/report commands for it."""
    from kgreason.paths import shown

    sweep_dir = shown(sweep_dir)
    d = shlex.quote(sweep_dir)
    return (f"sweep dir: {sweep_dir}\n"
            f"  tables: kgreason tables {d}\n"
            f"  report: kgreason report {d}")


class SweepCallbacks(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        def stop(signum, frame):  # noqa: ARG001
            n = end_workers()
            print(f"kgreason: sweep stopped by {signal.Signals(signum).name}"
                  + (f"; ended {n} worker process(es)" if n else "")
                  + f"; finished jobs are kept in {config.hydra.sweep.dir}", file=sys.stderr)
            os._exit(128 + signum)

        for s in (signal.SIGTERM,):
            try:
                signal.signal(s, stop)
            except ValueError:  # not the main thread (a sweep run from inside another program)
                pass

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        print(next_steps(config.hydra.sweep.dir))


#: in a sweep dir: one JSON line per job that kgreason refused to run on its dir because of what the
#: dir held (it is left as it was, so it gets no failed.json); read by compose.SweepCheck for the
#: exit status and by KeepHydraRecord, which puts each such job's .hydra/ back
REFUSED = "refused_jobs.jsonl"

#: run dir (resolved) -> its ``.hydra/*.yaml`` (name -> bytes) before this launch's Hydra rewrote them
_HYDRA_BEFORE: dict[str, dict[str, bytes]] = {}


def _key(run_dir: str | Path) -> str:
    return str(Path(run_dir).resolve())


def keep_hydra_record(run_dir: str | Path) -> bool:
    """Remember ``<run_dir>/.hydra/*.yaml`` as they are now (a dir an earlier launch made).
    Returns whether there was anything to keep."""
    _HYDRA_BEFORE.pop(_key(run_dir), None)  # never an earlier launch's copy (one process, many runs)
    d = Path(run_dir) / ".hydra"
    try:
        files = {p.name: p.read_bytes() for p in sorted(d.glob("*.yaml")) if p.is_file()}
    except OSError:
        return False
    if files:
        _HYDRA_BEFORE[_key(run_dir)] = files
    return bool(files)


def restore_hydra_record(run_dir: str | Path) -> bool:
    """Put ``<run_dir>/.hydra/*.yaml`` back as :func:`keep_hydra_record` found them, for a launch
    that did not run (refused the dir, or stopped before its first example). Returns whether
    anything was put back (False for a dir no earlier launch had made)."""
    files = _HYDRA_BEFORE.pop(_key(run_dir), None)
    if not files:
        return False
    d = Path(run_dir) / ".hydra"
    for p in d.glob("*.yaml"):
        if p.name not in files:  # written by this launch only
            p.unlink(missing_ok=True)
    for name, data in files.items():
        tmp = d / (name + ".tmp")
        tmp.write_bytes(data)
        tmp.replace(d / name)
    return True


#: run dir (resolved) -> the names it held before this launch (``None``: the dir was not there)
_ENTRIES_BEFORE: dict[str, frozenset[str] | None] = {}


def note_entries(run_dir: str | Path) -> None:
    """Remember what ``run_dir`` holds before Hydra makes it or writes into it, so that a start
    refused later removes only what this launch made (:func:`made_by_this_launch`)."""
    try:
        _ENTRIES_BEFORE[_key(run_dir)] = frozenset(p.name for p in Path(run_dir).iterdir())
    except FileNotFoundError:
        _ENTRIES_BEFORE[_key(run_dir)] = None
    except OSError:
        _ENTRIES_BEFORE[_key(run_dir)] = frozenset({"?"})  # unreadable: treat it as an earlier dir


def made_by_this_launch(run_dir: str | Path) -> tuple[bool, frozenset[str]] | None:
    """``(dir made by this launch, names it held before)`` as :func:`note_entries` saw them;
    ``None`` when nothing was noted (a run started outside the Hydra app)."""
    key = _key(run_dir)
    if key not in _ENTRIES_BEFORE:
        return None
    before = _ENTRIES_BEFORE[key]
    return (before is None, before or frozenset())


def forget_hydra_record(run_dir: str | Path) -> None:
    """The launch runs on the dir: what Hydra wrote for it is the dir's record now."""
    _HYDRA_BEFORE.pop(_key(run_dir), None)


class KeepHydraRecord(Callback):
    """Keeps each run dir's ``.hydra/`` before Hydra rewrites it (see the module docstring).

    A single run: kept here, put back by ``app.main`` when the launch does not run. A sweep's
    jobs may run in other processes (the joblib launcher), so each refused job is named in
    ``<sweep dir>/refused_jobs.jsonl`` (kgreason/runner/compose.py) and put back here at the sweep's end;
    registered after ``SweepCheck``, this runs before its exit status is decided."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        note_entries(str(config.hydra.run.dir))
        keep_hydra_record(str(config.hydra.run.dir))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        import time

        self._t0 = time.time() - 1.0
        root = Path(str(config.hydra.sweep.dir))
        self._multirun: bytes | None = None  # the sweep's multirun.yaml, which Hydra rewrites next
        if root.is_dir():
            try:
                self._multirun = (root / "multirun.yaml").read_bytes()
            except OSError:
                pass
            for h in root.rglob(".hydra"):
                if h.is_dir():
                    keep_hydra_record(h.parent)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        root = Path(str(config.hydra.sweep.dir))
        t0 = getattr(self, "_t0", 0.0)
        try:
            lines = (root / REFUSED).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            lines = []
        refused: set[Path] = set()
        for line in lines:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if isinstance(r, dict) and float(r.get("time") or 0) >= t0 and r.get("dir"):
                job = (root / str(r["dir"])).resolve()
                if job.is_relative_to(root.resolve()):
                    refused.add(job)
        # the jobs this launch started: Hydra wrote their .hydra/ since the sweep began
        launched = {h.parent.resolve() for h in root.rglob(".hydra")
                    if any(p.stat().st_mtime >= t0 for p in h.glob("*.yaml"))} if root.is_dir() else set()
        for job in refused:
            restore_hydra_record(job)
        if getattr(self, "_multirun", None) is not None and refused and launched <= refused:
            # every job was refused its dir: nothing of this launch ran, so the sweep's record
            # stays the launch's that made the jobs (Hydra wrote this one's before any job); with
            # no refusal nothing is put back (jobs without .hydra/, hydra.output_subdir=null, ran)
            tmp = root / "multirun.yaml.tmp"
            tmp.write_bytes(self._multirun)
            tmp.replace(root / "multirun.yaml")


def unfinished_twin(config: DictConfig) -> tuple[Path, int] | None:
    """The latest unfinished run of the same configuration as this launch (``(dir, rows)``), when
    this launch would start a new run dir of the default layout: ``hydra.run.dir`` not given on
    the command line, the dir it names not there yet, and ``resume`` not false. The run dirs
    looked at are those beside the new one's day folder (``<output>/runs/*/*``); a dir another
    process holds is skipped (kgreason/runs.py ``unfinished_run``)."""
    import copy

    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf, open_dict, read_write

    from kgreason.record import fingerprint
    from kgreason.runs import unfinished_run

    given = [str(o) for o in OmegaConf.to_container(config.hydra.overrides.hydra, resolve=False)]
    if any(o.lstrip("+~").split("=", 1)[0] == "hydra.run.dir" for o in given):
        return None
    if not config.get("resume", True):
        return None
    new = Path(str(config.hydra.run.dir))
    if new.exists():
        return None
    HydraConfig.instance().set_config(config)  # the task config may read ${hydra:...}
    task = copy.deepcopy(config)
    with read_write(task), open_dict(task):
        del task["hydra"]  # as Hydra hands the config to the run (fingerprint.json was made from that)
    digest, _ = fingerprint(task)
    found = []
    for fp in new.parent.parent.glob("*/*/fingerprint.json"):
        rows = unfinished_run(fp.parent, digest)
        if rows is not None:
            mtimes = [p.stat().st_mtime for p in (fp.parent / "predictions.jsonl", fp) if p.exists()]
            found.append((max(mtimes), fp.parent, rows))
    if not found:
        return None
    _, d, rows = max(found, key=lambda t: (t[0], str(t[1])))
    return d, rows


def _launch_record(config: DictConfig) -> tuple[list[str], Any, Any]:
    """What makes two launches one sweep: the command line's task overrides, the sweeper's
    params (a preset's axes) and the job folder template, unresolved."""
    from omegaconf import OmegaConf

    task = [str(o) for o in OmegaConf.to_container(config.hydra.overrides.task, resolve=False)]
    params = OmegaConf.select(config, "hydra.sweeper.params", default=None)
    params = OmegaConf.to_container(params, resolve=False) if params is not None else None
    subdir = OmegaConf.to_container(config.hydra.sweep, resolve=False).get("subdir")
    return task, params or None, subdir


def _file_record(path: Path) -> tuple[list[str], Any, Any] | None:
    """:func:`_launch_record` of the sweep whose ``multirun.yaml`` is ``path`` (read as plain YAML,
    interpolations left as text, as Hydra saved them: fast enough for a folder of many sweeps);
    None for a file that is not a sweep's record."""
    import yaml

    try:
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        hy = doc["hydra"]
        task = [str(o) for o in hy["overrides"]["task"]]
        params = (hy.get("sweeper") or {}).get("params") or None
        return task, params, (hy.get("sweep") or {}).get("subdir")
    except Exception:  # noqa: BLE001 - a damaged or foreign multirun.yaml is not this sweep's
        return None


def _job_digest(config: DictConfig, job: list[str]) -> str | None:
    """The config fingerprint of one job of the sweep (as its run will record it in
    fingerprint.json), or None where it cannot be composed here."""
    import copy

    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict, read_write

    from kgreason.record import fingerprint

    if not GlobalHydra.instance().is_initialized():
        return None
    try:
        job_cfg = GlobalHydra.instance().config_loader().load_sweep_config(config, list(job))
        HydraConfig.instance().set_config(job_cfg)  # the task config may read ${hydra:...}
        task = copy.deepcopy(job_cfg)
        with read_write(task), open_dict(task):
            del task["hydra"]
        return fingerprint(task)[0]
    except Exception:  # noqa: BLE001 - a job only its own run can compose: its run's guard checks it
        return None
    finally:
        HydraConfig.instance().set_config(config)


def _sweep_state(config: DictConfig, sweep_dir: Path, layout: list[tuple[list[str], str]]) -> int | None:
    """How many of the sweep's jobs ``sweep_dir`` holds finished, when it is unfinished and this
    launch can go on in it: some job has no complete ``metrics.json`` (or a ``failed.json``), no
    live process holds any job dir, and every job dir that holds a run holds this launch's
    configuration of that job (its ``fingerprint.json``); else None."""
    from kgreason.runs import dir_in_use, finished_run

    done = 0
    for job, sub in layout:
        d = sweep_dir / sub
        if not d.is_dir():
            continue
        if dir_in_use(d):
            return None
        try:
            fp = json.loads((d / "fingerprint.json").read_text(encoding="utf-8")).get("sha256")
        except (OSError, ValueError, AttributeError):
            fp = None
        if fp is not None:
            digest = _job_digest(config, job)
            if digest is not None and digest != fp:
                return None  # another configuration of this job (changed defaults): not this sweep any more
        done += finished_run(d)
    return done if done < len(layout) else None


def unfinished_sweep(config: DictConfig) -> tuple[Path, int] | None:
    """The newest unfinished sweep of the same overrides as this ``--multirun`` launch
    (``(sweep dir, jobs finished)``), when the launch would start a new sweep dir of the default
    layout: ``hydra.sweep.dir`` not given on the command line, the dir it names not there yet, and
    ``resume`` not false. The sweep dirs looked at are those beside the new one's day folder
    (``<output>/multirun/*/*``, each with the ``multirun.yaml`` Hydra wrote when it started):
    the same task overrides, sweeper params and job folder template, and a state
    :func:`_sweep_state` accepts (unfinished, not running, the same configuration per job)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from kgreason.runner.sweepguard import sweep_layout

    given = [str(o) for o in OmegaConf.to_container(config.hydra.overrides.hydra, resolve=False)]
    if any(o.lstrip("+~").split("=", 1)[0] == "hydra.sweep.dir" for o in given):
        return None
    if not config.get("resume", True):
        return None
    HydraConfig.instance().set_config(config)  # ${hydra:...} in the sweep dir's name
    new = Path(str(config.hydra.sweep.dir))
    if new.exists():
        return None
    mine = _launch_record(config)
    found = []
    for rec in new.parent.parent.glob("*/*/multirun.yaml"):
        if _file_record(rec) == mine:
            found.append((rec.stat().st_mtime, rec.parent))
    if not found:
        return None
    layout = sweep_layout(config)
    for _, d in sorted(found, key=lambda t: (t[0], str(t[1])), reverse=True):
        done = _sweep_state(config, d, layout)
        if done is not None:
            return d, done
    return None


class GoOn(Callback):
    """The same command again goes on with the latest unfinished run of the same configuration
    (:func:`unfinished_twin`) instead of starting a new run dir beside it: Hydra is pointed at
    that dir before it makes or writes anything, so no empty new dir is left. One line says so;
    ``resume=false`` (or an explicit ``hydra.run.dir``) starts a new dir instead. Runs before
    ``KeepHydraRecord``, so the kept ``.hydra/`` is the resumed dir's.

    A ``--multirun`` launch does the same with the newest unfinished sweep of the same overrides
    (:func:`unfinished_sweep`): its jobs go to that sweep's job dirs, where each job's run
    resumes (a finished job rewrites its figures without a model call; a stopped one answers only
    the examples it has left). The sweep dir is given to Hydra as a ``hydra.sweep.dir`` override,
    since each job's config is composed again from the launch's overrides."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from hydra.core.hydra_config import HydraConfig
        from omegaconf import open_dict, read_write

        from kgreason.paths import hydra_quote, shown

        try:
            found = unfinished_sweep(config)
        except Exception:  # noqa: BLE001 - a sweep this check cannot expand: the sweep reports it itself
            return
        if found is None:
            return
        d, done = found
        print(f"kgreason: going on with the unfinished sweep of these overrides in {shown(d)} ({done} job(s) finished); "
              "resume=false starts a new sweep dir instead", file=sys.stderr)
        with read_write(config.hydra), open_dict(config.hydra):
            config.hydra.sweep.dir = str(d)
            config.hydra.overrides.hydra.append(f"hydra.sweep.dir={hydra_quote(str(d))}")
        HydraConfig.instance().set_config(config)

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from omegaconf import open_dict, read_write

        try:
            twin = unfinished_twin(config)
        except Exception:  # noqa: BLE001 - a config this check cannot resolve: the run reports it itself
            return
        if twin is None:
            return
        d, rows = twin
        from kgreason.paths import shown

        print(f"kgreason: going on with the unfinished run of this configuration in {shown(d)} ({rows} rows written); "
              "resume=false starts a new run dir instead", file=sys.stderr)
        with read_write(config.hydra.run), open_dict(config.hydra.run):
            config.hydra.run.dir = str(d)
