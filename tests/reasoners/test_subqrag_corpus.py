"""SubQRAG's corpus-level offline index (subqrag.txt §2.1, HippoRAG 2 protocol of §3.1) and its
resume: the graph is built from the whole pool before the first question, counted as indexing
calls, and a resumed run rebuilds the very same graph with no indexing call (issues 17, 18)."""

from __future__ import annotations

import json

import pytest

from conftest import REPO, compose_cfg

from kgreason.data.base import ExampleSet
from kgreason.embed import Embedder
from kgreason.llm.accounting import MeteredLLM, example_ledger
from kgreason.llm.scripted import ScriptedLLM
from kgreason.reasoners.subqrag import SubQRAG
from kgreason.types import Example, to_jsonable

EX0 = Example(id="d0", question="Where was the director of Alpha born?", answers=("Riverton",),
              corpus=(("Alpha", "Alpha is a film directed by Bob Stone."),
                      ("Bob Stone", "Bob Stone was born in Riverton.")))
EX1 = Example(id="d1", question="Which river is in Eastland?", answers=("Zeta",),
              corpus=(("Zeta", "Zeta is a river in Eastland."), ("Alpha", "Alpha is a film directed by Bob Stone.")))


def _llm(*first):
    return ScriptedLLM(rules=[
        *first,
        {"pattern": r"Decompose.*Question: Where was the director of Alpha",
         "reply": '["Who directed Alpha?", "Where was #1 born?"]'},
        {"pattern": r"Decompose", "reply": '["Which river is in Eastland?"]'},
        {"pattern": r"Title: Alpha\n", "reply": '[["Alpha", "directed by", "Bob Stone"]]'},
        {"pattern": r"Title: Bob Stone\n", "reply": '[["Bob Stone", "born in", "Riverton"]]'},
        {"pattern": r"Title: Zeta\n", "reply": '[["Zeta", "located in", "Eastland"]]'},
        # Eq. 4, guided by the sub-question: one triple the offline pass did not write
        {"pattern": r"Unanswered: Where was Bob Stone born",
         "reply": '[["Bob Stone", "born in", "Riverton"], ["Bob Stone", "was born in", "Riverton"]]'},
        {"pattern": r"Unanswered: Who directed Alpha", "reply": '[["Alpha", "directed by", "Bob Stone"]]'},
        {"pattern": r"Unanswered: Which river", "reply": '[["Zeta", "located in", "Eastland"]]'},
        {"pattern": r"\[(\d+)\] Alpha \| directed by \| Bob Stone.*Question: Who directed",
         "reply": '{{"answer": "Bob Stone", "used": [{0}], "sufficient": true}}'},
        {"pattern": r"\[(\d+)\] Zeta \| located in \| Eastland.*Question: Which river",
         "reply": '{{"answer": "Zeta", "used": [{0}], "sufficient": true}}'},
        {"pattern": r"Triples:.*Question:", "reply": '{"answer": "unknown", "used": [], "sufficient": false}'},
        {"pattern": r"Passages:.*Question: Where was Bob Stone born", "reply": '{"answer": "Riverton"}'},
        # kg_source=injected starts from an empty graph: the first sub-questions go to the passages too
        {"pattern": r"Passages:.*Question: Who directed Alpha", "reply": '{"answer": "Bob Stone"}'},
        {"pattern": r"Passages:.*Question: Which river", "reply": '{"answer": "Zeta"}'},
        {"pattern": r"Graph memory:.*Riverton.*Question", "reply": '{"answer": "Riverton"}'},
        {"pattern": r"Graph memory:.*Zeta.*Question", "reply": '{"answer": "Zeta"}'},
    ])


@pytest.fixture(scope="module")
def emb_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("emb")


def _reasoner(llm, idx, emb_dir, kg_source="auto"):
    return SubQRAG(kg=None, llm=MeteredLLM(llm), index_dir=str(idx), top_k=2, kg_source=kg_source,
                   embedder=Embedder(cache_dir=str(emb_dir)))


def _extractions(llm):
    return [c for c in llm.calls if "Title: " in c.messages[-1].content]


