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
        other: ``(m,)`` int32 entity at the other end of each triple (tails for ``out``).
        rels: ``(m,)`` int32 relation ids; rel_mask: ``(R,)`` bool, used when ``use_mask``.
        tmask: ``(m,)`` bool, set True for activated triples (boolean ``q·SUB``).
        emask: ``(n,)`` bool, set True for reached entities (boolean ``t·OBJ``).
    """
    for i in range(active.shape[0]):
        e = active[i]
        for p in range(indptr[e], indptr[e + 1]):
            t = order[p]
            if use_mask and not rel_mask[rels[t]]:
                continue
            tmask[t] = True
            emask[other[t]] = True


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
        kg = self.kg
        out_ptr, out_ord = kg.out_csr
        in_ptr, in_ord = kg.in_csr
        return {
            Direction.OUT: (np.ascontiguousarray(out_ptr, dtype=np.int64), np.ascontiguousarray(out_ord, dtype=np.int32),
                            np.ascontiguousarray(kg.tails)),
            Direction.IN: (np.ascontiguousarray(in_ptr, dtype=np.int64), np.ascontiguousarray(in_ord, dtype=np.int32),
                           np.ascontiguousarray(kg.heads)),
        }

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
            indptr, order, other = self._arrays[d]
            _mark(indptr, order, act, other, self._rels, mask, use, tmask, emask)
        return np.flatnonzero(tmask).astype(np.int64), np.flatnonzero(emask).astype(np.int32)

    @cached_property
    def _rels(self) -> np.ndarray:
        return np.ascontiguousarray(self.kg.rels)
