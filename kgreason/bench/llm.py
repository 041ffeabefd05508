"""LLM-layer benchmark: batched vs sequential throughput.

``python -m kgreason.bench.llm`` (or ``main(argv)`` from the bench entry point) measures

* ``openai``: :class:`~kgreason.llm.openai_http.OpenAIChat` against :class:`FakeChatServer`
  (a real HTTP server on 127.0.0.1 with a fixed per-request latency, 50 ms by default):
  ``max_concurrency=16`` vs ``1`` on the same requests → requests/s, tokens/s and the ratio;
* ``hf``: :class:`~kgreason.llm.hf.HFCausalLM` on a tiny random-weight Llama built locally
  (nothing downloaded): one left-padded batch vs one request at a time.
* ``dtypes``: a real local model (``--model``, default the Qwen2.5-Coder-1.5B parts) in float32,
  bfloat16 and int8 (dynamic quantisation), and with ``--dtypes …,llamacpp`` the llama.cpp
  route: greedy tokens/s on the same prompts, one request at a time or ``--batch N`` per
  ``generate`` call, the dtypes alternating prompt by prompt (fair on a shared CPU), and whether
  each dtype's greedy reply equals the first one's.
* ``server``: whole runs (io and ToG by default) with ``llm=openai`` against a llama.cpp server
  (``kgreason serve``'s :class:`~kgreason.llm.serve.LlamaServer`, ``--parallel`` slots) serving
  ``--llm``'s local model, at ``example_workers`` 1, 4 and 8: examples per minute, the share of
  time the slots were busy, the server's own decode/prefill tokens/s and its prefix-cache hits.
* ``harness``: whole runs (``reasoner=io`` on the embedded world, ``llm=openai``) against
  :class:`FakeChatServer` with 0.5 s per request, at ``example_workers`` 16, 64 and 256: the share
  of ideal (the waiting a harness without overhead would do / what the run waited), issue 60.
* ``grammar``: a run's recorded JSON-schema calls (``--run``, a run dir or bundle made with
  ``llm.structured_output=true``) on the llama.cpp route with ``llm.grammar_top`` 0 and 256:
  CPU seconds, CPU ms a decoded token, the ratio, and whether the replies are the same.
* ``workers``: a whole run (``kgreason.runner.run.run``, ``reasoner=io`` on MetaQA 2-hop, call cache
  off) with ``example_workers=1`` and ``=8`` on the same questions → examples per minute and
  the ratio (8 workers → the local model's requests are merged by
  :class:`~kgreason.llm.batching.BatchingLLM`).

Speed is never asserted in tests; this prints a table (and ``--json PATH`` writes one).

:class:`FakeChatServer` is also the test server of ``tests/llm``: it speaks
``/v1/chat/completions`` and ``/v1/completions`` (echo+logprobs), and can inject 429 (with
``Retry-After``), 5xx, slow replies and 404 for chosen requests. With ``openai_rules=True`` it
refuses what the OpenAI API refuses for its reasoning models (HTTP 400 with OpenAI's error JSON)
and reports reasoning tokens in ``usage.completion_tokens_details``.
It can also shift the echoed log-probs by one position (``echo_shift``), as llama-cpp-python's
server does on some models.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

# ----------------------------------------------------------------------------- test server

# The model families the OpenAI API serves as reasoning models (GPT-5, o1, o3, o4-mini): it
# refuses `max_tokens` (they take `max_completion_tokens`), any temperature or top_p but 1,
# `stop` and `logprobs`, with HTTP 400 (OpenAI API reference, chat completions; reasoning guide).
# Kept apart from kgreason's own list (conf/llm/openai.yaml `reasoning_models`) on purpose: the
# test server says what the API does, not what the client believes.
OPENAI_REASONING_PREFIXES = ("gpt-5", "o1", "o3", "o4")


class FakeChatServer:
    """OpenAI-compatible server on ``127.0.0.1:<free port>`` (use as a context manager).

    Reply text is ``"echo: <last user message>"`` (``#i`` appended for choice ``i > 0``);
    token counts are whitespace word counts (prompt: all message contents; completion: the
    reply). ``faults`` is a list consumed one per incoming request before normal replies::

        ("429", retry_after_or_None) | ("500",) | ("503",) | ("slow", seconds) | ("404",)
        | ("401-quote",)  (a 401 whose message quotes the key it was sent)

    ``openai_rules=True``: a model whose name starts with one of
    :data:`OPENAI_REASONING_PREFIXES` gets HTTP 400 with OpenAI's error JSON
    (``{"error": {"message", "type": "invalid_request_error", "param", "code"}}``) for
    ``max_tokens``, ``temperature``/``top_p`` other than 1, ``stop`` or ``logprobs``; any other
    model gets it for ``reasoning_effort``. A reasoning model "thinks" ``reasoning_tokens``
    tokens per choice before its reply: they count in ``completion_tokens`` and in
    ``completion_tokens_details.reasoning_tokens``, and when ``max_completion_tokens`` leaves no
    room for the reply after them the reply is empty with ``finish_reason: "length"``, as the
    API does. ``reply(body) -> str`` replaces the echo text.

    Attributes:
        requests: every request body received (JSON dicts), in arrival order.
        headers: the matching request headers (dicts).
    """

    def __init__(self, latency_s: float = 0.0, faults: list[tuple] | None = None, completions: bool = True,
                 openai_rules: bool = False, reasoning_tokens: int = 0,
                 reply: Callable[[dict], str] | None = None, echo_shift: bool = False) -> None:
        self.latency_s, self.faults, self.completions = latency_s, list(faults or []), completions
        self.openai_rules, self.reasoning_tokens, self.reply = openai_rules, int(reasoning_tokens), reply
        self.rejected: list[str] = []  # the error messages of the requests refused by openai_rules
        self.echo_shift = echo_shift
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = 0      # requests being handled right now
        self.max_in_flight = 0  # the most ever handled at once (bounded-concurrency checks)
        self.first_request_at: float | None = None  # perf_counter of the first request, and of the
        self.last_reply_at: float | None = None     # last reply sent (the span a run kept it busy)
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # One buffered write per response (flushed by handle_one_request) and TCP_NODELAY,
            # as real servers (uvicorn under `vllm serve`) do. The stdlib default writes the
            # headers and the body separately on a Nagle socket: the body then waits for the
            # client's delayed ACK of the headers, ~40 ms per request on Linux loopback.
            wbufsize = -1
            disable_nagle_algorithm = True

            def log_message(self, *a):  # quiet
                pass

            def _send(self, code: int, body: dict, headers: dict | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):  # noqa: N802
                with server._lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    if server.first_request_at is None:
                        server.first_request_at = time.perf_counter()
                try:
                    self._post()
                finally:
                    with server._lock:
                        server.in_flight -= 1
                        server.last_reply_at = time.perf_counter()

            def _post(self):
                n = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(n) or b"{}")
                with server._lock:
                    server.requests.append(body)
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                    fault = server.faults.pop(0) if server.faults else None
                if fault is not None:
                    kind = fault[0]
                    if kind == "429":
                        h = {"Retry-After": str(fault[1])} if len(fault) > 1 and fault[1] is not None else {}
                        return self._send(429, {"error": {"message": "rate limited"}}, h)
                    if kind == "401-quote":  # as some servers do: the rejected key quoted back
                        key = self.headers.get("Authorization", "").removeprefix("Bearer ")
                        return self._send(401, {"error": {"message": f"Incorrect API key provided: {key}"}})
                    if kind in ("500", "502", "503", "404", "400"):
                        return self._send(int(kind), {"error": {"message": f"injected {kind}"}})
                    if kind == "slow":
                        time.sleep(float(fault[1]))
                if server.latency_s:
                    time.sleep(server.latency_s)
                if self.path.endswith("/chat/completions"):
                    refusal = server._refusal(body) if server.openai_rules else None
                    if refusal is not None:
                        with server._lock:
                            server.rejected.append(refusal["message"])
                        return self._send(400, {"error": refusal})
                    return self._send(200, server._chat(body))
                if self.path.endswith("/completions") and server.completions:
                    return self._send(200, server._completion(body))
                return self._send(404, {"error": {"message": f"no route {self.path}"}})

        class Server(ThreadingHTTPServer):
            # listen() backlog: the stdlib default of 5 drops the SYNs of a burst of new
            # connections (16 concurrent clients), each costing a 1 s SYN retransmit.
            request_queue_size = 256

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @staticmethod
    def is_reasoning(model: str) -> bool:
        return str(model).startswith(OPENAI_REASONING_PREFIXES)

    def _refusal(self, body: dict) -> dict | None:
        """OpenAI's error object for a request the API refuses, else None."""
        def err(param: str, code: str, message: str) -> dict:
            return {"message": message, "type": "invalid_request_error", "param": param, "code": code}

        if not self.is_reasoning(body.get("model", "")):
            if "reasoning_effort" in body:
                return err("reasoning_effort", "unsupported_parameter",
                           "Unsupported parameter: 'reasoning_effort' is not supported with this model.")
            return None
        if "max_tokens" in body:
            return err("max_tokens", "unsupported_parameter", "Unsupported parameter: 'max_tokens' is not "
                       "supported with this model. Use 'max_completion_tokens' instead.")
        for p in ("temperature", "top_p"):
            if p in body and body[p] != 1:
                return err(p, "unsupported_value", f"Unsupported value: '{p}' does not support {body[p]} with "
                           "this model. Only the default (1) value is supported.")
        for p in ("stop", "logprobs"):
            if p in body:
                return err(p, "unsupported_parameter",
                           f"Unsupported parameter: '{p}' is not supported with this model.")
        return None

    def _chat(self, body: dict) -> dict:
        msgs = body.get("messages", [])
        user = [m["content"] for m in msgs if m.get("role") == "user"]
        text = self.reply(body) if self.reply is not None else "echo: " + (user[-1] if user else "")
        n = int(body.get("n", 1) or 1)
        pt = sum(len(m["content"].split()) for m in msgs)
        thinks = self.reasoning_tokens if self.is_reasoning(body.get("model", "")) else 0
        budget = body.get("max_completion_tokens")
        choices, ct, rt = [], 0, 0
        for i in range(n):
            t = text if i == 0 else f"{text} #{i}"
            words = t.split()
            finish = "stop"
            if thinks and budget is not None and thinks + len(words) > int(budget):
                t, words, finish = "", [], "length"  # the budget went on reasoning: no reply
                think = min(thinks, int(budget))
            else:
                think = thinks
            ct += len(words) + think
            rt += think
            ch: dict[str, Any] = {"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": finish}
            if body.get("logprobs"):
                ch["logprobs"] = {"content": [{"token": w, "logprob": -0.1 * (j + 1), "bytes": None, "top_logprobs": []}
                                              for j, w in enumerate(words)]}
            choices.append(ch)
        usage: dict[str, Any] = {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct}
        if self.openai_rules:
            usage["completion_tokens_details"] = {"reasoning_tokens": rt}
        return {"id": "cmpl-fake", "object": "chat.completion", "created": 0, "model": body.get("model", "fake"),
                "choices": choices, "usage": usage}

    def _completion(self, body: dict) -> dict:
        """Echo scoring, one token per word with its leading spaces (``\\s*\\S+``): log-prob
        −0.01·(len(token) mod 7 + 1), except the continuations of the score-alignment probes
        (:data:`~kgreason.llm.openai_http.SCORE_PROBES`): the right one −0.05, the wrong one −6.
        The first token's log-prob is null (as the OpenAI API reports it). ``echo_shift``: as
        llama-cpp-python ≤ 0.3.36 on a model without BOS, each token gets the next position's
        value and the last one the same −2 whatever it is."""
        import re

        from kgreason.llm.openai_http import SCORE_PROBES

        prompt = body.get("prompt", "")
        toks = [(m.start(), m.group()) for m in re.finditer(r"\s*\S+|\s+$", prompt)]
        lps: list[float | None] = [-0.01 * (len(t) % 7 + 1) for _, t in toks]
        for prefix, right, wrong in SCORE_PROBES:
            for cand, v in ((right, -0.05), (wrong, -6.0)):
                if prompt == prefix + cand:
                    for i, (off, _) in enumerate(toks):
                        if off >= len(prefix):
                            lps[i] = v
        if self.echo_shift and lps:
            lps = lps[1:] + [-2.0]
        if lps:
            lps[0] = None
        return {"id": "cmpl-fake", "object": "text_completion", "created": 0, "model": body.get("model", "fake"),
                "choices": [{"index": 0, "text": prompt, "finish_reason": "length",
                             "logprobs": {"tokens": [t for _, t in toks], "token_logprobs": lps,
                                          "text_offset": [o for o, _ in toks], "top_logprobs": None}}],
                "usage": {"prompt_tokens": len(toks), "completion_tokens": 0, "total_tokens": len(toks)}}

    def __enter__(self) -> "FakeChatServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


# ----------------------------------------------------------------------------- benchmarks


def _requests(n: int, max_tokens: int = 16):
    from kgreason.types import ChatRequest

    return [ChatRequest.of(f"question number {i} about the knowledge graph", max_tokens=max_tokens) for i in range(n)]


def bench_openai(n: int = 64, latency_s: float = 0.05, concurrency: int = 16) -> dict[str, Any]:
    import os

    from kgreason.llm.openai_http import OpenAIChat

    os.environ.setdefault("KGREASON_BENCH_FAKE_KEY", "sk-bench-not-a-key")
    out: dict[str, Any] = {"backend": "openai(fake server)", "n": n, "latency_s": latency_s}
    with FakeChatServer(latency_s=latency_s) as srv:
        for label, conc in (("sequential", 1), ("batched", concurrency)):
            llm = OpenAIChat(model="fake", base_url=srv.base_url, api_key_env="KGREASON_BENCH_FAKE_KEY",
                             max_concurrency=conc)
            llm.generate(_requests(conc))  # open `conc` keep-alive connections, as a long run has
            t0 = time.perf_counter()
            comps = llm.generate(_requests(n))
            dt = time.perf_counter() - t0
            toks = sum(c.usage.prompt_tokens + c.usage.completion_tokens for c in comps)
            out[label] = {"s": round(dt, 4), "req_per_s": round(n / dt, 2), "tok_per_s": round(toks / dt, 1)}
    out["ratio"] = round(out["batched"]["req_per_s"] / out["sequential"]["req_per_s"], 2)
    return out


def bench_hf(n: int = 16, max_tokens: int = 16, batch_size: int = 16, repeats: int = 5) -> dict[str, Any]:
    """Tiny random Llama through ``HFCausalLM``: batch ``batch_size`` vs one request at a time.

    A batch of 16 takes tens of milliseconds here, so one timing swings with whatever else the
    CPU is doing; each mode is timed ``repeats`` times, alternating, and the median is reported
    (``runs_s`` keeps every timing).
    """
    import tempfile

    from kgreason.llm.hf import HFCausalLM, build_tiny_model

    out: dict[str, Any] = {"backend": "hf(tiny random llama)", "n": n, "max_tokens": max_tokens, "repeats": repeats}
    with tempfile.TemporaryDirectory() as d:
        path = build_tiny_model(d)
        modes = {"sequential": HFCausalLM(model=path, batch_size=1, device="cpu"),
                 "batched": HFCausalLM(model=path, batch_size=batch_size, device="cpu")}
        runs: dict[str, list[float]] = {m: [] for m in modes}
        toks: dict[str, int] = {}
        for llm in modes.values():
            llm.generate(_requests(2, max_tokens))  # warm-up
        for _ in range(max(1, repeats)):
            for label, llm in modes.items():
                t0 = time.perf_counter()
                comps = llm.generate(_requests(n, max_tokens))
                runs[label].append(time.perf_counter() - t0)
                toks[label] = sum(c.usage.completion_tokens for c in comps)
        for label, ts in runs.items():
            dt = float(np.median(ts))
            out[label] = {"s": round(dt, 4), "req_per_s": round(n / dt, 2), "tok_per_s": round(toks[label] / dt, 1),
                          "runs_s": [round(t, 4) for t in ts]}
    out["ratio"] = round(out["batched"]["req_per_s"] / out["sequential"]["req_per_s"], 2)
    return out


DTYPE_PROMPTS = ("What is the capital of France? Answer in one word.",
                 "Which film did Peter Bogdanovich direct in 1971? Reply with a JSON list of titles.",
                 "Write a Python function that returns the square of a number.")


def bench_dtypes(model: str | None = "qwen2.5-coder-1.5b-instruct", dtypes: tuple[str, ...] = ("float32", "bfloat16", "int8"),
                 max_tokens: int = 32, rounds: int = 1, prompts: tuple[str, ...] = DTYPE_PROMPTS,
                 n_threads: int | None = None, batch: int = 1) -> dict[str, Any]:
    """Greedy decode speed of one local model per dtype, the dtypes alternating prompt by prompt.

    ``batch`` = 1: one request at a time. ``batch`` > 1: each prompt is sent as one ``generate``
    call of ``batch`` requests (the prompts from it on, cyclically), one left-padded batch, as the
    cross-example batcher and SubQRAG's index send them; tokens/s counts every row's tokens."""
    import os

    from kgreason.llm.local import LocalLLM
    from kgreason.types import ChatRequest

    how = "1 request at a time" if batch <= 1 else f"batches of {batch}"
    out: dict[str, Any] = {"backend": f"local {model or 'smollm2'} (greedy, {how})", "batch": max(1, batch),
                           "max_tokens": max_tokens, "rounds": rounds, "load_avg_start": os.getloadavg()[0]}
    out["n_threads"] = n_threads
    # "llamacpp" in dtypes: the llama.cpp route on the quantised GGUF as is (requests one at a time)
    llms = {d: (LocalLLM(model=model, route="llamacpp", n_threads=n_threads) if d == "llamacpp"
                else LocalLLM(model=model, dtype=d, n_threads=n_threads)) for d in dtypes}
    for llm in llms.values():  # warm-up
        llm.generate([ChatRequest.of("Hi", max_tokens=2)])
    secs = {d: 0.0 for d in dtypes}
    toks = {d: 0 for d in dtypes}
    texts: dict[str, list[str]] = {d: [] for d in dtypes}
    for r in range(max(1, rounds)):
        for i, q in enumerate(prompts):
            order = dtypes if r % 2 == 0 else tuple(reversed(dtypes))
            group = [prompts[(i + j) % len(prompts)] for j in range(max(1, batch))]
            for d in order:
                t0 = time.perf_counter()
                cs = llms[d].generate([ChatRequest.of(x, max_tokens=max_tokens) for x in group])
                secs[d] += time.perf_counter() - t0
                c = cs[0]
                toks[d] += sum(x.usage.completion_tokens for x in cs)
                print(f"  {d:9s} {sum(x.usage.completion_tokens for x in cs):3d} tokens {time.perf_counter() - t0:7.1f}s  {c.text[:60]!r}",
                      flush=True)
                if r == 0:
                    texts[d].append(c.text)
    ref = dtypes[0]
    for d in dtypes:
        out[d] = {"tok_per_s": round(toks[d] / secs[d], 2), "s": round(secs[d], 1), "tokens": toks[d],
                  "same_greedy_as_" + ref: [a == b for a, b in zip(texts[d], texts[ref])], "texts": texts[d]}
        out[d]["ratio_vs_" + ref] = round(out[d]["tok_per_s"] / out[ref]["tok_per_s"], 2)
    out["load_avg_end"] = os.getloadavg()[0]
    return out


def _recorded_schema_requests(run: str, n: int) -> list[tuple[str, Any]]:
    """The first ``n`` model calls of a run dir or bundle (its ``predictions.jsonl`` traces) whose
    prompt has a JSON schema: ``(form, ChatRequest)`` with the call's messages, temperature and the
    run's reply cap for that form, and a seed of its own, so that a sampled call is repeatable."""
    from pathlib import Path

    import yaml

    from kgreason.bench.tokens import _method, prediction_rows
    from kgreason.reasoners.base import load_schema
    from kgreason.storage.bundle import readable
    from kgreason.types import ChatRequest, Message

    out: list[tuple[str, Any]] = []
    with readable(run) as (root, _):
        runs = sorted(p.parent for p in Path(root).rglob("predictions.jsonl"))
        if len(runs) != 1:
            raise SystemExit(f"{run}: {len(runs)} runs in it; give one run dir or one row's bundle")
        reasoner = _method(runs[0])
        caps = (yaml.safe_load((runs[0] / "config.yaml").read_text()).get("reasoner") or {}).get("max_tokens", 512)
        for row in prediction_rows(runs[0]):
            for step in row.get("trace") or []:
                d = step.get("data") or {}
                if step.get("kind") != "llm" or not d.get("messages"):
                    continue
                form = str(d.get("prompt_id") or step.get("name")).split("_")[0]
                schema = load_schema(reasoner, form)
                if schema is None:
                    continue
                cap = caps.get(form, caps.get("default", 512)) if isinstance(caps, dict) else caps
                msgs = tuple(Message(m["role"], m["content"]) for m in d["messages"])
                out.append((form, ChatRequest(messages=msgs, temperature=float(d.get("temperature") or 0.0),
                                              max_tokens=int(cap), json_schema=schema, seed=1000 + len(out))))
                if len(out) >= n:
                    return out
    return out


def bench_grammar(run_dir: str, model: str | None = "qwen2.5-coder-1.5b-instruct", n: int = 24,
                  tops: tuple[int, ...] = (0, 256), n_threads: int | None = 1) -> dict[str, Any]:
    """Structured output's cost of decoding under a grammar (issue 70): a run's recorded JSON-schema
    calls sent, each with a seed of its own, to the llama.cpp route with the grammar tested on the
    whole vocabulary (``llm.grammar_top=0``, llama-cpp-python's own sampler) and on the top
    candidates (``grammar_top=256``, kgreason/llm/grammar_sampler.py), the settings alternating
    call by call. Reports each setting's CPU seconds, its CPU ms a decoded token (the calls'
    prompts and their reuse are the same for both), the ratio, and how many replies were the same."""
    import os
    from pathlib import Path

    from kgreason.llm.local import LocalLLM

    reqs = _recorded_schema_requests(run_dir, n)
    if not reqs:
        raise SystemExit(f"{run_dir}: no recorded model call has a JSON schema (run with llm.structured_output=true)")
    llms = {t: LocalLLM(model=model, route="llamacpp", n_threads=n_threads, grammar_top=t) for t in tops}
    cpu = {t: 0.0 for t in tops}
    toks = {t: 0 for t in tops}
    computed = {t: 0 for t in tops}
    texts: dict[int, list[str]] = {t: [] for t in tops}
    for i, (form, r) in enumerate(reqs):
        for t in (tops if i % 2 == 0 else tuple(reversed(tops))):
            (c,) = llms[t].generate([r])
            cpu[t] += c.usage.cpu_s
            toks[t] += c.usage.completion_tokens
            computed[t] += c.usage.prompt_tokens - c.usage.prompt_tokens_reused
            texts[t].append(c.text)
        print(f"  {i + 1:3d} {form:10s} " + "  ".join(f"top={t}: {len(texts[t][-1]):4d} chars" for t in tops),
              flush=True)
    ref = tops[0]
    out: dict[str, Any] = {"backend": f"llamacpp {model or 'smollm2'}", "run": Path(run_dir).name,
                           "calls": len(reqs),
                           "forms": sorted({f for f, _ in reqs}), "n_threads": n_threads,
                           "load_avg": os.getloadavg()[0]}
    for t in tops:
        ms = 1000 * cpu[t] / max(1, toks[t])
        out[f"grammar_top={t}"] = {
            "cpu_s": round(cpu[t], 1), "completion_tokens": toks[t], "prompt_tokens_computed": computed[t],
            "cpu_ms_per_completion_token": round(ms, 1), "draws": dict(llms[t].impl.grammar_stats),
            f"same_replies_as_{ref}": sum(a == b for a, b in zip(texts[t], texts[ref]))}
    for t in tops:
        out[f"grammar_top={t}"]["cpu_ratio_vs_" + str(ref)] = round(cpu[ref] / max(cpu[t], 1e-9), 2)
    return out


def bench_workers(llm_overrides: tuple[str, ...] = ("llm=qwen_coder_1_5b",), n: int = 16, workers: int = 8,
                  max_tokens: int | None = None) -> dict[str, Any]:
    """Examples per minute of one real run at 1 worker and at ``workers`` (same questions)."""
    import os
    import tempfile
    from pathlib import Path

    from hydra import compose, initialize_config_dir

    from kgreason.runner.run import run

    conf = str(Path(__file__).resolve().parents[2] / "conf")
    out: dict[str, Any] = {"backend": f"run reasoner=io metaqa {' '.join(llm_overrides)}", "n": n,
                           "load_avg_start": os.getloadavg()[0]}
    for w in (1, workers):
        ov = ["reasoner=io", "dataset=metaqa", "kg=metaqa", f"dataset.limit={n}", "tracking=none",
              "llm_cache.mode=off", f"example_workers={w}", *llm_overrides]
        if max_tokens:
            ov.append(f"reasoner.max_tokens={max_tokens}")
        with initialize_config_dir(config_dir=conf, version_base=None):
            cfg = compose("config", overrides=ov)
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            res = run(cfg, d)
            dt = time.perf_counter() - t0
        out[f"workers_{w}"] = {"s": round(dt, 1), "examples_per_min": round(n / dt * 60, 2),
                               "hits_at_1": res.metrics.get("metric/hits_at_1"),
                               "completion_tokens": res.metrics.get("llm/completion_tokens"),
                               "calls": res.metrics.get("llm/calls")}
    out["ratio"] = round(out[f"workers_{workers}"]["examples_per_min"] / out["workers_1"]["examples_per_min"], 2)
    out["load_avg_end"] = os.getloadavg()[0]
    return out


def bench_harness(concurrency: tuple[int, ...] = (16, 64, 256), n: int = 300, latency_s: float = 0.5,
                  reasoner: str = "io") -> dict[str, Any]:
    """The run harness against a served model: whole runs (``reasoner`` on the embedded world,
    ``llm=openai`` against :class:`FakeChatServer` with a fixed ``latency_s`` per request, call
    cache off) at each ``example_workers`` in ``concurrency`` (``llm.max_concurrency`` the same).

    The share of ideal is ``ideal / span``: ``ideal`` = the rounds of ``W`` examples the run
    needs (``ceil(n / W)``) × the requests per example × ``latency_s``, the time a harness with no
    overhead would keep the server busy; ``span`` = from the server's first request to its last
    reply (the run's start-up and its final scoring and writing are outside it; the harness's own
    work between an example's reply and the next example's request is inside)."""
    import math
    import os
    import tempfile
    from pathlib import Path

    from hydra import compose, initialize_config_dir

    from kgreason.runner.run import run

    conf = str(Path(__file__).resolve().parents[2] / "conf")
    out: dict[str, Any] = {"backend": f"run reasoner={reasoner} llm=openai (fake server)", "n": n,
                           "latency_s": latency_s, "cpus": os.cpu_count(), "load_avg_start": os.getloadavg()[0],
                           "rows": []}

    def one(w: int, lat: float) -> tuple[float, dict]:
        """``(span s, metrics)`` of one run."""
        with FakeChatServer(latency_s=lat) as srv, tempfile.TemporaryDirectory() as d:
            ov = [f"reasoner={reasoner}", "llm=openai", f"llm.base_url={srv.base_url}", "llm.model=m",
                  "llm.api_key_env=null", f"llm.max_concurrency={w}", f"example_workers={w}",
                  f"dataset.limit={n}", "tracking=none", "llm_cache.mode=off", "reports.hop_distribution=false",
                  "preflight.probe_llm=false"]
            with initialize_config_dir(config_dir=conf, version_base=None):
                cfg = compose("config", overrides=ov)
            res = run(cfg, d)
            return srv.last_reply_at - srv.first_request_at, res.metrics

    one(concurrency[0], 0.0)  # warm-up: imports, the KG compile and the embedding store, once
    for w in concurrency:
        span, m = one(w, latency_s)
        per_example = (m.get("llm/calls") or 0) / max(1, m.get("run/n_examples") or 1)
        ideal = math.ceil(n / w) * per_example * latency_s
        out["rows"].append({"example_workers": w, "span_s": round(span, 2), "requests_per_example": round(per_example, 2),
                            "ideal_s": round(ideal, 2), "share_of_ideal": round(ideal / span, 3)})
    out["load_avg_end"] = os.getloadavg()[0]
    return out


def bench_server(llm_overrides: tuple[str, ...] = ("llm=local",), reasoners: tuple[str, ...] = ("io", "tog"),
                 workers: tuple[int, ...] = (1, 4, 8), n: int = 8, parallel: int = 2, threads: int | None = None,
                 max_tokens: int = 32, n_ctx: int = 4096, data: tuple[str, ...] = ()) -> dict[str, Any]:
    """Whole runs (``kgreason.runner.run.run``, call cache off) with ``llm=openai`` against a llama.cpp
    server (``kgreason.llm.serve.LlamaServer``, ``parallel`` slots) serving a local model: for
    each reasoner and each ``example_workers`` the examples per minute, the tokens the server
    reported, the share of time its slots were busy, and what its own logs say (decode and
    prefill tokens/s from llama.cpp's per-request timings; prompt tokens reused from the KV
    cache). The same ``n`` questions for every row."""
    import os
    import tempfile
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from kgreason.llm.openai_http import OpenAIChat
    from kgreason.llm.serve import LlamaServer, resolve_model
    from kgreason.runner.run import run
    from kgreason.types import ChatRequest

    gguf, name, _ = resolve_model(llm_overrides)
    conf = str(Path(__file__).resolve().parents[2] / "conf")
    out: dict[str, Any] = {"backend": f"llama.cpp server ({gguf.name}, {parallel} slots)", "n": n,
                           "max_tokens": max_tokens, "load_avg_start": os.getloadavg()[0], "rows": []}
    with LlamaServer(gguf, name, parallel=parallel, threads=threads, n_ctx=n_ctx) as srv:
        out["threads_per_slot"] = srv.threads
        probe = OpenAIChat(model=name, base_url=srv.base_url, api_key_env=None)
        probe.generate([ChatRequest.of("Hi", max_tokens=2)] * parallel)  # warm every slot
        out["score_check"] = dict(zip(("passed", "detail"), probe.score_alignment()))
        for reasoner in reasoners:
            for w in workers:
                ov = [f"reasoner={reasoner}", f"dataset.limit={n}", "tracking=none", "llm_cache.mode=off",
                      f"example_workers={w}", f"reasoner.max_tokens={max_tokens}", "llm=openai",
                      f"llm.base_url={srv.base_url}", f"llm.model={name}", "llm.api_key_env=null", *data]
                GlobalHydra.instance().clear()
                with initialize_config_dir(config_dir=conf, version_base=None):
                    cfg = compose("config", overrides=ov)
                s0, l0 = srv.stats(), srv.log_counters()
                with tempfile.TemporaryDirectory() as d:
                    t0 = time.perf_counter()
                    res = run(cfg, d)
                    dt = time.perf_counter() - t0
                s1, l1 = srv.stats(), srv.log_counters()
                busy = sum(b1 - b0 for b0, b1 in zip(s0["busy_s"], s1["busy_s"]))
                d_ = {k: s1[k] - s0[k] for k in ("requests", "prompt_tokens", "completion_tokens", "cached_tokens",
                                                 "replies_with_cached_field")}
                lg = {k: l1[k] - l0[k] for k in l1}
                out["rows"].append({
                    "reasoner": reasoner, "example_workers": w, "s": round(dt, 1),
                    "examples_per_min": round(n / dt * 60, 2), "requests": d_["requests"],
                    "prompt_tokens": d_["prompt_tokens"], "completion_tokens": d_["completion_tokens"],
                    "completion_tok_per_s": round(d_["completion_tokens"] / dt, 2),
                    "slots_busy_share": round(busy / (parallel * dt), 3),
                    "server_decode_tok_per_s": round(lg["eval_tokens"] / (lg["eval_ms"] / 1000), 1) if lg["eval_ms"] else None,
                    "server_prefill_tok_per_s": round(lg["prompt_eval_tokens"] / (lg["prompt_eval_ms"] / 1000), 1)
                    if lg["prompt_eval_ms"] else None,
                    "prefix_cache_hit_tokens": int(lg["prefix_hit_tokens"]),
                    "cached_tokens_in_usage": d_["cached_tokens"] if d_["replies_with_cached_field"] else None,
                    "error_rate": res.metrics.get("run/error_rate")})
                print(json.dumps(out["rows"][-1]), flush=True)
    out["load_avg_end"] = os.getloadavg()[0]
    for reasoner in reasoners:
        rows = [r for r in out["rows"] if r["reasoner"] == reasoner]
        for r in rows:
            r["ratio_vs_1_worker"] = round(r["examples_per_min"] / rows[0]["examples_per_min"], 2)
    return out


def print_server_table(r: dict[str, Any]) -> None:
    print(f"{r['backend']}, {r['threads_per_slot']} thread(s) per slot, n={r['n']}, max_tokens={r['max_tokens']}")
    cols = ("reasoner", "example_workers", "s", "examples_per_min", "ratio_vs_1_worker", "requests",
            "completion_tok_per_s", "slots_busy_share", "server_decode_tok_per_s", "server_prefill_tok_per_s",
            "prompt_tokens", "prefix_cache_hit_tokens", "cached_tokens_in_usage")
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for row in r["rows"]:
        print("| " + " | ".join(str(row.get(c)) for c in cols) + " |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kgreason.bench.llm", description=__doc__.split("\n\n")[0])
    p.add_argument("--which", default="openai,hf",
                   help="comma list of: openai, hf, dtypes, workers, server, harness, grammar")
    p.add_argument("--run", default=None, help="grammar: a run dir or bundle made with llm.structured_output=true")
    p.add_argument("--n", type=int, default=64, help="requests per measurement")
    p.add_argument("--latency-ms", type=float, default=50.0, help="fake server latency per request")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--repeats", type=int, default=5, help="hf: timings per mode (median reported)")
    p.add_argument("--json", default=None, help="write results here")
    p.add_argument("--model", default="qwen2.5-coder-1.5b-instruct",
                   help="dtypes: named local model ('smollm2' = the embedded default)")
    p.add_argument("--max-tokens", type=int, default=32, help="dtypes: new tokens per prompt; workers: reasoner.max_tokens")
    p.add_argument("--llm", default="llm=qwen_coder_1_5b",
                   help="workers, server: space-separated llm overrides (server: the local model to serve, e.g. llm=local)")
    p.add_argument("--workers", type=int, default=8, help="workers: the concurrent run's example_workers")
    p.add_argument("--threads", type=int, default=None, help="dtypes: torch CPU threads (1 on a busy shared box)")
    p.add_argument("--parallel", type=int, default=2, help="server: llama.cpp server slots (processes)")
    p.add_argument("--reasoners", default="io,tog", help="server: comma list of reasoners")
    p.add_argument("--worker-counts", default="1,4,8", help="server: example_workers values")
    p.add_argument("--harness-counts", default="16,64,256", help="harness: example_workers values")
    p.add_argument("--harness-n", type=int, default=300, help="harness: questions per run (the embedded world has 300)")
    p.add_argument("--data", default="", help="server: space-separated dataset overrides (default: the embedded world)")
    p.add_argument("--batch", type=int, default=1, help="dtypes: requests per generate call (one left-padded batch)")
    p.add_argument("--dtypes", default="float32,bfloat16,int8",
                   help="dtypes: comma list, the first is the reference; 'llamacpp' adds the llama.cpp route")
    a = p.parse_args(argv)
    results = []
    for which in [w.strip() for w in a.which.split(",") if w.strip()]:
        if which == "dtypes":
            r = bench_dtypes(None if a.model == "smollm2" else a.model, max_tokens=a.max_tokens,
                             rounds=max(1, min(a.repeats, 2)), n_threads=a.threads, batch=a.batch,
                             dtypes=tuple(x.strip() for x in a.dtypes.split(",") if x.strip()))
            print(json.dumps(r, indent=1))
            results.append(r)
            continue
        if which == "grammar":
            if not a.run:
                p.error("--which grammar needs --run RUN_DIR (a run made with llm.structured_output=true)")
            r = bench_grammar(a.run, None if a.model == "smollm2" else a.model, n=min(a.n, 64),
                              n_threads=a.threads if a.threads is not None else 1)
            print(json.dumps(r, indent=1))
            results.append(r)
            continue
        if which == "workers":
            r = bench_workers(tuple(a.llm.split()), n=min(a.n, 64), workers=a.workers, max_tokens=a.max_tokens)
            print(json.dumps(r, indent=1))
            results.append(r)
            continue
        if which == "harness":
            r = bench_harness(tuple(int(x) for x in a.harness_counts.split(",") if x), n=a.harness_n,
                              latency_s=a.latency_ms / 1000 if a.latency_ms != 50.0 else 0.5)
            for row in r["rows"]:
                print(f"example_workers {row['example_workers']:4d}: {row['share_of_ideal']:.0%} of ideal "
                      f"(server busy {row['span_s']:.1f} s, ideal {row['ideal_s']:.1f} s)")
            results.append(r)
            continue
        if which == "server":
            r = bench_server(tuple(a.llm.split()),
                             reasoners=tuple(x for x in a.reasoners.split(",") if x),
                             workers=tuple(int(x) for x in a.worker_counts.split(",") if x), n=min(a.n, 64),
                             parallel=a.parallel, threads=a.threads, max_tokens=a.max_tokens, data=tuple(a.data.split()))
            print_server_table(r)
            results.append(r)
            continue
        if which == "openai":
            results.append(bench_openai(a.n, a.latency_ms / 1000, a.concurrency))
        elif which == "hf":
            results.append(bench_hf(min(a.n, 16), batch_size=a.concurrency, repeats=a.repeats))
        else:
            p.error(f"unknown --which item {which!r} (openai, hf, dtypes, workers, server, harness, grammar)")
    print(f"{'backend':26s} {'mode':11s} {'req/s':>8s} {'tok/s':>9s}")
    for r in results:
        if "sequential" not in r:
            continue
        for mode in ("sequential", "batched"):
            print(f"{r['backend']:26s} {mode:11s} {r[mode]['req_per_s']:8.2f} {r[mode]['tok_per_s']:9.1f}")
        print(f"{r['backend']:26s} {'ratio':11s} {r['ratio']:8.2f}x")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