def test_the_whole_pool_is_indexed_before_the_first_question(tmp_path, emb_dir):
    """§2.1: one corpus-level KG from every sampled question's paragraphs (deduplicated), built in
    prepare(); today each question indexed its own paragraphs when answered."""
    llm = _llm()
    r = _reasoner(llm, tmp_path / "idx", emb_dir)
    r.prepare(ExampleSet("docs", [EX0, EX1]))
    assert r.kg_source == "index" and len(_extractions(llm)) == 3  # Alpha once, though both questions hold it
    # the second question's triple is there before the first question is answered
    assert ("Zeta", "located in", "Eastland") in r.graph and len(r.graph) == 3
    assert r.llm.outside.by_purpose["index"].calls == 3 and "answer" not in r.llm.outside.by_purpose
    with example_ledger() as led:
        p = r.answer(EX0)
    assert p.answer == "Riverton" and "index" not in led.by_purpose
    # the fallback's passages are indexed: read back (no generic extraction call again); the
    # guided extraction (Eq. 4) writes only what the index lacks, and the triple that answered
    # enters the graph memory (Eq. 5; test_subqrag_memory.py)
    assert len(_extractions(llm)) == 3
    assert p.extra["write_back"] == [{"passage": "Bob Stone", "triples": [["Bob Stone", "was born in", "Riverton"]]}]
    assert ["Bob Stone", "born in", "Riverton"] in p.extra["graph_memory"]


@pytest.mark.parametrize("kg_source", ["auto", "injected"])
def test_a_resumed_run_rebuilds_the_same_graph_without_indexing_calls(tmp_path, emb_dir, kg_source):
    """Issue 18: kill after the first question, resume: the same graph (index + write-backs, same
    order and provenance), zero indexing calls, and the same answer to the next question. With or
    without the offline index the fallbacks' guided extraction (Eq. 4) writes into G
    (``update_scope=run``: later questions see it), and the resume replays that."""
    ds = ExampleSet("docs", [EX0, EX1])
    llm1 = _llm()
    r1 = _reasoner(llm1, tmp_path / "idx", emb_dir, kg_source)
    r1.prepare(ds)
    p0 = r1.answer(EX0)
    assert p0.extra["write_back"] and p0.extra["triples_written"] > 0
    state = (list(r1.graph.triples), dict(r1.graph.provenance))
    p1 = r1.answer(EX1)
    row0 = json.loads(json.dumps({"id": EX0.id, "error": None, "extra": to_jsonable(p0.extra)}))  # as stored

    llm2 = _llm()
    r2 = _reasoner(llm2, tmp_path / "idx", emb_dir, kg_source)
    r2.prepare(ds, done=[row0])
    assert not llm2.calls and not r2.llm.outside.by_purpose  # the index is read back, not rebuilt
    assert (list(r2.graph.triples), dict(r2.graph.provenance)) == state
    q1 = r2.answer(EX1)
    assert q1.answers == p1.answers and q1.extra["graph_memory"] == p1.extra["graph_memory"]
    assert r2.graph.triples == r1.graph.triples


def test_answering_before_prepare_is_an_error(emb_dir):
    r = SubQRAG(kg=None, llm=_llm(), embedder=Embedder(cache_dir=str(emb_dir)))
    with pytest.raises(RuntimeError, match="prepare"):
        r.answer(EX0)


def test_an_example_that_fails_after_writing_back_keeps_its_write_backs(tmp_path, emb_dir, monkeypatch):
    """Issue 18: the run-long graph keeps what a failing example wrote back (Eq. 4) before it
    raised, so its row must carry those write-backs and a resume must replay them; before, the
    error row had no ``extra`` and a resumed run's graph lacked them. Without an offline index
    (``injected``): an indexed pool's passages are read from the index, never written back."""
    ds = ExampleSet("docs", [EX0, EX1])
    r1 = _reasoner(_llm(), tmp_path / "idx", emb_dir, "injected")
    r1.prepare(ds)
    real = SubQRAG._call

    def failing(self, t, purpose, prompt, parser):
        if purpose == "final_answer":
            raise ConnectionError("endpoint gone")
        return real(self, t, purpose, prompt, parser)

    monkeypatch.setattr(SubQRAG, "_call", failing)
    p0 = r1.answer(EX0)
    monkeypatch.setattr(SubQRAG, "_call", real)
    assert p0.error == "ConnectionError: endpoint gone" and "ConnectionError" in p0.extra["traceback"]
    assert ("Bob Stone", "born in", "Riverton") in r1.graph  # the uninterrupted run keeps it
    assert {"passage": "Bob Stone", "triples": [["Bob Stone", "born in", "Riverton"], ["Bob Stone", "was born in",
                                                                                      "Riverton"]]} in p0.extra["write_back"]
    assert p0.extra["triples_written"] == 3  # the error row keeps its count too
    state = (list(r1.graph.triples), dict(r1.graph.provenance))

    row0 = json.loads(json.dumps({"id": EX0.id, "error": p0.error, "extra": to_jsonable(p0.extra)}))
    r2 = _reasoner(_llm(), tmp_path / "idx", emb_dir, "injected")
    r2.prepare(ds, done=[row0])  # kept as it is (retry_errors=false)
    assert (list(r2.graph.triples), dict(r2.graph.provenance)) == state


