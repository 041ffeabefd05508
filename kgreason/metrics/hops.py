"""Hop distribution: shortest-path distance from an example's query entities to its gold
answers in the KG (the "how many hops does the question really need" report, LogosKG Fig. 2).

For each example, query entities are ``topic_entities`` (or ``findings`` for clinical cases
that have no topic entities) and targets are ``diagnoses`` (clinical) or ``answers``; both are
linked with :meth:`KG.find_entity` (exact name, then normalised name/label/alias). The distance
is the minimum over all linked gold answers of the BFS layer in which the answer is first
reached under ``within`` semantics (layer h = entities at shortest distance exactly h from the
seed set; logoskg.txt §3.3). Two routes give the same numbers:

* no ``retriever``: the SciPy engine, one example at a time, stopping at the first layer that
  holds a gold answer;
* a ``retriever`` (the run's engine, rebuilt with ``within`` semantics and no paths or triples):
  the examples' seed sets go through :meth:`GraphRetriever.retrieve_many` in chunks of
  ``batch``, so the batched torch engine (CPU or CUDA) answers a chunk with one sparse product
  per hop.

Buckets: ``"1"``..``"K"``; ``"unreachable"`` (linked, but no gold answer within K hops);
``"unlinked"`` (no query entity or no gold answer could be linked). A gold answer that is itself
a query entity has distance 0 and goes to bucket ``"0"`` (only present when it happens).
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from kgreason.types import Example


def _link(kg, names: Iterable[str]) -> list[int]:
    ids = {kg.find_entity(str(n)) for n in names}
    ids.discard(-1)
    return sorted(ids)


def query_and_gold(kg, ex: Example) -> tuple[list[int], list[int]]:
    """Linked ``(query entity ids, gold answer ids)`` of one example."""
    sources = _link(kg, ex.topic_entities or ex.findings)
    targets = _link(kg, ex.diagnoses or ex.answers)
    return sources, targets


def example_hops(retriever, kg, ex: Example, max_hops: int) -> int | None | str:
    """Distance in hops, ``None`` if unreachable within ``max_hops``, ``"unlinked"`` if unlinked."""
    sources, targets = query_and_gold(kg, ex)
    if not sources or not targets:
        return "unlinked"
    tset = set(targets)
    if tset & set(sources):
        return 0
    # the `within` BFS of GraphRetriever.retrieve, stopped at the first layer holding a gold answer
    target = np.zeros(kg.n_entities, dtype=bool)
    target[targets] = True
    visited = np.zeros(kg.n_entities, dtype=bool)
    active = np.asarray(sources, dtype=np.int32)
    visited[active] = True
    for h in range(1, max_hops + 1):
        if len(active) == 0:
            return None
        _, reached = retriever._hop(active, None, None)
        new = reached[~visited[reached]]
        if target[new].any():
            return h
        visited[new] = True
        active = new
    return None


def _first_gold_layer(sub, targets: list[int], max_hops: int) -> int | None:
    tset = np.asarray(targets, dtype=np.int64)
    for h, layer in enumerate(sub.entities_by_hop[:max_hops], start=1):
        if np.isin(tset, layer).any():
            return h
    return None


def _batched_hops(retriever, kg, examples: list[Example], max_hops: int, batch: int) -> list[int | None | str]:
    """:func:`example_hops` for many examples through ``retriever.retrieve_many``."""
    out: list[int | None | str] = [None] * len(examples)
    todo: list[tuple[int, list[int], list[int]]] = []
    for i, ex in enumerate(examples):
        sources, targets = query_and_gold(kg, ex)
        if not sources or not targets:
            out[i] = "unlinked"
        elif set(targets) & set(sources):
            out[i] = 0
        else:
            todo.append((i, sources, targets))
    batch = max(1, int(batch))
    for start in range(0, len(todo), batch):
        chunk = todo[start:start + batch]
        subs = retriever.retrieve_many([s for _, s, _ in chunk], max_hops)
        for (i, _, targets), sub in zip(chunk, subs):
            out[i] = _first_gold_layer(sub, targets, max_hops)
    return out


def hop_distribution(kg, examples: Iterable[Example], max_hops: int = 5, direction: str = "both",
                     retriever=None, batch: int = 256) -> dict[str, Any]:
    """Histogram of shortest query→gold hop distances.

    Args:
        kg: the :class:`~kgreason.kg.store.KG`.
        examples: the dataset's examples.
        max_hops: K; distances above K count as ``"unreachable"``.
        direction: ``out`` | ``in`` | ``both`` (edge direction followed).
        retriever: optional :class:`~kgreason.retrieval.base.GraphRetriever` configured with
            ``semantics="within"``, ``direction=direction`` and no time-out; when given, the
            seed sets are answered in batches with its ``retrieve_many``.
        batch: seed sets per ``retrieve_many`` call.

    Returns:
        ``{"counts": {"1": n, ..., "K": n, "unreachable": n, "unlinked": n},
        "per_example": {id: hops | None}, "max_hops": K, "direction": direction}`` where
        ``per_example`` is ``None`` for unreachable and unlinked examples (see
        ``"unlinked_ids"`` for the latter).
    """
    examples = list(examples)
    if retriever is not None:
        sem = getattr(getattr(retriever, "semantics", None), "value", getattr(retriever, "semantics", None))
        dirn = getattr(getattr(retriever, "direction", None), "value", getattr(retriever, "direction", None))
        if sem not in (None, "within") or dirn not in (None, str(direction)):
            raise ValueError(f"hop_distribution needs a retriever with semantics=within and "
                             f"direction={direction}, got semantics={sem} direction={dirn}")
        distances = _batched_hops(retriever, kg, examples, max_hops, batch)
    else:
        from kgreason.retrieval.scipy_engine import ScipyRetriever

        scipy_r = ScipyRetriever(kg, semantics="within", direction=direction, max_paths=0, return_triples=False)
        distances = [example_hops(scipy_r, kg, ex, max_hops) for ex in examples]
    counts: dict[str, int] = {str(h): 0 for h in range(1, max_hops + 1)}
    counts["unreachable"] = 0
    counts["unlinked"] = 0
    per_example: dict[str, int | None] = {}
    unlinked: list[str] = []
    for ex, d in zip(examples, distances):
        if d == "unlinked":
            counts["unlinked"] += 1
            per_example[ex.id] = None
            unlinked.append(ex.id)
        elif d is None:
            counts["unreachable"] += 1
            per_example[ex.id] = None
        else:
            counts[str(d)] = counts.get(str(d), 0) + 1
            per_example[ex.id] = int(d)
    order = ["0"] if "0" in counts else []
    order += [str(h) for h in range(1, max_hops + 1)] + ["unreachable", "unlinked"]
    return {"counts": {k: counts[k] for k in order}, "per_example": per_example, "max_hops": int(max_hops),
            "direction": str(direction), "unlinked_ids": unlinked}
