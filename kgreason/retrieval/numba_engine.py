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
def _expand(indptr, order, active, other, rels, rel_mask, use_mask, seen):  # pragma: no cover - jitted
    """Triples leaving ``active`` through CSR ``(indptr, order)`` and the entities they reach.

    Args:
        indptr: ``(n+1,)`` int64 CSR offsets; order: ``(m,)`` int32 triple ids grouped by key.
        active: ``(a,)`` int32 sorted unique entity ids.
        other: ``(m,)`` int32 entity at the other end of each triple (tails for ``out``).
        rels: ``(m,)`` int32 relation ids; rel_mask: ``(R,)`` bool, used when ``use_mask``.
        seen: ``(n,)`` bool scratch mask, all False on entry and on exit.

    Returns:
        ``(tids (t,) int64 unsorted, reached (r,) int32 unsorted unique)``.
    """
    total = 0
    for i in range(active.shape[0]):
        e = active[i]
        total += indptr[e + 1] - indptr[e]
    tids = np.empty(total, dtype=np.int64)
    reached = np.empty(total, dtype=np.int32)
    nt = 0
    nr = 0
    for i in range(active.shape[0]):
        e = active[i]
        for p in range(indptr[e], indptr[e + 1]):
            t = order[p]
            if use_mask and not rel_mask[rels[t]]:
                continue
            tids[nt] = t
            nt += 1
            o = other[t]
            if not seen[o]:
                seen[o] = True
                reached[nr] = o
                nr += 1
    for i in range(nr):
        seen[reached[i]] = False
    return tids[:nt], reached[:nr]


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

    @cached_property
    def _scratch(self) -> np.ndarray:
        return np.zeros(self.kg.n_entities, dtype=np.bool_)

    def _one(self, d: Direction, active: np.ndarray, rel_mask):
        indptr, order, other = self._arrays[d]
        use = rel_mask is not None
        mask = rel_mask if use else np.zeros(1, dtype=np.bool_)
        tids, reached = _expand(indptr, order, np.ascontiguousarray(active, dtype=np.int32), other,
                                np.ascontiguousarray(self.kg.rels), mask, use, self._scratch)
        return tids, reached

    def _hop(self, active, rel_mask, deadline):
        if len(active) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
        if self.direction is Direction.BOTH:
            t1, e1 = self._one(Direction.OUT, active, rel_mask)
            t2, e2 = self._one(Direction.IN, active, rel_mask)
            return np.unique(np.concatenate([t1, t2])), np.unique(np.concatenate([e1, e2])).astype(np.int32)
        tids, reached = self._one(self.direction, active, rel_mask)
        tids.sort()
        reached.sort()
        return tids, reached
