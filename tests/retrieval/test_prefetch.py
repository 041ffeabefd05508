"""Batched retrieval across examples: the run loop's retrieve_many prefetch changes nothing
in the answers, and the reasoner's retrieve calls are really served from the batch."""

from __future__ import annotations

import json

import pytest
from conftest import compose_cfg

from kgreason.retrieval.prefetch import PrefetchingRetriever
from kgreason.runner.run import build, run


def _rows(d):
    return {r["id"]: r for r in map(json.loads, (d / "predictions.jsonl").read_text().splitlines())}


@pytest.mark.parametrize("retriever", ["torch", "scipy"])
def test_prefetch_matches_unbatched_run(tmp_path, retriever):
    common = ["tracking=none", "dataset.limit=30", f"retriever={retriever}", "reports.hop_distribution=false"]
    a, b = tmp_path / "batched", tmp_path / "single"
    run(compose_cfg(common + ["retrieval_batch=8"], a), a)
    run(compose_cfg(common + ["retrieval_batch=0"], b), b)
    ra, rb = _rows(a), _rows(b)
    assert ra.keys() == rb.keys() and len(ra) == 30
    for k in ra:
        assert ra[k]["predictions"] == rb[k]["predictions"], k
        assert ra[k]["extra"]["search_space"] == rb[k]["extra"]["search_space"], k
    stats = json.loads((a / "timing.json").read_text())["retrieval_prefetch"]
    linked = sum(1 for r in ra.values() if not r["extra"].get("link_failed"))
    # 30 examples in chunks of 8 -> at least 4 batched calls; every planned query is served
    assert stats["batches"] >= 4
    assert stats["served"] == linked and stats["fallthrough"] == 0
    assert "retrieval_prefetch" not in json.loads((b / "timing.json").read_text())


def test_prefetch_uses_one_retrieve_many_per_chunk(tmp_path):
    cfg = compose_cfg(["tracking=none", "dataset.limit=12", "retriever=torch", "retrieval_batch=6",
                       "reports.hop_distribution=false"], tmp_path)
    c = build(cfg, tmp_path)
    assert isinstance(c.retriever, PrefetchingRetriever)
    calls: list[int] = []
    inner = c.retriever.inner
    orig = inner.retrieve_many

    def spy(seed_sets, hops, relations=None):
        calls.append(len(seed_sets))
        return orig(seed_sets, hops, relations)

    inner.retrieve_many = spy
    inner.retrieve = lambda *a, **k: pytest.fail("single-query retrieve called despite prefetch")
    from kgreason.runner.run import _chunks

    examples = list(c.dataset)
    for chunk in _chunks(examples, c.retriever, c.reasoner):
        for ex in chunk:
            c.reasoner.answer(ex)
        c.retriever.clear()
    # one batched call per (chunk, hop count) group; all seed sets of a chunk go in together
    assert sum(calls) >= 1 and len(calls) <= 2 * 2 * 3  # 2 chunks x up to 3 distinct hop counts
    assert max(calls) > 1


def test_prefetch_kg_dx_per_evidence_queries(tmp_path):
    common = ["reasoner=kg_dx", "dataset=embedded", "dataset.task=clinical", "dataset.limit=10",
              "tracking=none", "retriever=torch", "reports.hop_distribution=false"]
    a, b = tmp_path / "batched", tmp_path / "single"
    run(compose_cfg(common + ["retrieval_batch=5"], a), a)
    run(compose_cfg(common + ["retrieval_batch=0"], b), b)
    ra, rb = _rows(a), _rows(b)
    assert {k: r["predictions"] for k, r in ra.items()} == {k: r["predictions"] for k, r in rb.items()}
    stats = json.loads((a / "timing.json").read_text())["retrieval_prefetch"]
    assert stats["served"] > 0 and stats["batches"] >= 2


def test_run_hop_distribution_uses_batched_engine(tmp_path, monkeypatch):
    """reports.engine=run sends the hop distribution through the run engine's retrieve_many
    (in chunks of reports.batch) and gives the same hops.json as the per-example SciPy route."""
    from kgreason.retrieval.torch_engine import TorchRetriever

    calls = []
    orig = TorchRetriever.retrieve_many

    def spy(self, seed_sets, hops, relations=None):
        calls.append((len(seed_sets), hops, self.semantics.value, self.return_triples, self.max_paths))
        return orig(self, seed_sets, hops, relations)

    monkeypatch.setattr(TorchRetriever, "retrieve_many", spy)
    common = ["tracking=none", "dataset.limit=20", "retriever=torch", "retrieval_batch=0",
              "retriever.semantics=exact", "reports.max_hops=4"]
    a, b = tmp_path / "run_engine", tmp_path / "scipy"
    run(compose_cfg(common + ["reports.engine=run", "reports.batch=8"], a), a)
    assert calls and all(c[1:] == (4, "within", False, 0) for c in calls)
    ha = json.loads((a / "hops.json").read_text())
    # one seed set per example (per-example figure) and one per distinct linked gold (Fig. 2's pairs)
    golds = {g for ps in ha["per_pair"].values() for _, g, d in ps if d != "unlinked"}
    assert sum(c[0] for c in calls) <= 20 + len(golds) and max(c[0] for c in calls) <= 8
    calls.clear()
    run(compose_cfg(common + ["reports.engine=scipy"], b), b)
    assert not calls
    hb = json.loads((b / "hops.json").read_text())
    assert ha["counts"] == hb["counts"] and ha["per_example"] == hb["per_example"]
    assert ha["per_pair"] == hb["per_pair"] and ha["counts_per_example"] == hb["counts_per_example"]


def test_hop_engine_auto_picks_batched_engines(tmp_path, monkeypatch):
    from kgreason.retrieval.torch_engine import TorchRetriever

    seen = []
    orig = TorchRetriever.retrieve_many
    monkeypatch.setattr(TorchRetriever, "retrieve_many",
                        lambda self, s, h, r=None: seen.append(len(s)) or orig(self, s, h, r))
    for name, want in (("torch", True), ("scipy", False)):
        seen.clear()
        d = tmp_path / name
        run(compose_cfg(["tracking=none", "dataset.limit=6", f"retriever={name}", "retrieval_batch=0"], d), d)
        assert bool(seen) is want, name
        assert (d / "hops.json").exists()


def test_hop_engine_rejects_unknown_value_before_running(tmp_path):
    with pytest.raises(ValueError, match="reports.engine"):
        run(compose_cfg(["tracking=none", "dataset.limit=2", "reports.engine=gpu"], tmp_path), tmp_path)
    assert not (tmp_path / "predictions.jsonl").exists()