#: ``kg_source=injected`` starts G from the run's KG: the 5 triples of tests/assets' RoG subgraphs
#: (a real KG the hotpot questions do not need), not the embedded world's 6.7k triples, whose
#: MiniLM encoding took 3-4 minutes of the test on 2 cores
INJECTED = ["reasoner.kg_source=injected", "kg=rog_subgraphs", f"kg.path={REPO / 'tests' / 'assets' / 'rog_subgraphs.jsonl'}"]


def _hotpot_run(tmp_path, emb_dir, *overrides, rules=None):
    from kgreason.runner.run import run

    data = tmp_path / "hotpot.jsonl"
    recs = [{"_id": ex.id, "question": ex.question, "answer": ex.answers[0], "supporting_facts": [],
             "context": [[t, [x]] for t, x in ex.corpus]} for ex in (EX0, EX1)]
    data.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    out = tmp_path / "run"
    cfg = compose_cfg(["reasoner=subqrag", "dataset=hotpotqa", f"dataset.path={data}", "llm=scripted",
                       "tracking=none", f"reasoner.index_dir={tmp_path / 'idx'}", f"llm_cache.dir={tmp_path / 'calls'}",
                       f"embedder.cache_dir={emb_dir}", *overrides], out)
    if rules is not None:  # scripted replies (the config's scripted model answers "" to everything)
        from omegaconf import open_dict

        with open_dict(cfg):
            cfg.llm.rules = rules
    return (lambda: run(cfg, out).metrics), out


def test_run_indexes_at_start_up_before_the_first_example(tmp_path, emb_dir):
    """Through run(): llm/index/calls = one per pool passage, made before the first example."""
    go, out = _hotpot_run(tmp_path, emb_dir)
    first = go()
    assert first["llm/index/calls"] == 3 and first["run/n_examples"] == 2
    assert json.loads((out / "prepare_usage.json").read_text())["index"]["calls"] == 3
    # every question falls back (the scripted model answers ""): its passages are read from the
    # index, and one guided extraction (Eq. 4) each, whose empty reply writes nothing
    rows = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and not any(r["extra"].get("write_back") for r in rows)
    assert _extract_steps(rows) == 2 and any(s["kind"] == "update" for r in rows for s in r["trace"])
    assert first["metric/triples_written_total"] == 0 and first["metric/triples_written"] == 0


def _extract_steps(rows):
    """Online extraction calls (Eq. 4) recorded in the rows' traces."""
    return sum(1 for r in rows for s in r["trace"] if s["kind"] == "llm" and s["name"] == "update_extract")


def test_without_an_index_the_write_backs_resume_to_the_uninterrupted_metrics(tmp_path, emb_dir):
    """``reasoner.kg_source=injected`` (no offline index): the fallbacks extract online and write
    into G; a run killed after its first row replays that row's ``write_back`` and writes the
    uninterrupted metrics byte for byte (extraction calls included, no indexing call)."""
    rules = [{"pattern": "Unanswered: ", "reply": '[["Alpha", "directed by", "Bob Stone"], '
                                                  '["Bob Stone", "born in", "Riverton"], ["Zeta", "in", "Eastland"]]'}]
    go, out = _hotpot_run(tmp_path, emb_dir, *INJECTED, rules=rules)
    first = go()
    reference = (out / "metrics.json").read_bytes()
    rows = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    written = [len(wb["triples"]) for r in rows for wb in r["extra"].get("write_back", [])]
    assert rows[0]["extra"]["triples_written"] > 0 and _extract_steps(rows) == 2
    assert sum(written) == sum(r["extra"]["triples_written"] for r in rows) == first["metric/triples_written_total"]
    assert "llm/index/calls" not in first
    (out / "predictions.jsonl").write_text(json.dumps(rows[0]) + "\n")
    resumed = go()
    assert resumed["run/n_examples"] == 2
    assert (out / "metrics.json").read_bytes() == reference, (resumed, json.loads(reference))


