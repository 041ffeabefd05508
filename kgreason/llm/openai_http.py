"""OpenAIChat: any OpenAI-compatible ``/v1/chat/completions`` endpoint (OpenAI, vLLM serve,
llama.cpp server, TGI, Ollama...), through the official ``openai`` client.

* The API key is read from the environment variable *named* by ``api_key_env`` at
  construction; it is never a config value, never an attribute of this object, and never
  logged (the run config records only the variable's name).
* Bounded concurrency: one ``generate`` batch is sent through a thread pool of
  ``max_concurrency`` workers; results come back in request order.
* Retries are ours (the client's own are disabled with ``max_retries=0`` so every attempt is
  counted here): 429, 5xx, timeouts and connection errors are retried with exponential
  backoff and full jitter, ``Retry-After`` (seconds or HTTP date) is honoured when the server
  sends it and it is at most ``max_retry_after_s`` (a longer wait fails the call at once: the
  server asked for more than the run may wait); after ``max_retries`` retries
  :class:`~kgreason.llm.base.LLMError` names the endpoint and the last status. Other 4xx fail at once.
* **A reply is a success only when it is one** (:func:`check_reply`): a status 200 whose body is
  not a JSON completion (HTML, malformed or cut JSON), no choices, fewer choices than asked, or a
  choice without text (``content: null``) or with only whitespace is a failed attempt, retried under
  the same backoff and never returned (so never cached).
* **Bounded attempts** (issue 57 M1): ``timeout_s`` is each attempt's deadline, connect to last
  byte (every phase's timeout is the time left; a timer shuts the socket at the deadline, so a
  server trickling its body cannot hold the call), and the body is read against a byte ceiling
  (:func:`reply_byte_ceiling`, from ``max_reply_chars``; gzip/deflate bodies are unpacked within
  it): past it the attempt is an unusable reply, retried, never cached. A lone UTF-16 surrogate in
  a reply becomes U+FFFD (``Usage.replies_cleaned``), so every store can write the text.
* A reply without ``usage`` is kept with its tokens and cost *unknown* (``Usage.usage_unknown``,
  warned once per client; the run's ``llm/calls_usage_unknown`` says how many calls the token and
  cost figures lack), never counted as 0 tokens. A reply longer than ``max_reply_chars`` is cut to
  that length and counted in ``Usage.replies_cut`` (the row's usage, the trace's ``llm`` sums and
  ``llm/replies_cut``), with a warning.
* ``score`` uses the legacy ``/v1/completions`` endpoint with ``echo=True, logprobs=0,
  max_tokens=1`` (vLLM and llama.cpp servers support it; OpenAI's chat models do not): the
  candidate's log-prob is the sum of the echoed log-probs of the tokens that overlap the
  candidate. Servers that refuse it raise :class:`~kgreason.llm.base.ScoringUnsupported`, and
  so does a server whose echoed log-probs fail a known-answer check
  (:meth:`OpenAIChat.score_alignment`, run once, one warning): llama-cpp-python's server
  reports them one position off on some models, which would rank a wrong answer above the
  right one.
* **Reasoning models** (``reasoning_models``: name patterns, by default ``gpt-5*``, ``o1*``,
  ``o3*``, ``o4*``; docs/llm.md "Reasoning models") get the request the OpenAI API accepts from
  them: ``max_completion_tokens`` = the request's ``max_tokens`` (the visible reply's budget) +
  ``reasoning_budget_tokens`` (room to reason first), never ``max_tokens``; no ``temperature`` and
  no ``top_p`` (the API takes only 1, so requests at temperature 0 or 1 go without one and any
  other value raises :class:`~kgreason.llm.base.LLMError` before a request is sent: the run's
  preflight refuses such a config first); no ``seed``; ``stop`` applied here to the reply (the API
  refuses it); ``reasoning_effort`` when set; ``logprobs`` refused. Reasoning tokens
  (``usage.completion_tokens_details.reasoning_tokens``) are recorded in ``Usage.reasoning_tokens``;
  they are part of ``completion_tokens`` and billed as output, as OpenAI counts them.
* :meth:`OpenAIChat.probe`: the run's start-up probe (kgreason/preflight.py): a dead endpoint
  (connection refused, unknown host, 400/401/403/404) fails at once, a busy one (429, 5xx,
  timeouts) is retried under the retry policy above for at most ``wait_s`` seconds.
"""

from __future__ import annotations

import dataclasses
import email.utils
import fnmatch
import json
import logging
import math
import os
import random
import socket
import sys
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping, Sequence

from kgreason import secrets
from kgreason.llm.accounting import PriceTable, call_usage
from kgreason.llm.base import LLMError, ScoringUnsupported, backend_seed
from kgreason.textio import clean_surrogates
from kgreason.types import ChatRequest, Completion, Message

log = logging.getLogger("kgreason.llm")

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})

DEFAULT_REASONING_MODELS = ("gpt-5*", "o1*", "o3*", "o4*")
"""Name patterns (``fnmatch``, case-insensitive) of the models the OpenAI API serves as reasoning
models; ``conf/llm/openai.yaml`` ``reasoning_models`` overrides them. A pattern starting with
``!`` excludes (``["gpt-5*", "!gpt-5-chat*"]``)."""


