"""Cross-example batching for in-process models (``local``, ``hf``).

With ``example_workers > 1`` each worker thread answers its own example and calls
``llm.generate`` with one or a few requests. A local model run that way either serialises the
calls (one short batch each) or runs several forward passes at once on the same cores. A
serving engine (vLLM) instead merges the requests of concurrent clients into one batch;
:class:`BatchingLLM` does the same in process:

* callers put their requests on a queue and wait;
* one dispatcher thread takes the first waiting call, then keeps gathering further calls
  until ``batch_size`` requests are waiting or ``wait_s`` (20 ms by default) has passed since
  the first one, and sends them all to the wrapped model in one ``generate`` (which left-pads
  them into batches, :class:`~kgreason.llm.hf.HFCausalLM`);
* the completions are split back in order, each caller receiving exactly its own;
* if a merged call raises, each gathered call is re-run on its own, so an error reaches only
  the caller whose requests cause it (and the others still get their answers);
* ``score`` runs under the same lock as ``generate`` (never two forward passes at once).

``batch_sizes`` records the number of requests of every call made to the wrapped model.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any, Sequence

from kgreason.types import ChatRequest, Completion, Message

log = logging.getLogger("kgreason.llm")

BATCHED_BACKENDS = ("local", "hf")


class _Call:
    __slots__ = ("requests", "done", "result", "error")

    def __init__(self, requests: list[ChatRequest]) -> None:
        self.requests = requests
        self.done = threading.Event()
        self.result: list[Completion] | None = None
        self.error: BaseException | None = None


class BatchingLLM:
    """Wraps an LLM so concurrent ``generate`` calls are merged into one batch.

    Args:
        inner: the model (anything with ``generate``/``score``, ``backend``, ``model``).
        batch_size: stop gathering once this many requests wait (``None`` = the inner model's
            ``batch_size``, else 8).
        wait_s: the longest the first waiting call is held back for others to join.
    """

    def __init__(self, inner: Any, batch_size: int | None = None, wait_s: float = 0.02) -> None:
        self.inner = inner
        self.backend = getattr(inner, "backend", "?")
        self.model = getattr(inner, "model", "?")
        if batch_size is None:
            # a backend that states its batch size (even None) is not asked to load its model for it
            batch_size = (inner.batch_size if hasattr(inner, "batch_size")
                          else getattr(getattr(inner, "impl", None), "batch_size", None))
        self.batch_size = max(1, int(batch_size or 8))
        self.wait_s = float(wait_s)
        self.batch_sizes: list[int] = []
        self._q: "queue.Queue[_Call | None]" = queue.Queue()
        self._model_lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    # ------------------------------------------------------------------ public
    def cache_identity(self) -> dict[str, Any]:
        """The wrapped model's reply-shaping settings: the call cache keys a batched run exactly
        like an unbatched one (batching does not change what a request asks for)."""
        from kgreason.llm.cache import backend_settings

        return backend_settings(self.inner)

    def generate(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        requests = list(requests)
        if not requests:
            return []
        if self._closed:
            raise RuntimeError("BatchingLLM is closed")
        self._ensure_thread()
        call = _Call(requests)
        self._q.put(call)
        call.done.wait()
        if call.error is not None:
            raise call.error
        assert call.result is not None
        return call.result

    def score(self, prompt: Sequence[Message], candidates: Sequence[str]) -> list[float]:
        with self._model_lock:
            return self.inner.score(prompt, candidates)

    def close(self) -> None:
        """Stop the dispatcher (calls already queued are answered first)."""
        self._closed = True
        if self._thread is not None:
            self._q.put(None)
            self._thread.join(timeout=30)

    # ------------------------------------------------------------------ dispatcher
    def _ensure_thread(self) -> None:
        if self._thread is None:
            with self._start_lock:
                if self._thread is None:
                    t = threading.Thread(target=self._loop, name="llm-batcher", daemon=True)
                    t.start()
                    self._thread = t

    def _gather(self, first: _Call) -> tuple[list[_Call], bool]:
        calls, n = [first], len(first.requests)
        deadline = time.monotonic() + self.wait_s
        stop = False
        while n < self.batch_size:
            left = deadline - time.monotonic()
            try:
                nxt = self._q.get(timeout=left) if left > 0 else self._q.get_nowait()
            except queue.Empty:
                break
            if nxt is None:
                stop = True
                break
            calls.append(nxt)
            n += len(nxt.requests)
        return calls, stop

    def _loop(self) -> None:
        while True:
            first = self._q.get()
            if first is None:
                return
            calls, stop = self._gather(first)
            self._run(calls)
            if stop:
                return

    def _call_inner(self, reqs: list[ChatRequest]) -> list[Completion]:
        with self._model_lock:
            self.batch_sizes.append(len(reqs))
            out = list(self.inner.generate(reqs))
        if len(out) != len(reqs):
            raise RuntimeError(f"{self.backend}: generate returned {len(out)} completions for {len(reqs)} requests")
        return out

    def _run(self, calls: list[_Call]) -> None:
        merged = [r for c in calls for r in c.requests]
        try:
            out = self._call_inner(merged)
        except BaseException as e:  # noqa: BLE001 – routed to the callers below
            if len(calls) == 1:
                calls[0].error = e
                calls[0].done.set()
                return
            log.info("batched generate of %d calls failed (%s); running each on its own", len(calls), e)
            for c in calls:
                try:
                    c.result = self._call_inner(c.requests)
                except BaseException as e2:  # noqa: BLE001
                    c.error = e2
                c.done.set()
            return
        i = 0
        for c in calls:
            c.result = out[i : i + len(c.requests)]
            i += len(c.requests)
            c.done.set()


def maybe_batching(llm: Any, workers: int, wait_s: float = 0.02) -> Any:
    """``BatchingLLM(llm)`` for in-process backends when examples run concurrently, else ``llm``."""
    if int(workers) > 1 and getattr(llm, "backend", None) in BATCHED_BACKENDS:
        return BatchingLLM(llm, wait_s=wait_s)
    return llm
