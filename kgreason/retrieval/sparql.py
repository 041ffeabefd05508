"""k-hop retrieval over a SPARQL KG source by iterative batched expansion (``retriever=sparql``).

Same semantics, direction, relation filter, per-hop triples and path reconstruction as every
:class:`~kgreason.retrieval.base.GraphRetriever` (LogosKG §3.3, Eq. 4–7); only the hop primitive
differs: hop ``h`` expands the whole active frontier with
:meth:`kgreason.kg.sparql.SparqlKG.prefetch` (one ``VALUES`` query per direction per
``batch_size`` entities, not one request per entity), then reads the activated triples from the
local index. On an in-memory KG the expansion is a no-op and the hop is a CSR walk, so the class
also serves as an engine-independent reference.

The visited set is a Python set rather than an ``(n_entities,)`` array: a SPARQL source's entity
count grows while a query runs.
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from kgreason.kg.source import prefetch
from kgreason.retrieval.base import Direction, GraphRetriever, QueryTimeout, Semantics
from kgreason.types import Subgraph


class SparqlRetriever(GraphRetriever):
    """Batched-expansion k-hop retriever (module docstring); arguments as ``GraphRetriever``."""

    name = "sparql"
    remote_ok = True

    def _hop(self, active, rel_mask, deadline):
        kg = self.kg
        prefetch(kg, active)
        if deadline is not None and time.perf_counter() > deadline:
            raise QueryTimeout
        parts: list[np.ndarray] = []
        for e in active.tolist():
            if self.direction in (Direction.OUT, Direction.BOTH):
                parts.append(np.asarray(kg.out_triples(e), dtype=np.int64))
            if self.direction in (Direction.IN, Direction.BOTH):
                parts.append(np.asarray(kg.in_triples(e), dtype=np.int64))
        tids = np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
        if rel_mask is not None and len(tids):
            tids = tids[rel_mask[kg.rels[tids]]]
        act = set(active.tolist())
        heads, tails = kg.heads[tids], kg.tails[tids]
        reached: list[np.ndarray] = []
        if self.direction in (Direction.OUT, Direction.BOTH):
            reached.append(tails[np.fromiter((h in act for h in heads.tolist()), bool, len(heads))])
        if self.direction in (Direction.IN, Direction.BOTH):
            reached.append(heads[np.fromiter((t in act for t in tails.tolist()), bool, len(tails))])
        ents = np.unique(np.concatenate(reached)).astype(np.int32) if reached else np.zeros(0, np.int32)
        return tids, ents

    def retrieve(self, seeds: Sequence[int], hops: int, relations: Sequence[int] | None = None) -> Subgraph:
        deadline = None if self.timeout_ms is None else time.perf_counter() + self.timeout_ms / 1000.0
        seeds_arr = np.unique(np.asarray(seeds, dtype=np.int32))
        rel_mask = self._rel_mask(relations)
        layers: list[np.ndarray] = []
        tids_by_hop: list[np.ndarray] = []
        active, visited = seeds_arr, set(seeds_arr.tolist())
        timed_out = False
        try:
            for _ in range(hops):
                if deadline is not None and time.perf_counter() > deadline:
                    raise QueryTimeout
                tids, reached = self._hop(active, rel_mask, deadline)
                if self.semantics is Semantics.WALK:
                    new = reached
                else:
                    new = np.array([e for e in reached.tolist() if e not in visited], dtype=np.int32)
                    visited.update(new.tolist())
                layers.append(new)
                tids_by_hop.append(tids)
                active = new
        except QueryTimeout:
            timed_out = True
        return self._finish(seeds_arr, layers, tids_by_hop, deadline, timed_out)

    def retrieve_many(self, seed_sets: Sequence[Sequence[int]], hops: int,
                      relations: Sequence[int] | None = None) -> list[Subgraph]:
        """Many seed sets, hop-synchronously: hop ``h`` expands the union of every query's
        frontier in one batched expansion, then each query is answered from local facts."""
        rel_mask = self._rel_mask(relations)
        fronts = [np.unique(np.asarray(s, dtype=np.int32)) for s in seed_sets]
        seen = [set(f.tolist()) for f in fronts]
        for _ in range(hops):
            union = np.unique(np.concatenate(fronts)) if fronts else np.zeros(0, np.int32)
            if len(union) == 0:
                break
            prefetch(self.kg, union)
            nxt = []
            for f, vis in zip(fronts, seen):
                _, reached = self._hop(f, rel_mask, None) if len(f) else (None, np.zeros(0, np.int32))
                if self.semantics is not Semantics.WALK:
                    reached = np.array([e for e in reached.tolist() if e not in vis], dtype=np.int32)
                    vis.update(reached.tolist())
                nxt.append(reached)
            fronts = nxt
        return [self.retrieve(s, hops, relations) for s in seed_sets]
