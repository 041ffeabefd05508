"""The one diagnosis precision / recall / F1 (LogosKG Appendix A.2, Eq. 11-12).

Every diagnosis number of the project comes from :func:`dx_prf`: the final answers
(``dx_precision`` / ``dx_recall`` / ``dx_f1``) and each round a reasoner carries in
``Prediction.rounds`` (``dx_<round>_<precision|recall|f1>``, see :mod:`kgreason.metrics`).

A.2 defines an *entity-level* overlap of two sets::

    Precision = |pred ∩ gold| / |pred|        Recall = |pred ∩ gold| / |gold|

and says Round 1 and Round 2 use the same computation on their own prediction sets (Eq. 12).
Two diagnosis strings are **the same entity** when

* they normalise to the same string (:func:`normalise_diagnosis`):

  1. lower-case;
  2. delete ASCII punctuation (``Pneumonia.`` → ``pneumonia``, ``Guillain-Barré`` →
     ``guillainbarré``); non-ASCII characters stay as they are;
  3. collapse whitespace;
  4. drop ONE leading article ``a`` / ``an`` / ``the`` when a word follows (``the flu`` → ``flu``);

* **or** they link to the same KG entity through the KG's names, labels and aliases
  (``KG.find_entity``; on UMLS a CUI's every English string, on PrimeKG a node's name): a correct
  Round 2 pick named ``High Blood Pressure`` matches the gold ``Hypertension`` when both link to
  C0020538. The links are the run's (:func:`entity_links`, written into the prediction row as
  ``extra["dx_entity_links"]``, ``{string: KG entity name}``), so ``python -m kgreason.score``
  reproduces the run's value from ``predictions.jsonl`` without the KG. With no links (a dataset
  run without a KG, or a hand-written file) only the string rule applies.

"Same entity" is closed transitively (strings → entity classes); both sides become sets of
classes (a string normalising to ``""`` is dropped; two spellings or two aliases of one entity
count once, on either side) and ``|pred ∩ gold|`` is the size of the intersection of the class
sets. Why the string rule: spellings that differ only in case, punctuation or a leading
determiner must count as one entity even when the KG does not know them; an article inside a
name is part of it (``Hepatitis A`` ≠ ``Hepatitis``, which the SQuAD normaliser of
:mod:`kgreason.metrics.qa`, which drops every ``a``, would merge).

Conventions for the cases A.2 leaves undefined: an empty prediction set has P = R = F1 = 0; an
empty gold set makes the example not applicable (``None``, left out of the mean). F1 is the
harmonic mean 2PR / (P + R), 0 when P + R = 0.

Golden table: ``tests/metrics/test_dx_prf.py``.
"""

from __future__ import annotations

import re
import string
from typing import Any, Iterable, Mapping

_PUNCT = str.maketrans("", "", string.punctuation)
_LEADING_ARTICLE = re.compile(r"^(?:a|an|the)\s+(?=\S)")


def normalise_diagnosis(name: str) -> str:
    """The entity key of a diagnosis string (rule in the module docstring)."""
    s = " ".join(str(name).lower().translate(_PUNCT).split())
    return _LEADING_ARTICLE.sub("", s)


LINKS_KEY = "dx_entity_links"  # Prediction.extra key: {diagnosis string: KG entity name}


def entity_links(kg: Any, names: Iterable[str]) -> dict[str, str]:
    """``{string: KG entity name}`` for every string of ``names`` that ``kg.find_entity`` links
    (exact name, then normalised name / label / alias); unlinked strings are left out."""
    out: dict[str, str] = {}
    for n in dict.fromkeys(str(x) for x in names):
        i = kg.find_entity(n)
        if i is not None and i >= 0:
            out[n] = str(kg.entity_names[int(i)])
    return out


def _classes(items: Iterable[str], links: Mapping[str, str], parent: dict[str, str]) -> list[tuple[str, str]]:
    """Registers each item's string key (and its KG entity, joined to it) in the union-find
    ``parent``; returns the (item, string key) pairs of the items that normalise to something."""
    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    keys = []
    for x in items:
        n = normalise_diagnosis(x)
        if not n:
            continue
        keys.append((x, "s:" + n))
        find("s:" + n)
        ent = links.get(x)
        if ent is not None:
            a, b = find("s:" + n), find("e:" + str(ent))
            if a != b:
                parent[a] = b
    return keys


def _root(parent: dict[str, str], x: str) -> str:
    while parent[x] != x:
        x = parent[x]
    return x


def dx_prf(predicted: Iterable[str], gold: Iterable[str],
           links: Mapping[str, str] | None = None) -> tuple[float, float, float] | None:
    """``(precision, recall, f1)`` of predicted vs gold diagnoses, or None with no gold.
    ``links``: ``{string: KG entity name}`` (the run's :func:`entity_links`); two strings linked
    to one entity are one entity (module docstring)."""
    links = links or {}
    parent: dict[str, str] = {}
    pk = _classes(list(predicted), links, parent)
    gk = _classes(list(gold), links, parent)
    p = {_root(parent, k) for _, k in pk}
    g = {_root(parent, k) for _, k in gk}
    if not g:
        return None
    hit = len(p & g)
    prec = hit / len(p) if p else 0.0
    rec = hit / len(g)
    f = 2 * prec * rec / (prec + rec) if prec + rec > 0 else 0.0
    return prec, rec, f


def links_of(extra: Mapping[str, Any]) -> dict[str, str]:
    """The run's entity links recorded in a prediction's ``extra`` (empty when absent)."""
    v = extra.get(LINKS_KEY) if isinstance(extra, Mapping) else None
    return dict(v) if isinstance(v, Mapping) else {}


__all__ = ["dx_prf", "entity_links", "links_of", "normalise_diagnosis", "LINKS_KEY"]
