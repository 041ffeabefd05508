"""The ``llm=openai`` backend against a real OpenAI-compatible server: llama-cpp-python's
``llama_cpp.server`` serving the embedded SmolLM2-135M GGUF on 127.0.0.1 (the session fixture
``llama_server`` in tests/conftest.py; ``kgreason.llm.serve.LlamaServer``).

What a fake server cannot show: the chat template the server applies, its stop handling, the
token usage it reports (recorded per call in the trace and the row's ``llm_usage``), concurrent
requests from ``example_workers > 1``, and ``score()`` through ``/v1/completions`` echo
log-probs (SGR Eq. 18), whose alignment is checked against the in-process llama.cpp route on the
same file. SmolLM2 cannot read, so the reasoner runs assert plumbing, never accuracy.

Marked ``server``; skipped where ``llama_cpp.server`` cannot be imported (``make test`` installs
``llama-cpp-python[server]``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest

from conftest import REPO, compose_cfg

from kgreason.types import ChatRequest, Message

pytestmark = pytest.mark.server

NAME = "smollm2-135m-instruct"


def _llm(srv, **kw):
    from kgreason.llm.openai_http import OpenAIChat

    return OpenAIChat(model=NAME, base_url=srv.base_url, api_key_env=None, max_retries=1, **kw)


@pytest.fixture(scope="module")
def local_llama():
    """The in-process llama.cpp route on the same GGUF (every position's logits)."""
    import llama_cpp

    from kgreason.llm import llamacpp_compat
    from kgreason.llm.local import find_gguf

    llamacpp_compat.apply()  # an AMX CPU's native build crashes on the first decode otherwise
    return llama_cpp.Llama(model_path=str(find_gguf()), logits_all=True, n_ctx=512, n_threads=1, verbose=False)


def _in_process_logprobs(llm, text: str) -> tuple[list[int], np.ndarray]:
    """(tokens as the server's /completions sees them, log-softmax of every position's logits)."""
    toks = llm.tokenize(text.encode(), add_bos=True, special=True)
    llm.reset()
    llm.eval(toks)
    logits = np.asarray(llm.scores[: len(toks)], dtype=np.float64)
    m = logits.max(axis=1, keepdims=True)
    return toks, logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True))


# ----------------------------------------------------------------------------- the server itself


def test_models_endpoint_names_the_served_model(llama_server):
    with urllib.request.urlopen(f"{llama_server.base_url}/models", timeout=10) as r:
        ids = [m["id"] for m in json.loads(r.read())["data"]]
    assert ids == [NAME]
    assert llama_server.override_line() == (f"llm=openai llm.base_url={llama_server.base_url} "
                                            f"llm.model={NAME} llm.api_key_env=null example_workers={llama_server.parallel}")


def test_server_applies_the_ggufs_chat_template_and_reports_its_tokens(llama_server, local_llama):
    """The prompt tokens the server reports for a chat request are exactly the tokens of the
    GGUF's own chat template rendered over the messages (a server sending the raw text, or
    another template, reports a different count); the reply's usage reaches Completion.usage."""
    import jinja2

    msgs = (Message("system", "You answer in one word."), Message("user", "What colour is the sky?"))
    c = _llm(llama_server).generate([ChatRequest(messages=msgs, max_tokens=8, temperature=0.0)])[0]
    tmpl = local_llama.metadata["tokenizer.chat_template"]
    text = jinja2.Template(tmpl).render(messages=[{"role": m.role, "content": m.content} for m in msgs],
                                        add_generation_prompt=True, bos_token="", eos_token="")
    assert "<|im_start|>system\nYou answer in one word.<|im_end|>" in text  # SmolLM2's ChatML
    expected = len(local_llama.tokenize(text.encode(), add_bos=True, special=True))
    plain = len(local_llama.tokenize(b"You answer in one word.\nWhat colour is the sky?", add_bos=True, special=True))
    assert c.usage.prompt_tokens == expected != plain
    assert 1 <= c.usage.completion_tokens <= 8 and c.usage.calls == 1 and c.text.strip()


