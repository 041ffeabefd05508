"""``python -m kgreason.bench [kg=embedded] [backends=[scipy,numba]] [hops=[1,2]] [out=b.json]``."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="../../conf", config_name="bench/config")
def main(cfg: DictConfig) -> None:
    from kgreason.bench.retrieval import run_bench

    run_bench(cfg)


if __name__ == "__main__":
    main()
