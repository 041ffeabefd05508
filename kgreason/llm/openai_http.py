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
  sends it; after ``max_retries`` retries :class:`~kgreason.llm.base.LLMError` names the
  endpoint and the last status. Other 4xx fail at once.
* ``score`` uses the legacy ``/v1/completions`` endpoint with ``echo=True, logprobs=0,
  max_tokens=1`` (vLLM and llama.cpp servers support it; OpenAI's chat models do not): the
  candidate's log-prob is the sum of the echoed log-probs of the tokens that overlap the
  candidate. Servers that refuse it raise :class:`~kgreason.llm.base.ScoringUnsupported`, and
  so does a server whose echoed log-probs fail a known-answer check
  (:meth:`OpenAIChat.score_alignment`, run once, one warning): llama-cpp-python's server
  reports them one position off on some models, which would rank a wrong answer above the
  right one.
"""

from __future__ import annotations

import email.utils
import logging
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping, Sequence

from kgreason import secrets
from kgreason.llm.accounting import PriceTable, call_usage
from kgreason.llm.base import LLMError, ScoringUnsupported
from kgreason.types import ChatRequest, Completion, Message

log = logging.getLogger("kgreason.llm")

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP-date), else None."""
    if value is None or str(value).strip() == "":
        return None
    v = str(value).strip()
    try:
        return max(0.0, float(v))
    except ValueError:
        pass
    try:
        dt = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError):
        return None
    return max(0.0, dt.timestamp() - (time.time() if now is None else now))


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
        timeout_s: per-request timeout.
        prices: USD per 1M tokens per model (see :mod:`kgreason.llm.accounting`).
        score_endpoint: ``completions`` (echo+logprobs) or ``none`` (score raises).
        score_check: before the first ``score``, check the echoed log-probs on known answers
            (:meth:`score_alignment`); a server that fails is treated as unable to score.
        sleep / rng: injectable for tests (``sleep(seconds)``, ``random.Random``).
    """

    backend = "openai"

    def __init__(self, model: str, base_url: str | None = None, api_key_env: str | None = "OPENAI_API_KEY",
                 max_concurrency: int = 8, max_retries: int = 5, backoff_base_s: float = 0.5,
                 backoff_max_s: float = 60.0, timeout_s: float = 120.0, prices: Mapping[str, Any] | None = None,
                 score_endpoint: str = "completions", score_check: bool = True, extra_body: Mapping[str, Any] | None = None,
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
        self.sleep = sleep or time.sleep
        self.rng = rng or random.Random()
        self.retries_done = 0  # total retries over this object's life (for tests / logs)
        self._client = openai.OpenAI(api_key=key, base_url=self.base_url, max_retries=0, timeout=float(timeout_s))

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAIChat(model={self.model!r}, base_url={self.base_url!r})"

    # ------------------------------------------------------------------ retries
    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return retry_after
        cap = min(self.backoff_max_s, self.backoff_base_s * (2 ** attempt))
        return self.rng.uniform(0.5 * cap, cap)  # "equal jitter": never 0, never above the cap

    def _with_retries(self, endpoint: str, fn: Callable[[], Any]) -> Any:
        o = self._openai
        last = "no attempt"
        for attempt in range(self.max_retries + 1):
            retry_after = None
            try:
                return fn()
            except o.APIStatusError as e:
                status = int(getattr(e, "status_code", 0) or 0)
                last = f"HTTP {status}"
                if status not in RETRY_STATUS and status < 500:
                    raise LLMError(f"{endpoint} failed with HTTP {status}: {_msg(e)}") from e
                headers = getattr(getattr(e, "response", None), "headers", None) or {}
                retry_after = parse_retry_after(headers.get("retry-after"))
            except o.APITimeoutError:
                last = "timeout"
            except o.APIConnectionError as e:
                last = f"connection error ({_msg(e)})"
            if attempt == self.max_retries:
                break
            delay = self._backoff(attempt, retry_after)
            log.info("%s: %s, retry %d/%d in %.2fs", endpoint, last, attempt + 1, self.max_retries, delay)
            self.retries_done += 1
            self.sleep(delay)
        raise LLMError(f"{endpoint} failed after {self.max_retries + 1} attempts; last status: {last}")

    # ------------------------------------------------------------------ generate
    def _one(self, req: ChatRequest) -> Completion:
        kw: dict[str, Any] = dict(
            model=self.model, messages=[{"role": m.role, "content": m.content} for m in req.messages],
            temperature=req.temperature, top_p=req.top_p, max_tokens=req.max_tokens, n=req.n,
        )
        if req.stop:
            kw["stop"] = list(req.stop)
        if req.seed is not None:
            kw["seed"] = int(req.seed)
        if req.logprobs:
            kw["logprobs"] = True
        if self.extra_body:
            kw["extra_body"] = dict(self.extra_body)
        endpoint = f"{self.base_url}/chat/completions"
        t0 = time.perf_counter()
        resp = self._with_retries(endpoint, lambda: self._client.chat.completions.create(**kw))
        latency = time.perf_counter() - t0
        choices = sorted(resp.choices or [], key=lambda c: c.index)
        texts = tuple((c.message.content or "") if c.message is not None else "" for c in choices)
        lps = None
        if req.logprobs:
            lps = tuple(tuple(float(t.logprob) for t in ((c.logprobs.content or []) if c.logprobs else []))
                        for c in choices)
        pt = int(getattr(resp.usage, "prompt_tokens", 0) or 0) if resp.usage else 0
        ct = int(getattr(resp.usage, "completion_tokens", 0) or 0) if resp.usage else 0
        usage = call_usage(pt, ct, latency, self.prices.cost(self.model, pt, ct))
        return Completion(texts=texts, usage=usage, token_logprobs=lps)

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
            return self._client.completions.create(model=self.model, prompt=text, echo=True, logprobs=0,
                                                   max_tokens=1, temperature=0.0)
        try:
            resp = self._with_retries(endpoint, call)
        except LLMError as e:
            if "failed with HTTP 4" not in str(e):  # outages stay LLMError; refusals mean unsupported
                raise
            raise ScoringUnsupported(f"{endpoint} does not support echo+logprobs scoring: {e}") from e
        lp = resp.choices[0].logprobs if resp.choices else None
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


def _msg(e: Exception) -> str:
    m = str(getattr(e, "message", "") or e)
    return m[:300]