def test_stop_strings_cut_the_reply(llama_server):
    """A stop string the reply would surely contain (the letter e, in 40 tokens of English) cuts
    it: the stopped reply has no "e", is shorter and cost fewer tokens. (Two greedy replies to
    the same prompt are not compared: a reused KV prefix changes SmolLM2's near-ties.)"""
    llm = _llm(llama_server)
    req = dict(messages=(Message("user", "Describe the weather in three sentences."),), max_tokens=40,
               temperature=0.0)
    full = llm.generate([ChatRequest(**req)])[0]
    assert "e" in full.text, full.text
    cut = llm.generate([ChatRequest(**req, stop=("e",))])[0]
    assert "e" not in cut.text and len(cut.text) < len(full.text), (full.text, cut.text)
    assert cut.usage.completion_tokens < full.usage.completion_tokens


# ----------------------------------------------------------------------------- score(), Eq. 18


def test_alignment_probe_is_ranked_right_by_smollm2_in_process(local_llama):
    """The known-answer probe the backend checks servers with is one the 135M model surely
    gets right on the in-process route (right continuation ahead by far more than the margin)."""
    from kgreason.llm.openai_http import SCORE_PROBE_MARGIN, SCORE_PROBES

    for prefix, right, wrong in SCORE_PROBES:
        got = {}
        for cand in (right, wrong):
            p_toks, _ = _in_process_logprobs(local_llama, prefix)
            toks, logp = _in_process_logprobs(local_llama, prefix + cand)
            assert toks[: len(p_toks)] == p_toks  # the continuation adds whole tokens
            got[cand] = float(sum(logp[i - 1, toks[i]] for i in range(len(p_toks), len(toks))))
        assert got[right] - got[wrong] >= 2 * SCORE_PROBE_MARGIN, got


def test_score_trusts_the_server_exactly_when_its_echo_logprobs_are_aligned(llama_server, local_llama):
    """Compare the server's echoed log-probs with the in-process route on the same file: they
    are either aligned (token i scored by position i-1's distribution) or shifted by one
    (by position i's, llama-cpp-python 0.3.36 on a model without BOS). The backend's check must
    trust the server in the first case and refuse it in the second."""
    from kgreason.llm.openai_http import SCORE_PROBES

    llm = _llm(llama_server)
    prefix, right, _ = SCORE_PROBES[0]
    lp = llm._echo(prefix + right)
    server = np.asarray([v for v in lp.token_logprobs[1:] if v is not None][: 8], dtype=np.float64)
    toks, logp = _in_process_logprobs(local_llama, prefix + right)
    bos = local_llama.token_bos()
    body = [i for i, t in enumerate(toks) if not (i == 0 and t == bos)]  # the tokens the server echoes
    aligned = np.asarray([logp[i - 1, toks[i]] for i in body[1:]])[: len(server)]
    shifted = np.asarray([logp[i, toks[i]] for i in body[1:]])[: len(server)]
    is_aligned = np.allclose(server, aligned, atol=0.1)
    is_shifted = np.allclose(server, shifted, atol=0.1)
    assert is_aligned != is_shifted, (server, aligned, shifted)
    ok, detail = llm.score_alignment()
    assert ok == is_aligned, detail
    print(f"llama-cpp-python server echo log-probs: {'aligned' if is_aligned else 'shifted by one'}; "
          f"check: {detail}")
    if not ok:
        from kgreason.llm.base import ScoringUnsupported

        with pytest.raises(ScoringUnsupported):
            llm.score((Message("user", "Capital of France?"),), ["Paris", "Banana"])


def test_sgr_p_theta_follows_the_backends_decision(llama_server):
    """SGR's P_θ (Eq. 18) uses score() when the server passed the check and the chat-choice
    fallback (None) when it did not."""
    from kgreason.reasoners.sgr import SGR

    llm = _llm(llama_server)
    ok, _ = llm.score_alignment()

    class Stub:
        pass

    s = Stub()
    s.llm = llm
    p = SGR._p_theta(s, "Count: 1, 2, 3, 4, 5, 6, 7, 8, 9. What comes after 9?", [" 10", " 3"])
    assert (p is not None) == ok


# ----------------------------------------------------------------------------- whole runs


