"""Malformed input files: every reader names the file, the line and the field (issue 18, Inputs).

Each case here used to load silently (a byte-order mark or NUL inside an entity name, the gold
answer ``"None"``) or fail with a bare ``UnicodeDecodeError`` that printed the file.
"""

from __future__ import annotations

import gzip
import json

import pytest

from kgreason.data.base import DataError
from kgreason.data.kgqa import load_cwq, load_webqsp, load_grailqa
from kgreason.data.metaqa import load_metaqa
from kgreason.data.multihop import load_hotpotqa, load_musique
from kgreason.kg.loaders import KGFormatError, load_metaqa_kb, load_triples
from kgreason.textio import InputFileError, read_text


def _cwq(tmp_path, answer, name="cwq.json"):
    p = tmp_path / name
    p.write_text(json.dumps([{"ID": "q1", "question": "who?", "topic_entity": {"m.01": "A"}, "answer": "B"},
                             {"ID": "q2", "question": "who?", "topic_entity": {"m.01": "A"}, "answer": answer}]))
    return p


# ------------------------------------------------------------------ bytes: UTF-8, BOM, NUL


def test_non_utf8_dataset_names_file_line_and_column_not_contents(tmp_path):
    p = tmp_path / "cwq.json"
    body = '[{"ID": "q1", "question": "who?", "topic_entity": {"m.01": "A"},\n "answer": "Caf\xe9 SECRETCONTENT"}]'
    p.write_bytes(body.encode("latin-1"))
    with pytest.raises(DataError) as e:
        load_cwq(str(p))
    msg = str(e.value)
    assert f"{p}:2:" in msg and "not valid UTF-8" in msg and "column 16" in msg
    assert "SECRETCONTENT" not in msg  # never the file's contents


def test_leading_bom_is_dropped_not_part_of_first_field(tmp_path):
    p = tmp_path / "kb.txt"
    p.write_bytes("\ufeffAlien|directed_by|Ridley Scott\n".encode("utf-8"))
    kg = load_metaqa_kb(str(p))
    assert "Alien" in kg.entity_names and "\ufeffAlien" not in kg.entity_names


def test_bom_inside_a_kg_file_is_an_error_with_line(tmp_path):
    p = tmp_path / "triples.tsv"
    p.write_text("a\tr\tb\nc\tr\t\ufeffd\n", encoding="utf-8")
    with pytest.raises(KGFormatError, match=r"triples\.tsv:2: byte-order mark \(U\+FEFF\) at column 5"):
        load_triples(str(p))


def test_nul_byte_in_gzip_kg_is_an_error_with_line(tmp_path):
    p = tmp_path / "triples.tsv.gz"
    p.write_bytes(gzip.compress(b"a\tr\tb\nc\tr\td\x00\n"))
    with pytest.raises(KGFormatError, match=r"triples\.tsv\.gz:2: NUL byte at column 6"):
        load_triples(str(p))


def test_nul_byte_in_dataset_is_an_error(tmp_path):
    p = tmp_path / "q.jsonl"
    # an escaped NUL or BOM is valid JSON, but inside a gold answer no prediction can match it
    p.write_text('{"id": "1", "question": "what movies did [A] star in", "answers": ["B\\u0000"]}\n')
    with pytest.raises(DataError, match=r"record 0: field 'answers'\[0\] holds a NUL character"):
        load_metaqa(str(p))
    p.write_text('{"id": "1", "question": "what movies did [A] star in", "answers": ["\\ufeffB"]}\n')
    with pytest.raises(DataError, match=r"field 'answers'\[0\] holds a byte-order mark"):
        load_metaqa(str(p))
    p.write_bytes(b'{"id": "1", "question": "what movies did [A] star in", "answers": ["B\x00"]}\n')
    with pytest.raises(DataError, match=r"q\.jsonl:1: NUL byte"):
        load_metaqa(str(p))


def test_utf16_file_gets_a_hint(tmp_path):
    p = tmp_path / "kb.txt"
    p.write_bytes("a|r|b\n".encode("utf-16"))
    with pytest.raises(KGFormatError, match="UTF-16"):
        load_metaqa_kb(str(p))


def test_read_text_missing_and_directory(tmp_path):
    with pytest.raises(InputFileError, match="file not found"):
        read_text(tmp_path / "nope.json")
    with pytest.raises(InputFileError, match="directory"):
        read_text(tmp_path)


# ------------------------------------------------------------------ gold answers


@pytest.mark.parametrize("answer, expected", [
    (None, r"field 'answer' is null; expected a string or a list"),
    ({"a": 1}, r"field 'answer' is an object"),
    (7, r"field 'answer' is a number"),
    ([["B"]], r"answer\[0\]: expected a string or \{answer_type"),
    (["B", None], r"answer\[1\]: expected a string or \{answer_type"),
    ("  ", r"field 'answer' is an empty string"),
])
def test_cwq_bad_answers_name_record_and_field(tmp_path, answer, expected):
    p = _cwq(tmp_path, answer)
    with pytest.raises(DataError, match=rf"record 1: {expected}"):
        load_cwq(str(p))


