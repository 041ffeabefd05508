"""Hydra callbacks of every kgreason run (wired in ``conf/hydra/default.yaml``).

* At the start of a sweep: a SIGTERM to the sweep's own process also ends the launcher's worker
  processes (joblib/loky kept them alive, idle, about 1 GB each with a model loaded), then exits as
  a terminated process would. Each job's own run writes its partial metrics on the SIGTERM it gets.
* At the end of a sweep: the sweep dir and the commands that turn it into tables, since
  ``kgreason tables`` and ``kgreason report`` need that dir and Hydra never prints it.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
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
    d = shlex.quote(str(sweep_dir))
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