def _run(srv, tmp_path, *overrides):
    from kgreason.runner.run import run

    cfg = compose_cfg(["llm=openai", f"llm.base_url={srv.base_url}", f"llm.model={NAME}", "llm.api_key_env=null",
                       "tracking=none", "dataset.limit=1", "llm_cache.mode=off", *overrides], tmp_path)
    res = run(cfg, tmp_path)
    rows = [json.loads(x) for x in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    return res, rows


FAST = {
    "io": ["reasoner=io", "reasoner.max_tokens=24"],
    "cot": ["reasoner=cot", "reasoner.max_tokens=48"],
    "rag": ["reasoner=rag", "reasoner.max_tokens=24"],
    "logoskg_dx": ["reasoner=logoskg_dx", "dataset=embedded_clinical", "reasoner.max_tokens=32"],
}
SLOW = {  # rag_text retrieves from a pool of the question's passages and one other (_small_pool): the
    # embedded world's whole pool took 2-4 min of MiniLM encoding on 2 cores, none of it the server's
    "rag_text": ["reasoner=rag_text", "dataset=embedded", "dataset.task=multihop", "reasoner.max_tokens=24"],
    # ToG and ReKnoS: one step of width 1 (plumbing; a deeper search is the same calls again)
    "tog": ["reasoner=tog", "reasoner.max_tokens=32", "reasoner.depth=1", "reasoner.width=1"],
    "reknos": ["reasoner=reknos", "reasoner.max_tokens=32", "reasoner.depth=1", "reasoner.width=1"],
    "sgr": ["reasoner=sgr", "reasoner.max_tokens=48"],
}


def _check_run(llama_server, tmp_path, overrides):
    probe = _llm(llama_server).generate([ChatRequest.of("ping", max_tokens=1)])[0].usage  # = the run's preflight
    before2 = llama_server.stats()
    res, rows = _run(llama_server, tmp_path, *overrides)
    m = res.metrics
    assert m["run/n_examples"] == 1 and m["run/error_rate"] == 0.0, rows[0].get("error")
    assert m["llm/calls"] > 0
    steps = [e["data"] for e in rows[0]["trace"] if e.get("kind") == "llm"]
    assert steps and all(s["usage"]["prompt_tokens"] > 0 and s["usage"]["calls"] == 1 for s in steps)
    # what the server reported is what the run recorded: every call (+ the preflight probe)
    after = llama_server.stats()
    d = {k: after[k] - before2[k] for k in ("requests", "prompt_tokens", "completion_tokens")}
    ledger = {k: sum(u.get(k, 0) for u in rows[0]["llm_usage"].values()) for k in ("calls", "prompt_tokens",
                                                                                   "completion_tokens")}
    score_requests = d["requests"] - 1 - ledger["calls"]  # score() calls: /completions, one per candidate
    assert score_requests >= 0
    if score_requests == 0:
        assert d["prompt_tokens"] == probe.prompt_tokens + ledger["prompt_tokens"] == probe.prompt_tokens + m["llm/prompt_tokens"]
        assert d["completion_tokens"] == probe.completion_tokens + ledger["completion_tokens"]
    return res, rows


@pytest.mark.parametrize("name", list(FAST))
def test_reasoner_runs_through_the_server(name, llama_server, tmp_path):
    _check_run(llama_server, tmp_path, FAST[name])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SLOW))
def test_reasoner_runs_through_the_server_slow(name, llama_server, tmp_path):
    over = SLOW[name] + ([f"reasoner.corpus={_small_pool(tmp_path)}"] if name == "rag_text" else [])
    res, rows = _check_run(llama_server, tmp_path, over)
    if name == "sgr":  # which P_θ source SGR used follows the backend's score check
        ok, _ = _llm(llama_server).score_alignment()
        srcs = {e["data"].get("p_theta_source") for e in rows[0]["trace"] if e.get("kind") == "answer"}
        assert "logprobs" not in srcs or ok, srcs


def _small_pool(tmp_path):
    """A passage pool (JSONL) of two of the first multihop question's supporting passages and one other."""
    from kgreason.data.embedded import load_embedded
    from kgreason.reasoners.rag_text import load_corpus

    ex = next(iter(load_embedded(task="multihop", limit=1)))
    world = load_corpus("embedded", 0)
    keep = [p for p in world if p[0] in set(ex.supporting)][:2] + world[:1]
    corpus = tmp_path / "pool.jsonl"
    corpus.write_text("".join(json.dumps({"title": t, "text": x}) + "\n" for t, x in keep))
    return corpus


