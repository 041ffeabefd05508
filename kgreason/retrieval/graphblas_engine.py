"""python-graphblas baseline (logoskg.txt Table 2 "GraphBLAS"; SuiteSparse:GraphBLAS underneath).

One hop is LogosKG's pair of products in GraphBLAS's boolean ``any.pair`` semiring: the active
entities as a sparse boolean vector ``q``, ``t = q ⊕.⊗ SUB`` (the activated triples, Eq. 5),
an optional relation filter on ``t``, then ``q' = t ⊕.⊗ OBJ`` (Eq. 4). For ``in`` the roles of
SUB and OBJ swap (their transposes); ``both`` is the union. The visited set and the semantics
are the shared hop loop of :class:`~kgreason.retrieval.base.GraphRetriever`. ``graphblas`` is an
optional dependency (``pip install kgreason[graphblas]``), imported when the engine is built.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from kgreason.retrieval.base import Direction, GraphRetriever


def _gb():
    try:
        import graphblas
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError("GraphBLASRetriever needs python-graphblas: pip install 'kgreason[graphblas]' "
                          "(or pip install python-graphblas)") from e
    return graphblas


class GraphBLASRetriever(GraphRetriever):
    """k-hop retrieval with python-graphblas sparse boolean vector × matrix products.

    >>> from kgreason.kg.store import KG
    >>> kg = KG.from_triples([("A", "r", "B"), ("B", "r", "C")])
    >>> GraphBLASRetriever(kg).retrieve([0], 2).entities().tolist()
    [1, 2]
    """

    name = "graphblas"

    def __init__(self, kg, **kw) -> None:
        super().__init__(kg, **kw)
        self._gbm = _gb()

    @cached_property
    def _mats(self):
        """Per direction ``(START, END)``: ``START`` (n × m) entity → triples it starts,
        ``END`` (m × n) triple → entity it reaches."""
        Matrix = self._gbm.Matrix
        kg = self.kg
        n, m = kg.n_entities, kg.n_triples
        tid = np.arange(m, dtype=np.int64)
        heads, tails = np.asarray(kg.heads, dtype=np.int64), np.asarray(kg.tails, dtype=np.int64)
        sub = Matrix.from_coo(heads, tid, True, nrows=n, ncols=m, dtype=bool)
        obj = Matrix.from_coo(tid, tails, True, nrows=m, ncols=n, dtype=bool)
        sub_t = Matrix.from_coo(tails, tid, True, nrows=n, ncols=m, dtype=bool)   # OBJᵀ
        obj_t = Matrix.from_coo(tid, heads, True, nrows=m, ncols=n, dtype=bool)   # SUBᵀ
        return {Direction.OUT: (sub, obj), Direction.IN: (sub_t, obj_t)}

    def _one(self, d, q, rel_mask):
        gb = self._gbm
        start, end = self._mats[d]
        t = q.vxm(start, gb.semiring.any_pair).new()
        if rel_mask is not None:
            tids, _ = t.to_coo(values=False)
            keep = tids[rel_mask[self.kg.rels[tids.astype(np.int64)]]]
            if len(keep) == 0:  # an empty from_coo with a scalar value is not an empty vector
                return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
            t = gb.Vector.from_coo(keep, True, size=self.kg.n_triples, dtype=bool)
        reached = t.vxm(end, gb.semiring.any_pair).new()
        return t.to_coo(values=False)[0].astype(np.int64), reached.to_coo(values=False)[0].astype(np.int32)

    def _hop(self, active, rel_mask, deadline):
        if len(active) == 0 or self.kg.n_triples == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
        q = self._gbm.Vector.from_coo(np.asarray(active, dtype=np.int64), True, size=self.kg.n_entities, dtype=bool)
        if self.direction is Direction.BOTH:
            t1, e1 = self._one(Direction.OUT, q, rel_mask)
            t2, e2 = self._one(Direction.IN, q, rel_mask)
            return np.union1d(t1, t2), np.union1d(e1, e2).astype(np.int32)
        return self._one(self.direction, q, rel_mask)
