"""kg=freebase_sparql against a real Virtuoso 7 started by the test suite (fixture
``virtuoso_freebase`` in tests/conftest.py), compared with kg=freebase_slice on the same CWQ
questions: identical retrieved facts, answers and metrics (issue 20).

Every cap runs at its default, hubs included: candidate lists are cut in a canonical order on
both sources (retriever paths by relation name then MID before ``max_paths``, RAG's and SGR's
candidate triples by (head, relation, tail) within a hop, ToG's neighbours and ReKnoS's entities
by MID, every score tie by the entity's MID: issue #32, tests/reasoners/test_tie_order.py), so
the two sources must agree exactly: per question the answers, per-question metrics, the
reasoner's extras (entities retrieved or kept in the beam, search space, path layers as sets),
the linked MIDs and every k-hop retrieval step; the run's metrics; the hop-distribution report.
The questions are a seeded sample of 40 CWQ questions; at least one reaches a hub (a topic
whose paths are cut at ``max_paths``, e.g. United States).
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import compose_cfg

pytestmark = pytest.mark.slow

N_QUESTIONS = 40
# llm_cache off: the second run must not count the first run's calls as cache hits
# embedder.kg_store=null: the slice's full triple store (310k facts, ~30 min on 2 cores) is not what
# this test compares, and a SPARQL source has no store: both sides rank by per-text encoding
COMMON = ["dataset=cwq", f"dataset.sample={N_QUESTIONS}", "dataset.sample_seed=7", "tracking=none", "llm=scripted",
          "llm_cache.mode=off", "preflight.min_link_rate=0",  # the two KG sources are compared; the slice links some
          "embedder.kg_store=null"]
REASONERS = {
    # the hop-distribution report (2 hops) once, with the reasoner that needs no LLM
    "retrieval_only": ["reasoner=retrieval_only", "reasoner.hops=1", "reports.max_hops=2"],
    "rag": ["reasoner=rag", "reports.hop_distribution=false", "reasoner.hops=1", "reasoner.top_k=20"],
    "tog": ["reasoner=tog", "reports.hop_distribution=false", "reasoner.prune=bm25", "reasoner.width=2", "reasoner.depth=2"],
    "reknos": ["reasoner=reknos", "reports.hop_distribution=false", "reasoner.width=2", "reasoner.depth=2",
               "reasoner.few_shot=false"],
    # reasoner.topics=dataset: the scripted model writes no usable S_q (Eq. 2), so V_q would link
    # nothing and no question would reach either KG; the dataset's topics make both sources walk
    "sgr": ["reasoner=sgr", "reports.hop_distribution=false", "reasoner.cypher=false", "reasoner.hops=1",
            "reasoner.num_paths=1", "reasoner.collab_iterations=1", "reasoner.topics=dataset"],
}
SPARQL = ["kg=freebase_sparql", "retriever=sparql", "kg.max_rows=100000", "kg.retries=1"]
SLICE = ["kg=freebase_slice", "retriever=scipy"]
IGNORED_METRICS = ("time/", "timing", "llm/latency", "run/wall")


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    """The module's MiniLM text cache and compiled-KG cache (both keyed by content): rag and SGR
    verbalise the same slice facts (``KG.verbalise``), so SGR reads the vectors rag's runs wrote
    instead of encoding them again, and the slice is compiled once, not once per reasoner. Both
    sources of a comparison read the same cache, as before (the second run of a test always read
    the first one's vectors)."""
    return tmp_path_factory.mktemp("virtuoso_caches")


def _run(overrides, out, monkeypatch, url=None, cache=None):
    from kgreason.runner.run import run

    if url:
        monkeypatch.setenv("FREEBASE_SPARQL_URL", url)
    if cache is not None:
        overrides = [*overrides, f"embedder.cache_dir={cache / 'embeddings'}"]
        if "kg=freebase_slice" in overrides:
            overrides.append(f"kg.cache_dir={cache / 'kg'}")
    res = run(compose_cfg(overrides, out), out)
    preds = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    return res, preds


def _canon(x):
    """Sets stored as lists (entities reached, path layers) compared as sets; ids never compared."""
    if isinstance(x, list) and all(isinstance(v, (str, int, float)) for v in x):
        return sorted(x, key=str)
    if isinstance(x, list):
        return [_canon(v) for v in x]
    if isinstance(x, dict):
        return {k: _canon(v) for k, v in x.items()}
    return x


def _view(res, preds):
    metrics = {k: v for k, v in res.metrics.items() if not any(k.startswith(p) or p in k for p in IGNORED_METRICS)}
    rows = {}
    for p in preds:
        extra = {k: v for k, v in (p.get("extra") or {}).items() if k not in ("latency_s", "traceback")}
        steps = []
        for s in p.get("trace", []):
            if s.get("kind") == "link":  # (mention, internal id, method): ids are local to a source
                steps.append([[m[0], m[2]] for m in s["data"]["linked"]] + [s["data"]["failed"]])
            elif s.get("kind") == "retrieve":  # seeds (MIDs), per-hop entity/triple counts, paths
                steps.append(s["data"])
        rows[p["id"]] = dict(predictions=p["predictions"], metrics=p["metrics"], error=p.get("error"),
                             extra=_canon(extra), steps=steps)
    return metrics, rows, res.reports.get("hop_distribution", {}).get("counts")


def _differences(a: dict, b: dict, limit: int = 3) -> str:
    """The first differing questions, field by field, short enough to read in a CI log (a whole
    40-question dict diff hides the cause: in issue #32 it was one names block answered empty)."""
    out = []
    for qid in [q for q in a if a[q] != b.get(q)][:limit]:
        for field in a[qid]:
            x, y = a[qid][field], b[qid].get(field)
            if x == y:
                continue
            if isinstance(x, dict) and isinstance(y, dict):
                keys = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
                if all(isinstance(x.get(k), list) and isinstance(y.get(k), list) for k in keys):
                    detail = "; ".join(f"{k}: slice only {sorted(set(map(str, x[k])) - set(map(str, y[k])))[:8]}, "
                                       f"sparql only {sorted(set(map(str, y[k])) - set(map(str, x[k])))[:8]}"
                                       for k in keys)
                else:
                    detail = "; ".join(f"{k}: {str(x.get(k))[:80]} != {str(y.get(k))[:80]}" for k in keys)
            else:
                detail = f"{str(x)[:160]} != {str(y)[:160]}"
            out.append(f"{qid} {field}: {detail}")
    return "\n".join(out)


@pytest.mark.parametrize("reasoner", sorted(REASONERS))
def test_sparql_on_virtuoso_equals_the_in_memory_slice(reasoner, virtuoso_freebase, shared_data, tmp_path,
                                                       monkeypatch, shared_cache):
    """Measured on the loaded 2-core machine (load average 9-11): sgr 342 s with its own caches,
    23 s reading the vectors of rag's runs (rag: 271-548 s, the slice's facts encoded once)."""
    monkeypatch.setenv("KGREASON_DATA", str(shared_data))
    url = virtuoso_freebase["url"]
    a = _view(*_run(COMMON + SLICE + REASONERS[reasoner], tmp_path / "slice", monkeypatch, cache=shared_cache))
    b = _view(*_run(COMMON + SPARQL + REASONERS[reasoner], tmp_path / "sparql", monkeypatch, url=url, cache=shared_cache))
    assert a[1] == b[1], _differences(a[1], b[1])  # per question: answers, retrieved entities, k-hop sizes, search space
    assert a[0] == b[0]          # metrics
    assert a[2] == b[2]          # hop-distribution report
    linked = [r for r in a[1].values() if r["extra"].get("retrieved")]
    assert linked, "no question reached the KG: the comparison would be vacuous"
    if reasoner == "retrieval_only":  # the sample reaches a hub: its paths were cut at max_paths
        steps = [s for r in a[1].values() for s in r["steps"] if isinstance(s, dict)]
        assert any(s.get("paths_truncated") for s in steps), "no hub in the sample: ties would go untested"
    assert not any(r["error"] for r in b[1].values())
    stats = json.loads((tmp_path / "sparql" / "timing.json").read_text())["kg_endpoint"]
    assert stats["requests"] > 0 and stats["failures"] == 0
