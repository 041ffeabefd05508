"""Every job folder of a sweep is checked before Hydra writes anything (issue 44, item 4).

Hydra makes a multirun job's folder ``<hydra.sweep.dir>/<hydra.sweep.subdir>`` and writes the
job's ``.hydra/`` record there *before* the task function runs. kgreason's subdir is the job
number (conf/hydra/default.yaml, issue 71), so no override value reaches a folder name; Hydra's
own, which a user may still choose, is made of the job's override values
(``${hydra.job.num}_${hydra.job.override_dirname}``). With that one, a value with ``../``
(``kg.name=../../x``), an absolute or ``..`` ``hydra.sweep.subdir``, or a value too long for one
file name therefore used to write files outside the sweep, a typed API key among them, before
any check of ours could run.

:class:`SweepPathGuard` (a Hydra callback, ``conf/hydra/default.yaml``) runs at
``on_multirun_start``, before the sweeper and the launcher: it expands the sweep as Hydra's basic
sweeper does (the command line plus ``hydra.sweeper.params``), builds each job's subdir as Hydra
will, and passes it through :func:`kgreason.paths.safe_relative` (every part one safe path
component, byte length included) and :func:`kgreason.paths.inside`, and refuses a subdir that
would carry a secret typed as an override (a folder name is never scrubbed). The first job that fails
stops the whole sweep with one line (exit 2), with secret values scrubbed, and nothing written.
"""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from kgreason import secrets
from kgreason.paths import inside, safe_relative


class SweepRefused(ValueError):
    """A sweep job whose folder would not be one safe folder inside the sweep dir."""


def _job_overrides(config: Any) -> list[list[str]]:
    """The override list of every job, as Hydra's basic sweeper expands them."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    args = [str(x) for x in OmegaConf.to_container(config.hydra.overrides.task, resolve=False)]
    params = OmegaConf.select(config, "hydra.sweeper.params", default=None)
    if params:
        args = [f"{k}={v}" for k, v in OmegaConf.to_container(params, resolve=False).items()] + args
    parsed = OverridesParser.create().parse_overrides(args)
    return BasicSweeper.split_arguments(parsed, None)[0]


def _override_dirname(job: list[str], config: Any) -> str:
    """``hydra.job.override_dirname`` of a job, made as Hydra's config loader makes it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    od = OmegaConf.select(config, "hydra.job.config.override_dirname")
    exclude = set(OmegaConf.to_container(od.exclude_keys)) if od is not None else set()
    kv, item = (str(od.kv_sep), str(od.item_sep)) if od is not None else ("=", ",")
    lines = sorted(o.input_line for o in OverridesParser.create().parse_overrides(job)
                   if not o.is_hydra_override() and o.key_or_group not in exclude)
    return item.join(lines).replace("=", kv)


def _register_secrets(jobs: list[list[str]]) -> None:
    """Values typed for secret-looking keys (``+llm.api_key=...``): scrubbed from what we print."""
    for job in jobs:
        for o in job:
            key, _, value = o.lstrip("+~").partition("=")
            if secrets.SECRET_KEY.search(key.rsplit(".", 1)[-1]):
                secrets.register(value)


def job_subdir(config: Any, num: int, job: list[str], probe: Any = None) -> str:
    """``hydra.sweep.subdir`` of job ``num`` (overrides ``job``), made as Hydra will make it
    (``probe``: a copy of ``config`` to write into; one is made when not given)."""
    from omegaconf import OmegaConf, open_dict, read_write

    probe = copy.deepcopy(config) if probe is None else probe
    with read_write(probe.hydra), open_dict(probe.hydra):
        probe.hydra.job.num = num
        probe.hydra.job.id = num
        probe.hydra.job.override_dirname = _override_dirname(job, config)
    return str(OmegaConf.select(probe, "hydra.sweep.subdir"))


def sweep_layout(config: Any) -> list[tuple[list[str], str]]:
    """``(overrides, subdir)`` of every job of the sweep ``config`` launches, in launch order."""
    jobs = _job_overrides(config)
    probe = copy.deepcopy(config)
    return [(job, job_subdir(config, num, job, probe)) for num, job in enumerate(jobs)]


