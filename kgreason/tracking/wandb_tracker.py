"""Weights & Biases tracker: mirrors a run dir into a W&B run (offline by default).

The run dir stays the source of truth (``metrics.json``, ``predictions.jsonl``, ``hops.json``);
this tracker copies them into W&B so sweeps can be browsed and compared:

* the run record (``run.json``, via :meth:`WandbTracker.log_config`: resolved config without
  secrets, group choices, git, versions, data file hashes) → ``run.config``; W&B's own git
  capture is on too;
* scalar metrics → ``run.log`` and ``run.summary``;
* tables (per-example predictions, hop table, judge attributes) → ``wandb.Table``;
* the hop distribution → a ``wandb.Histogram`` over the numeric buckets plus a bucket/count
  ``wandb.Table`` (which also holds ``unreachable``/``unlinked``);
* images (``hops.png``) → ``wandb.Image``.

Offline runs land in ``<out_dir>/wandb/offline-run-*``; upload later with ``wandb sync``.
Jobs of one Hydra multirun share a W&B *group* (the sweep dir's name) unless ``group`` is set.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from kgreason.textio import utf8_safe


def _default_group() -> str | None:
    """The Hydra sweep dir's name when running under ``--multirun`` (one group per sweep)."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
        if hc.mode == RunMode.MULTIRUN:
            return group_from_sweep_dir(str(hc.sweep.dir))
    except Exception:  # noqa: BLE001 - not inside a Hydra app
        return None
    return None


def group_from_sweep_dir(sweep_dir: str) -> str:
    """``outputs/multirun/2026-11-23/06-45-00`` → ``2026-11-23_06-45-00`` (last two parts)."""
    parts = [p for p in Path(sweep_dir).parts if p not in ("/", "")]
    return "_".join(parts[-2:]) if parts else "multirun"


def _cell(v: Any) -> Any:
    if isinstance(v, str):
        return utf8_safe(v)
    if v is None or isinstance(v, (bool, int)):
        return v
    if isinstance(v, float):
        return None if math.isnan(v) else v
    try:
        return utf8_safe(json.dumps(v, ensure_ascii=False, default=str))
    except TypeError:
        return str(v)


class WandbTracker:
    """Tracker (see :class:`kgreason.tracking.base.Tracker`) backed by a W&B run.

    Args:
        out_dir: the run dir; W&B writes to ``<out_dir>/wandb``.
        run_config: the resolved, secret-scrubbed run config.
        project: W&B project.
        group: W&B group; ``None`` = the Hydra sweep dir name under ``--multirun``, else none.
        tags: W&B tags.
        mode: ``offline`` (default) | ``online`` | ``disabled``.
        name: run display name; ``None`` = the run dir's name (the Hydra job subdir).
        entity: W&B entity (team/user), ``None`` = the default.
        job_type: W&B job type.
        notes: free text shown in the W&B UI.
    """

    def __init__(self, out_dir: str, run_config: Mapping[str, Any] | None = None, project: str = "kgreason",
                 group: str | None = None, tags: Sequence[str] = (), mode: str = "offline",
                 name: str | None = None, entity: str | None = None, job_type: str | None = "eval",
                 notes: str | None = None, **_: Any) -> None:
        try:
            import wandb
        except ImportError as e:  # pragma: no cover - wandb is a core dependency
            raise ImportError("tracking=wandb needs the `wandb` package (pip install wandb), "
                              "or choose tracking=jsonl / tracking=none") from e
        self._wandb = wandb
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        mode = str(mode or os.environ.get("WANDB_MODE", "offline"))
        # W&B's own git capture is on (commit, remote, in the run's metadata), next to run.json's
        settings = wandb.Settings(x_disable_stats=True, x_disable_meta=False, console="off", save_code=False,
                                  disable_git=False, disable_job_creation=True, reinit="create_new",
                                  silent=True)
        self.run = wandb.init(
            dir=str(self.out_dir), project=project, entity=entity, group=group or _default_group(),
            tags=[str(t) for t in (tags or ())] or None, name=name or self.out_dir.resolve().name,
            job_type=job_type, notes=notes, mode=mode, config=dict(run_config or {}), settings=settings,
        )
        self._closed = False

    def log_config(self, record: Mapping[str, Any]) -> None:
        """The run record (``run.json``: resolved config, group choices, git, versions, data file
        hashes, fingerprint, preflight figures) into the W&B run's config."""
        self.run.config.update(dict(record), allow_val_change=True)

    @property
    def run_dir(self) -> Path | None:
        """The offline run directory (``<out_dir>/wandb/offline-run-*``)."""
        d = getattr(self.run, "dir", None)  # .../files
        return Path(d).parent if d else None

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        clean = {str(k): float(v) for k, v in metrics.items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool)}
        self.run.log(clean, step=step)
        self.run.summary.update(clean)

    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        rows = list(rows)
        columns: list[str] = []
        for r in rows:
            columns.extend(k for k in r if k not in columns)
        data = [[_cell(r.get(c)) for c in columns] for r in rows]
        self.run.log({name: self._wandb.Table(columns=columns or ["empty"], data=data if columns else [])})

    def log_histogram(self, name: str, counts: Mapping[str, int]) -> None:
        import numpy as np

        wandb = self._wandb
        numeric = sorted((int(k), int(v)) for k, v in counts.items() if str(k).lstrip("-").isdigit())
        payload: dict[str, Any] = {}
        if numeric:
            values = np.array([v for _, v in numeric], dtype=np.int64)
            keys = [k for k, _ in numeric]
            edges = np.array(keys + [keys[-1] + 1], dtype=np.float64) - 0.5
            if np.all(np.diff(edges) > 0):
                payload[name] = wandb.Histogram(np_histogram=(values, edges))
        table = wandb.Table(columns=["bucket", "count"], data=[[str(k), int(v)] for k, v in counts.items()])
        payload[f"{name}_table"] = table
        payload[f"{name}_bar"] = wandb.plot.bar(table, "bucket", "count", title=name)
        self.run.log(payload)

    def log_image(self, name: str, path: str) -> None:
        if Path(path).exists():
            self.run.log({name: self._wandb.Image(str(path))})

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.run.finish()