def test_a_resume_that_would_answer_a_question_after_later_writes_is_refused(tmp_path, emb_dir):
    """``update_scope: run``: a question sees exactly the writes of the questions before it in
    dataset order. A resume that keeps the second row but must answer the first again (a row
    retried or set aside) would break that, so the run stops before the first example, with one
    line naming the setting; ``update_scope=question`` resumes it."""
    from kgreason.preflight import PreflightError

    rules = [{"pattern": "Unanswered: ", "reply": '[["Alpha", "directed by", "Bob Stone"]]'}]
    go, out = _hotpot_run(tmp_path, emb_dir, *INJECTED, rules=rules)
    go()
    preds = out / "predictions.jsonl"
    lines = preds.read_text().splitlines()
    preds.write_text(lines[1] + "\n")
    with pytest.raises(PreflightError, match="update_scope=run.*question d0") as e:
        go()
    assert len(str(e.value).splitlines()) == 1
    assert preds.read_text().splitlines() == [lines[1]]  # nothing answered, nothing lost


@pytest.mark.parametrize("kill", ["after_first_example", "mid_indexing", "after_indexing", "finished"])
def test_a_resumed_run_writes_the_uninterrupted_metrics_byte_for_byte(tmp_path, emb_dir, kill):
    """Issue 18: whatever point a kill hits (indexing half done, indexing done and no row, one row,
    every row), the resumed run's metrics.json equals the uninterrupted run's, ``llm/index/*``
    included. Before, a resume counted only the indexing calls of its own invocation (0), and a
    finished run invoked again rewrote its metrics without them."""
    go, out = _hotpot_run(tmp_path, emb_dir)
    go()
    reference = (out / "metrics.json").read_bytes()
    assert json.loads(reference)["llm/index/calls"] == 3
    preds = out / "predictions.jsonl"
    if kill == "after_first_example":
        preds.write_text(preds.read_text().splitlines()[0] + "\n")
    elif kill in ("mid_indexing", "after_indexing"):
        preds.unlink()
        (out / "prepare_usage.json").unlink()
        if kill == "mid_indexing":  # one passage logged; the other two calls sit in the call cache
            (log,) = (tmp_path / "idx").glob("*/extractions.jsonl")
            log.write_text(log.read_text().splitlines()[0] + "\n")
    resumed = go()
    assert resumed["run/n_examples"] == 2
    assert (out / "metrics.json").read_bytes() == reference, (resumed, json.loads(reference))


def test_another_run_dir_reusing_the_index_counts_no_indexing_call(tmp_path, emb_dir):
    """The index cache is shared by runs: a second run dir reads it back and pays nothing for it
    (its extraction rows were paid by the first run). Its passages count as cache hits with their
    tokens, as a call-cache hit does, so the method's calls and tokens per question are the first
    run's (docs/llm.md): before, a run on a cached index reported 7.0 calls per question where the
    run that built it reported 16.7 (the held-out SubQRAG row)."""
    go, out = _hotpot_run(tmp_path, emb_dir)
    first = go()
    import shutil

    shutil.rmtree(out)
    again = go()
    assert again.get("llm/index/calls", 0) == 0 and again["run/n_examples"] == 2
    assert again["llm/index/cache_hits"] == 3
    assert again["llm/index/prompt_tokens"] == first["llm/index/prompt_tokens"] > 0
    assert again["llm/calls_per_question"] == first["llm/calls_per_question"]
    assert again["llm/tokens_per_question"] == first["llm/tokens_per_question"]


@pytest.mark.parametrize("require_grounded", [True, False])
def test_a_sufficient_claim_the_used_triples_do_not_name_falls_back_to_the_corpus(tmp_path, emb_dir, require_grounded):
    """Seen with Qwen2.5-Coder-1.5B (docs/subqrag.md): the generator calls the triples sufficient
    and answers with a relation name (`What is Shirley Temple's position?` → `final starring
    role`), so §2.3's corpus fallback never ran. With ``require_grounded`` the answer must be
    named by a triple it used; the relation name is not, so the passages answer and their triple
    enters the graph memory. ``require_grounded=False`` takes the generator's word, as §2.3 words it."""
    llm = _llm({"pattern": r"\[(\d+)\] Alpha \| directed by \| Bob Stone.*Question: Where was Bob Stone born",
                "reply": '{{"answer": "directed by", "used": [{0}], "sufficient": true}}'})
    r = SubQRAG(kg=None, llm=MeteredLLM(llm), index_dir=str(tmp_path / "idx"), top_k=2,
                embedder=Embedder(cache_dir=str(emb_dir)), require_grounded=require_grounded)
    r.prepare(ExampleSet("docs", [EX0, EX1]))
    p = r.answer(EX0)
    second = [s for s in p.trace if s.kind == "subquestion"][1].data
    if require_grounded:
        assert second["source"] == "passages" and second["answer"] == "Riverton"
        assert ["Bob Stone", "born in", "Riverton"] in p.extra["graph_memory"]
        assert any(s.kind == "note" and s.name == "ungrounded" for s in p.trace)
    else:
        assert second["source"] == "triples" and second["answer"] == "directed by"
        assert ["Bob Stone", "born in", "Riverton"] not in p.extra["graph_memory"]