def check_sweep(config: Any) -> int:
    """Raise :class:`SweepRefused` naming the first job whose folder is not one safe folder
    inside ``hydra.sweep.dir``; returns the number of jobs checked."""
    from omegaconf import OmegaConf

    try:
        jobs = _job_overrides(config)
        sweep_dir = str(OmegaConf.select(config, "hydra.sweep.dir"))
        raw_subdir = str(OmegaConf.to_container(config.hydra.sweep, resolve=False).get("subdir"))
        probe = copy.deepcopy(config)
    except Exception:  # noqa: BLE001 - a sweep Hydra cannot parse or place is Hydra's to report
        return 0
    _register_secrets(jobs)
    for num, job in enumerate(jobs):
        try:
            subdir = job_subdir(config, num, job, probe)
        except Exception:  # noqa: BLE001 - an interpolation only the job can resolve: the run's own check
            continue
        if secrets.scrub(subdir) != subdir:  # a folder name is never scrubbed afterwards
            raise SweepRefused(f"hydra.sweep.subdir of job {num} ({secrets.scrub(subdir)!r}) would hold a secret "
                               "typed as an override in a folder name; give keys through their environment "
                               "variable (llm.api_key_env=NAME) instead")
        try:
            safe_relative(subdir, "hydra.sweep.subdir")
            inside(sweep_dir, Path(sweep_dir) / subdir, "hydra.sweep.subdir")
        except ValueError as e:
            made = "" if subdir == raw_subdir else f" (job {num}'s folder, made from its overrides: {' '.join(job)})"
            raise SweepRefused(str(e).replace("; nothing is written or deleted there", "") + made) from None
    return len(jobs)


def _makeable(path: Path, field: str) -> None:
    """A ValueError naming ``field`` when ``path`` cannot be a folder: it is a file, or its
    nearest existing parent is a file or not writable (Hydra would stop on ``mkdir`` with a
    traceback, before any kgreason code runs)."""
    if path.exists():
        if not path.is_dir():
            raise ValueError(f"{field}={path}: it is a file, not a folder")
        return
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"{field}={path} cannot be made: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{field}={path} cannot be made: {parent} is not writable by this user")


def check_job_paths(config: Any, job_dir: str | Path, field: str) -> None:
    """Raise a ValueError (one line) when a file Hydra writes for a job would land outside its
    folder ``job_dir`` (issue 57, L11): ``hydra.job.name`` names the log (``<name>.log``) and must
    be one safe file name; ``hydra.output_subdir`` (the ``.hydra/`` record; null: none) must be
    a folder inside the job's. Also refuses a ``job_dir`` (``field``) that cannot be made."""
    from omegaconf import OmegaConf

    from kgreason.paths import safe_component

    name = OmegaConf.select(config, "hydra.job.name")
    if name is not None:
        safe_component(str(name), "hydra.job.name")
    sub = OmegaConf.select(config, "hydra.output_subdir")
    job_dir = Path(str(job_dir))
    if sub is not None:
        if str(sub).startswith(("/", "~")) or ".." in Path(str(sub)).parts:
            raise ValueError(f"hydra.output_subdir={sub!r} cannot be used: a folder inside the run dir is expected "
                             "(no absolute path, no '..')")
        inside(job_dir, job_dir / str(sub), "hydra.output_subdir")
    _makeable(job_dir, field)


class SweepPathGuard(Callback):
    """Hydra callback: :func:`check_sweep` before the first job's folder is made; before a single
    run, :func:`check_job_paths` (the same checks of Hydra's own names for each job of a sweep)."""

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        try:
            check_job_paths(config, str(config.hydra.run.dir), "hydra.run.dir")
        except ValueError as e:
            print(secrets.scrub(f"kgreason: error: {e}; nothing was written"), file=sys.stderr)
            sys.exit(2)

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        try:
            check_job_paths(config, str(config.hydra.sweep.dir), "hydra.sweep.dir")
            n = check_sweep(config)
        except (SweepRefused, ValueError) as e:
            print(secrets.scrub(f"kgreason: error: {e}. The sweep did not start; nothing was written."),
                  file=sys.stderr)
            sys.exit(2)
        del n
