"""The in-memory KG: int32 triple arrays, vocabularies, CSR indexes and LogosKG incidence views.

A tiny example (entities 0..4, relations ``a``=0 and ``b``=1)::

      0 --a--> 1 --b--> 3
      |                 ^
      +--a--> 2 --a-----+
                        4 (isolated)

Triples are rows of ``(head, rel, tail)``; triple ``t`` is row ``t``. The LogosKG views
(logoskg.txt §3.2, Eq. 1–3) are

* ``SUB``: ``(n_entities, n_triples)`` CSR, ``SUB[i, t] = 1`` iff entity i is the subject of t;
* ``OBJ``: ``(n_triples, n_entities)`` CSR, ``OBJ[t, j] = 1`` iff entity j is the object of t;
* ``REL``: ``(n_triples, n_relations)`` CSR, ``REL[t, r] = 1`` iff t uses relation r.

>>> kg = KG.from_triples([("A", "a", "B"), ("B", "b", "D"), ("A", "a", "C"), ("C", "a", "D")])
>>> kg.n_entities, kg.n_relations, kg.n_triples
(4, 2, 4)
>>> sorted(kg.entity_names[j] for j in (kg.SUB @ kg.OBJ)[kg.entity_id("A")].nonzero()[1])
['B', 'C']
"""

from __future__ import annotations

import json
import re
from functools import cached_property
from pathlib import Path
from collections.abc import Sequence as _SequenceABC
from typing import Iterable, Mapping, Sequence

import numpy as np
import scipy.sparse as sp

_WS = re.compile(r"\s+")


def normalise_name(name: str) -> str:
    """Lower-case, collapse whitespace and underscores: the key for name/alias lookup."""
    return _WS.sub(" ", name.replace("_", " ")).strip().lower()


class RangeNames(_SequenceABC):
    """Lazy entity names ``f"{prefix}{i}"`` for ``i in range(n)`` (synthetic KGs at PKG scale:
    54M names as a Python list would take ~4 GB and a multi-second ``vocab.json`` load).

    Behaves as a read-only sequence of ``str``; equal to any sequence with the same items;
    ``index(name)`` is O(1) by parsing. Serialised in ``vocab.json`` as
    ``{"range": prefix, "n": n}``.

    >>> names = RangeNames(3)
    >>> list(names), names[-1], names[:2], names.index("e2"), "e3" in names
    (['e0', 'e1', 'e2'], 'e2', ['e0', 'e1'], 2, False)
    """

    __slots__ = ("n", "prefix")

    def __init__(self, n: int, prefix: str = "e") -> None:
        self.n, self.prefix = int(n), str(prefix)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [f"{self.prefix}{j}" for j in range(*i.indices(self.n))]
        i = int(i)
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(i)
        return f"{self.prefix}{i}"

    def lookup(self, name) -> int:
        """Id of ``name`` or ``-1``."""
        if not isinstance(name, str) or not name.startswith(self.prefix):
            return -1
        digits = name[len(self.prefix):]
        if not digits.isdigit() or (len(digits) > 1 and digits[0] == "0"):
            return -1
        i = int(digits)
        return i if i < self.n else -1

    def index(self, name, *args) -> int:  # type: ignore[override]
        i = self.lookup(name)
        if i < 0:
            raise ValueError(f"{name!r} is not in names")
        return i

    def __contains__(self, name) -> bool:
        return self.lookup(name) >= 0

    def __eq__(self, other) -> bool:
        if isinstance(other, RangeNames):
            return (self.n, self.prefix) == (other.n, other.prefix) or (self.n == other.n == 0)
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(other) == self.n and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def to_json(self) -> dict:
        return {"range": self.prefix, "n": self.n}

    def __repr__(self) -> str:
        return f"RangeNames({self.n}, prefix={self.prefix!r})"


