"""``python -m kgreason.bench``: the retrieval bench (a Hydra app) or a named sub-bench.

* ``python -m kgreason.bench [kg=embedded] [backends=[scipy,numba]] [hops=[1,2]] [out=b.json]``
  runs the retrieval bench (LogosKG Tables 2–4; Hydra overrides, ``conf/bench/config.yaml``).
* ``python -m kgreason.bench NAME [args...]`` where ``NAME`` is a bare word (no ``=``, no
  leading ``-``) runs ``kgreason.bench.NAME.main(args)``, e.g. ``python -m kgreason.bench llm
  --which openai``, ``... dense_recall``, ``... dx_offline``. Any module of this package with a
  ``main(argv)`` is a subcommand, so new benches need no registration here.
  ``python -m kgreason.bench retrieval [overrides]`` is the Hydra app spelled out.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import sys

import hydra
from omegaconf import DictConfig

_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def subcommands() -> list[str]:
    """Names of the ``kgreason.bench`` modules (each a sub-bench; ``retrieval`` is the Hydra app)."""
    import kgreason.bench as pkg

    names = []
    for m in pkgutil.iter_modules(pkg.__path__):
        if m.name.startswith("_"):
            continue
        names.append(m.name)
    return sorted(names)


@hydra.main(version_base="1.3", config_path="../../conf", config_name="bench/config")
def main(cfg: DictConfig) -> None:
    from kgreason.bench.retrieval import run_bench

    run_bench(cfg)


def dispatch(argv: list[str]) -> int | None:
    """Run the sub-bench named by ``argv[1]``; ``None`` when ``argv`` is for the Hydra app."""
    if len(argv) < 2 or not _BARE.fullmatch(argv[1]):
        return None  # overrides (`kg=embedded`), flags (`--help`, `-m`) or nothing: the Hydra app
    name, rest = argv[1], argv[2:]
    if name == "retrieval":
        sys.argv = [argv[0], *rest]
        main()
        return 0
    if name.startswith("_") or name not in subcommands():
        print(f"python -m kgreason.bench: unknown sub-bench {name!r}; choose from "
              f"{', '.join(subcommands())}, or give Hydra overrides (key=value) for the retrieval bench",
              file=sys.stderr)
        return 2
    mod = importlib.import_module(f"kgreason.bench.{name}")
    fn = getattr(mod, "main", None)
    if not callable(fn):
        print(f"python -m kgreason.bench: kgreason.bench.{name} has no main(argv)", file=sys.stderr)
        return 2
    rc = fn(rest)
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":
    rc = dispatch(sys.argv)
    if rc is None:
        main()
    else:
        sys.exit(rc)
