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