@pytest.mark.slow
def test_subqrag_runs_through_the_server(llama_server, tmp_path):
    """SubQRAG indexes its pool first (§2.1): a pool of two of the question's passages and one other.
    ``kg_source=index`` says so: with a JSONL pool, ``auto`` meant ``injected``, which embedded the
    embedded world's 6.7k triples and indexed nothing. Two sub-questions: each runs the same calls
    again (30 s on the quiet 2-core machine, 65 s on CI with SmolLM2's five)."""
    corpus = _small_pool(tmp_path)
    res, _ = _run(llama_server, tmp_path, "reasoner=subqrag", "dataset=embedded", "dataset.task=multihop",
                  "reasoner.max_tokens=24", "reasoner.index_max_tokens=64", f"reasoner.corpus={corpus}",
                  "reasoner.max_subquestions=2",  # each sub-question runs the same calls again
                  f"reasoner.index_dir={tmp_path / 'idx'}",
                  "reasoner.kg_source=index")
    assert res.metrics["run/error_rate"] == 0.0 and res.metrics["llm/calls"] > 0
    assert res.metrics["llm/index/calls"] == 3  # one extraction per pool passage, through the server


def test_example_workers_send_concurrent_requests_to_the_slots(llama_server, tmp_path):
    """example_workers=4 on 4 questions: the server holds requests of several examples at once
    (both slots busy), and the predictions come back in dataset order."""
    before = llama_server.stats()
    res, rows = _run(llama_server, tmp_path, "reasoner=io", "reasoner.max_tokens=16", "dataset.limit=4", "example_workers=4")
    after = llama_server.stats()
    assert res.metrics["run/n_examples"] == 4 and res.metrics["run/error_rate"] == 0.0
    assert after["max_in_flight"] >= 2
    assert all(b1 > b0 for b0, b1 in zip(before["busy_s"], after["busy_s"]))  # every slot answered some
    from kgreason.data.embedded import load_embedded

    assert [r["id"] for r in rows] == [ex.id for ex in load_embedded(limit=4)]


# ----------------------------------------------------------------------------- kgreason serve


def test_kgreason_serve_prints_the_override_line_and_answers(tmp_path):
    """`kgreason serve llm=local --port P` in a subprocess: it prints the exact override line,
    the endpoint answers a chat request, and SIGTERM stops it and its slot process."""
    from kgreason.llm.serve import free_port, llama_server_available

    why = llama_server_available()
    if why:
        pytest.skip(why)
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, "-m", "kgreason", "serve", "llm=local", "--port", str(port),
                          "--threads", "1"], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        line, deadline = "", time.monotonic() + 240
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            if line.startswith("llm=openai") or not line and p.poll() is not None:
                break
        url = f"http://127.0.0.1:{port}/v1"
        assert line.strip() == f"llm=openai llm.base_url={url} llm.model=SmolLM2-135M-Instruct.Q4_1 llm.api_key_env=null example_workers=1", \
            (line, p.stderr.read() if p.poll() is not None else "")
        from kgreason.llm.openai_http import OpenAIChat

        c = OpenAIChat(model="SmolLM2-135M-Instruct.Q4_1", base_url=url, api_key_env=None,
                       max_retries=0).generate([ChatRequest.of("Say hi.", max_tokens=4)])[0]
        assert c.usage.prompt_tokens > 0 and c.usage.completion_tokens >= 1
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0
        with pytest.raises(OSError):
            urllib.request.urlopen(f"{url}/models", timeout=2)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)


@pytest.mark.slow
def test_server_bench_reports_every_row():
    """`kgreason bench llm --which server` on the smallest setting: its own server, one io row
    per worker count, with the busy share, the server's own speeds and the prefix-cache count."""
    from kgreason.bench.llm import bench_server

    r = bench_server(("llm=local",), reasoners=("io",), workers=(1, 2), n=2, parallel=2, threads=1, max_tokens=8)
    assert [(x["reasoner"], x["example_workers"]) for x in r["rows"]] == [("io", 1), ("io", 2)]
    for x in r["rows"]:
        assert x["requests"] == 3 and x["error_rate"] == 0.0  # 2 examples + the preflight probe
        assert 0 < x["slots_busy_share"] <= 1 and x["server_decode_tok_per_s"] > 0
        assert x["cached_tokens_in_usage"] is None  # llama-cpp-python sends no prompt_tokens_details
    assert r["score_check"]["passed"] in (True, False)
