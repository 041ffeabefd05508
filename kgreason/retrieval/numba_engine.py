"""Numba backend of the LogosKG engine (logoskg.txt §3.3, Table 2 "LogosKG (Numba)").

One hop is the sparse product ``t = q·SUB`` followed by ``q' = t·OBJ`` (Eq. 4–5), written as a
compiled loop over the KG's CSR index (``kg.out_csr`` groups triple ids by head, ``kg.in_csr``
by tail): for every active entity, walk its triple slice, keep the triples whose relation is
allowed, and mark the entity at the other end in a boolean mask (the boolean semiring of the
paper's products). Kernels are ``@njit(cache=True)``: the first call in a fresh environment
compiles (~1–2 s) and later processes load the cached machine code.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from kgreason.retrieval.base import Direction, GraphRetriever

try:  # numba is a core dependency; keep the import error readable if it is missing
    from numba import njit
except ImportError as e:  # pragma: no cover
    raise ImportError("NumbaRetriever needs numba (pip install numba)") from e


@njit(cache=True)
def _mark(indptr, order, active, other, rels, rel_mask, use_mask, tmask, emask):  # pragma: no cover - jitted
    """Mark the triples leaving ``active`` through CSR ``(indptr, order)`` and the entities they reach.

    Args:
        indptr: ``(n+1,)`` int64 CSR offsets; order: ``(m,)`` int32 triple ids grouped by key.
        active: ``(a,)`` int32 sorted unique entity ids.
        other: ``(m,)`` int32 entity at the other end of the triple at each CSR position
            (``tails[order]`` for ``out``), so the inner loop reads memory in order.
        rels: ``(m,)`` int32 relation id at each CSR position; rel_mask: ``(R,)`` bool, used when ``use_mask``.
        tmask: ``(m,)`` bool, set True for activated triples (boolean ``q·SUB``).
        emask: ``(n,)`` bool, set True for reached entities (boolean ``t·OBJ``).
    """
    for i in range(active.shape[0]):
        e = active[i]
        for p in range(indptr[e], indptr[e + 1]):
            if use_mask and not rel_mask[rels[p]]:
                continue
            tmask[order[p]] = True
            emask[other[p]] = True


@njit(cache=True)
def _gather(tids, heads, rels, tails, out):  # pragma: no cover - jitted
    """``out[i] = (heads[t], rels[t], tails[t])`` for ``t = tids[i]``: one pass, no temporaries."""
    for i in range(tids.shape[0]):
        t = tids[i]
        out[i, 0] = heads[t]
        out[i, 1] = rels[t]
        out[i, 2] = tails[t]


class NumbaRetriever(GraphRetriever):
    """k-hop retrieval with Numba-compiled CSR kernels (same semantics as every engine).

    >>> from kgreason.kg.store import KG
    >>> kg = KG.from_triples([("A", "r", "B"), ("B", "r", "C")])
    >>> NumbaRetriever(kg).retrieve([0], 2).entities().tolist()
    [1, 2]
    """

    name = "numba"

    @cached_property
    def _arrays(self):
        """Per direction: CSR offsets, triple ids in CSR order, and the far-end entity and
        relation of each CSR position (gathered once, so hops stream through memory)."""
        kg = self.kg
        out = {}
        for d, (ptr, order), far in ((Direction.OUT, kg.out_csr, kg.tails), (Direction.IN, kg.in_csr, kg.heads)):
            order = np.ascontiguousarray(order, dtype=np.int32)
            out[d] = (np.ascontiguousarray(ptr, dtype=np.int64), order,
                      np.ascontiguousarray(np.asarray(far)[order], dtype=np.int32),
                      np.ascontiguousarray(np.asarray(kg.rels)[order], dtype=np.int32))
        return out

    def _hop(self, active, rel_mask, deadline):
        kg = self.kg
        if len(active) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
        # fresh masks per hop: np.zeros is lazily zeroed memory and flatnonzero is a fast linear scan,
        # which beats sorting/uniquing the activated ids once a hop reaches a large part of the KG
        tmask = np.zeros(kg.n_triples, dtype=np.bool_)
        emask = np.zeros(kg.n_entities, dtype=np.bool_)
        use = rel_mask is not None
        mask = rel_mask if use else np.zeros(1, dtype=np.bool_)
        act = np.ascontiguousarray(active, dtype=np.int32)
        dirs = [Direction.OUT, Direction.IN] if self.direction is Direction.BOTH else [self.direction]
        for d in dirs:
            indptr, order, other, rels = self._arrays[d]
            _mark(indptr, order, act, other, rels, mask, use, tmask, emask)
        return np.flatnonzero(tmask).astype(np.int64, copy=False), np.flatnonzero(emask).astype(np.int32)

    def _triples(self, tids: np.ndarray) -> np.ndarray:
        out = np.empty((len(tids), 3), dtype=np.int32)
        if len(tids):
            _gather(np.ascontiguousarray(tids, dtype=np.int64), self._heads, self._rels, self._tails, out)
        return out

    @cached_property
    def _heads(self) -> np.ndarray:
        return np.ascontiguousarray(self.kg.heads, dtype=np.int32)

    @cached_property
    def _tails(self) -> np.ndarray:
        return np.ascontiguousarray(self.kg.tails, dtype=np.int32)

    @cached_property
    def _rels(self) -> np.ndarray:
        return np.ascontiguousarray(self.kg.rels, dtype=np.int32)
