"""HotpotQA / MuSiQue / 2Wiki loaders: official, IRCoT and HippoRAG formats."""

from __future__ import annotations

import json

import pytest

from kgreason.data import DataError, load_hotpotqa, load_musique, load_twowiki


def jsonl(p, recs):
    p.write_text("\n".join(json.dumps(r) for r in recs), encoding="utf-8")
    return str(p)


HOTPOT = {"_id": "5a7f", "answer": "Rush", "question": "Which band?", "type": "bridge", "level": "hard",
          "supporting_facts": [["Nobody's Hero", 0], ["Neil Peart", 1], ["Neil Peart", 2]],
          "context": [["Nobody's Hero", ["Nobody's Hero is a song", " by Rush."]],
                      ["Neil Peart", ["Neil Peart was a drummer."]], ["Other", ["Noise."]]]}
IRCOT = {"question_id": "5a8c", "question_text": "What position?",
         "answers_objects": [{"number": "", "date": {"day": "", "month": "", "year": ""}, "spans": ["Chief of Protocol"]}],
         "contexts": [{"id": "0", "title": "Meet Corliss Archer", "paragraph_text": "Radio show.", "is_supporting": False},
                      {"id": "1", "title": "Shirley Temple", "paragraph_text": "Chief of Protocol.", "is_supporting": True}]}
MUSIQUE = {"id": "3hop1__1_2_3", "question": "Seat of the county?", "answer": "Stanley", "answer_aliases": ["Stanley, ND"],
           "answerable": True,
           "paragraphs": [{"idx": 0, "title": "Port Blair", "paragraph_text": "p0", "is_supporting": False},
                          {"idx": 1, "title": "Mountrail County", "paragraph_text": "p1", "is_supporting": True}],
           "question_decomposition": [{"id": 1, "question": "Van Hook >> located in", "answer": "Mountrail County",
                                       "paragraph_support_idx": 1}]}
TWOWIKI = {"_id": "b088", "type": "comparison", "question": "Who is younger?", "answer": "Free Guy",
           "context": [["Free Guy", ["Free Guy is a film.", "Directed by Shawn Levy."]]],
           "supporting_facts": [["Free Guy", 0]], "evidences": [["Free Guy", "director", "Shawn Levy"]],
           "answer_id": "Q1"}


def test_hotpot_official_and_ircot(tmp_path):
    ex = load_hotpotqa(jsonl(tmp_path / "h.jsonl", [HOTPOT]))[0]
    assert ex.answers == ("Rush",) and ex.supporting == ("Nobody's Hero", "Neil Peart")
    assert ex.corpus[0] == ("Nobody's Hero", "Nobody's Hero is a song by Rush.") and len(ex.corpus) == 3
    assert ex.extra == {"type": "bridge", "level": "hard"}
    ir = load_hotpotqa(jsonl(tmp_path / "i.jsonl", [IRCOT]))[0]
    assert ir.id == "5a8c" and ir.answers == ("Chief of Protocol",) and ir.supporting == ("Shirley Temple",)
    # official JSON list (the dev file format) reads the same
    (tmp_path / "h.json").write_text(json.dumps([HOTPOT]))
    assert load_hotpotqa(str(tmp_path / "h.json"))[0] == ex


def test_hotpot_hf_columnar(tmp_path):
    rec = dict(HOTPOT, id="hf1", context={"title": ["A", "B"], "sentences": [["a1", "a2"], ["b1"]]},
               supporting_facts={"title": ["A", "B"], "sent_id": [0, 0]})
    del rec["_id"]
    ex = load_hotpotqa(jsonl(tmp_path / "hf.jsonl", [rec]))[0]
    assert ex.corpus == (("A", "a1 a2"), ("B", "b1")) and ex.supporting == ("A", "B")


