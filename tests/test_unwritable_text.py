"""Issue 57 M2: text UTF-8 cannot hold (a lone UTF-16 surrogate) stops no writer of a run.

The HTTP client cleans model replies before any store sees them (tests/llm/test_openai_replies.py);
these tests hand such text straight to the project's own JSON writers, as a backend that does
not clean its text would: each writes valid UTF-8 with U+FFFD in its place, and nothing raises.
"""

from __future__ import annotations

import json

from kgreason.textio import clean_surrogates, utf8_safe

BAD = "Paris \ud800 and \udfff\ud800 x"


def test_clean_surrogates_replaces_lone_ones_and_joins_pairs():
    assert clean_surrogates(BAD) == ("Paris \ufffd and \ufffd\ufffd x", 3)
    assert clean_surrogates("\ud83d\ude00 ok") == ("\U0001f600 ok", 0)
    assert clean_surrogates("already \ufffd fine") == ("already \ufffd fine", 0)
    assert utf8_safe("plain") == "plain"


def test_prediction_rows_with_a_lone_surrogate_are_written_and_read_back(tmp_path):
    from kgreason.runs import PredictionStore

    store = PredictionStore(tmp_path / "predictions.jsonl")
    store.append({"id": "e1", "metrics": {"hit1": 0.0}, "error": None, "answers": [BAD], "raw": BAD})
    store.append({"id": "e2", "metrics": {"hit1": 1.0}, "error": None, "answers": ["ok"], "raw": "ok"})
    assert store.rows["e1"]["raw"] == utf8_safe(BAD)  # in memory as on disk
    again = PredictionStore(tmp_path / "predictions.jsonl")
    assert len(again) == 2 and again.rows["e1"]["answers"] == [utf8_safe(BAD)] and not again.damaged
    (tmp_path / "predictions.jsonl").read_bytes().decode("utf-8")


def test_write_json_and_the_damaged_side_file_take_a_lone_surrogate(tmp_path):
    from kgreason.runs import _append_damaged, write_json

    write_json(tmp_path / "metrics.json", {"note": BAD, "x": 1.0})
    assert json.loads((tmp_path / "metrics.json").read_text(encoding="utf-8"))["note"] == utf8_safe(BAD)
    _append_damaged(tmp_path / "p.damaged.jsonl", "p.jsonl", [{"line": 3, "raw": BAD, "reason": "x", "id": None}])
    assert json.loads((tmp_path / "p.damaged.jsonl").read_text(encoding="utf-8"))["raw"] == utf8_safe(BAD)


def test_subqrag_index_files_take_a_reply_with_a_lone_surrogate(tmp_path):
    """The extraction log and provenance file of SubQRAG's offline index hold model text."""
    from kgreason.llm.scripted import ScriptedLLM
    from kgreason.reasoners import subqrag_index

    passages = [("p1", "Paris", "Paris is the capital of France.")]
    reply = '[["Paris", "capital of", "France \ud800"]]'
    llm = ScriptedLLM(default=reply)
    subqrag_index.index_corpus(passages, llm, tmp_path / "idx", name="t", validate=False)
    files = [f for f in (tmp_path / "idx").rglob("*") if f.is_file()]
    assert any(f.name == "extractions.jsonl" for f in files) and any(f.name == "provenance.json" for f in files)
    for f in files:
        if f.suffix in (".json", ".jsonl", ".tsv", ".txt"):
            assert "\ufffd" not in f.read_bytes().decode("utf-8") or "France \ufffd" in f.read_text("utf-8")