def is_reasoning_model(model: str, patterns: Sequence[str] | None = None) -> bool:
    """Whether ``model`` matches the reasoning-model patterns (default :data:`DEFAULT_REASONING_MODELS`);
    matched on the whole name and on its last ``/`` part (``openai/gpt-5-mini`` behind a proxy).

    >>> is_reasoning_model("gpt-5-mini"), is_reasoning_model("gpt-4o-mini"), is_reasoning_model("o4-mini")
    (True, False, True)
    >>> is_reasoning_model("gpt-5-chat-latest", ["gpt-5*", "!gpt-5-chat*"])
    False
    """
    pats = [str(p).lower() for p in (DEFAULT_REASONING_MODELS if patterns is None else patterns)]
    names = {str(model).lower(), str(model).lower().rsplit("/", 1)[-1]}
    hit = any(fnmatch.fnmatchcase(n, p) for p in pats if not p.startswith("!") for n in names)
    return hit and not any(fnmatch.fnmatchcase(n, p[1:]) for p in pats if p.startswith("!") for n in names)


def apply_stop(text: str, stop: Sequence[str]) -> str:
    """The reply cut before the first stop sequence, as the API does for models that take ``stop``."""
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=-1)
    return text if cut < 0 else text[:cut]


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP-date), else None.

    Never raises: ``inf``, ``1e12`` and far dates come back as they are (``inf`` included: the
    caller compares them with its cap), ``nan`` and anything unreadable as None, a past date or a
    negative number as 0."""
    if value is None or str(value).strip() == "":
        return None
    v = str(value).strip()
    try:
        x = float(v)
    except ValueError:
        x = None
    if x is not None:
        return None if math.isnan(x) else max(0.0, x)
    try:
        dt = email.utils.parsedate_to_datetime(v)
        return max(0.0, dt.timestamp() - (time.time() if now is None else now))
    except (TypeError, ValueError, OverflowError, OSError):
        return None


def render_plain(messages: Sequence[Message]) -> str:
    """Plain-text rendering of a conversation for the completions (scoring) endpoint."""
    parts = [f"{m.role}: {m.content}" for m in messages]
    return "\n".join(parts) + "\nassistant: "


class OpenAIChat:
    """Args:
        model: model name as the endpoint knows it.
        base_url: e.g. ``https://api.openai.com/v1`` or ``http://localhost:8000/v1``.
        api_key_env: name of the environment variable holding the key; ``null`` for servers
            without auth (the client then sends ``EMPTY``).
        max_concurrency: worker threads per ``generate`` batch.
        max_retries: retries after the first attempt (so ``max_retries + 1`` attempts).
        backoff_base_s / backoff_max_s: exponential backoff ``base·2^attempt`` capped, full jitter.
        timeout_s: each attempt's deadline in seconds (connect to the body's last byte), > 0.
        prices: USD per 1M tokens per model (see :mod:`kgreason.llm.accounting`).
        score_endpoint: ``completions`` (echo+logprobs) or ``none`` (score raises).
        reasoning_models: name patterns of reasoning models (default :data:`DEFAULT_REASONING_MODELS`).
        reasoning_effort: ``minimal`` / ``low`` / ``medium`` / ``high`` ... sent to a reasoning model
            when set (null: the API's default); a non-reasoning model refuses it (LLMError here).
        reasoning_budget_tokens: tokens a reasoning model may spend reasoning on top of the
            request's ``max_tokens`` (``max_completion_tokens`` = both).
        max_retry_after_s: the longest ``Retry-After`` honoured; a server asking for more fails
            the call at once (bounded time: a day-long or ``inf`` wait is never slept).
        max_reply_chars: a reply text longer than this is cut to it (``Usage.replies_cut``).
        score_check: before the first ``score``, check the echoed log-probs on known answers
            (:meth:`score_alignment`); a server that fails is treated as unable to score.
        sleep / rng: injectable for tests (``sleep(seconds)``, ``random.Random``).
    """

    backend = "openai"

    def __init__(self, model: str, base_url: str | None = None, api_key_env: str | None = "OPENAI_API_KEY",
                 max_concurrency: int = 8, max_retries: int = 5, backoff_base_s: float = 0.5,
                 backoff_max_s: float = 60.0, timeout_s: float = 120.0, prices: Mapping[str, Any] | None = None,
                 score_endpoint: str = "completions", score_check: bool = True,
                 extra_body: Mapping[str, Any] | None = None,
                 reasoning_models: Sequence[str] | None = DEFAULT_REASONING_MODELS,
                 reasoning_effort: str | None = None, reasoning_budget_tokens: int = 8192,
                 max_retry_after_s: float = 60.0, max_reply_chars: int = 200_000,
                 sleep: Callable[[float], None] | None = None, rng: random.Random | None = None) -> None:
        try:
            import openai
        except ImportError as e:  # pragma: no cover - openai is a core dependency
            raise ImportError("llm=openai needs the `openai` package: pip install openai") from e
        self._openai = openai
        self.model = str(model)
        self.base_url = (base_url or "https://api.openai.com/v1").rstrip("/")
        if api_key_env:
            if not secrets.ENV_NAME.match(str(api_key_env)):
                secrets.register(str(api_key_env))  # a key typed where its variable's name belongs
                raise LLMError("llm.api_key_env must be the NAME of the environment variable holding the key "
                               "(e.g. OPENAI_API_KEY), but its value looks like a key itself; export the key "
                               "and pass the variable's name (the value is not repeated here or written anywhere)")
            key = os.environ.get(str(api_key_env))
            secrets.register(key)  # scrubbed from every file the run writes, server errors included
            if not key:
                raise LLMError(f"llm.api_key_env={api_key_env!r}: environment variable is not set "
                               f"(export it, or set llm.api_key_env=null for a server without auth)")
        else:
            key = "EMPTY"
        self.api_key_env = api_key_env
        self.max_concurrency = max(1, int(max_concurrency))
        self.max_retries = max(0, int(max_retries))
        self.backoff_base_s, self.backoff_max_s = float(backoff_base_s), float(backoff_max_s)
        self.prices = PriceTable.of(prices)
        self.score_endpoint = str(score_endpoint)
        self.score_check = bool(score_check)
        self._aligned: tuple[bool, str] | None = None  # score_alignment()'s result, once known
        self._align_lock = threading.Lock()
        self.extra_body = dict(extra_body or {})
        self.reasoning_models = tuple(str(p) for p in (DEFAULT_REASONING_MODELS if reasoning_models is None
                                                        else reasoning_models))
        self.reasoning = is_reasoning_model(self.model, self.reasoning_models)
        self.reasoning_effort = None if reasoning_effort in (None, "") else str(reasoning_effort)
        self.reasoning_budget_tokens = int(reasoning_budget_tokens)
        if self.reasoning_effort is not None and not self.reasoning:
            raise LLMError(f"llm.reasoning_effort={self.reasoning_effort!r}: model {self.model!r} is not a reasoning "
                           f"model (llm.reasoning_models: {list(self.reasoning_models)}) and the API refuses the field")
        if self.reasoning_budget_tokens < 0:
            raise LLMError(f"llm.reasoning_budget_tokens={reasoning_budget_tokens!r}: expected an integer >= 0")
        try:
            self.timeout_s = float(timeout_s)
        except (TypeError, ValueError):
            self.timeout_s = float("nan")
        if isinstance(timeout_s, bool) or not (0.0 < self.timeout_s < float("inf")):
            raise LLMError(f"llm.timeout_s={timeout_s!r}: expected a finite number of seconds > 0 (each attempt's "
                           f"deadline)")
        try:
            self.max_retry_after_s = float(max_retry_after_s)
        except (TypeError, ValueError):
            self.max_retry_after_s = float("nan")
        if not (0.0 <= self.max_retry_after_s < float("inf")):
            raise LLMError(f"llm.max_retry_after_s={max_retry_after_s!r}: expected a finite number of seconds >= 0")
        if isinstance(max_reply_chars, bool) or not isinstance(max_reply_chars, int) or max_reply_chars < 1:
            raise LLMError(f"llm.max_reply_chars={max_reply_chars!r}: expected an integer >= 1")
        self.max_reply_chars = int(max_reply_chars)
        self._warned_surrogates = False
        self._warned_usage = False
        self._warned_cut = False
        self.sleep = sleep or time.sleep
        self.rng = rng or random.Random()
        self.retries_done = 0  # total retries over this object's life (for tests / logs)
        self._tls = threading.local()  # the current attempt's _Limits, per worker thread
        http_client = openai.DefaultHttpxClient(timeout=self.timeout_s, event_hooks={
            "request": [self._on_request], "response": [self._on_response]})
        self._client = openai.OpenAI(api_key=key, base_url=self.base_url, max_retries=0, timeout=self.timeout_s,
                                     http_client=http_client)

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAIChat(model={self.model!r}, base_url={self.base_url!r})"

    # ------------------------------------------------------------------ bounds of one attempt
    def _bounded(self, limits: _Limits, fn: Callable[[], Any]) -> Any:
        """``fn()`` (one request through the client) under ``limits``: the HTTP hooks below read
        them from this thread."""
        self._tls.limits = limits
        try:
            return fn()
        finally:
            self._tls.limits = None

    def _on_request(self, request: Any) -> None:
        """Every phase's timeout (connect, write, pool, each read) is at most the time left to the
        attempt's deadline, and the body is asked for unencoded (its size is then its length)."""
        lim = getattr(self._tls, "limits", None)
        if lim is None:
            return
        left = lim.deadline - time.monotonic()
        if left <= 0:
            raise lim.late()
        t = request.extensions.get("timeout") or {}
        request.extensions["timeout"] = {k: left if t.get(k) is None else min(float(t[k]), left)
                                         for k in ("connect", "read", "write", "pool")}
        request.headers["Accept-Encoding"] = "identity"

    def _on_response(self, response: Any) -> None:
        """Before the body is read: refuse one that announces more than the ceiling, and read the
        rest through the bounded stream (:func:`_bounded_stream_type`)."""
        lim = getattr(self._tls, "limits", None)
        if lim is None:
            return
        enc = (response.headers.get("content-encoding") or "identity").strip().lower()
        if enc not in ("identity", "gzip", "x-gzip", "deflate"):
            raise BadReply(f"the body is {enc[:40]!r}-encoded, and identity was asked for")
        length = (response.headers.get("content-length") or "").strip()
        if enc == "identity" and length.isdigit() and int(length) > lim.max_bytes:
            raise lim.too_big(int(length), "announces")
        if enc != "identity":
            del response.headers["content-encoding"]  # decoded (within the ceiling) by the stream
        ns = response.extensions.get("network_stream")
        try:
            sock = ns.get_extra_info("socket") if ns is not None else None
        except Exception:  # noqa: BLE001 - a transport without sockets: the per-chunk check remains
            sock = None
        base = sys.modules[type(response).__module__.split(".")[0]].SyncByteStream
        response.stream = _bounded_stream_type(base)(response.stream, lim, sock, enc)

    # ------------------------------------------------------------------ retries
    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return retry_after
        cap = min(self.backoff_max_s, self.backoff_base_s * (2 ** attempt))
        return self.rng.uniform(0.5 * cap, cap)  # "equal jitter": never 0, never above the cap

    def _with_retries(self, endpoint: str, fn: Callable[[], Any], wait_s: float | None = None) -> Any:
        """``fn()`` under the retry policy. ``wait_s`` (the start-up probe): a refused connection
        or an unknown host fails at once, and the retries stop once waiting would pass ``wait_s``
        seconds (the attempts' own time and the backoff sleeps counted)."""
        o = self._openai
        last = "no attempt"
        spent = 0.0
        for attempt in range(self.max_retries + 1):
            retry_after = None
            t0 = time.perf_counter()
            try:
                return fn()
            except o.APIStatusError as e:
                status = int(getattr(e, "status_code", 0) or 0)
                last = f"HTTP {status}"
                if status not in RETRY_STATUS and status < 500:
                    raise LLMError(f"{endpoint} failed with HTTP {status}: {_msg(e)}") from e
                headers = getattr(getattr(e, "response", None), "headers", None) or {}
                retry_after = parse_retry_after(headers.get("retry-after"))
                if retry_after is not None and retry_after > self.max_retry_after_s:
                    raise LLMError(f"{endpoint} failed with HTTP {status} and Retry-After: "
                                   f"{str(headers.get('retry-after'))[:40]} (wait {retry_after:g} s), longer than "
                                   f"llm.max_retry_after_s={self.max_retry_after_s:g}; not retried") from e
            except BadReply as e:
                last = f"unusable reply ({e})"
            except AttemptDeadline as e:
                last = f"timeout ({e})"
            except (ValueError, o.APIResponseValidationError) as e:  # a 200 whose body is not JSON the client reads
                last = f"unusable reply (body is not a JSON completion: {type(e).__name__}: {_msg(e)[:120]})"
            except o.APITimeoutError:
                last = "timeout"
            except o.APIConnectionError as e:
                inner = _inner_error(e, (BadReply, AttemptDeadline))
                last = (f"unusable reply ({inner})" if isinstance(inner, BadReply) else f"timeout ({inner})"
                        if inner is not None else f"connection error ({_cause(e)})")
                if inner is None and wait_s is not None and _cannot_connect(e):
                    raise LLMError(f"{endpoint} failed: {last}; the connection could not be opened (not retried)") from e
            spent += time.perf_counter() - t0
            if attempt == self.max_retries:
                break
            delay = self._backoff(attempt, retry_after)
            if wait_s is not None and spent + delay > wait_s:
                raise LLMError(f"{endpoint} still busy after {attempt + 1} attempts and {spent:.1f} s (the next "
                               f"retry in {delay:.1f} s would pass preflight.probe_wait_s={wait_s:g}); "
                               f"last status: {last}")
            log.info("%s: %s, retry %d/%d in %.2fs", endpoint, last, attempt + 1, self.max_retries, delay)
            self.retries_done += 1
            self.sleep(delay)
            spent += delay
        raise LLMError(f"{endpoint} failed after {self.max_retries + 1} attempts; last status: {last}")

    # ------------------------------------------------------------------ generate
    def cache_identity(self) -> dict[str, Any]:
        """Reply-shaping settings beyond the common ones (:func:`kgreason.llm.cache.backend_settings`):
        a reasoning model's request form, effort and reasoning budget. Empty for other models, so
        their cache keys are those of earlier versions."""
        if not self.reasoning:
            return {}
        return {"reasoning": {"request": "max_completion_tokens", "effort": self.reasoning_effort,
                              "budget_tokens": self.reasoning_budget_tokens}}

    def request_body(self, req: ChatRequest) -> dict[str, Any]:
        """The ``chat.completions.create`` arguments for ``req`` (the model family decides the form)."""
        kw: dict[str, Any] = dict(model=self.model, messages=[{"role": m.role, "content": m.content}
                                                             for m in req.messages], n=req.n)
        if self.reasoning:
            for name, value in (("temperature", req.temperature), ("top_p", req.top_p)):
                if name == "temperature" and float(value) not in (0.0, 1.0) or name == "top_p" and float(value) != 1.0:
                    raise LLMError(f"model {self.model!r} is a reasoning model (llm.reasoning_models), which the API "
                                   f"serves at {name} 1 only; this request asks for {name}={value} (set the "
                                   f"reasoner's or judge's {name} to 0 or 1, or use a non-reasoning model)")
            if req.logprobs:
                raise LLMError(f"model {self.model!r} is a reasoning model: the API returns no log-probabilities")
            kw["max_completion_tokens"] = int(req.max_tokens) + self.reasoning_budget_tokens
            if self.reasoning_effort is not None:
                kw["reasoning_effort"] = self.reasoning_effort
        else:
            kw.update(temperature=req.temperature, top_p=req.top_p, max_tokens=req.max_tokens)
            if req.stop:
                kw["stop"] = list(req.stop)
            seed = backend_seed(req)  # sampled requests only (docs/llm.md, "Seeds and sampled calls")
            if seed is not None:
                kw["seed"] = seed
            if req.logprobs:
                kw["logprobs"] = True
        if getattr(req, "json_schema", None):  # llm.structured_output: the reply's form as a JSON schema
            kw["response_format"] = {"type": "json_schema",
                                     "json_schema": {"name": "reply", "schema": json.loads(req.json_schema)}}
        if self.extra_body:
            kw["extra_body"] = dict(self.extra_body)
        return kw

    def _one(self, req: ChatRequest, wait_s: float | None = None) -> Completion:
        kw = self.request_body(req)
        if wait_s is not None:  # the probe: one attempt never outlasts the wait
            kw["timeout"] = max(1.0, min(self.timeout_s, float(wait_s)))
        endpoint = f"{self.base_url}/chat/completions"
        t0 = time.perf_counter()

        attempt_s = float(kw.get("timeout", self.timeout_s))
        why = f"{req.n} choice(s) of up to llm.max_reply_chars={self.max_reply_chars} characters" + (
            " with log-probs" if req.logprobs else "")

        def call():
            limits = _Limits(reply_byte_ceiling(self.max_reply_chars, req.n, req.logprobs), attempt_s, why)
            r = self._bounded(limits, lambda: self._client.chat.completions.create(**kw))
            try:  # the probe asks for one token, which may be a newline: any text answers it
                ch = check_reply(r, req.n, allow_blank=wait_s is not None)
            except BadReply as e:
                if self.reasoning and "is empty" in str(e) and "'length'" in str(e):
                    raise BadReply(f"{e}: the reasoning used up max_completion_tokens="
                                   f"{kw.get('max_completion_tokens')}; raise llm.reasoning_budget_tokens "
                                   f"(now {self.reasoning_budget_tokens})") from None
                raise
            return r, ch, (reply_logprobs(ch) if req.logprobs else None)

        resp, choices, lps = self._with_retries(endpoint, call, wait_s=wait_s)
        latency = time.perf_counter() - t0
        texts, bad = zip(*(clean_surrogates(c.message.content) for c in choices))
        cleaned = sum(k > 0 for k in bad)
        if cleaned and not self._warned_surrogates:
            self._warned_surrogates = True
            log.warning("%s: a reply held %d lone UTF-16 surrogate(s), which UTF-8 cannot store; replaced with "
                        "U+FFFD (counted in the row's usage as replies_cleaned; warned once)", self.model, sum(bad))
        cut = sum(len(t) > self.max_reply_chars for t in texts)
        if cut:
            texts = tuple(t[:self.max_reply_chars] for t in texts)
            if not self._warned_cut:
                self._warned_cut = True
                log.warning("%s: a reply longer than llm.max_reply_chars=%d was cut to that length (counted in "
                            "the row's usage as replies_cut; warned once)", self.model, self.max_reply_chars)
        if self.reasoning and req.stop:
            texts = tuple(apply_stop(t, req.stop) for t in texts)
        pt, ct, rt = reply_usage(getattr(resp, "usage", None))
        cached = cached_prompt_tokens(getattr(resp, "usage", None))
        unknown = pt is None
        if unknown:
            pt = ct = rt = cached = 0
            if not self._warned_usage:
                self._warned_usage = True
                log.warning("%s (%s): a reply without token counts (`usage`): its tokens and cost are unknown, "
                            "left out of the token and cost figures and counted in llm/calls_usage_unknown "
                            "(warned once)", self.model, self.base_url)
        usage = call_usage(pt, ct, latency, 0.0 if unknown else self.prices.cost(self.model, pt, ct, cached),
                           reasoning_tokens=rt, prompt_tokens_reused=cached)
        if unknown or cut or cleaned:
            usage = dataclasses.replace(usage, usage_unknown=int(unknown), replies_cut=cut, replies_cleaned=cleaned)
        return Completion(texts=texts, usage=usage, token_logprobs=lps)

    def probe(self, wait_s: float = 120.0) -> Completion:
        """One tiny request (``max_tokens=1``), sent as the run's requests are (same parameters),
        under the probe's policy (:meth:`_with_retries` with ``wait_s``)."""
        return self._one(ChatRequest.of("ping", max_tokens=1), wait_s=float(wait_s))

    def generate(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        requests = list(requests)
        if len(requests) <= 1 or self.max_concurrency == 1:
            return [self._one(r) for r in requests]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(requests))) as pool:
            return list(pool.map(self._one, requests))  # map keeps order

    # ------------------------------------------------------------------ score
    def _echo(self, text: str) -> Any:
        """``/completions`` with ``echo`` and log-probs of ``text``: the response's logprobs.

        ``max_tokens=1``, not 0: llama-cpp-python reads 0 as "until the context is full"; the one
        generated token lies past ``len(text)`` and is never counted."""
        endpoint = f"{self.base_url}/completions"

        def call():
            limits = _Limits(reply_byte_ceiling(len(text) + 64, 1, logprobs=True), self.timeout_s,
                             f"the echoed log-probs of a {len(text)}-character text")
            return self._bounded(limits, lambda: self._client.completions.create(
                model=self.model, prompt=text, echo=True, logprobs=0, max_tokens=1, temperature=0.0))
        try:
            resp = self._with_retries(endpoint, call)
        except LLMError as e:
            if "failed with HTTP 4" not in str(e):  # outages stay LLMError; refusals mean unsupported
                raise
            raise ScoringUnsupported(f"{endpoint} does not support echo+logprobs scoring: {e}") from e
        choices = getattr(resp, "choices", None)
        lp = getattr(choices[0], "logprobs", None) if isinstance(choices, list) and choices else None
        if lp is None or not getattr(lp, "token_logprobs", None) or getattr(lp, "text_offset", None) is None:
            raise ScoringUnsupported(f"{endpoint} returned no echoed logprobs for model {self.model}")
        return lp

    def _continuation(self, prefix: str, cand: str) -> float:
        """Σ of the echoed log-probs of the tokens of ``prefix + cand`` that overlap ``cand``.

        A token that straddles the boundary counts: with the prompt ending in ``"assistant: "``
        a BPE tokenizer reads ``" Paris"`` as one token starting at the prefix's last space;
        counting only tokens that start inside the candidate scored such a candidate 0."""
        lp = self._echo(prefix + cand)
        offs, vals = list(lp.text_offset), list(lp.token_logprobs)
        start, end = len(prefix), len(prefix) + len(cand)
        total = 0.0
        for i, (off, v) in enumerate(zip(offs, vals)):
            tok_end = offs[i + 1] if i + 1 < len(offs) else float("inf")
            if off < end and tok_end > start and v is not None:
                total += float(v)
        return total

    def score_alignment(self) -> tuple[bool, str]:
        """Check the server's echoed log-probs on known answers (:data:`SCORE_PROBES`), once.

        Every probe's right continuation must outscore its wrong one by :data:`SCORE_PROBE_MARGIN`
        nats. A server whose log-probs sit one position off (llama-cpp-python ≤ 0.3.36 on a model
        without a BOS token reports, at each echoed token, the log-prob the *next* position's
        distribution gives it) fails: its score for a one-token continuation says nothing about
        the continuation. Returns (passed, detail); the result is kept for this object's life."""
        with self._align_lock:
            if self._aligned is None:
                rows = []
                for prefix, right, wrong in SCORE_PROBES:
                    r, w = self._continuation(prefix, right), self._continuation(prefix, wrong)
                    rows.append(f"{prefix!r}+{right!r} {r:.2f} vs {wrong!r} {w:.2f}")
                    if not r - w >= SCORE_PROBE_MARGIN:
                        self._aligned = (False, "; ".join(rows))
                        break
                else:
                    self._aligned = (True, "; ".join(rows))
                if not self._aligned[0]:
                    log.warning("llm=openai (%s, %s): the server's /completions echo log-probs fail the known-answer "
                                "check (%s; the right continuation must lead by >= %.1f nats): score() is treated as "
                                "unsupported for this run (SGR falls back to its chat choice). Known cause: "
                                "llama-cpp-python's server shifts echoed log-probs by one position on models "
                                "without a BOS token (docs/llm.md)", self.base_url, self.model, self._aligned[1],
                                SCORE_PROBE_MARGIN)
            return self._aligned

    def score(self, prompt: Sequence[Message], candidates: Sequence[str]) -> list[float]:
        if self.score_endpoint != "completions":
            raise ScoringUnsupported(f"llm=openai ({self.base_url}, {self.model}): score_endpoint={self.score_endpoint!r}")
        if self.score_check:
            ok, detail = self.score_alignment()
            if not ok:
                raise ScoringUnsupported(f"{self.base_url}/completions: echoed log-probs failed the alignment "
                                         f"check ({detail})")
        prefix = render_plain(prompt)
        return [self._continuation(prefix, cand) for cand in candidates]


