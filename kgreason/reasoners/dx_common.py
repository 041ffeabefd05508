"""What the two diagnosis reasoners share (``kg_dx`` and ``logoskg_dx`` import this module,
never each other).

* :func:`diagnosis_types` / :func:`diagnosis_mask` — which KG entities are diagnoses;
* :func:`check_hop_retriever` — both reasoners read hop *distances* from the retriever's BFS
  layers and treat a finding–diagnosis edge as undirected (LogosKG §3.1 k-hop retrieval; §6);
* :func:`within_k` — the entities at distance ≤ k (or == k) from a seed set, from one
  :class:`~kgreason.types.Subgraph`;
* :func:`parse_name_list` — the strict reply parser for a JSON list of diagnosis / entity names;
* :func:`chunk_by_chars` — splits a candidate listing into prompts that fit a character budget
  (LogosKG App. A.5: Round 2 shows the LLM *every* KG candidate, 715 in the paper's case).

Nothing here reads gold answers: diagnosis scores come from :mod:`kgreason.metrics.clinical`,
computed by the run from ``Prediction.answers`` and ``Prediction.rounds``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from kgreason.llm.parsing import ParseResult, parse_json, truncated_json_list


def diagnosis_types(kg, disease_type: str | Sequence[str], who: str) -> list[str]:
    """The KG entity types that count as diagnoses: ``disease_type`` is one name or a list
    (e.g. ``[disease, pathology]``: PrimeKG says ``disease``, the DDXPlus KG ``pathology``);
    the names the KG has are used, and none at all is an error naming the KG's types."""
    names = [disease_type] if isinstance(disease_type, str) else [str(x) for x in disease_type]
    present = [n for n in names if n in kg.type_names]
    if not present:
        raise ValueError(f"{who}: KG {kg.name!r} has none of the diagnosis entity types {names}; "
                         f"its types: {list(kg.type_names)} (set reasoner.disease_type)")
    return present


def diagnosis_mask(kg, disease_type: str | Sequence[str], who: str) -> np.ndarray:
    """``(n_entities,)`` bool: True for the entities of the diagnosis types."""
    mask = np.zeros(kg.n_entities, dtype=bool)
    for ty in diagnosis_types(kg, disease_type, who):
        mask[kg.entities_of_type(ty)] = True
    return mask


def _value(x) -> str:
    return str(getattr(x, "value", x))


def check_hop_retriever(retriever, who: str, require_both_directions: bool = True) -> None:
    """Refuse a retriever whose layers are not hop distances (``walk`` semantics) or, unless
    ``require_both_directions`` is off, one that follows edges in one direction only."""
    if _value(getattr(retriever, "semantics", None)) == "walk":
        raise ValueError(f"{who} needs hop distances: use a retriever with semantics within|exact, not walk")
    direction = _value(getattr(retriever, "direction", "both"))
    if require_both_directions and direction != "both":
        raise ValueError(f"{who}: finding→diagnosis hops are undirected; set retriever.direction=both "
                         f"(got {direction}) or reasoner.require_both_directions=false")


def within_k(seeds: np.ndarray, layers: Sequence[np.ndarray], k: int, exact: bool) -> np.ndarray:
    """Sorted int32 ids at distance ≤ k from ``seeds`` (seeds included: distance 0), or at
    distance exactly k with ``exact`` (ablation ``dx_exact_k``; not a setting of the LogosKG study).

    ``layers`` are the BFS shells of one ``retrieve(seeds, k)`` (``Subgraph.entities_by_hop``,
    ``within``/``exact`` semantics); fewer than k shells means nothing lies at distance k."""
    if exact:
        return np.unique(layers[-1]).astype(np.int32) if len(layers) >= k else np.zeros(0, np.int32)
    parts = [np.asarray(seeds, dtype=np.int32)] + [np.asarray(x, dtype=np.int32) for x in layers]
    return np.unique(np.concatenate(parts)).astype(np.int32)


def parse_name_list(text: str) -> ParseResult:
    """Strict: a JSON list of strings (or an object holding one list). Anything else fails,
    which triggers the bounded re-ask."""
    js = parse_json(text)
    val = js.value
    if js.ok and isinstance(val, dict):
        lists = [v for v in val.values() if isinstance(v, list)]
        val = lists[0] if lists else None
    if not js.ok or not isinstance(val, list):
        cut = truncated_json_list(text)  # cut off at max_tokens: its complete items (docs/validation.md)
        if cut:
            return ParseResult(True, list(dict.fromkeys(cut)), f"JSON list cut off: kept its {len(cut)} complete items")
        return ParseResult(False, [], "expected a JSON list of strings")
    out = [str(x).strip() for x in val if isinstance(x, (str, int, float)) and str(x).strip()]
    return ParseResult(True, list(dict.fromkeys(out)))


def chunk_by_chars(names: Sequence[str], budget: int) -> list[list[str]]:
    """Split ``names`` (in order) into consecutive parts whose listing — one ``- name`` line
    each, ``len(name) + 3`` characters — fits ``budget`` characters; a new part starts only
    when the next line would not fit, and a name longer than the budget gets a part of its
    own (never dropped). Every name lands in exactly one part."""
    if int(budget) < 1:
        raise ValueError(f"round2_chars must be >= 1 characters, got {budget}")
    parts: list[list[str]] = []
    used = budget + 1
    for n in names:
        size = len(n) + 3
        if used + size > budget:
            parts.append([])
            used = 0
        parts[-1].append(n)
        used += size
    return parts


__all__ = ["diagnosis_types", "diagnosis_mask", "check_hop_retriever", "within_k", "parse_name_list",
           "chunk_by_chars"]
