"""The Hydra app behind ``kgreason [group=option ...]`` (and ``python -m kgreason``): compose
dataset × kg × retriever × reasoner × llm and run. ``kgreason TOOL ...`` runs a tool instead
(``kgreason --help`` lists both; the dispatch lives in :mod:`kgreason.cli`).

The configs are the clone's ``conf/`` when run from a checkout and the copy shipped inside the
wheel (``kgreason/conf``) when installed (:func:`kgreason.paths.config_dir`).
"""

from __future__ import annotations

import os
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from kgreason.paths import config_dir, explain_missing, inside

os.environ.setdefault("WANDB_MODE", "offline")
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


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="config")
def main(cfg: DictConfig) -> float | None:
    set_hub_mode(cfg)
    from kgreason.run import run
    from kgreason.secrets import scrub_std_streams

    scrub_std_streams()  # Hydra prints a failed job's overrides to stderr, secrets included

    from kgreason.run import RunInterrupted

    out_dir = Path(HydraConfig.get().runtime.output_dir)
    hc = HydraConfig.get()
    if str(hc.mode) == "RunMode.MULTIRUN":
        # a job's dir is <sweep dir>/<subdir>, the subdir made of the override values: a value with
        # "../" (kg.name=../../x) must not place the job's files outside the sweep dir
        inside(hc.sweep.dir, out_dir, f"hydra.sweep.subdir (here {hc.sweep.subdir!r}, made from the overrides)")
    try:
        result = run(cfg, out_dir)
    except RunInterrupted as e:  # SIGTERM: logged and summed up by run(); exit as a terminated process would
        raise SystemExit(128 + e.signum) from None
    except Exception as e:  # noqa: BLE001 - re-raised; a missing input file gets a hint first
        missing = isinstance(e, FileNotFoundError) or "not found" in str(e) or "No such file" in str(e)
        hint = explain_missing(cfg, str(e)) if missing else None
        if hint:
            raise FileNotFoundError(f"{e}\n{hint}") from e
        raise
    print(f"run dir: {out_dir}")
    for k, v in result.metrics.items():
        if k.startswith(("metric/", "run/error_rate", "llm/calls", "judge/pdsqi_average")):
            print(f"  {k}: {v}")
    key = cfg.get("optimized_metric")
    return result.metrics.get(key) if key else None
