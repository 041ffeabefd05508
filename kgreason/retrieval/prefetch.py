"""Batched retrieval across examples: the run loop asks each reasoner which k-hop queries it is
about to make, answers a chunk of examples' queries with one ``retrieve_many`` call, and serves
the reasoner's ``retrieve`` calls from those results.

This is where the batched torch engine pays off (one sparse product per hop for the whole
chunk, logoskg.txt §3.3); engines without a batched kernel loop inside ``retrieve_many`` and
behave exactly as before. A reasoner opts in by defining::

    def retrieval_plan(self, example) -> list[tuple[Sequence[int], int]]:
        '''The (seeds, hops) queries answer(example) will make, when known without an LLM.'''

Results are keyed by (sorted unique seeds, hops, relation filter), so a prefetched query returns
the very Subgraph an unbatched ``retrieve`` would (the engines' equality tests cover
``retrieve_many`` == ``retrieve``). Queries the plan did not foresee fall through to the engine.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Sequence

import numpy as np

from kgreason.types import Subgraph

Key = tuple[tuple[int, ...], int, tuple[int, ...] | None]


def _key(seeds: Sequence[int], hops: int, relations: Sequence[int] | None) -> Key:
    s = tuple(int(x) for x in np.unique(np.asarray(seeds, dtype=np.int64)))
    r = None if relations is None else tuple(sorted(int(x) for x in relations))
    return s, int(hops), r


class PrefetchingRetriever:
    """Proxy around a :class:`~kgreason.retrieval.base.GraphRetriever`; every other attribute
    (``kg``, ``direction``, ``answer_set`` ...) is the wrapped engine's."""

    def __init__(self, inner: Any, chunk_size: int = 64) -> None:
        self.inner = inner
        self.chunk_size = int(chunk_size)
        self._memo: dict[Key, Subgraph] = {}
        self.stats = {"batches": 0, "prefetched": 0, "served": 0, "fallthrough": 0}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def prefetch(self, requests: Iterable[tuple[Sequence[int], int] | tuple[Sequence[int], int, Sequence[int] | None]]) -> int:
        """Answer ``requests`` ((seeds, hops[, relations]) tuples) in one ``retrieve_many`` per
        (hops, relations) group; returns the number of distinct queries run."""
        groups: dict[tuple[int, tuple[int, ...] | None], list[tuple[int, ...]]] = defaultdict(list)
        for req in requests:
            seeds, hops = req[0], req[1]
            rel = req[2] if len(req) > 2 else None
            k = _key(seeds, hops, rel)
            if not k[0] or k in self._memo:
                continue
            if k[0] not in groups[(k[1], k[2])]:
                groups[(k[1], k[2])].append(k[0])
        n = 0
        for (hops, rel), seed_sets in groups.items():
            subs = self.inner.retrieve_many([list(s) for s in seed_sets], hops, None if rel is None else list(rel))
            for s, sub in zip(seed_sets, subs):
                self._memo[(s, hops, rel)] = sub
            self.stats["batches"] += 1
            n += len(seed_sets)
        self.stats["prefetched"] += n
        return n

    def retrieve(self, seeds: Sequence[int], hops: int, relations: Sequence[int] | None = None) -> Subgraph:
        sub = self._memo.get(_key(seeds, hops, relations))
        if sub is not None:
            self.stats["served"] += 1
            return sub
        self.stats["fallthrough"] += 1
        return self.inner.retrieve(seeds, hops, relations)

    def retrieve_many(self, seed_sets, hops, relations=None) -> list[Subgraph]:
        return self.inner.retrieve_many(seed_sets, hops, relations)

    def clear(self) -> None:
        """Drop the prefetched results (the run loop calls this after each chunk)."""
        self._memo.clear()

    def __repr__(self) -> str:
        return f"PrefetchingRetriever({self.inner!r})"
