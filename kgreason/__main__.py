"""``python -m kgreason [group=option ...]``: compose dataset × kg × retriever × reasoner × llm and run."""

from __future__ import annotations

import os
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float | None:
    from kgreason.run import run
    from kgreason.secrets import scrub_std_streams

    scrub_std_streams()  # Hydra prints a failed job's overrides to stderr, secrets included

    out_dir = Path(HydraConfig.get().runtime.output_dir)
    result = run(cfg, out_dir)
    print(f"run dir: {out_dir}")
    for k, v in result.metrics.items():
        if k.startswith(("metric/", "run/error_rate", "llm/calls", "judge/pdsqi_total")):
            print(f"  {k}: {v}")
    key = cfg.get("optimized_metric")
    return result.metrics.get(key) if key else None


if __name__ == "__main__":
    main()