#: Known-answer probes of :meth:`OpenAIChat.score_alignment`: (prefix, right, wrong continuation).
#: Chosen so that even SmolLM2-135M (the embedded model) ranks them right by a wide margin
#: on the in-process llama.cpp route (tests/server).
SCORE_PROBES: tuple[tuple[str, str, str], ...] = (
    ("1, 2, 3, 4, 5, 6, 7,", " 8", " 3"),
)
SCORE_PROBE_MARGIN = 1.0


class BadReply(Exception):
    """A status-200 reply that is not a usable completion (a failed attempt, retried, never cached)."""


class AttemptDeadline(Exception):
    """An attempt that had no complete reply within its deadline (``llm.timeout_s``); retried."""


REPLY_BYTES_BASE = 1 << 16
"""Bytes of a reply body beyond its texts (ids, usage, JSON keys): part of :func:`reply_byte_ceiling`."""
REPLY_BYTES_PER_CHAR = 12
"""The most bytes one character of reply text takes in a JSON body (``\\ud83d\\ude00``: 12)."""
LOGPROB_BYTES_PER_CHAR = 96
"""With ``logprobs`` each token also carries its text, bytes and log-prob (about 100 bytes a token)."""


def reply_byte_ceiling(max_reply_chars: int, n: int = 1, logprobs: bool = False) -> int:
    """The largest reply body (bytes, after any content decoding) read for a request with ``n``
    choices: room for ``n`` texts of ``max_reply_chars`` characters each, every one written in its
    longest JSON form (plus log-probs when asked), and :data:`REPLY_BYTES_BASE` for the rest. A
    body past it is an unusable reply: a reply that size could only be cut to ``max_reply_chars``
    anyway, and reading it whole once took 2.8 GB (issue 57 M1).

    >>> reply_byte_ceiling(200_000)
    2465536
    """
    per_char = REPLY_BYTES_PER_CHAR + (LOGPROB_BYTES_PER_CHAR if logprobs else 0)
    return REPLY_BYTES_BASE + max(1, int(n)) * int(max_reply_chars) * per_char


