"""The LogosKG authors' own library as an optional bench baseline (issue 22 point 4).

The library (``LogosKG/LogosKG.py`` in the authors' public repository, MIT) is never copied
into kgreason: the user clones it and points ``LOGOSKG_SRC`` at the checkout (the directory that
holds ``LogosKG/LogosKG.py``). :class:`LogosKGLibRetriever` builds the library's ``LogosKG``
object from the KG's integer triples (entity names = kgreason ids) and answers
``within``/``out`` queries with its ``retrieve_within_k_hop`` (k-hop neighbours following edges
head → tail) — the operation LogosKG Table 2 times. The 2026 release
(``LogosKG-Efficient-and-Scalable-Graph-Retrieval``) returns the seeds as part of its answer,
the 2025 one (``LogosKG``) leaves them out; the adapter removes them, so both give kgreason's
``within`` set (distance 1..k). The library returns only the union of the layers, so the
``Subgraph`` holds that union as a single layer and no triples; it has no time limit of its own,
so a query is marked ``timed_out`` afterwards when it ran past ``timeout_ms``.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from kgreason.retrieval.base import Direction, GraphRetriever, Semantics
from kgreason.types import Subgraph

HOW_TO_GET = ("set LOGOSKG_SRC to a checkout of the LogosKG authors' library, e.g. "
              "`git clone https://github.com/Serendipity618/LogosKG-Efficient-and-Scalable-Graph-Retrieval "
              "../LogosKG && export LOGOSKG_SRC=../LogosKG` (the older "
              "https://github.com/Serendipity618/LogosKG works too; keep it outside this repository)")


def load_library(src: str | None = None):
    """The library's ``LogosKG`` class from ``src`` (default ``$LOGOSKG_SRC``), with a clear error."""
    src = src or os.environ.get("LOGOSKG_SRC")
    if not src:
        raise RuntimeError(f"backend logoskg_lib needs the LogosKG library: {HOW_TO_GET}")
    path = Path(src).expanduser()
    if not (path / "LogosKG" / "LogosKG.py").is_file():
        raise RuntimeError(f"LOGOSKG_SRC={src}: no LogosKG/LogosKG.py there; {HOW_TO_GET}")
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
    return importlib.import_module("LogosKG.LogosKG").LogosKG


class LogosKGLibRetriever(GraphRetriever):
    """The authors' ``LogosKG(...).retrieve_within_k_hop`` behind kgreason's retriever interface.

    Args:
        backend: the library's backend (``numba`` | ``scipy`` | ``torch``).
        device: the library's ``device`` for its torch backend (``cuda`` runs it on a GPU, as the
            H200 row of ``experiments/logoskg_table2/gpu_h200/`` did); ``None`` leaves the library's
            default. Refused with the other backends, which have no device.
        src: checkout path (default ``$LOGOSKG_SRC``).
        (others): see :class:`~kgreason.retrieval.base.GraphRetriever`; only ``within`` and
            ``out`` exist in the library, anything else is an error at construction.
    """

    name = "logoskg_lib"

    def __init__(self, kg, *, backend: str = "numba", device: str | None = None, src: str | None = None,
                 **kw) -> None:
        super().__init__(kg, **kw)
        if device is not None and backend != "torch":
            raise ValueError(f"logoskg_lib: device={device!r} needs backend=torch (the library's {backend} "
                             "backend runs on the CPU)")
        if self.semantics is not Semantics.WITHIN or self.direction is not Direction.OUT:
            raise ValueError("logoskg_lib: the library's retrieve_within_k_hop is semantics=within, "
                             f"direction=out; got {self.semantics.value}/{self.direction.value}")
        cls = load_library(src)
        triples = list(zip(np.asarray(kg.heads).tolist(), np.asarray(kg.rels).tolist(), np.asarray(kg.tails).tolist()))
        self.device = device
        self.lib = cls(triples, backend=backend) if device is None else cls(triples, backend=backend, device=device)

    def _hop(self, active, rel_mask, deadline):  # pragma: no cover - the library has no hop primitive
        raise NotImplementedError("logoskg_lib answers whole queries only")

    def retrieve(self, seeds: Sequence[int], hops: int, relations: Sequence[int] | None = None) -> Subgraph:
        if relations is not None:
            raise ValueError("logoskg_lib: the library has no relation filter")
        seeds_arr = np.unique(np.asarray(seeds, dtype=np.int32))
        t0 = time.perf_counter()
        got = self.lib.retrieve_within_k_hop([int(s) for s in seeds_arr], int(hops))
        elapsed_ms = (time.perf_counter() - t0) * 1000
        ents = np.setdiff1d(np.asarray(got, dtype=np.int32), seeds_arr)  # sorted, seeds removed
        timed_out = self.timeout_ms is not None and elapsed_ms > self.timeout_ms
        return Subgraph(seeds=seeds_arr, entities_by_hop=[ents], triples_by_hop=[], timed_out=timed_out)

    def answer_set(self, sub: Subgraph) -> np.ndarray:
        return sub.entities_by_hop[0] if sub.entities_by_hop else np.zeros(0, dtype=np.int32)
