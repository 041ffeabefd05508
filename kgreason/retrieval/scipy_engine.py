"""SciPy backend of the LogosKG engine: one hop is ``t = q·SUB`` then ``q' = t·OBJ`` on CSR
matrices (logoskg.txt §3.3, Eq. 4–5). For ``in`` the transposes swap roles; ``both`` is the
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
        kg = self.kg
        sub, obj = kg.SUB.tocsr(), kg.OBJ.tocsc()
        # for "in", the tail is the subject of the traversal and the head its object
        return {
            Direction.OUT: (sub, obj),
            Direction.IN: (obj.T.tocsr(), sub.T.tocsc()),
        }

    def _one(self, d: Direction, active: np.ndarray, rel_mask):
        start, end = self._mats[d]
        n = self.kg.n_entities
        q = sp.csr_matrix((np.ones(len(active), dtype=np.float32), (np.zeros(len(active), dtype=np.int32), active)), shape=(1, n))
        t = q @ start  # (1, m) activated triples
        tids = np.sort(t.indices.astype(np.int64))
        if rel_mask is not None:
            tids = tids[rel_mask[self.kg.rels[tids]]]
        tv = sp.csr_matrix((np.ones(len(tids), dtype=np.float32), (np.zeros(len(tids), dtype=np.int32), tids)), shape=(1, self.kg.n_triples))
        reached = (tv @ end).indices
        return tids, np.unique(reached).astype(np.int32)

    def _hop(self, active, rel_mask, deadline):
        if len(active) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
        if self.direction is Direction.BOTH:
            t1, e1 = self._one(Direction.OUT, active, rel_mask)
            t2, e2 = self._one(Direction.IN, active, rel_mask)
            return np.union1d(t1, t2), np.union1d(e1, e2).astype(np.int32)
        return self._one(self.direction, active, rel_mask)