class _Limits:
    """One attempt's bounds: the body's byte ceiling (and what set it) and the monotonic deadline."""

    __slots__ = ("max_bytes", "deadline", "timeout_s", "why")

    def __init__(self, max_bytes: int, timeout_s: float, why: str) -> None:
        self.max_bytes, self.timeout_s, self.why = int(max_bytes), float(timeout_s), why
        self.deadline = time.monotonic() + float(timeout_s)

    def late(self) -> AttemptDeadline:
        return AttemptDeadline(f"no complete reply within llm.timeout_s={self.timeout_s:g} s")

    def too_big(self, got: int, verb: str = "passed") -> BadReply:
        return BadReply(f"the body {verb} {got} bytes, the ceiling for this request is {self.max_bytes} bytes "
                        f"({self.why}); not read further")


_STREAM_TYPES: dict[type, type] = {}


def _bounded_stream_type(base: type) -> type:
    """A ``SyncByteStream`` of the client's own HTTP library (``httpx`` or ``httpx2``) that passes
    the body on while counting it against :class:`_Limits`, decodes gzip/deflate itself (within the
    ceiling: a small compressed body cannot unpack into gigabytes), and ends the attempt at its
    deadline: a timer shuts the socket down then, so a read blocked on a trickling server returns."""
    if base in _STREAM_TYPES:
        return _STREAM_TYPES[base]

    class Bounded(base):  # type: ignore[misc, valid-type]
        def __init__(self, inner: Any, limits: _Limits, sock: Any, encoding: str) -> None:
            self.inner, self.limits, self.got = inner, limits, 0
            self.decoder = (zlib.decompressobj(zlib.MAX_WBITS | 32) if encoding in ("gzip", "x-gzip", "deflate")
                            else None)
            self._lock = threading.Lock()
            self._done = self._fired = False
            self._timer = None
            if sock is not None:
                self._timer = threading.Timer(max(0.0, limits.deadline - time.monotonic()), self._fire, (sock,))
                self._timer.daemon = True
                self._timer.start()

        def _fire(self, sock: Any) -> None:
            with self._lock:
                if self._done:
                    return
                self._fired = True
            try:  # the plain socket's shutdown (also under TLS): the blocked read returns at once
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except (OSError, TypeError, ValueError):
                pass

        def _finish(self) -> bool:
            """Stop the timer; whether it had fired (the socket is shut then)."""
            with self._lock:
                self._done = True
                fired = self._fired
            if self._timer is not None:
                self._timer.cancel()
            return fired

        def _count(self, data: bytes) -> bytes:
            self.got += len(data)
            if self.got > self.limits.max_bytes:
                raise self.limits.too_big(self.got)
            if time.monotonic() > self.limits.deadline:
                raise self.limits.late()
            return data

        def __iter__(self):
            try:
                for chunk in self.inner:
                    if self.decoder is None:
                        yield self._count(chunk)
                        continue
                    # decode at most what the ceiling still allows (+1 byte to see it passed)
                    out = self.decoder.decompress(chunk, self.limits.max_bytes - self.got + 1)
                    if self.decoder.unconsumed_tail:
                        raise self.limits.too_big(self.got + len(out), "unpacks to more than")
                    yield self._count(out)
                if self.decoder is not None:
                    yield self._count(self.decoder.flush())
            except (BadReply, AttemptDeadline):
                self._finish()
                raise
            except zlib.error as e:
                self._finish()
                raise BadReply(f"the body's content encoding does not decode ({e})") from None
            except Exception as e:
                if self._finish() or time.monotonic() > self.limits.deadline:
                    raise self.limits.late() from e
                raise
            self._finish()

        def close(self) -> None:
            self._finish()
            close = getattr(self.inner, "close", None)
            if close is not None:
                close()

    _STREAM_TYPES[base] = Bounded
    return Bounded


