"""Retrieval protocols and the hop loop that every k-hop engine shares.

An engine supplies one primitive, :meth:`GraphRetriever._hop`: given the active entities
``q^(h-1)`` it returns the activated triples ``t^(h) = q^(h-1)·SUB`` (LogosKG Eq. 5, restricted
by direction and relation filter) and the entities they reach, ``t^(h)·OBJ`` (Eq. 4). The base
class turns that into the three named semantics, the per-hop triples, path reconstruction
(Eq. 5–7) with a cap, and a per-query timeout.

Semantics for seeds ``S`` and ``k`` hops (``entities_by_hop[h-1]`` is what hop ``h`` produced):

* ``within``: BFS layers; layer h = entities at shortest distance exactly h (seeds are layer 0
  and never reappear). The answer set is the union of layers 1..k (distance ≤ k, seeds excluded).
* ``exact``: same layers; the answer set is layer k only (shortest distance == k).
* ``walk``: ``q^(h) = q^(0)·(SUB·OBJ)^h`` as a boolean vector (logoskg.txt §3.3): the entities
  reachable by a walk of exactly h steps; seeds and revisits are allowed. Answer set = ``q^(k)``.

Directions: ``out`` follows head→tail, ``in`` follows tail→head, ``both`` does either.

In reconstructed paths ``(e0, r1, e1, ..., rk, ek)`` a relation id ``r >= n_relations`` means
relation ``r - n_relations`` traversed backwards (tail→head).
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import Enum
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from kgreason.kg.store import KG
from kgreason.types import Subgraph


class Semantics(str, Enum):
    WITHIN = "within"
    EXACT = "exact"
    WALK = "walk"


class Direction(str, Enum):
    OUT = "out"
    IN = "in"
    BOTH = "both"


class QueryTimeout(Exception):
    """Raised inside an engine when a query passes its deadline; the base class catches it."""


@dataclass(frozen=True, slots=True)
class Hit:
    id: int
    text: str
    score: float


@runtime_checkable
class TextRetriever(Protocol):
    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]: ...


class GraphRetriever(ABC):
    """k-hop retrieval over a KG. Settings come from ``__init__``; queries from method arguments.

    Args:
        kg: the KG.
        semantics: ``within`` | ``exact`` | ``walk`` (see module docstring).
        direction: ``out`` | ``in`` | ``both``.
        max_paths: cap on reconstructed paths per query (0 = do not reconstruct paths).
        timeout_ms: per-query time limit; a query past it returns what it has with
            ``timed_out=True`` (``None`` = no limit).
        return_triples: collect the activated triples of each hop (Eq. 5–7).
    """

    name = "base"
    #: serves a KG fetched as it is walked (kgreason.kg.sparql.SparqlKG); the matrix engines need
    #: every fact in memory and refuse one at construction, i.e. before the first example
    remote_ok = False

    def __init__(
        self,
        kg: KG,
        *,
        semantics: str = "within",
        direction: str = "out",
        max_paths: int = 1000,
        timeout_ms: float | None = None,
        return_triples: bool = True,
    ) -> None:
        if getattr(kg, "remote", False) and not self.remote_ok:
            from kgreason.kg.source import require_in_memory

            require_in_memory(kg, f"retriever {type(self).__name__}")
        self.kg = kg
        self.semantics = Semantics(semantics)
        self.direction = Direction(direction)
        self.max_paths = int(max_paths)
        self.timeout_ms = timeout_ms
        self.return_triples = return_triples

    # ------------------------------------------------------------------ engine primitive
    @abstractmethod
    def _hop(
        self, active: np.ndarray, rel_mask: np.ndarray | None, deadline: float | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """One hop from ``active`` (sorted unique int32 entity ids).

        Returns:
            ``(triple_ids, reached)``: sorted unique int64 ids of the activated triples (those
            whose subject — or object, for ``in`` — is active, in the allowed relations) and
            sorted unique int32 ids of the entities at their other end.
        """

    # ------------------------------------------------------------------ public API
    def retrieve(
        self, seeds: Sequence[int], hops: int, relations: Sequence[int] | None = None
    ) -> Subgraph:
        """k-hop retrieval from ``seeds``; see the module docstring for the semantics."""
        deadline = None if self.timeout_ms is None else time.perf_counter() + self.timeout_ms / 1000.0
        seeds_arr = np.unique(np.asarray(seeds, dtype=np.int32))
        rel_mask = self._rel_mask(relations)
        layers: list[np.ndarray] = []
        tids_by_hop: list[np.ndarray] = []
        active = seeds_arr
        # visited = entities stamped with this query's generation in the thread's stamp array
        # (allocated once per thread; nothing graph-sized is cleared or allocated per query)
        visited, gen = self._visited_stamps()
        visited[seeds_arr] = gen
        timed_out = False
        try:
            for _ in range(hops):
                if deadline is not None and time.perf_counter() > deadline:
                    raise QueryTimeout
                tids, reached = self._hop(active, rel_mask, deadline)
                if self.semantics is Semantics.WALK:
                    new = reached
                else:
                    new = reached[visited[reached] != gen]
                    visited[new] = gen
                layers.append(new.astype(np.int32, copy=False))
                tids_by_hop.append(tids)
                active = new
        except QueryTimeout:
            timed_out = True
        return self._finish(seeds_arr, layers, tids_by_hop, deadline, timed_out)

    def retrieve_many(
        self, seed_sets: Sequence[Sequence[int]], hops: int, relations: Sequence[int] | None = None
    ) -> list[Subgraph]:
        """Answer many seed sets; engines with a batched kernel override this."""
        return [self.retrieve(s, hops, relations) for s in seed_sets]

    def answer_set(self, sub: Subgraph) -> np.ndarray:
        """The k-hop entity set of ``sub`` under this retriever's semantics."""
        if not sub.entities_by_hop:
            return np.zeros(0, dtype=np.int32)
        if self.semantics is Semantics.WITHIN:
            return sub.entities()
        return np.asarray(sub.entities_by_hop[-1], dtype=np.int32)

    # ------------------------------------------------------------------ helpers
    def _visited_stamps(self) -> tuple[np.ndarray, int]:
        """This thread's ``(n,)`` int32 visited-stamp array and a fresh generation number for
        one query (the array is re-zeroed only when the int32 generations run out)."""
        tls = self.__dict__.get("_tls")
        if tls is None:
            tls = self.__dict__.setdefault("_tls", threading.local())
        arr = getattr(tls, "visited", None)
        if arr is None:
            arr = tls.visited = np.zeros(self.kg.n_entities, dtype=np.int32)
            tls.gen = 0
        tls.gen += 1
        if tls.gen >= 2**31 - 1:
            arr[:] = 0
            tls.gen = 1
        return arr, tls.gen

    def _rel_mask(self, relations: Sequence[int] | None) -> np.ndarray | None:
        if relations is None:
            return None
        mask = np.zeros(self.kg.n_relations, dtype=bool)
        mask[np.asarray(list(relations), dtype=np.int64)] = True
        return mask

    def _finish(self, seeds_arr, layers, tids_by_hop, deadline, timed_out: bool) -> Subgraph:
        """The end every engine shares: paths (when asked for and not timed out), triples per
        hop (when asked for), the :class:`Subgraph`."""
        paths, truncated = ((), False)
        if self.max_paths > 0 and not timed_out and layers:
            try:
                paths, truncated = self._paths(seeds_arr, layers, tids_by_hop, deadline)
            except QueryTimeout:
                timed_out = True
        triples_by_hop = [self._triples(t) for t in tids_by_hop] if self.return_triples else []
        return Subgraph(seeds=seeds_arr, entities_by_hop=layers, triples_by_hop=triples_by_hop,
                        paths=paths, paths_truncated=truncated, timed_out=timed_out)

    def _triples(self, tids: np.ndarray) -> np.ndarray:
        kg = self.kg
        out = np.empty((len(tids), 3), dtype=np.int32)
        out[:, 0], out[:, 1], out[:, 2] = kg.heads[tids], kg.rels[tids], kg.tails[tids]
        return out

    def _paths(self, seeds, layers, tids_by_hop, deadline):
        """Path reconstruction (logoskg.txt §3.3, Eq. 5–7): chain hop-h triples whose start lies
        on a path of length h-1, keeping only chains that end in layer h (BFS semantics) or in
        q^(h) (walk). Stops at ``max_paths``."""
        kg, R = self.kg, self.kg.n_relations
        ename, rname = kg.entity_names, kg.relation_names
        # canonical order (never storage order): seeds by id string, each entity's steps by
        # (relation name, forward first, next entity's id string); so which paths survive the
        # max_paths cut is the same on every KG backend and after a recompile
        frontier: list[tuple[int, ...]] = [(int(s),) for s in sorted((int(x) for x in seeds), key=lambda e: ename[e])]
        truncated = False
        for h, tids in enumerate(tids_by_hop):
            if deadline is not None and time.perf_counter() > deadline:
                raise QueryTimeout
            allowed = set(layers[h].tolist())
            # index activated triples by the entity they leave from
            step: dict[int, list[tuple[int, int]]] = {}
            heads, rels, tails = kg.heads[tids], kg.rels[tids], kg.tails[tids]
            if self.direction in (Direction.OUT, Direction.BOTH):
                for a, r, b in zip(heads.tolist(), rels.tolist(), tails.tolist()):
                    if b in allowed:
                        step.setdefault(a, []).append((r, b))
            if self.direction in (Direction.IN, Direction.BOTH):
                for a, r, b in zip(heads.tolist(), rels.tolist(), tails.tolist()):
                    if a in allowed:
                        step.setdefault(b, []).append((r + R, a))
            nxt: list[tuple[int, ...]] = []
            ordered: dict[int, list[tuple[int, int]]] = {}
            for p in frontier:
                steps = ordered.get(p[-1])
                if steps is None:
                    steps = ordered[p[-1]] = sorted(step.get(p[-1], ()),
                                                    key=lambda rb: (rname[rb[0] % R], rb[0] >= R, ename[rb[1]]))
                for r, b in steps:
                    if len(nxt) >= self.max_paths:
                        truncated = True
                        break
                    nxt.append(p + (r, b))
                if truncated:
                    break
            frontier = nxt
            if not frontier:
                break
        return tuple(frontier), truncated

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(kg={self.kg.name!r}, semantics={self.semantics.value}, "
                f"direction={self.direction.value})")