def test_hipporag_corpus(tmp_path):
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps([{"title": "Free Guy", "text": "Free Guy is a film."}, {"title": "X", "text": "y"}]))
    rec = {k: v for k, v in TWOWIKI.items() if k != "context"}
    es = load_twowiki(jsonl(tmp_path / "q.jsonl", [rec]), corpus=str(corpus))
    assert es.corpus == [("Free Guy", "Free Guy is a film."), ("X", "y")] and es[0].corpus == ()
    assert es[0].supporting == ("Free Guy",) and es[0].extra["evidences"] == [["Free Guy", "director", "Shawn Levy"]]
    bad = tmp_path / "bad_corpus.json"
    bad.write_text(json.dumps([{"title": "x"}]))
    with pytest.raises(DataError, match="record 0: expected fields 'title' and 'text'"):
        load_twowiki(jsonl(tmp_path / "q2.jsonl", [rec]), corpus=str(bad))


def test_musique(tmp_path):
    unans = dict(MUSIQUE, id="2hop__9_9", answerable=False)
    es = load_musique(jsonl(tmp_path / "m.jsonl", [MUSIQUE, unans]))
    assert len(es) == 1
    ex = es[0]
    assert ex.answers == ("Stanley", "Stanley, ND") and ex.supporting == ("Mountrail County",) and ex.hops == 3
    assert ex.extra["decomposition"][0]["answer"] == "Mountrail County"
    assert len(load_musique(jsonl(tmp_path / "m2.jsonl", [MUSIQUE, unans]), answerable_only=False)) == 2


@pytest.mark.parametrize("loader,rec,match", [
    (load_hotpotqa, {k: v for k, v in HOTPOT.items() if k != "supporting_facts"}, "record 0: missing field 'supporting_facts'"),
    (load_hotpotqa, dict(HOTPOT, context=[["t"]]), r"context\[0\]: expected \[title, \[sentence"),
    (load_hotpotqa, dict(IRCOT, contexts=[{"title": "x"}]), r"contexts\[0\]: expected"),
    (load_musique, dict(MUSIQUE, paragraphs=[{"idx": 0}]), r"paragraphs\[0\]: expected"),
    (load_musique, {k: v for k, v in MUSIQUE.items() if k != "answer"}, "missing field 'answer'"),
    (load_twowiki, dict(TWOWIKI, question=5), "field 'question' must be str"),
])
def test_errors(tmp_path, loader, rec, match):
    with pytest.raises(DataError, match=match):
        loader(jsonl(tmp_path / "bad.jsonl", [rec]))


def test_shared_samples(shared_data):
    h = load_hotpotqa(str(shared_data / "hotpotqa" / "ircot_hotpotqa_dev500.jsonl"))
    assert len(h) == 500 and all(len(e.supporting) == 2 for e in h)  # PROVENANCE: 2 supporting each
    assert sum(len(e.corpus) for e in h) == 4931
    ho = load_hotpotqa(str(shared_data / "hotpotqa" / "migres_hotpot_dev200.jsonl"))
    assert len(ho) == 200 and sum(e.extra["type"] == "bridge" for e in ho) == 134
    assert all(set(e.supporting) <= {t for t, _ in e.corpus} for e in ho)
    m = load_musique(str(shared_data / "musique" / "migres_musique_dev200.jsonl"))
    assert len(m) == 200 and all(len(e.corpus) == 20 for e in m)
    assert sum(e.hops == 2 for e in m) == 145 and sum(e.hops == 4 for e in m) == 23
    d = shared_data / "2wikimultihopqa"
    t = load_twowiki(str(d / "migres_2wiki_dev200.jsonl"), corpus=str(d / "hipporag_2wikimultihopqa_corpus.json"))
    assert len(t) == 200 and sum(bool(e.corpus) for e in t) == 164 and len(t.corpus) == 6119
    titles = {ti for ti, _ in t.corpus}
    assert sum(set(e.supporting) <= titles for e in t) == 23  # PROVENANCE: 23 fully covered


# ---------------------------------------------------------------- the passage pool (issue 57)
def _hotpot_recs(n):
    return [dict(HOTPOT, _id=f"h{i}", question=f"Q{i}?",
                 context=[[f"T{i}", [f"Paragraph {i}."]], ["Shared", ["Shared paragraph."]]]) for i in range(n)]