def _inner_error(e: BaseException, kinds: tuple[type, ...]) -> BaseException | None:
    """``e`` or the first exception of one of ``kinds`` it was raised from (an older ``openai``
    wraps what a response hook raises in ``APIConnectionError``)."""
    seen: set[int] = set()
    x: BaseException | None = e
    while x is not None and id(x) not in seen:
        if isinstance(x, kinds):
            return x
        seen.add(id(x))
        x = x.__cause__ or x.__context__
    return None


def check_reply(resp: Any, n: int = 1, allow_blank: bool = False) -> list:
    """The choices of a chat reply, ordered by index, when it is a usable completion; else
    :class:`BadReply` saying what is wrong: not a completion object (an HTML or other non-JSON
    body the client hands back as text), no ``choices`` or fewer than the ``n`` asked for, a
    choice whose ``message.content`` is not a string (``null``: a refusal, a tool call, a cut body),
    or (unless ``allow_blank``: the start-up probe) one that is empty or whitespace only."""
    if resp is None or isinstance(resp, (str, bytes, list, int, float)):
        shown = repr(resp)[:60] if not isinstance(resp, (str, bytes)) else f"{len(resp)} chars of non-JSON text"
        raise BadReply(f"the body is not a JSON completion ({type(resp).__name__}: {shown})")
    choices = getattr(resp, "choices", None)
    if not isinstance(choices, list) or not choices:
        raise BadReply("no choices" if not choices else f"choices is {type(choices).__name__}, not a list")
    if len(choices) < int(n):
        raise BadReply(f"{len(choices)} choice(s), {n} asked for")
    for c in choices:
        msg = getattr(c, "message", None)
        content = getattr(msg, "content", None)
        if not isinstance(content, str):
            refusal = getattr(msg, "refusal", None)
            why = f"refusal {str(refusal)[:80]!r}" if refusal else f"finish_reason {getattr(c, 'finish_reason', None)!r}"
            raise BadReply(f"choice {getattr(c, 'index', '?')} has no text (content: "
                           f"{'null' if content is None else type(content).__name__}; {why})")
        if not allow_blank and not content.strip():
            raise BadReply(f"choice {getattr(c, 'index', '?')} is empty ({len(content)} whitespace character(s); "
                           f"finish_reason {getattr(c, 'finish_reason', None)!r})")
    try:
        ordered = sorted(choices, key=lambda c: int(getattr(c, "index", 0) or 0))
    except (TypeError, ValueError):
        ordered = list(choices)
    return ordered[:max(1, int(n))]  # a server sending more than asked: the first n


