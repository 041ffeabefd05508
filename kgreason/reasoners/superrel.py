"""Super-relations for ReKnoS (reknos.txt §3.2): groups of KG relations within one field.

Three sources, picked by ``ReKnoS(superrel_source=...)``:

* ``hierarchy``: the KG's own relation hierarchy. Freebase-style ``domain.type.property`` names
  group by their ``domain.type`` prefix (``film.film.directed_by`` → ``film.film``), as the
  paper does with the Freebase/Wikidata hierarchies. A compound relation through a CVT node
  (FB15k-237 writes ``award.award_category.winners|award.award_honor.award_winner``: the first
  hop, then the CVT's property) groups by the hierarchy of its FIRST hop (→
  ``award.award_category``): the first hop is the property of the entity the search stands on,
  the type the relation belongs to in Freebase's schema, while the CVT type is an internal node
  the search never sees. The plain prefix rule would put each compound relation in a group of
  its own (``award.award_category.winners|award.award_honor``): 159 groups for FB15k-237's 237
  relations, 117 of them singletons; the first-hop rule gives 109 groups, 64 singletons
  (:meth:`SuperRelations.histogram`, tested on the shared slice). A relation→group map file
  (TSV ``relation<TAB>group`` or JSON ``{relation: group}``) overrides the rule for KGs with a
  flat schema. Relations without a dot form a group of their own.
* ``cluster``: for KGs without a hierarchy (§3.2: "clustering when hierarchies are absent"):
  seeded k-means (Lloyd) in numpy on all-MiniLM-L6-v2 embeddings of the relation names.
* ``random``: a seeded random partition of the relations (ablation: breaks the semantic
  coherence of the groups while keeping the search breadth).

A super-relation is shown to the LLM by its name plus a few member properties. Each group
holds the relation ids of its members; ``group_of[r]`` is the group of relation ``r``.

>>> from kgreason.kg.store import KG
>>> kg = KG.from_triples([("a", "film.film.directed_by", "b"), ("a", "film.film.genre", "c"),
...                       ("b", "people.person.spouse", "d")])
>>> sr = hierarchy_superrelations(kg)
>>> sr.names, sr.group_of.tolist()
(['film.film', 'people.person'], [0, 0, 1])
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from kgreason.kg.store import KG


@dataclass(frozen=True)
class SuperRelations:
    """A partition of the KG's relations into named groups.

    Attributes:
        names: ``(G,)`` group names (unique).
        group_of: ``(R,)`` int32 group id of every relation.
        members: ``[g]`` = ``(m_g,)`` int32 relation ids in group ``g``, sorted.
        source: ``hierarchy`` | ``cluster`` | ``random``.
    """

    names: list[str]
    group_of: np.ndarray
    members: list[np.ndarray]
    source: str

    @staticmethod
    def from_assignment(labels: Sequence[int], names: Sequence[str], source: str) -> "SuperRelations":
        group_of = np.asarray(labels, dtype=np.int32)
        members = [np.flatnonzero(group_of == g).astype(np.int32) for g in range(len(names))]
        return SuperRelations(list(names), group_of, members, source)

    @property
    def n_groups(self) -> int:
        return len(self.names)

    def histogram(self, kg: KG) -> dict:
        """The grouping at a glance, for the run's report: relation and group counts, singleton
        groups, compound (CVT, ``|``) relations, and ``sizes`` = {group size: number of groups}."""
        sizes = np.bincount(np.asarray([len(m) for m in self.members], dtype=np.int64))
        return {
            "kg": getattr(kg, "name", "?"), "source": self.source, "n_relations": int(len(self.group_of)),
            "n_groups": self.n_groups, "singletons": int(sizes[1]) if len(sizes) > 1 else 0,
            "compound_relations": sum(1 for r in kg.relation_names if "|" in r),
            "largest_group": int(len(sizes) - 1),
            "sizes": {str(k): int(v) for k, v in enumerate(sizes) if v},
        }

    def describe(self, kg: KG, g: int, max_members: int = 4) -> str:
        """``"film.film: directed_by, genre, ..."``: the name and a few member relations."""
        # members by name, not by relation id (ids follow the KG's storage order)
        rels = sorted(kg.relation_names[r] for r in self.members[g])[:max_members]
        short = [r[len(self.names[g]) + 1 :] if r.startswith(self.names[g] + ".") else r for r in rels]
        more = ", ..." if len(self.members[g]) > max_members else ""
        return f"{', '.join(short)}{more}"


def hierarchy_group(rel: str) -> str:
    """The hierarchy group of one relation name: the ``domain.type`` of its first hop.

    >>> hierarchy_group("film.film.directed_by"), hierarchy_group("people.person.spouse_s|people.marriage.spouse")
    ('film.film', 'people.person')
    >>> hierarchy_group("nationality")
    'nationality'
    """
    first = rel.split("|", 1)[0]
    return first.rsplit(".", 1)[0] if first.count(".") >= 2 else first


def hierarchy_superrelations(kg: KG, map_file: str | None = None) -> SuperRelations:
    """Group relations by their first hop's ``domain.type`` (:func:`hierarchy_group`), or by
    ``map_file`` (relation → group)."""
    mapping: Mapping[str, str] = _read_map(map_file) if map_file else {}
    group_names: dict[str, int] = {}
    labels = []
    for rel in kg.relation_names:
        g = mapping[rel] if rel in mapping else hierarchy_group(rel)
        labels.append(group_names.setdefault(g, len(group_names)))
    return SuperRelations.from_assignment(labels, list(group_names), "hierarchy")


def _read_map(path: str) -> dict[str, str]:
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"super-relation map file {p} not found")
    text = p.read_text()
    if p.suffix == ".json":
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"{p}: expected a JSON object {{relation: group}}")
        return {str(k): str(v) for k, v in data.items()}
    out = {}
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.rstrip("\n").split("\t")
        if len(parts) != 2:
            raise ValueError(f"{p}:{i}: expected 'relation<TAB>group', got {line!r}")
        out[parts[0]] = parts[1]
    return out


def kmeans(x: np.ndarray, k: int, seed: int = 0, iters: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """Seeded Lloyd k-means with k-means++ initialisation.

    Args:
        x: ``(n, d)`` float32 points.
        k: clusters (clipped to ``n``).

    Returns:
        ``(labels (n,) int32, centroids (k, d) float32)``. Empty clusters are re-seeded with the
        point farthest from its centroid.
    """
    n = len(x)
    k = max(1, min(k, n))
    rng = np.random.default_rng(seed)
    cent = [x[int(rng.integers(n))]]
    for _ in range(1, k):
        d2 = np.min(((x[:, None, :] - np.asarray(cent)[None]) ** 2).sum(-1), axis=1)
        p = d2 / d2.sum() if d2.sum() > 0 else np.full(n, 1.0 / n)
        cent.append(x[int(rng.choice(n, p=p))])
    c = np.asarray(cent, dtype=np.float64)
    labels = np.full(n, -1, dtype=np.int32)
    for _ in range(iters):
        d2 = ((x[:, None, :] - c[None]) ** 2).sum(-1)
        new = d2.argmin(1).astype(np.int32)
        for j in range(k):
            if not np.any(new == j):
                far = int(d2[np.arange(n), new].argmax())
                new[far] = j
        if np.array_equal(new, labels):
            break
        labels = new
        c = np.stack([x[labels == j].mean(0) for j in range(k)])
    return labels, c.astype(np.float32)


def cluster_superrelations(kg: KG, n_clusters: int = 8, seed: int = 0, embedder=None) -> SuperRelations:
    """k-means over MiniLM embeddings of the relation names (dots/underscores → spaces).

    A cluster is named after its member nearest to the centroid (``"~film.film.directed_by"``
    style names would mislead; we use ``"cluster:<nearest relation>"``)."""
    from kgreason.embed import Embedder

    emb = embedder if embedder is not None else Embedder()
    store = emb.kg_store(kg, "relation_words") if hasattr(emb, "kg_store") else None  # built once per machine
    if store is not None:
        x = np.asarray(store.matrix, dtype=np.float64)
    else:
        x = emb.encode([r.replace(".", " ").replace("_", " ") for r in kg.relation_names]).astype(np.float64)
    labels, cent = kmeans(x, n_clusters, seed=seed)
    names = []
    for j in range(len(cent)):
        idx = np.flatnonzero(labels == j)
        nearest = idx[int(((x[idx] - cent[j]) ** 2).sum(1).argmin())]
        names.append(f"cluster:{kg.relation_names[nearest]}")
    return SuperRelations.from_assignment(labels, _unique(names), "cluster")


def random_superrelations(kg: KG, n_groups: int | None = None, seed: int = 0) -> SuperRelations:
    """A seeded random partition into ``n_groups`` (default: as many as the hierarchy has)."""
    g = n_groups or hierarchy_superrelations(kg).n_groups
    g = max(1, min(g, kg.n_relations))
    rng = np.random.default_rng(seed)
    labels = np.concatenate([np.arange(g), rng.integers(0, g, size=kg.n_relations - g)])
    rng.shuffle(labels)
    return SuperRelations.from_assignment(labels, [f"group_{j}" for j in range(g)], "random")


def build_superrelations(kg: KG, source: str = "hierarchy", *, map_file: str | None = None,
                         n_clusters: int = 8, seed: int = 0, embedder=None) -> SuperRelations:
    if source == "hierarchy":
        return hierarchy_superrelations(kg, map_file)
    if source == "cluster":
        return cluster_superrelations(kg, n_clusters, seed, embedder)
    if source == "random":
        return random_superrelations(kg, None, seed)
    raise ValueError(f"superrel_source={source!r}: expected hierarchy | cluster | random")


def _unique(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n}#{seen[n]}")
    return out