def test_webquestions_answers_with_null(tmp_path):
    p = tmp_path / "wq.json"
    p.write_text(json.dumps([{"url": "u", "question": "q?", "topic_entity": {"m.1": "A"}, "answers": ["x", None]}]))
    with pytest.raises(DataError, match=r"field 'answers'\[1\] is null"):
        load_webqsp(str(p))


def test_grailqa_answer_argument_must_be_string(tmp_path):
    p = tmp_path / "g.json"
    p.write_text(json.dumps([{"qid": 1, "question": "q?", "answer": [{"answer_type": "Value", "answer_argument": None}]}]))
    with pytest.raises(DataError, match=r"answer\[0\]\.answer_argument' is null"):
        load_grailqa(str(p))


def test_metaqa_answers_dict(tmp_path):
    p = tmp_path / "q.jsonl"
    p.write_text('{"id": "1", "question": "what movies did [A] star in", "answers": {"x": 1}}\n')
    with pytest.raises(DataError, match=r"q\.jsonl: record 0: field 'answers' is an object"):
        load_metaqa(str(p))


def test_hotpot_int_answer_and_musique_null_alias(tmp_path):
    p = tmp_path / "h.jsonl"
    p.write_text(json.dumps({"_id": "a", "question": "q?", "answer": 1994, "supporting_facts": [],
                             "context": []}) + "\n")
    with pytest.raises(DataError, match=r"field 'answer' is a number; expected a string"):
        load_hotpotqa(str(p))
    m = tmp_path / "m.jsonl"
    m.write_text(json.dumps({"id": "2hop__1", "question": "q?", "answer": "x", "answer_aliases": [None],
                             "paragraphs": []}) + "\n")
    with pytest.raises(DataError, match=r"field 'answer_aliases'\[0\] is null"):
        load_musique(str(m))


def test_good_answers_still_load(tmp_path):
    es = load_cwq(str(_cwq(tmp_path, ["C", "D"])))
    assert [ex.answers for ex in es] == [("B",), ("C", "D")]


def test_bom_inside_passage_text_is_content_but_not_at_a_line_start(tmp_path):
    rec = {"_id": "a", "question": "q?", "answer": "x", "supporting_facts": [],
           "context": [["T", ["some\ufefftext"]]]}
    p = tmp_path / "h.json"
    p.write_text(json.dumps([rec], ensure_ascii=False), encoding="utf-8")
    assert load_hotpotqa(str(p)).examples[0].corpus == (("T", "some\ufefftext"),)
    p.write_text("[" + json.dumps(rec) + ",\n\ufeff" + json.dumps(dict(rec, _id="b")) + "]", encoding="utf-8")
    with pytest.raises(DataError, match=r"h\.json:2: byte-order mark"):
        load_hotpotqa(str(p))


# ------------------------------------------------------------------ issue #32 item 4: where

def test_duplicate_example_id_names_file_line_field_and_first_occurrence(tmp_path):
    rec = {"question": "who?", "topic_entity": {"m.01": "A"}, "answer": "B"}
    p = tmp_path / "cwq.jsonl"
    p.write_text("\n".join(json.dumps(dict(rec, ID=i)) for i in ("16", "17", "18", "17")) + "\n")
    with pytest.raises(DataError) as e:
        load_cwq(str(p))
    msg = str(e.value)
    assert msg.startswith(f"{p}:4") and "field 'ID'" in msg and "'17'" in msg and "(first at line 2)" in msg, msg
    # a JSON list has no line per record: the record index says where
    q = tmp_path / "cwq.json"
    q.write_text(json.dumps([dict(rec, ID="a"), dict(rec, ID="a")]))
    with pytest.raises(DataError, match=rf"^{q}: record 1: field 'ID': duplicate example id 'a' \(first at record 0\)"):
        load_cwq(str(q))


def test_duplicate_metaqa_id_names_file_and_line(tmp_path):
    p = tmp_path / "2hop_test.jsonl"
    p.write_text("\n".join(json.dumps({"id": "x", "question": f"who is [A{i}]", "answers": ["B"]}) for i in range(2)) + "\n")
    with pytest.raises(DataError, match=rf"^{p}:2: field 'id': duplicate example id 'x' \(first at line 1\)"):
        load_metaqa(str(p))


def test_cr_only_line_endings_are_named(tmp_path):
    p = tmp_path / "kb.txt"
    p.write_bytes(b"a|r|b\rc|r|d\re|r|f\r")
    with pytest.raises(KGFormatError, match=r"kb\.txt:1: .*line endings"):
        load_metaqa_kb(p)
    q = tmp_path / "t.tsv"
    q.write_bytes(b"a\tr\tb\r\nc\tr\td\r\n")  # CRLF is fine
    assert load_triples(q).n_triples == 2
