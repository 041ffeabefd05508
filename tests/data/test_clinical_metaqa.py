"""DDXPlus, ProbSum and MetaQA loaders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kgreason.data import DataError, load_ddxplus, load_metaqa, load_probsum
from kgreason.kg.linking import link_example, link_rates
from kgreason.data.ddxplus import load_ddxplus_kg
from kgreason.kg.loaders import load_metaqa_kb

ASSETS = Path(__file__).resolve().parents[1] / "assets"
DDX = ASSETS / "ddxplus"


def ddx(path, **kw):
    return load_ddxplus(str(path), str(DDX / "release_conditions.json"), str(DDX / "release_evidences.json"), **kw)


def test_ddxplus_english_codes_decoded():
    es = ddx(DDX / "patients.csv")
    ex = es[0]
    assert ex.diagnoses == ("URTI",) and ex.answers == ("URTI",)
    assert ex.findings == (
        "Do you have a fever (either felt or measured with a thermometer)?",
        "Do you have pain somewhere, related to your reason for consulting?",
        "Do you feel pain somewhere?: pharynx",
        "How intense is the pain?: 4",
        "Do you have a cough?",
        "Have you traveled out of the country in the last 4 weeks?: N",
    )
    assert "Do you feel pain somewhere?" in ex.topic_entities
    assert ex.extra["initial_evidence"] == "Do you have a cough?"
    assert ex.extra["differential"] == [["URTI", 0.6], ["Pneumonia", 0.4]]
    assert ex.question.startswith("Age: 21. Sex: M. Chief complaint: Do you have a cough?.")
    # topic entities link into the DDXPlus KG by exact name
    kg = load_ddxplus_kg(DDX / "release_conditions.json", DDX / "release_evidences.json")
    assert link_rates(link_example(kg, e) for e in es)["rate"] == 1.0


def test_ddxplus_french_release_with_english_column(tmp_path):
    p = tmp_path / "fr.csv"
    p.write_text(
        ",OriginalRowKey,AGE,DIFFERENTIAL_DIAGNOSIS,SEX,PATHOLOGY,EVIDENCES,INITIAL_EVIDENCE,English Pathology,English Evidences,ICD-10\n"
        "0,77,40,\"[['Pneumonie', 1.0]]\",F,Pneumonie,\"['toux', 'trav1_@_N']\",toux,Pneumonia,"
        "\"{'Do you have a cough?': 'True', 'Have you traveled out of the country in the last 4 weeks?': 'No'}\",J17\n",
        encoding="utf-8")
    ex = ddx(p)[0]
    assert ex.id == "ddxplus-77" and ex.diagnoses == ("Pneumonia",)
    assert ex.findings == ("Do you have a cough?", "Have you traveled out of the country in the last 4 weeks?: No")
    assert ex.extra["initial_evidence"] == "Do you have a cough?" and ex.extra["differential"] == [["Pneumonia", 1.0]]
    # code → question learnt from aligned rows (repeated base codes collapse, as the column's keys do)
    p3 = tmp_path / "fr3.csv"
    p3.write_text(
        "AGE,SEX,PATHOLOGY,EVIDENCES,INITIAL_EVIDENCE,English Evidences\n"
        "40,F,Pneumonie,\"['toux']\",toux,\"{'Do you have a cough?': 'True'}\"\n"
        "41,M,Pneumonie,\"['fievre', 'toux', 'toux']\",fievre,"
        "\"{'Do you have a fever (either felt or measured with a thermometer)?': 'True', 'Do you have a cough?': 'True'}\"\n"
        "42,M,Pneumonie,\"['toux', 'fievre', 'x']\",fievre,\"{'Do you have a cough?': 'True'}\"\n",
        encoding="utf-8")
    es3 = ddx(p3)
    fever = "Do you have a fever (either felt or measured with a thermometer)?"
    assert es3[1].extra["initial_evidence"] == fever and es3[2].extra["initial_evidence"] == fever
    no_col = tmp_path / "fr2.csv"
    no_col.write_text("AGE,SEX,PATHOLOGY,EVIDENCES,INITIAL_EVIDENCE\n40,F,Pneumonie,\"['toux']\",toux\n")
    with pytest.raises(DataError, match=r"fr2.csv:2: field EVIDENCES: evidence code 'toux' is not in release_evidences.json"):
        ddx(no_col)


@pytest.mark.parametrize("csv_text,match", [
    ("AGE,SEX,PATHOLOGY\n1,M,URTI\n", "header lacks column"),
    ("", "empty file"),
    ("AGE,SEX,PATHOLOGY,EVIDENCES,INITIAL_EVIDENCE\n1,M,Flu,\"['E_91']\",E_91\n", "unknown pathology 'Flu'"),
    ("AGE,SEX,PATHOLOGY,EVIDENCES,INITIAL_EVIDENCE\n1,M,URTI,\"['E_91'\",E_91\n", "field EVIDENCES: expected"),
])
def test_ddxplus_errors(tmp_path, csv_text, match):
    p = tmp_path / "bad.csv"
    p.write_text(csv_text)
    with pytest.raises(DataError, match=match):
        ddx(p)


def test_ddxplus_shared(shared_data):
    d = shared_data / "ddxplus"
    es = load_ddxplus(str(d / "patients_val_sample588_karishmagrana.csv"), str(d / "release_conditions.json"),
                      str(d / "release_evidences.json"))
    assert len(es) == 588 and len({e.diagnoses[0] for e in es}) == 49
    cond = json.loads((d / "release_conditions.json").read_text())
    assert {e.diagnoses[0] for e in es} <= {c["cond-name-eng"] for c in cond.values()}
    kg = load_ddxplus_kg(d / "release_conditions.json", d / "release_evidences.json")
    assert link_rates(link_example(kg, e) for e in es)["rate"] == 1.0
    # French initial-evidence codes are learnt from the English column (alignment + elimination);
    # the initial evidence is always one of the patient's own evidences
    assert all(e.extra["initial_evidence"] in e.topic_entities for e in es)


def test_probsum_format():
    es = load_probsum(str(ASSETS / "probsum.csv"))
    assert len(es) == 2
    ex = es[0]
    assert ex.id == "probsum-100001.txt"
    assert ex.diagnoses == ("Acute on chronic systolic heart failure", "acute kidney injury")
    assert ex.question.startswith("Subjective:\nPt reports less dyspnea") and "Assessment:\n72 yo M" in ex.question
    assert es[1].answer_groups == (("Pneumonia",), ("leukocytosis",), ("fever",))


def test_probsum_errors(tmp_path):
    p = tmp_path / "p.csv"
    p.write_text("File ID,Assessment,Subjective Sections,Objective Sections,Summary\n1.txt,a,s,o,\n")
    with pytest.raises(DataError, match=r"record 0: empty 'Summary'"):
        load_probsum(str(p))
    p.write_text("File ID,Assessment\n1,a\n")
    with pytest.raises(DataError, match="header lacks column"):
        load_probsum(str(p))


def test_metaqa_official_and_jsonl(tmp_path):
    d = tmp_path / "2-hop"
    d.mkdir()
    p = d / "qa_test.txt"
    p.write_text("which person directed the movies starred by [John Krasinski]\tSam Mendes|Ken Kwapis\n"
                 "[Kismet] was directed by who\tWilliam Dieterle\n")
    es = load_metaqa(str(p))
    assert es.name == "metaqa-2hop" and es[0].hops == 2 and es[0].id == "2hop-test-0"
    assert es[0].question == "which person directed the movies starred by John Krasinski"
    assert es[0].topic_entities == ("John Krasinski",) and es[0].answers == ("Sam Mendes", "Ken Kwapis")
    assert load_metaqa(str(p), keep_brackets=True)[1].question == "[Kismet] was directed by who"
    j = tmp_path / "x.jsonl"
    j.write_text(json.dumps({"id": "1-hop-test-1", "question": "who wrote [The Two of Us]",
                             "topic_entity": "The Two of Us", "answers": ["Claude Berri"]}))
    ex = load_metaqa(str(j), hops=1)[0]
    assert ex.topic_entities == ("The Two of Us",) and ex.hops == 1


@pytest.mark.parametrize("text,match", [
    ("no brackets here\tX\n", ":1: expected exactly one \\[topic entity\\]"),
    ("[a] and [b]\tX\n", "found 2"),
    ("[a] q\n", ":1: expected 'question<TAB>answer1|answer2'"),
    ("", "empty file"),
])
def test_metaqa_errors(tmp_path, text, match):
    p = tmp_path / "1-hop_qa.txt"
    p.write_text(text)
    with pytest.raises(DataError, match=match):
        load_metaqa(str(p))


def test_metaqa_shared_links(shared_data):
    kg = load_metaqa_kb(shared_data / "metaqa" / "kb.txt")
    # measured (docs/data.md): the rebuilt KB lacks 12 of the 2-hop sample's topic entities
    for h, linked in ((1, 1000), (2, 988), (3, 1000)):
        es = load_metaqa(str(shared_data / "metaqa" / f"{h}hop_test_sample1000.jsonl"))
        assert len(es) == 1000 and all(e.hops == h for e in es)
        r = link_rates(link_example(kg, e) for e in es)
        assert r["by_method"] == {"exact": linked} and r["failed"] == 1000 - linked
        # every example flagged covered_by_kb links its topic entity
        assert r["examples_linked"] >= {1: 1000, 2: 979, 3: 947}[h]
