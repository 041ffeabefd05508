"""`kgreason bench caps`: per-prompt reply caps fitted on dev-split traces (issue 70 item 3)."""

from __future__ import annotations

import json

import pytest

from kgreason.bench import caps


def _llm(name: str, reply: str, ct: int, parsed, ok: bool = True) -> dict:
    usage = {"calls": 1, "cache_hits": 0, "prompt_tokens": 10, "completion_tokens": ct}
    return {"kind": "llm", "name": name, "data": {"prompt_id": name, "messages": [{"role": "user", "content": "p"}],
                                                 "replies": [reply], "parsed": parsed, "parse_ok": ok, "usage": usage}}


STEP = '{"triple": 3, "state": "s", "answer": ""}'  # 41 characters


def _run(tmp_path, config: str, name: str = "run"):
    run = tmp_path / name
    run.mkdir()
    rows = [{"id": f"q{i}", "trace": [
        # 41 parsed characters of 82: half of 100 tokens is what the parser read, then it rambles to the cap
        _llm("step_p0_t0", STEP + "x" * 41, 100, {"triple": 3}),
        _llm("step_p0_t1", STEP, 20 + i, {"triple": 3}),
        _llm("hypothesis_p0_t0", "no json at all", 512, None, ok=False),
        _llm("structure", '{"entities": ["A"]}', 12, {"entities": ["A"]}),
    ]} for i in range(2)]
    (run / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "config.yaml").write_text(config)
    return run


DEV = "questions:\n  split: dev\n  dev_size: 20\ndataset:\n  limit: null\n"


def test_caps_fit_the_longest_parsed_part_with_headroom(tmp_path):
    runs, questions = caps.collect([_run(tmp_path, DEV)])
    rows = {r["prompt"]: r for r in caps.table(runs, questions, headroom=1.5, step=16, floor=32, ceiling=512)}
    step = rows["step"]
    assert step["replies"] == 4 and step["parsed_max"] == pytest.approx(50)
    assert step["cap"] == 80  # 50 x 1.5 = 75, rounded up to 16
    assert step["cut"] == 0 and step["saved_per_q"] == pytest.approx((100 - 80) * 2 / 2)
    assert rows["structure"]["cap"] == 32  # 12 x 1.5 = 18, the floor
    assert rows["hypothesis"]["cap"] is None and rows["hypothesis"]["unparseable"] == 2  # nothing to fit on
    ov = caps.override(list(rows.values()), default=512)
    assert ov == "reasoner.max_tokens={step:80,structure:32,default:512}"


def test_a_cap_never_exceeds_the_one_the_traces_ran_under(tmp_path):
    runs, q = caps.collect([_run(tmp_path, DEV)])
    rows = {r["prompt"]: r for r in caps.table(runs, q, headroom=20, step=16, floor=32, ceiling=512)}
    assert rows["step"]["cap"] == 512


def test_a_lower_quantile_cuts_and_says_so(tmp_path):
    runs, q = caps.collect([_run(tmp_path, DEV)])
    rows = {r["prompt"]: r for r in caps.table(runs, q, headroom=1.0, step=1, floor=1, quantile=0.5)}
    assert rows["step"]["cap"] == 21 and rows["step"]["cut"] == 2


@pytest.mark.parametrize("config,ok", [
    (DEV, True),
    ("questions:\n  split: all\n  dev_size: 20\ndataset:\n  limit: 10\n  sample: null\n", True),
    ("questions:\n  split: all\n  dev_size: 20\ndataset:\n  limit: 30\n  sample: null\n", False),
    ("questions:\n  split: all\n  dev_size: 20\ndataset:\n  limit: 10\n  sample: 5\n", False),
    ("questions:\n  split: heldout\n  dev_size: 20\ndataset:\n  limit: null\n", False),
])
def test_only_dev_split_traces_are_fitted_on(tmp_path, capsys, config, ok):
    run = _run(tmp_path, config)
    assert caps.main([str(run)]) == (0 if ok else 2)
    out = capsys.readouterr()
    if ok:
        assert "reasoner.max_tokens={step:80," in out.out
    else:
        assert "dev split only" in out.err and str(run) in out.err and out.err.count("\n") == 1


def test_the_step_prompts_parser_reads_one_json_object_and_nothing_after(tmp_path):
    """The premise of a cap at the parsed length: SGR's step parser reads the first JSON object and
    ignores what follows, so a reply cut after it parses the same."""
    from kgreason.reasoners.sgr.stepwise import parse_step

    full = STEP + "\nLet's continue reasoning step by step: the next triple is [a, b, c] ..."
    assert parse_step(full).ok and parse_step(full) == parse_step(STEP)


def test_traces_without_a_model_reply_are_refused_not_fitted(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "predictions.jsonl").write_text(json.dumps({"id": "q1", "trace": []}) + "\n")
    (run / "config.yaml").write_text(DEV)
    assert caps.main([str(run)]) == 2
    err = capsys.readouterr().err
    assert "no model reply" in err and err.count("\n") == 1
