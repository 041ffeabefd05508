"""Hop distribution: shortest-path distance from an example's query entities to its gold
answers in the KG (the "how many hops does the question really need" report, LogosKG Fig. 2).

Two units, both in ``hops.json``:

* **per pair** (``counts``, the bar chart ``hops.png``): every (query entity, gold entity) pair of
  every example, the distance from that query entity to that gold entity. This is what LogosKG
  Fig. 2 plots: "Hop-distance distribution of pair entities for the ProbSum and DDXPlus
  dataset" (logoskg.txt, Fig. 2), read with §6 "On UMLS, gold entities can mostly be found within
  1-2 hops" (each gold entity placed by its distance, not one figure per patient) and with
  DDX-Plus's "symptom–diagnosis pairs" (§4). A pair one of whose names the KG cannot link is
  ``"unlinked"``; ``per_pair`` lists each example's pairs.
* **per example** (``counts_per_example``, ``per_example``): the minimum over the example's
  linked gold answers, from the whole set of query entities (the figure ``kgreason tables``'
  per-question ``kg_hops`` reads). Before issue 72 this was the only unit, and what ``counts``
  held.

The per-example route is described below; a pair's distance is the BFS layer of the query
entity in a BFS from the gold entity over the reversed edge direction (``both``: the same
edges), so one BFS per distinct gold entity serves every example and query entity that names it
(:func:`pair_hops`).

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


_REVERSE = {"out": "in", "in": "out", "both": "both"}


def _names(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(str(v) for v in values))


def _distances_from_golds(kg, needed: dict[int, set[int]], max_hops: int, direction: str, retriever=None,
                          batch: int = 256) -> dict[int, dict[int, int]]:
    """``{gold: {query entity: hops}}`` for the query entities each gold is paired with (those not
    within ``max_hops`` left out): one BFS per gold over the reversed edge direction, stopped once
    every query entity it is paired with is reached. The run's engine (``retriever``) walks the
    right edges only when they are their own reverse (``both``); it then answers the golds in
    ``retrieve_many`` chunks of ``batch``."""
    out: dict[int, dict[int, int]] = {}
    golds = list(needed)
    if retriever is not None and direction == "both":
        size = max(1, int(batch))
        for start in range(0, len(golds), size):
            chunk = golds[start:start + size]
            for g, sub in zip(chunk, retriever.retrieve_many([[g] for g in chunk], max_hops)):
                want = np.asarray(sorted(needed[g] - {g}), dtype=np.int64)
                got = {g: 0} if g in needed[g] else {}
                for h, layer in enumerate(sub.entities_by_hop[:max_hops], start=1):
                    for e in want[np.isin(want, layer)].tolist():
                        got.setdefault(int(e), h)
                out[g] = got
        return out
    from kgreason.retrieval.scipy_engine import ScipyRetriever

    engine = ScipyRetriever(kg, semantics="within", direction=_REVERSE[direction], max_paths=0, return_triples=False)
    for g in golds:
        want = np.zeros(kg.n_entities, dtype=bool)
        want[list(needed[g])] = True
        got = {g: 0} if want[g] else {}
        left = int(want.sum()) - len(got)
        visited = np.zeros(kg.n_entities, dtype=bool)
        active = np.asarray([g], dtype=np.int32)
        visited[active] = True
        for h in range(1, max_hops + 1):
            if left <= 0 or len(active) == 0:
                break
            _, reached = engine._hop(active, None, None)
            new = reached[~visited[reached]]
            visited[new] = True
            for e in new[want[new]].tolist():
                got[int(e)] = h
                left -= 1
            active = new
        out[g] = got
    return out


def pair_hops(kg, examples: list[Example], max_hops: int, direction: str = "both", retriever=None,
              batch: int = 256) -> list[list[tuple[str, str, int | None | str]]]:
    """Per example: ``(query name, gold name, hops)`` for every pair of its query names
    (``topic_entities`` or ``findings``) and gold names (``diagnoses`` or ``answers``); ``hops`` is
    None when the gold is not within ``max_hops`` of that query entity, ``"unlinked"`` when
    either name links to no KG entity. One BFS per distinct gold entity serves every pair naming it."""
    linked = []
    needed: dict[int, set[int]] = {}
    for ex in examples:
        src = [(n, kg.find_entity(n)) for n in _names(ex.topic_entities or ex.findings)]
        dst = [(n, kg.find_entity(n)) for n in _names(ex.diagnoses or ex.answers)]
        linked.append((src, dst))
        for _, g in dst:
            if g >= 0:
                needed.setdefault(g, set()).update(s for _, s in src if s >= 0)
    dist = _distances_from_golds(kg, {g: s for g, s in needed.items() if s}, max_hops, direction, retriever, batch)
    out = []
    for src, dst in linked:
        out.append([(sname, gname, "unlinked" if s < 0 or g < 0 else dist.get(g, {}).get(s))
                    for gname, g in dst for sname, s in src])
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
        ``{"unit": "pair", "counts": {"1": n, ..., "K": n, "unreachable": n, "unlinked": n},
        "per_pair": {id: [[query, gold, hops | null | "unlinked"], ...]},
        "counts_per_example": {...}, "per_example": {id: hops | None}, "max_hops": K,
        "direction": direction, "unlinked_ids": [...]}``: ``counts`` over every (query entity,
        gold entity) pair (LogosKG Fig. 2, module docstring), ``counts_per_example`` over the
        examples (the minimum over their linked golds); ``per_example`` is ``None`` for
        unreachable and unlinked examples (see ``"unlinked_ids"`` for the latter).
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
    pairs = pair_hops(kg, examples, max_hops, direction, retriever, batch)
    pair_counts: dict[str, int] = {str(h): 0 for h in range(0, max_hops + 1)}
    pair_counts.update(unreachable=0, unlinked=0)
    for ps in pairs:
        for _, _, d in ps:
            pair_counts["unreachable" if d is None else str(d)] += 1
    pair_order = (["0"] if pair_counts["0"] else []) + [str(h) for h in range(1, max_hops + 1)] + ["unreachable",
                                                                                                  "unlinked"]
    return {"unit": "pair", "counts": {k: pair_counts[k] for k in pair_order},
            "per_pair": {ex.id: [list(p) for p in ps] for ex, ps in zip(examples, pairs)},
            "counts_per_example": {k: counts[k] for k in order}, "per_example": per_example,
            "max_hops": int(max_hops), "direction": str(direction), "unlinked_ids": unlinked}