class _RangeIndex(dict):
    """``name → id`` for :class:`RangeNames` without materialising it (dict API subset)."""

    def __init__(self, names: RangeNames) -> None:
        super().__init__()
        self._names = names

    def __missing__(self, key):
        i = self._names.lookup(key)
        if i < 0:
            raise KeyError(key)
        return i

    def get(self, key, default=None):
        i = self._names.lookup(key)
        return i if i >= 0 else default

    def __contains__(self, key) -> bool:
        return self._names.lookup(key) >= 0


class KG:
    """A directed multi-relational graph held as int32 arrays.

    Args:
        heads, rels, tails: ``(m,)`` int ids, one triple per position.
        entity_names: ``(n,)`` names; the id of ``entity_names[i]`` is ``i``. Names are unique.
            A :class:`RangeNames` is kept as is (lazy ``e<i>`` names for huge synthetic KGs).
        relation_names: ``(R,)`` relation names.
        aliases: optional ``{alias: entity name}``; aliases are matched after
            :func:`normalise_name`.
        entity_types: optional ``(n,)`` int32 type ids (``-1`` = unknown), with ``type_names``.
        labels: optional ``(n,)`` human-readable labels (e.g. the English name of a Freebase MID).
        name: a short label for logs and tables.
        validate: check that ids are in range (a full pass over the triple arrays; ``KG.load``
            of a huge memory-mapped KG can skip it to avoid paging the arrays in).
    """

    def __init__(
        self,
        heads: np.ndarray,
        rels: np.ndarray,
        tails: np.ndarray,
        entity_names: Sequence[str],
        relation_names: Sequence[str],
        *,
        aliases: Mapping[str, str] | None = None,
        entity_types: np.ndarray | None = None,
        type_names: Sequence[str] = (),
        labels: Sequence[str] | None = None,
        name: str = "kg",
        validate: bool = True,
    ) -> None:
        self.heads = np.ascontiguousarray(heads, dtype=np.int32)
        self.rels = np.ascontiguousarray(rels, dtype=np.int32)
        self.tails = np.ascontiguousarray(tails, dtype=np.int32)
        if not (len(self.heads) == len(self.rels) == len(self.tails)):
            raise ValueError("heads, rels and tails must have the same length")
        self.entity_names = entity_names if isinstance(entity_names, RangeNames) else list(entity_names)
        self.relation_names = list(relation_names)
        self.name = name
        n, r = len(self.entity_names), len(self.relation_names)
        if validate and len(self.heads):
            for arr, bound, what in ((self.heads, n, "head"), (self.tails, n, "tail"), (self.rels, r, "relation")):
                lo, hi = int(arr.min()), int(arr.max())
                if lo < 0 or hi >= bound:
                    raise ValueError(f"{what} id out of range [0, {bound}): found {lo if lo < 0 else hi}")
        self.entity_types = (
            np.full(n, -1, dtype=np.int32) if entity_types is None else np.asarray(entity_types, dtype=np.int32)
        )
        self.type_names = list(type_names)
        self.labels = list(labels) if labels is not None else None
        self._aliases = dict(aliases or {})

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_triples(
        cls,
        triples: Iterable[tuple[str, str, str]],
        *,
        entity_types: Mapping[str, str] | None = None,
        aliases: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        extra_entities: Iterable[str] = (),
        name: str = "kg",
    ) -> "KG":
        """Build a KG from string triples; ids are assigned in first-seen order."""
        ent: dict[str, int] = {}
        rel: dict[str, int] = {}
        h, r, t = [], [], []
        for head, relation, tail in triples:
            h.append(ent.setdefault(head, len(ent)))
            r.append(rel.setdefault(relation, len(rel)))
            t.append(ent.setdefault(tail, len(ent)))
        for e in extra_entities:
            ent.setdefault(e, len(ent))
        names = list(ent)
        types_arr, type_names = None, []
        if entity_types:
            type_names = sorted(set(entity_types.values()))
            tix = {tn: i for i, tn in enumerate(type_names)}
            types_arr = np.array([tix.get(entity_types.get(e, ""), -1) for e in names], dtype=np.int32)
        lab = [labels.get(e, e) for e in names] if labels else None
        return cls(
            np.array(h, dtype=np.int32), np.array(r, dtype=np.int32), np.array(t, dtype=np.int32),
            names, list(rel), aliases=aliases, entity_types=types_arr, type_names=type_names,
            labels=lab, name=name,
        )

    # ------------------------------------------------------------------ sizes & vocab
    @property
    def n_entities(self) -> int:
        return len(self.entity_names)

    @property
    def n_relations(self) -> int:
        return len(self.relation_names)

    @property
    def n_triples(self) -> int:
        return len(self.heads)

    @property
    def triples(self) -> np.ndarray:
        """``(m, 3)`` int32 rows ``(head, rel, tail)``."""
        return np.stack([self.heads, self.rels, self.tails], axis=1)

    @cached_property
    def _entity_index(self) -> dict[str, int]:
        if isinstance(self.entity_names, RangeNames):
            return _RangeIndex(self.entity_names)
        return {name: i for i, name in enumerate(self.entity_names)}

    @cached_property
    def _relation_index(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.relation_names)}

    @cached_property
    def _name_index(self) -> dict[str, int]:
        """normalised name/label/alias → id (first writer wins, exact names take priority)."""
        idx: dict[str, int] = {}
        if isinstance(self.entity_names, RangeNames) and not self._aliases and self.labels is None:
            return _RangeIndex(RangeNames(self.n_entities, normalise_name(self.entity_names.prefix)))
        for alias, target in self._aliases.items():
            if target in self._entity_index:
                idx.setdefault(normalise_name(alias), self._entity_index[target])
        if self.labels is not None:
            for i, lab in enumerate(self.labels):
                idx.setdefault(normalise_name(lab), i)
        for i, name in enumerate(self.entity_names):
            idx[normalise_name(name)] = i
        return idx

    @property
    def aliases(self) -> dict[str, str]:
        return dict(self._aliases)

    def entity_id(self, name: str) -> int:
        """Exact id of an entity name; raises KeyError with a hint when unknown."""
        try:
            return self._entity_index[name]
        except KeyError:
            raise KeyError(f"unknown entity {name!r} in KG {self.name!r}") from None

    def find_entity(self, mention: str) -> int:
        """Id by exact name, then normalised name / label / alias; ``-1`` if none."""
        i = self._entity_index.get(mention)
        if i is not None:
            return i
        return self._name_index.get(normalise_name(mention), -1)

    def has_relation(self, name: str) -> bool:
        """Whether ``name`` is exactly one of the KG's relation names."""
        return name in self._relation_index

    def relation_id(self, name: str) -> int:
        """Id of an exact relation name; raises KeyError naming the KG when unknown."""
        try:
            return self._relation_index[name]
        except KeyError:
            raise KeyError(f"unknown relation {name!r} in KG {self.name!r}") from None

    def entity_ids(self, names: Iterable[str]) -> np.ndarray:
        return np.array([self.entity_id(n) for n in names], dtype=np.int32)

    def entity_label(self, i: int) -> str:
        """Human-readable label (falls back to the entity name)."""
        return self.labels[i] if self.labels is not None else self.entity_names[i]

    def type_of(self, i: int) -> str | None:
        t = int(self.entity_types[i])
        return self.type_names[t] if t >= 0 else None

    def entities_of_type(self, type_name: str) -> np.ndarray:
        if type_name not in self.type_names:
            return np.zeros(0, dtype=np.int32)
        return np.flatnonzero(self.entity_types == self.type_names.index(type_name)).astype(np.int32)

    def verbalise(self, triple: Sequence[int]) -> str:
        """``"head label | relation | tail label"`` for prompts and embeddings."""
        h, r, t = (int(x) for x in triple)
        return f"{self.entity_label(h)} | {self.relation_names[r]} | {self.entity_label(t)}"

    # ------------------------------------------------------------------ indexes
    @cached_property
    def out_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """``(indptr (n+1,), triple_ids (m,))``: triples grouped by head, stable order."""
        return _group(self.heads, self.n_entities)

    @cached_property
    def in_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """``(indptr (n+1,), triple_ids (m,))``: triples grouped by tail."""
        return _group(self.tails, self.n_entities)

    def out_triples(self, entity: int) -> np.ndarray:
        indptr, tids = self.out_csr
        return tids[indptr[entity] : indptr[entity + 1]]

    def in_triples(self, entity: int) -> np.ndarray:
        indptr, tids = self.in_csr
        return tids[indptr[entity] : indptr[entity + 1]]

    @cached_property
    def SUB(self) -> sp.csr_matrix:  # noqa: N802 - the paper's name
        m = self.n_triples
        return sp.csr_matrix(
            (np.ones(m, dtype=np.float32), (self.heads, np.arange(m))), shape=(self.n_entities, m)
        )

    @cached_property
    def OBJ(self) -> sp.csr_matrix:  # noqa: N802
        m = self.n_triples
        return sp.csr_matrix(
            (np.ones(m, dtype=np.float32), (np.arange(m), self.tails)), shape=(m, self.n_entities)
        )

    @cached_property
    def REL(self) -> sp.csr_matrix:  # noqa: N802
        m = self.n_triples
        return sp.csr_matrix(
            (np.ones(m, dtype=np.float32), (np.arange(m), self.rels)), shape=(m, self.n_relations)
        )

    def degree(self) -> np.ndarray:
        """``(n,)`` int64 total degree (in + out)."""
        return np.bincount(self.heads, minlength=self.n_entities) + np.bincount(
            self.tails, minlength=self.n_entities
        )

    # ------------------------------------------------------------------ persistence
    def save(self, directory: str | Path) -> Path:
        """Write a compiled copy: ``.npy`` arrays (memory-mappable) + ``vocab.json``."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        for key in ("heads", "rels", "tails", "entity_types"):
            np.save(d / f"{key}.npy", getattr(self, key))
        vocab = {
            "name": self.name,
            "entity_names": (self.entity_names.to_json() if isinstance(self.entity_names, RangeNames)
                             else self.entity_names),
            "relation_names": self.relation_names,
            "type_names": self.type_names,
            "labels": self.labels,
            "aliases": self._aliases,
        }
        tmp = d / "vocab.json.tmp"
        tmp.write_text(json.dumps(vocab))
        tmp.replace(d / "vocab.json")  # written last: its presence marks a complete cache
        return d

    @classmethod
    def load(cls, directory: str | Path, mmap: bool = True, validate: bool = True) -> "KG":
        d = Path(directory)
        vocab_path = d / "vocab.json"
        if not vocab_path.exists():
            raise FileNotFoundError(f"{vocab_path}: not a compiled KG directory (vocab.json missing)")
        vocab = json.loads(vocab_path.read_text())
        mode = "r" if mmap else None
        arr = {k: np.load(d / f"{k}.npy", mmap_mode=mode) for k in ("heads", "rels", "tails", "entity_types")}
        names = vocab["entity_names"]
        if isinstance(names, dict):  # {"range": prefix, "n": n}: lazy synthetic names
            names = RangeNames(int(names["n"]), names.get("range", "e"))
        return cls(
            arr["heads"], arr["rels"], arr["tails"], names, vocab["relation_names"],
            aliases=vocab.get("aliases"), entity_types=arr["entity_types"],
            type_names=vocab.get("type_names", []), labels=vocab.get("labels"), name=vocab.get("name", "kg"),
            validate=validate,
        )

    def subset(self, triple_ids: np.ndarray, name: str | None = None) -> "KG":
        """A KG with the same vocabularies and only the given triples."""
        tids = np.asarray(triple_ids, dtype=np.int64)
        return KG(
            self.heads[tids], self.rels[tids], self.tails[tids], self.entity_names, self.relation_names,
            aliases=self._aliases, entity_types=self.entity_types, type_names=self.type_names,
            labels=self.labels, name=name or self.name,
        )

    def __repr__(self) -> str:
        return (
            f"KG(name={self.name!r}, entities={self.n_entities}, relations={self.n_relations}, "
            f"triples={self.n_triples})"
        )


def _group(keys: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(keys, kind="stable").astype(np.int32)
    counts = np.bincount(keys, minlength=n)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return indptr, order
