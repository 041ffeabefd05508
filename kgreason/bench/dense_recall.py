"""Passage Recall@k of dense MiniLM retrieval on the shared multi-hop samples.

``python -m kgreason.bench.dense_recall [--data DIR] [--limit 200] [--k 2 5] [--cache DIR]``

Recall as in HippoRAG (Gutiérrez et al., 2024, §4 "Metrics"): for each question, the fraction
of its gold supporting passages that appear among the top-k retrieved passages, averaged over
questions. Two settings are reported:

* ``distractor``: retrieval over the question's own paragraphs only (10 for HotpotQA/2Wiki,
  20 for MuSiQue: gold + distractors) — the dataset's distractor setting;
* ``pooled``: retrieval over the union of all (title, text) paragraphs of the evaluated
  questions (a small open corpus, still much smaller than HippoRAG's full corpora).

The query is the question text; a passage is embedded as ``"title: text"``. Exact cosine top-k.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class RecallItem:
    """One question: its own paragraphs ``(title, text)`` and the indices of the gold ones."""

    id: str
    question: str
    paragraphs: tuple[tuple[str, str], ...]
    gold: tuple[int, ...]


def _jsonl(path: Path, limit: int | None):
    out = []
    with path.open() as f:
        for ln, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{ln}: not JSON ({e})") from e
            if limit and len(out) >= limit * 2:  # headroom for skipped records
                break
    return out


def load_hotpotqa_ircot(path: Path, limit: int | None = None) -> list[RecallItem]:
    """IRCoT format: ``contexts[{title, paragraph_text, is_supporting}]``."""
    items = []
    for r in _jsonl(path, limit):
        paras = tuple((c["title"], c["paragraph_text"]) for c in r["contexts"])
        gold = tuple(i for i, c in enumerate(r["contexts"]) if c.get("is_supporting"))
        if gold:
            items.append(RecallItem(r["question_id"], r["question_text"], paras, gold))
    return items[:limit] if limit else items


def load_musique(path: Path, limit: int | None = None) -> list[RecallItem]:
    """MuSiQue format: ``paragraphs[{title, paragraph_text, is_supporting}]``."""
    items = []
    for r in _jsonl(path, limit):
        paras = tuple((p["title"], p["paragraph_text"]) for p in r["paragraphs"])
        gold = tuple(i for i, p in enumerate(r["paragraphs"]) if p.get("is_supporting"))
        if gold:
            items.append(RecallItem(r["id"], r["question"], paras, gold))
    return items[:limit] if limit else items


def load_hotpot_style(path: Path, limit: int | None = None) -> list[RecallItem]:
    """Original HotpotQA / 2Wiki format: ``context [[title, [sent...]]]``, gold = titles in
    ``supporting_facts``. Records without ``context`` are skipped."""
    items = []
    for r in _jsonl(path, limit):
        ctx = r.get("context") or []
        if not ctx:
            continue
        paras = tuple((t, " ".join(s.strip() for s in sents)) for t, sents in ctx)
        titles = {t for t, _ in r.get("supporting_facts", [])}
        gold = tuple(i for i, (t, _) in enumerate(paras) if t in titles)
        if gold:
            items.append(RecallItem(r["_id"], r["question"], paras, gold))
    return items[:limit] if limit else items


SAMPLES = {
    "hotpotqa": ("hotpotqa/ircot_hotpotqa_dev500.jsonl", load_hotpotqa_ircot),
    "musique": ("musique/migres_musique_dev200.jsonl", load_musique),
    "twowiki": ("2wikimultihopqa/migres_2wiki_dev200.jsonl", load_hotpot_style),
}


def recall_at_k(items: list[RecallItem], embedder, ks=(2, 5)) -> dict[str, float]:
    """HippoRAG passage recall@k in both settings: ``{"distractor/recall_at_2": ..., ...}``."""
    from kgreason.retrieval.dense import top_k

    pool: dict[tuple[str, str], int] = {}
    for it in items:
        for p in it.paragraphs:
            pool.setdefault(p, len(pool))
    keys = list(pool)
    P = embedder.encode([f"{t}: {x}" for t, x in keys])          # (n_pool, 384) float32
    Q = embedder.encode([it.question for it in items])            # (n_q, 384)
    out: dict[str, list[float]] = {}
    pooled_idx, _ = top_k(Q @ P.T, max(ks))
    for qi, it in enumerate(items):
        own = np.array([pool[p] for p in it.paragraphs])
        gold_local = set(it.gold)
        gold_pool = {pool[it.paragraphs[g]] for g in it.gold}
        sims = (Q[qi : qi + 1] @ P[own].T)
        local, _ = top_k(sims, max(ks))
        for k in ks:
            got = len(gold_local & set(local[0, :k].tolist())) / len(gold_local)
            out.setdefault(f"distractor/recall_at_{k}", []).append(got)
            got = len(gold_pool & set(pooled_idx[qi, :k].tolist())) / len(gold_pool)
            out.setdefault(f"pooled/recall_at_{k}", []).append(got)
    res = {k: float(np.mean(v)) for k, v in out.items()}
    res.update(n_questions=len(items), pool_size=len(keys),
               mean_paragraphs=float(np.mean([len(it.paragraphs) for it in items])),
               mean_gold=float(np.mean([len(it.gold) for it in items])))
    return res


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.environ.get("KGREASON_DATA", "../shared/data"))
    ap.add_argument("--limit", type=int, default=200, help="questions per dataset (first N)")
    ap.add_argument("--k", type=int, nargs="+", default=[2, 5])
    ap.add_argument("--datasets", nargs="+", default=list(SAMPLES))
    ap.add_argument("--cache", default=os.path.join(os.environ.get("KGREASON_CACHE_DIR", ".cache/kgreason"), "embeddings"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    a = ap.parse_args(argv)
    from kgreason.retrieval.dense import Embedder

    emb = Embedder(cache_dir=a.cache, device=a.device)
    results = {}
    for name in a.datasets:
        rel, loader = SAMPLES[name]
        path = Path(a.data) / rel
        if not path.exists():
            print(f"{name}: {path} missing, skipped")
            continue
        items = loader(path, a.limit)
        results[name] = {"file": rel, **recall_at_k(items, emb, a.k)}
        print(name, json.dumps(results[name]), flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
