"""`kgreason bench tokens`: where a method's model time goes, read from a run's traces (issue 70)."""

from __future__ import annotations

import json

import pytest

from kgreason.bench import tokens


def _llm(name: str, prompt: str, reply: str, pt: int, ct: int, parsed, ok: bool = True, reused: int | None = None,
         s: float = 1.0) -> dict:
    usage = {"calls": 1, "cache_hits": 0, "prompt_tokens": pt, "completion_tokens": ct, "latency_s": s}
    if reused is not None:
        usage["prompt_tokens_reused"] = reused
    return {"kind": "llm", "name": name, "data": {"prompt_id": name, "messages": [{"role": "user", "content": prompt}],
                                                 "replies": [reply], "parsed": parsed, "parse_ok": ok, "usage": usage}}


def test_purposes_drop_their_path_and_step_indices():
    assert [tokens.purpose_of(x) for x in ("step_p1_t0", "hypothesis_p2_t1", "prune_relations", "refine")] == \
        ["step", "hypothesis", "prune_relations", "refine"]


def test_parsed_share_is_the_reply_up_to_the_end_of_what_the_parser_read():
    reply = '{"triple": 3, "state": "s", "answer": ""}\nLet me also explain at length why.'
    assert tokens.parsed_end(reply, {"triple": 3}) == reply.index("}") + 1
    assert tokens.parsed_end("```cypher\nMATCH (a) RETURN a\n```\nthat is all", "MATCH (a) RETURN a") == \
        len("```cypher\nMATCH (a) RETURN a\n```")
    assert tokens.parsed_end("no json here", {"a": 1}) == len("no json here")


def test_a_runs_table_from_its_traces(tmp_path):
    head = "Instructions that every step repeats. " * 10  # 380 characters
    row = {"id": "q1", "trace": [
        _llm("step_p0_t0", head + "Step 1.", '{"a": 1} and more words after the json', 100, 20, {"a": 1}),
        _llm("step_p0_t1", head + "Step 2.", "rambling without json", 101, 30, None, ok=False, reused=95),
        _llm("answer", "A different prompt.", "X", 5, 1, "X", s=0.5),
    ], "llm_usage": {"score": {"calls": 2, "cache_hits": 0, "prompt_tokens": 40, "latency_s": 2.0}}}
    run = tmp_path / "run"
    run.mkdir()
    (run / "predictions.jsonl").write_text(json.dumps(row) + "\n" + json.dumps({**row, "id": "q2"}) + "\n")
    (run / "config.yaml").write_text("reasoner:\n  _target_: kgreason.reasoners.sgr.SGR\n  top_k: 30\n")
    (st,) = tokens.collect([run])
    assert st.method == "sgr" and st.questions == 2
    table = {r["purpose"]: r for r in tokens.rows([st])}
    step = table["step"]
    assert step["calls_per_q"] == 2 and step["prompt_tokens_per_q"] == 201
    # the second step prompt repeats the first one's 380 characters of 387: about 98 % of its 101 tokens
    assert step["prefix_reusable"] == pytest.approx((380 / 387 * 101) / 201, abs=0.01)
    assert step["reused"] == pytest.approx(95 / 201)
    assert step["unparseable"] == 2 and step["unparseable_share"] == 0.5
    assert step["parsed"] == pytest.approx(20 * len('{"a": 1}') / len('{"a": 1} and more words after the json') / 50)
    assert table["score (P_θ)"]["calls_per_q"] == 2 and table["score (P_θ)"]["prompt_tokens_per_q"] == 40
    assert table["all"]["model_s_per_q"] == pytest.approx(1 + 1 + 0.5 + 2)
    md = tokens.markdown(tokens.rows([st]))
    assert "| **run** (sgr) | all |" in md


def test_a_path_without_predictions_is_one_line(tmp_path, capsys):
    assert tokens.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no predictions.jsonl" in err and err.count("\n") == 1