def reply_logprobs(choices: list) -> tuple[tuple[float, ...], ...]:
    """Per choice, the log-probs of its tokens (empty for a choice that carries none);
    :class:`BadReply` when they are there but not numbers."""
    try:
        return tuple(tuple(float(t.logprob) for t in ((getattr(c.logprobs, "content", None) or [])
                                                      if getattr(c, "logprobs", None) else []))
                     for c in choices)
    except (AttributeError, TypeError, ValueError) as e:
        raise BadReply(f"its log-probs are unreadable ({type(e).__name__}: {e})") from None


def _count(x: Any) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) and x >= 0 else None


def reply_usage(u: Any) -> tuple[int | None, int | None, int]:
    """(prompt tokens, completion tokens, reasoning tokens) of a reply's ``usage``; the first two
    are None when the server sent no usable counts (missing, null, negative or not integers)."""
    def get(obj: Any, name: str) -> Any:
        return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)

    if u is None:
        return None, None, 0
    pt, ct = _count(get(u, "prompt_tokens")), _count(get(u, "completion_tokens"))
    if pt is None or ct is None:
        return None, None, 0
    details = get(u, "completion_tokens_details")
    rt = _count(get(details, "reasoning_tokens")) if details is not None else None
    return pt, ct, rt or 0


def cached_prompt_tokens(u: Any) -> int:
    """The prompt tokens a server served from its prompt cache (``usage.prompt_tokens_details.cached_tokens``,
    as OpenAI and vLLM report them); 0 when the reply does not say."""
    def get(obj: Any, name: str) -> Any:
        return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)

    details = get(u, "prompt_tokens_details") if u is not None else None
    n = _count(get(details, "cached_tokens")) if details is not None else None
    return n or 0


def _msg(e: Exception) -> str:
    m = str(getattr(e, "message", "") or e)
    return m[:300]


def _cause(e: Exception) -> str:
    """The connection error's own words (the ``openai`` client says only "Connection error.")."""
    inner = e.__cause__ or e.__context__
    return f"{_msg(e)} {type(inner).__name__}: {_msg(inner)}" if inner is not None else _msg(e)


def _cannot_connect(e: Exception) -> bool:
    """A connection that could not be opened (refused, unknown host, unreachable), not one that
    broke: ``httpx.ConnectError`` under the client's ``APIConnectionError``."""
    seen, x = set(), e.__cause__ or e.__context__
    while x is not None and id(x) not in seen:
        seen.add(id(x))
        if type(x).__name__ in ("ConnectError", "ConnectionRefusedError", "gaierror"):
            return True
        x = x.__cause__ or x.__context__
    return False
