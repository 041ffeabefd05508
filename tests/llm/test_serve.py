"""`kgreason serve`'s pieces that need no llama.cpp: the slot proxy (routing, busy time, token
counts), the log counters, the model resolution and the one-line errors. The real server is
exercised in tests/llm/test_llama_server.py (marked ``server``)."""

from __future__ import annotations

import json
import threading
import urllib.request

import pytest

from kgreason.bench.llm import FakeChatServer
from kgreason.llm.serve import LlamaServer, SlotProxy, override_line


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def test_proxy_spreads_concurrent_requests_over_slots_and_counts_them():
    with FakeChatServer(latency_s=0.3) as a, FakeChatServer(latency_s=0.3) as b:
        proxy = SlotProxy([a.port, b.port]).start()
        try:
            url = f"http://127.0.0.1:{proxy.port}/v1/chat/completions"
            body = {"model": "m", "messages": [{"role": "user", "content": "one two three"}]}
            threads = [threading.Thread(target=_post, args=(url, body)) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            st = proxy.stats()
            with urllib.request.urlopen(f"http://127.0.0.1:{proxy.port}/kgreason/stats", timeout=5) as r:
                assert json.loads(r.read())["requests"] == 4
        finally:
            proxy.close()
    assert len(a.requests) == 2 and len(b.requests) == 2  # least in flight: two each
    assert st["requests"] == 4 and st["max_in_flight"] >= 2 and st["errors"] == 0
    # the fake counts words: 3 prompt tokens, reply "echo: one two three" = 4
    assert st["prompt_tokens"] == 12 and st["completion_tokens"] == 16
    assert st["replies_with_cached_field"] == 0  # the fake sends no prompt_tokens_details
    # busy = holding at least one request: the two requests a slot got overlapped (>= 0.3 s)
    assert all(0.25 <= b <= st["wall_s"] for b in st["busy_s"])


def test_proxy_counts_cached_tokens_when_the_server_reports_them():
    class Cached(FakeChatServer):
        def _chat(self, body):
            out = super()._chat(body)
            out["usage"]["prompt_tokens_details"] = {"cached_tokens": 2}
            return out

    with Cached() as a:
        proxy = SlotProxy([a.port]).start()
        try:
            _post(f"http://127.0.0.1:{proxy.port}/v1/chat/completions",
                  {"model": "m", "messages": [{"role": "user", "content": "x y"}]})
            st = proxy.stats()
        finally:
            proxy.close()
    assert st["cached_tokens"] == 2 and st["replies_with_cached_field"] == 1


def test_proxy_answers_502_naming_the_slot_when_it_is_down():
    from kgreason.llm.serve import free_port

    dead = free_port()
    proxy = SlotProxy([dead]).start()
    try:
        with pytest.raises(urllib.error.HTTPError) as e:
            _post(f"http://127.0.0.1:{proxy.port}/v1/chat/completions", {"model": "m", "messages": []})
        assert e.value.code == 502 and str(dead) in e.value.read().decode()
    finally:
        proxy.close()


def test_log_counters_read_prefix_hits_and_llama_timings(tmp_path):
    (tmp_path / "slot0.log").write_text(
        "Llama.generate: 57 prefix-match hit, remaining 12 prompt tokens to eval\n"
        "llama_perf_context_print: prompt eval time =      26.50 ms /    12 tokens (    2.21 ms per token)\n"
        "llama_perf_context_print:        eval time =     500.00 ms /    10 runs   (   50.00 ms per token)\n")
    (tmp_path / "slot1.log").write_text(
        "Llama.generate: 3 prefix-match hit, remaining 40 prompt tokens to eval\n"
        "llama_perf_context_print:        eval time =     500.00 ms /    30 runs   (   16.67 ms per token)\n")
    srv = LlamaServer(tmp_path / "m.gguf", "m", parallel=2, log_dir=tmp_path)
    srv.ports = [1, 2]
    c = srv.log_counters()
    assert c == {"prefix_hit_tokens": 60, "prefix_hits": 2, "prompt_eval_ms": 26.5, "prompt_eval_tokens": 12,
                 "eval_ms": 1000.0, "eval_tokens": 40}


def test_server_command_and_override_line(tmp_path):
    srv = LlamaServer(tmp_path / "m.gguf", "my-model", parallel=2, threads=3, n_ctx=1024)
    cmd = srv.command(1234)
    assert cmd[1:3] == ["-m", "kgreason.llm.llamacpp_server"]  # llama_cpp.server, AMX work-around applied
    flags = dict(zip(cmd[3::2], cmd[4::2]))
    assert flags == {"--model": str(tmp_path / "m.gguf"), "--model_alias": "my-model", "--host": "127.0.0.1",
                     "--port": "1234", "--n_ctx": "1024", "--n_threads": "3", "--n_threads_batch": "3",
                     "--logits_all": "true", "--verbose": "true"}
    assert override_line("http://127.0.0.1:8000/v1", "my-model") == \
        "llm=openai llm.base_url=http://127.0.0.1:8000/v1 llm.model=my-model llm.api_key_env=null"
    # the printed line sets as many examples at once as there are slots (example_workers=auto
    # would send 16 against any HTTP model, queued on one-request-at-a-time slots)
    assert srv.override_line().endswith(" llm.api_key_env=null example_workers=2")
    with pytest.raises(ValueError, match="parallel"):
        LlamaServer(tmp_path / "m.gguf", "m", parallel=0)


def test_resolve_model_finds_the_embedded_gguf_like_the_in_process_route():
    from kgreason.llm.local import find_gguf
    from kgreason.llm.serve import resolve_model

    try:
        gguf = find_gguf()
    except (ImportError, FileNotFoundError) as e:
        pytest.skip(str(e))
    got, name, llm = resolve_model(["llm=local"])
    assert got == gguf and name == gguf.stem and llm["n_ctx"] is None  # the model's trained window
    with pytest.raises(ValueError, match="local models"):
        resolve_model(["llm=openai"])


def test_serve_with_missing_llama_cpp_is_one_line_with_the_pip_command(monkeypatch, capsys):
    from kgreason.llm import serve

    monkeypatch.setattr(serve, "llama_server_available",
                        lambda: "llama_cpp.server cannot be imported (No module named 'llama_cpp'): " + serve.INSTALL_HINT)
    assert serve.main(["llm=local", "--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "pip install 'llama-cpp-python[server]==0.3.36'" in err


def test_serve_with_missing_qwen_weights_is_one_line_with_the_fetch_command(monkeypatch, capsys, tmp_path):
    from kgreason.llm import models, serve

    if models.parts_installed(models.QWEN_CODER_1_5B):  # an empty model dir is then filled from them
        pytest.skip("the Qwen parts are installed here as packages")
    monkeypatch.setattr(serve, "llama_server_available", lambda: None)
    monkeypatch.setenv("KGREASON_MODEL_DIR", str(tmp_path))
    assert serve.main(["llm=qwen_coder_1_5b", "--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "kgreason models fetch qwen2.5-coder-1.5b-instruct" in err
