"""The narrow KG interface the KGQA reasoners use: :class:`KGSource`.

Two implementations:

* :class:`kgreason.kg.store.KG`: the whole graph in memory (int32 triple arrays);
* :class:`kgreason.kg.sparql.SparqlKG`: a SPARQL 1.1 endpoint (the usual Freebase Virtuoso
  server of ToG / ReKnoS / SGR), materialised locally as the reasoners walk it.

The interface is what ToG, ReKnoS, SGR, IO/CoT/RAG, retrieval_only and the hop-distribution
report read today (``grep 'kg\\.' kgreason/reasoners``): entity and relation vocabularies, labels,
name lookup, and the facts around one entity as *triple ids* into ``heads``/``rels``/``tails``.
Ids are local to one source object: the SPARQL source hands out an id the first time it meets an
entity or fact, so ids from two sources must never be compared, only the names behind them.

What the interface does not promise: the whole graph. ``SUB``/``OBJ``/``REL`` (the LogosKG matrix
engines), ``degree()`` and ``triples`` over all facts exist only on the in-memory store;
:func:`require_in_memory` stops a run at start-up with a message saying so.

:func:`prefetch` is how a reasoner that scans ``heads``/``tails`` (ReKnoS's super-relation
candidates, Eq. 9) makes sure the facts of a frontier are local first: one batched request per
block of entities on the SPARQL source, nothing on the in-memory store.
"""

from __future__ import annotations

from typing import Iterable, Protocol, Sequence, runtime_checkable

import numpy as np


@runtime_checkable
class KGSource(Protocol):
    """What a KGQA reasoner may ask of a KG (see the module docstring)."""

    name: str
    entity_names: Sequence[str]
    relation_names: Sequence[str]

    @property
    def n_entities(self) -> int: ...
    @property
    def n_relations(self) -> int: ...
    @property
    def n_triples(self) -> int: ...
    @property
    def heads(self) -> np.ndarray: ...
    @property
    def rels(self) -> np.ndarray: ...
    @property
    def tails(self) -> np.ndarray: ...

    def entity_id(self, name: str) -> int: ...
    def find_entity(self, mention: str) -> int: ...
    def relation_id(self, name: str) -> int: ...
    def entity_label(self, i: int) -> str: ...
    def type_of(self, i: int) -> str | None: ...
    def out_triples(self, entity: int) -> np.ndarray: ...
    def in_triples(self, entity: int) -> np.ndarray: ...
    def verbalise(self, triple: Sequence[int]) -> str: ...


class NeedsInMemoryKG(RuntimeError):
    """A step needs the whole graph in memory and the configured KG is a remote source."""


def is_in_memory(kg) -> bool:
    """True for a KG whose every fact is local (the in-memory store)."""
    return not getattr(kg, "remote", False)


def require_in_memory(kg, what: str) -> None:
    """Stop before the first example when ``what`` needs the whole graph and ``kg`` is remote."""
    if not is_in_memory(kg):
        raise NeedsInMemoryKG(
            f"{what} needs the whole graph in memory, but kg={getattr(kg, 'name', kg)!r} is a SPARQL "
            f"endpoint ({getattr(kg, 'endpoint_url', '?')}); use an in-memory KG (e.g. kg=freebase_slice) "
            f"or retriever=sparql for k-hop retrieval")


def prefetch(kg, entities: Iterable[int]) -> None:
    """Make the facts around ``entities`` local (batched on a SPARQL source; no-op in memory)."""
    fn = getattr(kg, "prefetch", None)
    if fn is not None:
        fn(entities)
