"""Table 1 "Retrieval-only" (rag_text): one pooled corpus (HippoRAG 2 protocol) or each question's
own paragraphs; a real dataset never borrows the embedded world's passages (issue 17)."""

from __future__ import annotations

import pytest

from conftest import compose_cfg

from kgreason.data.base import ExampleSet
from kgreason.embed import Embedder
from kgreason.llm.scripted import ScriptedLLM
from kgreason.reasoners.rag_text import RagText, dataset_pool
from kgreason.types import Example

PARIS = ("Paris", "Paris is the capital of France.")
EVEREST = ("Everest", "Mount Everest is the highest mountain.")
CAT = ("Cat", "The cat sat on the mat.")


@pytest.fixture(scope="module")
def emb_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("emb")


def _llm():
    return ScriptedLLM(rules=[{"pattern": r"Paris is the capital of France.*Question:", "reply": '{"answer": "Paris"}'}],
                       default="unknown")


def test_pooled_retrieval_reads_every_questions_paragraphs_and_the_corpus_file(emb_dir):
    """A question without paragraphs retrieves from the dataset's pool (its corpus file and the
    other questions' paragraphs), never from the embedded world."""
    es = ExampleSet("docs", [Example(id="a", question="q?", answers=("x",), corpus=(EVEREST,)),
                             Example(id="b", question="What is the capital of France?", answers=("Paris",))])
    es.corpus = [PARIS, CAT, EVEREST]
    r = RagText(llm=_llm(), top_k=1, embedder=Embedder(cache_dir=str(emb_dir)))
    r.prepare(es)
    assert r._pool == [PARIS, CAT, EVEREST]  # corpus file first, duplicates once
    p = r.answer(es[1])
    assert p.answer == "Paris" and p.extra["retrieved_passages"] == ["Paris"]


def test_own_passages_and_an_example_without_any_gets_the_io_prompt(emb_dir):
    """Nothing to retrieve: the question alone, with the IO baseline's prompt (issue 43); the
    ablation on_empty=abstain keeps the earlier error row."""
    from kgreason.reasoners.base import load_prompt, render

    llm = ScriptedLLM(rules=[{"pattern": r"Paris is the capital of France.*Question:", "reply": '{"answer": "Paris"}'},
                             {"pattern": r"Reply with only a JSON list", "reply": '["Lyon"]'}], default="unknown")
    r = RagText(llm=llm, top_k=1, passages="own", embedder=Embedder(cache_dir=str(emb_dir)))
    p = r.answer(Example(id="r0", question="What is the capital of France?", answers=("Paris",),
                         corpus=(PARIS, EVEREST, CAT)))
    assert p.answer == "Paris" and "Everest" not in llm.calls[0].messages[-1].content
    assert p.extra["retrieval_empty"] is False
    p1 = r.answer(Example(id="r1", question="q"))
    assert llm.calls[-1].messages[-1].content == render(load_prompt("io", "answer"), question="q")
    assert p1.answers == ("Lyon",) and p1.extra["retrieval_empty"] is True
    r2 = RagText(llm=llm, top_k=1, passages="own", on_empty="abstain", embedder=Embedder(cache_dir=str(emb_dir)))
    with pytest.raises(ValueError, match="r1 has no passages"):
        r2.answer(Example(id="r1", question="q"))


def test_a_real_dataset_never_falls_back_to_the_embedded_world():
    bare = ExampleSet("hotpotqa", [Example(id="a", question="q", answers=("x",))])
    with pytest.raises(ValueError, match="has no passages"):
        dataset_pool(bare, "dataset")
    with pytest.raises(ValueError, match="not the embedded world"):
        dataset_pool(bare, "embedded")
    pool, origin = dataset_pool(ExampleSet("embedded-multihop", []), "dataset")  # the world's own passages
    assert origin == "embedded" and pool


def test_twowiki_pool_is_the_hipporag_corpus_plus_the_questions_paragraphs(shared_data, tmp_path):
    """conf/dataset/twowiki.yaml wires HippoRAG's 2Wiki corpus; the 36 questions without context
    retrieve from that pool, and no pool passage comes from the embedded world."""
    from hydra.utils import instantiate

    from kgreason.kg.embedded import make_world
    from kgreason.runner.run import _without

    cfg = compose_cfg(["dataset=twowiki", f"paths.data={shared_data}"], tmp_path)
    assert cfg.dataset.corpus.endswith("2wikimultihopqa/hipporag_2wikimultihopqa_corpus.json")
    es = instantiate(_without(cfg.dataset, "metrics", "reports"))
    bare = [ex for ex in es if not ex.corpus]
    assert len(es) == 200 and len(bare) == 36
    pool, origin = dataset_pool(es, "dataset")
    assert origin == "dataset" and pool[: len(es.corpus)] == es.corpus and len(pool) > len(es.corpus)
    world = {t for t, _ in make_world(0).corpus}
    assert not world & {t for t, _ in pool}


def test_every_text_qa_row_reports_its_pool_size_and_the_run_its_mean(emb_dir, tmp_path):
    """issue 57: the pool a question retrieved from is stated beside every text-QA row:
    ``extra["pool_size"]`` per row, ``retrieval/pool_size`` in metrics.json."""
    from kgreason.runner.run import retrieval_figures
    from kgreason.types import to_jsonable

    es = ExampleSet("docs", [Example(id="a", question="q?", answers=("x",), corpus=(EVEREST,)),
                             Example(id="b", question="What is the capital of France?", answers=("Paris",))])
    es.corpus = [PARIS, CAT, EVEREST]
    r = RagText(llm=_llm(), top_k=1, embedder=Embedder(cache_dir=str(emb_dir)))
    r.prepare(es)
    rows = [to_jsonable(r.answer(ex)) for ex in es]
    assert [row["extra"]["pool_size"] for row in rows] == [3, 3]
    assert retrieval_figures(rows)["retrieval/pool_size"] == 3
    own = RagText(llm=_llm(), top_k=1, passages="own", embedder=Embedder(cache_dir=str(emb_dir)))
    assert own.answer(Example(id="c", question="q", corpus=(PARIS, CAT))).extra["pool_size"] == 2
    assert "retrieval/pool_size" not in retrieval_figures([{"extra": {}}])


@pytest.mark.parametrize("name", ["hotpotqa", "musique", "twowiki"])
def test_the_composed_pool_is_the_protocol_corpus(name, tmp_path):
    cfg = compose_cfg([f"dataset={name}"], tmp_path)
    assert cfg.dataset.pool == "protocol"
    assert compose_cfg([f"dataset={name}", "dataset.pool=questions_run"], tmp_path / "q").dataset.pool == "questions_run"
