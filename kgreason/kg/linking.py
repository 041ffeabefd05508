"""Entity linking of a dataset's topic mentions to KG ids.

Order of attempts: exact id/name, then normalised name / label / alias (``KG.find_entity``),
then, when an :class:`EmbeddingLinker` is configured, nearest entity label by all-MiniLM-L6-v2
cosine above a threshold. Failures are reported, never raised.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from kgreason.kg.store import KG
from kgreason.types import Example


@dataclass
class LinkResult:
    ids: list[int] = field(default_factory=list)
    linked: list[tuple[str, int, str]] = field(default_factory=list)  # (mention, id, method)
    failed: list[str] = field(default_factory=list)


def link_mentions(kg: KG, mentions: Sequence[str], embedder=None, threshold: float = 0.8) -> LinkResult:
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
    """Link an example's topic entities (ids first, then names)."""
    res = link_mentions(kg, list(example.topic_entities), embedder=None)
    if res.failed and example.topic_names:
        extra = link_mentions(kg, list(example.topic_names), embedder=embedder, threshold=threshold)
        res.ids = list(dict.fromkeys(res.ids + extra.ids))
        res.linked += extra.linked
        res.failed = extra.failed if extra.ids or not res.ids else res.failed
    return res
