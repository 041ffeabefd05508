"""Entity linking of a dataset's topic mentions to KG ids.

Order of attempts: exact id/name, then normalised name / label / alias (``KG.find_entity``),
then, when an :class:`EmbeddingLinker` is configured, nearest entity label by all-MiniLM-L6-v2
cosine above a threshold. Failures are reported, never raised; :func:`link_rates` summarises
them per method.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from kgreason.kg.store import KG
from kgreason.types import Example


@dataclass
class LinkResult:
    ids: list[int] = field(default_factory=list)
    linked: list[tuple[str, int, str]] = field(default_factory=list)  # (mention, id, method)
    failed: list[str] = field(default_factory=list)


class EmbeddingLinker:
    """Nearest KG entity label by all-MiniLM-L6-v2 cosine (exact search, one matrix product).

    Label embeddings are read from the KG's ``entity_label`` embedding store (built once per
    machine, kgreason/storage/embedstore.py) on first use; with ``embedder.kg_store: null`` they are
    embedded by the linker.

    Args:
        kg: the KG whose labels (``KG.entity_label``) are the candidates.
        embedder: the run's :class:`~kgreason.embed.Embedder` (anything with ``encode``).
        entity_type: restrict candidates to entities of this type (e.g. ``pathology``).
    """

    def __init__(self, kg: KG, embedder, entity_type: str | None = None) -> None:
        from kgreason.kg.source import require_in_memory

        require_in_memory(kg, "EmbeddingLinker (every entity label is a candidate)")
        self.kg = kg
        self.embedder = embedder
        if entity_type is not None:
            self.candidates = kg.entities_of_type(entity_type)
        else:
            self.candidates = np.arange(kg.n_entities, dtype=np.int32)
        self._matrix: np.ndarray | None = None

    @property
    def matrix(self) -> np.ndarray:
        """``(len(candidates), 384)`` float32 unit label embeddings (computed on first use)."""
        if self._matrix is None:
            fn = getattr(self.embedder, "kg_store", None)
            store = fn(self.kg, "entity_label") if fn is not None else None  # built once per machine
            if store is not None:
                self._matrix = np.asarray(store.matrix[self.candidates], dtype=np.float32)
            else:
                labels = [self.kg.entity_label(int(i)) for i in self.candidates]
                self._matrix = self.embedder.encode(labels)
        return self._matrix

    def nearest(self, mentions: Sequence[str]) -> list[tuple[int, float]]:
        """Best ``(entity id, cosine)`` per mention; ``(-1, 0.0)`` when there are no candidates."""
        mentions = list(mentions)
        if not mentions:
            return []
        if len(self.candidates) == 0:
            return [(-1, 0.0)] * len(mentions)
        sims = self.embedder.encode(mentions) @ self.matrix.T
        best = np.argmax(sims, axis=1)  # first max = lowest index on ties
        return [(int(self.candidates[b]), float(sims[i, b])) for i, b in enumerate(best)]


def link_mentions(kg: KG, mentions: Sequence[str], embedder=None, threshold: float = 0.8) -> LinkResult:
    """Link surface mentions; ``embedder`` is anything with ``nearest(mentions)`` (an
    :class:`EmbeddingLinker`). Methods recorded: ``exact``, ``name``, ``embedding:<cos>``."""
    res = LinkResult()
    pending = []
    for m in mentions:
        i = kg.find_entity(m)
        if i >= 0:
            res.ids.append(i)
            res.linked.append((m, i, "exact" if kg.entity_names[i] == m else "name"))
        else:
            pending.append(m)
    if pending and embedder is not None:
        for m, (i, score) in zip(pending, embedder.nearest(pending)):
            if i >= 0 and score >= threshold:
                res.ids.append(i)
                res.linked.append((m, i, f"embedding:{score:.3f}"))
            else:
                res.failed.append(m)
    else:
        res.failed.extend(pending)
    res.ids = list(dict.fromkeys(res.ids))
    return res


def link_example(kg: KG, example: Example, embedder=None, threshold: float = 0.8) -> LinkResult:
    """Link an example's topic entities: one mention per topic entity.

    Each id in ``topic_entities`` is tried exactly / by normalised name; when it fails and
    ``topic_names`` pairs with the ids (same length), the entity's name is tried next (name,
    then embedding). Without a pairing, the ids are tried first and the names only if none of
    the ids linked. An example with names but no ids links its names.
    """
    ids, names = list(example.topic_entities), list(example.topic_names)
    if not ids:
        return link_mentions(kg, names, embedder=embedder, threshold=threshold)
    res = link_mentions(kg, ids, embedder=None)
    if not res.failed:
        return res
    if len(names) == len(ids):
        fallback = [names[ids.index(m)] for m in res.failed]
        extra = link_mentions(kg, fallback, embedder=embedder, threshold=threshold)
        back = dict(zip(fallback, res.failed))
        res.ids = list(dict.fromkeys(res.ids + extra.ids))
        res.linked += extra.linked
        res.failed = [back[m] for m in extra.failed]
        return res
    if not res.ids and names:
        extra = link_mentions(kg, names, embedder=embedder, threshold=threshold)
        if extra.ids:
            return extra
    if embedder is not None:
        extra = link_mentions(kg, res.failed, embedder=embedder, threshold=threshold)
        res.ids = list(dict.fromkeys(res.ids + extra.ids))
        res.linked += extra.linked
        res.failed = extra.failed
    return res


def link_rates(results: Iterable[LinkResult]) -> dict:
    """Summarise linking: ``{linked, failed, rate, by_method, examples, examples_linked,
    example_rate}``. ``linked``/``failed`` count mentions; ``by_method`` counts linked mentions by
    method (``exact`` | ``name`` | ``embedding``); ``example_rate`` = share of examples with at
    least one linked topic entity."""
    linked = failed = n_ex = ex_ok = 0
    by = Counter()
    for r in results:
        n_ex += 1
        ex_ok += bool(r.ids)
        linked += len(r.linked)
        failed += len(r.failed)
        by.update(m.split(":")[0] for _, _, m in r.linked)
    total = linked + failed
    return {"linked": linked, "failed": failed, "rate": linked / total if total else 0.0,
            "by_method": dict(by), "examples": n_ex, "examples_linked": ex_ok,
            "example_rate": ex_ok / n_ex if n_ex else 0.0}


__all__ = ["LinkResult", "EmbeddingLinker", "link_mentions", "link_example", "link_rates"]