def test_the_pool_is_the_protocol_corpus_whatever_the_number_of_questions_run(tmp_path):
    """subqrag.txt §3.1: "using the same retrieval corpus and sampling 1,000 questions": the pool
    is the paragraphs of every question of the protocol sample (here the file, which holds fewer
    than 1,000), not of the questions run, so it does not shrink with ``limit`` or a split.
    ``pool=questions_run`` is kgreason's behaviour before issue 57."""
    from kgreason.data.base import select_split
    from kgreason.reasoners.rag_text import dataset_pool

    path = jsonl(tmp_path / "h.jsonl", _hotpot_recs(6))
    full, _ = dataset_pool(load_hotpotqa(path), "dataset")
    assert len(full) == 7  # 6 own paragraphs + the shared one, once
    for kw in ({"limit": 2}, {"limit": 5}, {"sample": 6, "limit": 1}):
        es = load_hotpotqa(path, **kw)
        assert es.pool == "protocol" and dataset_pool(es, "dataset")[0] == full
    es = select_split(load_hotpotqa(path), "heldout", dev_size=2, n=2)
    assert len(es) == 2 and dataset_pool(es, "dataset")[0] == full
    # a sample draws the protocol's questions: the pool is theirs, whatever limit then keeps
    s3 = load_hotpotqa(path, sample=3, sample_seed=1)
    s3_1 = load_hotpotqa(path, sample=3, sample_seed=1, limit=1)
    assert dataset_pool(s3_1, "dataset")[0] == dataset_pool(s3, "dataset")[0]
    assert len(dataset_pool(s3, "dataset")[0]) == 4
    # the named setting: the paragraphs of the questions run
    run2 = load_hotpotqa(path, limit=2, pool="questions_run")
    assert run2.pool == "questions_run" and len(dataset_pool(run2, "dataset")[0]) == 3
    m = load_musique(jsonl(tmp_path / "m.jsonl", [dict(MUSIQUE, id=f"2hop__{i}_{i}", paragraphs=[
        dict(MUSIQUE["paragraphs"][0], paragraph_text=f"p{i}")]) for i in range(4)]), limit=1)
    assert m.pool == "protocol" and len(dataset_pool(m, "dataset")[0]) == 4
    with pytest.raises(DataError, match="pool must be protocol or questions_run, got 'all'"):
        load_hotpotqa(path, pool="all")


def test_twowiki_pool_is_the_corpus_file_and_every_sample_question(tmp_path):
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps([{"title": "Free Guy", "text": "Free Guy is a film."}]))
    recs = [dict(TWOWIKI, _id=f"w{i}", context=[[f"P{i}", [f"Para {i}."]]]) for i in range(3)]
    es = load_twowiki(jsonl(tmp_path / "q.jsonl", recs), corpus=str(corpus), limit=1)
    from kgreason.reasoners.rag_text import dataset_pool

    assert es.corpus == [("Free Guy", "Free Guy is a film.")]  # the corpus file, as before
    assert len(dataset_pool(es, "dataset")[0]) == 4
    run = load_twowiki(jsonl(tmp_path / "q.jsonl", recs), corpus=str(corpus), limit=1, pool="questions_run")
    assert len(dataset_pool(run, "dataset")[0]) == 2


def test_shared_sample_pools_do_not_depend_on_n(shared_data):
    """The shared HotpotQA sample (500 questions, fewer than the protocol's 1,000) pools every
    paragraph of its 500 questions: the same pool for N = 30 and N = 100."""
    from kgreason.reasoners.rag_text import dataset_pool

    p = str(shared_data / "hotpotqa" / "ircot_hotpotqa_dev500.jsonl")
    a, b = (dataset_pool(load_hotpotqa(p, limit=n), "dataset")[0] for n in (30, 100))
    assert a == b and len(a) > 1000
    assert len(dataset_pool(load_hotpotqa(p, limit=30, pool="questions_run"), "dataset")[0]) == 300
