"""Dense retrieval: exact top-k equals a brute-force cosine loop; the disk cache round-trips."""

from __future__ import annotations

import numpy as np
import pytest

from kgreason.embed import Embedder
from kgreason.retrieval.dense import DenseTextRetriever, top_k

SENTENCES = [
    "The Eiffel Tower is in Paris.",
    "Paris is the capital of France.",
    "Mount Everest is the highest mountain on Earth.",
    "The cat sat on the mat.",
    "Berlin is the capital of Germany.",
    "Photosynthesis converts light into chemical energy.",
]


def _brute(q: np.ndarray, m: np.ndarray, k: int) -> list[list[int]]:
    """Python loop over cosines; ties → lower index (the documented contract)."""
    out = []
    for qi in q:
        cos = []
        for j, mj in enumerate(m):
            cos.append((-(float(np.dot(qi, mj)) / (np.linalg.norm(qi) * np.linalg.norm(mj))), j))
        out.append([j for _, j in sorted(cos)[:k]])
    return out


@pytest.mark.parametrize("seed", range(5))
def test_top_k_equals_brute_force_random(seed):
    rng = np.random.default_rng(seed)
    m = rng.normal(size=(50, 16)).astype(np.float64)
    q = rng.normal(size=(7, 16))
    mn = m / np.linalg.norm(m, axis=1, keepdims=True)
    qn = q / np.linalg.norm(q, axis=1, keepdims=True)
    for k in (1, 5, 50, 80):
        idx, sc = top_k(qn @ mn.T, k)
        assert idx.tolist() == _brute(q, m, k)
        assert np.allclose(sc, np.take_along_axis(qn @ mn.T, idx, axis=1))


def test_top_k_ties_lower_index_first():
    idx, _ = top_k(np.array([[0.5, 0.9, 0.5, 0.9]]), 3)
    assert idx.tolist() == [[1, 3, 0]]


@pytest.fixture(scope="module")
def counting(tmp_path_factory):
    d = tmp_path_factory.mktemp("emb")
    return d


def test_minilm_top_k_equals_brute_force_and_cache_round_trip(counting, monkeypatch):
    calls = {"n": 0, "texts": 0}
    orig = Embedder._forward

    def spy(self, texts):
        calls["n"] += 1
        calls["texts"] += len(texts)
        return orig(self, texts)

    monkeypatch.setattr(Embedder, "_forward", spy)
    emb = Embedder(cache_dir=str(counting))
    r = DenseTextRetriever(SENTENCES, emb)
    assert r.matrix.shape == (len(SENTENCES), 384) and r.matrix.dtype == np.float32
    assert np.allclose(np.linalg.norm(r.matrix, axis=1), 1.0, atol=1e-5)
    queries = ["What is the capital of France?", "Where is the Eiffel Tower?"]
    hits = r.search(queries, 3)
    qv = emb.encode(queries)
    assert [[h.id for h in row] for row in hits] == _brute(qv, r.matrix, 3)
    assert hits[0][0].text == "Paris is the capital of France."
    first = calls["texts"]
    assert first == len(SENTENCES) + len(queries)
    # a fresh embedder (empty memory) with the same cache dir reads every vector from disk
    emb2 = Embedder(cache_dir=str(counting))
    again = emb2.encode(SENTENCES + queries)
    assert calls["texts"] == first
    assert np.array_equal(again[: len(SENTENCES)], r.matrix)
    # a new text costs exactly one forward pass over one text
    emb2.encode(["A brand new sentence."])
    assert calls["texts"] == first + 1


def test_dense_recall_hand_computed():
    """HippoRAG recall@k on a 2-question toy with a bag-of-words embedder, checked by hand."""
    from kgreason.bench.dense_recall import RecallItem, recall_at_k

    vocab = ["paris", "france", "everest", "cat", "berlin"]

    class BoW:
        def encode(self, texts):
            m = np.array([[t.lower().count(w) for w in vocab] for t in texts], dtype=np.float32) + 1e-3
            return m / np.linalg.norm(m, axis=1, keepdims=True)

    a = RecallItem("a", "paris france", (("P", "paris"), ("F", "france"), ("C", "cat")), (0, 1))
    b = RecallItem("b", "berlin", (("B", "berlin"), ("E", "everest"), ("C", "cat")), (0, 1))
    r = recall_at_k([a, b], BoW(), ks=(1, 2))
    # a: top1 is P or F (1 of 2 gold), top2 = {P, F} (2/2); b: top1 = B (1/2), top2 = B + ? (E ties C
    # at ~0 similarity; E comes first in the pool and own list) → 2/2
    assert r["distractor/recall_at_1"] == pytest.approx((0.5 + 0.5) / 2)
    assert r["distractor/recall_at_2"] == pytest.approx((1.0 + 1.0) / 2)
    assert r["pool_size"] == 5 and r["n_questions"] == 2  # ("C", "cat") shared → pooled once


def test_dense_recall_loaders_gold_and_errors(tmp_path):
    """IRCoT/MuSiQue gold = the flagged positions (titles may repeat); HotpotQA/2Wiki gold = the
    paragraphs titled by a supporting fact; bad records fail naming file, record and field."""
    import json

    from kgreason.bench.dense_recall import load_hotpot_style, load_musique
    from kgreason.data.base import DataError

    mus = tmp_path / "m.jsonl"
    par = lambda t, x, s: {"title": t, "paragraph_text": x, "is_supporting": s}  # noqa: E731
    recs = [{"id": "2hop_1", "question": "q1", "answer": "a",
             "paragraphs": [par("T", "one", False), par("T", "two", True), par("U", "three", True)]},
            {"id": "2hop_2", "question": "q2", "answer": "a", "paragraphs": [par("V", "x", False)]}]
    mus.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    (item,) = load_musique(mus)  # the second question has no gold paragraph: skipped
    assert item.id == "2hop_1" and item.gold == (1, 2)
    assert item.paragraphs == (("T", "one"), ("T", "two"), ("U", "three"))

    hp = tmp_path / "h.jsonl"
    rec = {"_id": "h1", "question": "q", "answer": "a", "supporting_facts": [["B", 0], ["B", 1]],
           "context": [["A", ["x. ", "y."]], ["B", ["z."]]]}
    hp.write_text(json.dumps(rec) + "\n" + json.dumps({"_id": "h2", "question": "q", "answer": "a",
                                                       "supporting_facts": []}) + "\n")
    (item,) = load_hotpot_style(hp)  # h2 has no context: skipped
    assert item.paragraphs == (("A", "x. y."), ("B", "z.")) and item.gold == (1,)

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(recs[0]) + "\n" + json.dumps({"id": "2hop_3", "answer": "a", "paragraphs": []}) + "\n")
    with pytest.raises(DataError, match=r"bad\.jsonl: record 1: missing field 'question'"):
        load_musique(bad)
    bad.write_text(json.dumps(recs[0]) + "\n{not json\n")
    with pytest.raises(DataError, match=r"bad\.jsonl:2:"):
        load_musique(bad)
