"""SciPy backend of the LogosKG engine: one hop is ``t = q·SUB`` then ``q' = t·OBJ`` on CSR
matrices (logoskg.txt §3.3, Eq. 4–5), each product done as a row selection (cost ∝ the
activated triples, see :meth:`ScipyRetriever._one`). For ``in`` the transposes swap roles; ``both`` is the
union of the two."""

from __future__ import annotations

from functools import cached_property

import numpy as np
import scipy.sparse as sp

from kgreason.retrieval.base import Direction, GraphRetriever


class ScipyRetriever(GraphRetriever):
    """k-hop retrieval with SciPy sparse products.

    >>> from kgreason.kg.store import KG
    >>> kg = KG.from_triples([("A", "r", "B"), ("B", "r", "C")])
    >>> ScipyRetriever(kg).retrieve([0], 2).entities().tolist()
    [1, 2]
    """

    name = "scipy"

    @cached_property
    def _mats(self):
        """Per direction ``(START, END)`` as CSR: ``START`` (n × m) maps an entity to the triples
        it starts, ``END`` (m × n) a triple to the entity it reaches (SUB/OBJ for ``out``, their
        roles swapped for ``in``)."""
        kg = self.kg
        sub, obj = kg.SUB.tocsr(), kg.OBJ.tocsr()
        return {
            Direction.OUT: (sub, obj),
            Direction.IN: (obj.T.tocsr(), sub.T.tocsr()),
        }

    def _one(self, d: Direction, active: np.ndarray, rel_mask):
        """``t = q·START`` and ``q' = t·END`` for a 0/1 vector ``q``: a boolean product with a 0/1
        vector is the union of the selected rows, so both are CSR row selections, whose cost is
        the rows' nonzeros (a general sparse product allocates a work array as wide as the
        matrix, i.e. ``m`` or ``n`` slots per call)."""
        start, end = self._mats[d]
        tids = np.unique(start[active].indices).astype(np.int64, copy=False)
        if rel_mask is not None:
            tids = tids[rel_mask[self.kg.rels[tids]]]
        reached = end[tids].indices
        return tids, np.unique(reached).astype(np.int32)

    def _hop(self, active, rel_mask, deadline):
        if len(active) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
        if self.direction is Direction.BOTH:
            t1, e1 = self._one(Direction.OUT, active, rel_mask)
            t2, e2 = self._one(Direction.IN, active, rel_mask)
            return np.union1d(t1, t2), np.union1d(e1, e2).astype(np.int32)
        return self._one(self.direction, active, rel_mask)
