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

from kgreason.data.kgqa import read_records
from kgreason.data.multihop import parse_hotpot, parse_ircot, parse_musique
from kgreason.paths import resolve as resolve_path


@dataclass(frozen=True)
class RecallItem:
    """One question: its own paragraphs ``(title, text)`` and the indices of the gold ones."""

    id: str
    question: str
    paragraphs: tuple[tuple[str, str], ...]
    gold: tuple[int, ...]


def _items(path: Path, limit: int | None, parse, flagged: str | None) -> list[RecallItem]:
    """Parse ``path`` with the dataset loaders' record parsers (so bad input fails the same way,
    naming file, record and field) and keep the questions that have gold paragraphs.

    ``flagged``: the record field whose entries carry ``is_supporting`` (IRCoT ``contexts``,
    MuSiQue ``paragraphs``); gold is then those positions, since titles can repeat. Without it
    (HotpotQA / 2Wiki ``context``), gold is every paragraph whose title is a supporting fact.
    Records without paragraphs are skipped.
    """
    items = []
    for i, rec in enumerate(read_records(path)):
        ex = parse(rec, f"{path}: record {i}")
        if flagged:
            gold = tuple(j for j, c in enumerate(rec[flagged]) if c.get("is_supporting"))
        else:
            titles = set(ex.supporting)
            gold = tuple(j for j, (t, _) in enumerate(ex.corpus) if t in titles)
        if ex.corpus and gold:
            items.append(RecallItem(ex.id, ex.question, ex.corpus, gold))
            if limit and len(items) >= limit:
                break
    return items


def load_hotpotqa_ircot(path: Path, limit: int | None = None) -> list[RecallItem]:
    """IRCoT format: ``contexts[{title, paragraph_text, is_supporting}]``."""
    return _items(path, limit, parse_ircot, "contexts")


def load_musique(path: Path, limit: int | None = None) -> list[RecallItem]:
    """MuSiQue format: ``paragraphs[{title, paragraph_text, is_supporting}]``."""
    return _items(path, limit, parse_musique, "paragraphs")


def load_hotpot_style(path: Path, limit: int | None = None) -> list[RecallItem]:
    """Original HotpotQA / 2Wiki format: ``context [[title, [sent...]]]``, gold = titles in
    ``supporting_facts``."""
    return _items(path, limit, parse_hotpot, None)


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
    ap.add_argument("--data", default=resolve_path("data"), help="data root (default: paths.data, i.e. $KGREASON_DATA)")
    ap.add_argument("--limit", type=int, default=200, help="questions per dataset (first N)")
    ap.add_argument("--k", type=int, nargs="+", default=[2, 5])
    ap.add_argument("--datasets", nargs="+", default=list(SAMPLES))
    ap.add_argument("--cache", default=os.path.join(resolve_path("cache"), "embeddings"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    a = ap.parse_args(argv)
    from kgreason.embed import Embedder

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
