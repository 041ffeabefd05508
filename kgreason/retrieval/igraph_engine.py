"""python-igraph baseline (logoskg.txt Table 2 "iGraph").

The KG is an ``igraph.Graph`` (directed multigraph, edge ``i`` = triple ``i``, edge attribute
``rel``). One hop asks igraph for the incident edges of every active vertex
(``Graph.incident(v, mode=OUT|IN|ALL)``) on a graph restricted to the allowed relations
(``Graph.subgraph_edges(..., delete_vertices=False)``, cached per relation set); the reached
entities are the other endpoints. ``Graph.neighborhood(order=k, mindist=k)`` gives the same BFS
layers but cannot return the activated triples, so the per-hop incident lists are used.
"""

from __future__ import annotations

import time
from functools import cached_property

import numpy as np

from kgreason.retrieval.base import Direction, GraphRetriever, QueryTimeout


class IgraphRetriever(GraphRetriever):
    """k-hop retrieval with python-igraph adjacency queries.

    >>> from kgreason.kg.store import KG
    >>> kg = KG.from_triples([("A", "r", "B"), ("B", "r", "C")])
    >>> IgraphRetriever(kg).retrieve([0], 2).entities().tolist()
    [1, 2]
    """

    name = "igraph"

    def __init__(self, kg, **kw) -> None:
        super().__init__(kg, **kw)
        self._filtered: dict[bytes, tuple] = {}

    @cached_property
    def graph(self):
        import igraph as ig

        kg = self.kg
        g = ig.Graph(n=kg.n_entities, edges=np.stack([kg.heads, kg.tails], axis=1).tolist(), directed=True)
        g.es["rel"] = kg.rels.tolist()
        return g

    def _graph_for(self, rel_mask):
        """``(graph, edge id → triple id array or None)`` for the allowed relations."""
        if rel_mask is None:
            return self.graph, None
        key = rel_mask.tobytes()
        if key not in self._filtered:
            eids = np.flatnonzero(rel_mask[self.kg.rels])
            sub = self.graph.subgraph_edges(eids.tolist(), delete_vertices=False)
            self._filtered[key] = (sub, eids.astype(np.int64))  # subgraph keeps edge order
        return self._filtered[key]

    def _hop(self, active, rel_mask, deadline):
        g, emap = self._graph_for(rel_mask)
        mode = {Direction.OUT: "out", Direction.IN: "in", Direction.BOTH: "all"}[self.direction]
        eids: list[int] = []
        for i, v in enumerate(active.tolist()):
            if deadline is not None and i % 256 == 0 and time.perf_counter() > deadline:
                raise QueryTimeout
            eids.extend(g.incident(v, mode=mode))
        tids = np.unique(np.asarray(eids, dtype=np.int64))
        if emap is not None:
            tids = emap[tids]
        if len(tids) == 0:
            return tids, np.zeros(0, dtype=np.int32)
        kg = self.kg
        h, t = kg.heads[tids], kg.tails[tids]
        parts = []
        if self.direction in (Direction.OUT, Direction.BOTH):
            parts.append(t[np.isin(h, active)])
        if self.direction in (Direction.IN, Direction.BOTH):
            parts.append(h[np.isin(t, active)])
        return tids, np.unique(np.concatenate(parts)).astype(np.int32)
