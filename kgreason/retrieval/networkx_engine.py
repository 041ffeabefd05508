"""NetworkX baseline and test reference (logoskg.txt Table 2 "NetworkX").

Deliberately independent of :class:`~kgreason.retrieval.base.GraphRetriever`'s hop loop: the KG is
a ``nx.MultiDiGraph`` whose edge keys are triple ids (attribute ``rel``), and :meth:`retrieve`
does plain BFS / walk expansion by iterating NetworkX neighbour views, then enumerates paths by
depth-first search. Every other engine is tested for equality against it.
"""

from __future__ import annotations

import time
from functools import cached_property
from typing import Sequence

import numpy as np

from kgreason.retrieval.base import Direction, GraphRetriever, QueryTimeout, Semantics
from kgreason.types import Subgraph


class NetworkXRetriever(GraphRetriever):
    """k-hop retrieval by NetworkX neighbour iteration (the reference implementation).

    >>> from kgreason.kg.store import KG
    >>> kg = KG.from_triples([("A", "r", "B"), ("B", "r", "C")])
    >>> NetworkXRetriever(kg).retrieve([0], 2).entities().tolist()
    [1, 2]
    """

    name = "networkx"

    @cached_property
    def graph(self):
        import networkx as nx

        g = nx.MultiDiGraph()
        g.add_nodes_from(range(self.kg.n_entities))
        g.add_edges_from(
            (int(h), int(t), int(i), {"rel": int(r)})
            for i, (h, r, t) in enumerate(zip(self.kg.heads.tolist(), self.kg.rels.tolist(), self.kg.tails.tolist()))
        )
        return g

    # --------------------------------------------------------------- neighbour iteration
    def _steps(self, e: int, rel_mask) -> list[tuple[int, int, int]]:
        """``(triple id, path relation id, other entity)`` for every allowed step out of ``e``."""
        g, R = self.graph, self.kg.n_relations
        out: list[tuple[int, int, int]] = []
        if self.direction in (Direction.OUT, Direction.BOTH):
            for b, keys in g.succ[e].items():
                for tid, data in keys.items():
                    if rel_mask is None or rel_mask[data["rel"]]:
                        out.append((tid, data["rel"], b))
        if self.direction in (Direction.IN, Direction.BOTH):
            for a, keys in g.pred[e].items():
                for tid, data in keys.items():
                    if rel_mask is None or rel_mask[data["rel"]]:
                        out.append((tid, data["rel"] + R, a))
        return out

    def _hop(self, active, rel_mask, deadline):
        tids: set[int] = set()
        reached: set[int] = set()
        for e in active.tolist():
            if deadline is not None and time.perf_counter() > deadline:
                raise QueryTimeout
            for tid, _, b in self._steps(e, rel_mask):
                tids.add(tid)
                reached.add(b)
        return (np.array(sorted(tids), dtype=np.int64), np.array(sorted(reached), dtype=np.int32))

    # --------------------------------------------------------------- reference retrieve
    def retrieve(self, seeds: Sequence[int], hops: int, relations: Sequence[int] | None = None) -> Subgraph:
        deadline = None if self.timeout_ms is None else time.perf_counter() + self.timeout_ms / 1000.0
        seed_list = sorted({int(s) for s in seeds})
        rel_mask = self._rel_mask(relations)
        walk = self.semantics is Semantics.WALK
        layers: list[set[int]] = []
        hop_tids: list[set[int]] = []
        visited = set(seed_list)
        active = set(seed_list)
        timed_out = False
        try:
            for _ in range(hops):
                tids: set[int] = set()
                reached: set[int] = set()
                for e in sorted(active):
                    if deadline is not None and time.perf_counter() > deadline:
                        raise QueryTimeout
                    for tid, _, b in self._steps(e, rel_mask):
                        tids.add(tid)
                        reached.add(b)
                new = reached if walk else reached - visited
                visited |= new
                layers.append(new)
                hop_tids.append(tids)
                active = new
        except QueryTimeout:
            timed_out = True
        paths: tuple = ()
        truncated = False
        if self.max_paths > 0 and not timed_out and layers:
            try:
                paths, truncated = self._dfs_paths(seed_list, layers, rel_mask, deadline)
            except QueryTimeout:
                timed_out = True
        kg = self.kg
        triples = []
        if self.return_triples:
            for tids in hop_tids:
                t = np.array(sorted(tids), dtype=np.int64)
                triples.append(np.stack([kg.heads[t], kg.rels[t], kg.tails[t]], axis=1).astype(np.int32))
        return Subgraph(
            seeds=np.array(seed_list, dtype=np.int32),
            entities_by_hop=[np.array(sorted(s), dtype=np.int32) for s in layers],
            triples_by_hop=triples, paths=paths, paths_truncated=truncated, timed_out=timed_out,
        )

    def _dfs_paths(self, seeds, layers, rel_mask, deadline):
        """All paths ``(e0, r1, e1, ..., rk, ek)`` whose i-th entity lies in layer i (up to the cap)."""
        k = len(layers)
        out: list[tuple[int, ...]] = []
        truncated = False
        ename, rname, R = self.kg.entity_names, self.kg.relation_names, self.kg.n_relations

        def rec(path: tuple[int, ...], h: int) -> bool:
            if h == k:
                if len(out) >= self.max_paths:
                    return False
                out.append(path)
                return True
            if deadline is not None and time.perf_counter() > deadline:
                raise QueryTimeout
            # the canonical order of GraphRetriever._paths (relation name, forward first, entity id
            # string): the paths kept under the cap do not follow the storage order
            steps = sorted(self._steps(path[-1], rel_mask), key=lambda x: (rname[x[1] % R], x[1] >= R, ename[x[2]]))
            for _, r, b in steps:
                if b in layers[h] and not rec(path + (r, b), h + 1):
                    return False
            return True

        for s in sorted(seeds, key=lambda e: ename[e]):
            if not rec((s,), 0):
                truncated = True
                break
        return tuple(out), truncated