@pytest.mark.parametrize("answer,expected", [
    ("Shirley Temple", True),             # a head
    ("shirley temple black", True),       # holds a head (whole words)
    ("Chief of Protocol.", True),         # a tail, punctuation dropped
    ("Temple", True),                     # inside a head, whole word
    ("final starring role", False),       # a relation name (seen with Qwen2.5-Coder-1.5B)
    ("Deputy Prime Minister", False),     # not in the used triples
    ("1", False),                         # "1945" holds it, but not as a whole word
    ("yes", True),                        # yes/no: needs one used triple
])
def test_answer_grounded_golden(answer, expected):
    from kgreason.reasoners.subqrag import answer_grounded

    used = [("Shirley Temple", "final starring role", "Kiss and Tell (1945 film)"),
            ("Shirley Temple", "position", "Chief of Protocol")]
    assert answer_grounded(answer, used) is expected
    assert answer_grounded("yes", []) is False


def test_auto_says_at_start_up_which_graph_it_chose(tmp_path, emb_dir, caplog):
    """``kg_source=auto`` indexes the dataset's own pool and starts a JSONL pool from the injected
    KG without indexing it; two tests had been caught out by that silently, so start-up says it."""
    with caplog.at_level("INFO", logger="kgreason.reasoners.subqrag"):
        _reasoner(_llm(), tmp_path / "idx", emb_dir).prepare(ExampleSet("docs", [EX0, EX1]))
    assert "kg_source=auto -> index: the pool is the dataset's own (3 passages)" in caplog.text
    caplog.clear()
    pool = tmp_path / "pool.jsonl"
    pool.write_text(json.dumps({"title": "Zeta", "text": "Zeta is a river in Eastland."}) + "\n")
    llm = _llm()
    r = SubQRAG(kg=None, llm=MeteredLLM(llm), index_dir=str(tmp_path / "idx"), corpus=str(pool),
                embedder=Embedder(cache_dir=str(emb_dir)))
    with caplog.at_level("INFO", logger="kgreason.reasoners.subqrag"):
        r.prepare(ExampleSet("docs", [EX0]))
    assert r.kg_source == "injected" and not _extractions(llm)
    assert f"kg_source=auto -> injected: the pool is {str(pool)!r} (1 passages)" in caplog.text
    assert "reasoner.kg_source=index indexes it" in caplog.text


def test_the_index_cap_is_a_setting_and_part_of_the_index_key(tmp_path, emb_dir):
    """``reasoner.index_max_tokens`` reaches every offline extraction call (it was fixed at 512
    whatever the config said), and an index built under another cap is not read back."""
    llm = _llm()
    r = SubQRAG(kg=None, llm=MeteredLLM(llm), index_dir=str(tmp_path / "idx"), index_max_tokens=96,
                embedder=Embedder(cache_dir=str(emb_dir)))
    r.prepare(ExampleSet("docs", [EX0]))
    assert [c.max_tokens for c in _extractions(llm)] == [96, 96]
    llm512 = _llm()
    _reasoner(llm512, tmp_path / "idx", emb_dir).prepare(ExampleSet("docs", [EX0]))
    assert [c.max_tokens for c in _extractions(llm512)] == [512, 512]  # not the 96-token index
    again = _llm()
    _reasoner(again, tmp_path / "idx", emb_dir).prepare(ExampleSet("docs", [EX0]))
    assert not _extractions(again)  # the default cap's index is read back
    with pytest.raises(ValueError, match="index_max_tokens must be >= 1"):
        SubQRAG(kg=None, llm=llm, index_max_tokens=0, embedder=Embedder(cache_dir=str(emb_dir)))


def test_a_jsonl_pool_line_that_is_not_json_names_its_file_and_line(tmp_path):
    from kgreason.reasoners.rag_text import load_corpus

    pool = tmp_path / "pool.jsonl"
    pool.write_text('{"title": "A", "text": "a"}\n{"title": "B", text}\n')
    with pytest.raises(ValueError, match=r"pool\.jsonl:2: expected one JSON object per line"):
        load_corpus(str(pool))
    pool.write_text('["A", "a"]\n')
    with pytest.raises(ValueError, match=r"pool\.jsonl:1: expected fields 'title' and 'text', got list"):
        load_corpus(str(pool))
