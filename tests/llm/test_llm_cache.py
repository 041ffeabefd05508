"""CallStore / CachedLLM: keys, modes, hit accounting, zero calls on re-run, several processes."""

from __future__ import annotations

import json
import multiprocessing as mp

import pytest

from kgreason.llm.base import CacheMiss, LLM
from kgreason.llm.cache import CachedLLM, cache_key, open_store, request_json
from kgreason.storage.callstore import StoreMissing
from kgreason.storage.llm_calls import CallStore
from kgreason.types import ChatRequest, Completion, Message, Usage


class CountingLLM:
    backend, model = "counting", "m"

    def __init__(self):
        self.generated: list[ChatRequest] = []
        self.scored = 0

    def generate(self, requests):
        self.generated.extend(requests)
        return [Completion(texts=(f"a:{r.messages[-1].content}:{r.sample_index}",),
                           usage=Usage(calls=1, prompt_tokens=5, completion_tokens=2, latency_s=0.1, cost_usd=0.01),
                           token_logprobs=((-0.5, -0.25),)) for r in requests]

    def score(self, prompt, candidates):
        self.scored += 1
        return [-float(len(c)) for c in candidates]


def test_key_covers_sampling_fields_and_ignores_nothing_else():
    base = ChatRequest.of("q", temperature=0.7, seed=1)
    k = cache_key("openai", "m", "generate", request_json(base))
    assert k == cache_key("openai", "m", "generate", request_json(ChatRequest.of("q", temperature=0.7, seed=1)))
    variants = [ChatRequest.of("q", temperature=0.8, seed=1), ChatRequest.of("q", temperature=0.7, seed=2),
                ChatRequest.of("q", temperature=0.7, seed=1, sample_index=1),
                ChatRequest.of("q", temperature=0.7, seed=1, n=2), ChatRequest.of("q", temperature=0.7, seed=1, stop=("x",)),
                ChatRequest.of("q", temperature=0.7, seed=1, top_p=0.5), ChatRequest.of("q", temperature=0.7, seed=1, max_tokens=3),
                ChatRequest.of("q", temperature=0.7, seed=1, logprobs=True), ChatRequest.of("q", system="s", temperature=0.7, seed=1)]
    keys = {cache_key("openai", "m", "generate", request_json(v)) for v in variants}
    assert len(keys) == len(variants) and k not in keys
    assert k != cache_key("openai", "m2", "generate", request_json(base))
    assert k != cache_key("vllm", "m", "generate", request_json(base))
    assert len(k) == 64


def test_hits_are_free_and_rerun_makes_zero_calls(tmp_path):
    inner = CountingLLM()
    llm = CachedLLM(inner, CallStore.open(tmp_path, "readwrite"))
    assert isinstance(llm, LLM) and llm.backend == "counting" and llm.model == "m"
    reqs = [ChatRequest.of(f"q{i}") for i in range(5)]
    first = llm.generate(reqs)
    assert len(inner.generated) == 5 and not any(c.cached for c in first)
    # new process-equivalent: a fresh store object on the same dir, partly overlapping batch
    inner2 = CountingLLM()
    llm2 = CachedLLM(inner2, CallStore.open(tmp_path, "readwrite"))
    mixed = llm2.generate([reqs[3], ChatRequest.of("new"), reqs[0]])
    assert [r.messages[-1].content for r in inner2.generated] == ["new"]
    assert [c.cached for c in mixed] == [True, False, True]
    assert mixed[0].text == first[3].text and mixed[2].text == first[0].text
    assert mixed[0].token_logprobs == first[3].token_logprobs
    hit = mixed[0].usage
    assert (hit.calls, hit.cache_hits, hit.cost_usd, hit.latency_s) == (0, 1, 0.0, 0.0)
    assert (hit.prompt_tokens, hit.completion_tokens) == (5, 2)
    again = llm2.generate(reqs)
    assert len(inner2.generated) == 1 and all(c.cached for c in again)
    assert [c.text for c in again] == [c.text for c in first]
    # score is cached too
    p = (Message("user", "x"),)
    assert llm2.score(p, ["ab", "c"]) == [-2.0, -1.0] and llm2.score(p, ["ab", "c"]) == [-2.0, -1.0]
    assert inner2.scored == 1


def test_readonly_and_off_modes(tmp_path):
    with pytest.raises(CacheMiss, match="no cache file"):  # the LLM cache's store: a miss of the replay
        open_store(tmp_path / "none", "readonly")
    with pytest.raises(StoreMissing, match="no cache file"):  # the bare store knows nothing of LLMs
        CallStore.open(tmp_path / "none", "readonly")
    CachedLLM(CountingLLM(), CallStore.open(tmp_path, "readwrite")).generate([ChatRequest.of("a")])
    inner = CountingLLM()
    ro = CachedLLM(inner, CallStore.open(tmp_path, "readonly"))
    assert ro.generate([ChatRequest.of("a")])[0].cached
    with pytest.raises(CacheMiss, match="readonly"):
        ro.generate([ChatRequest.of("a"), ChatRequest.of("b")])
    with pytest.raises(CacheMiss):
        ro.score((Message("user", "x"),), ["y"])
    assert inner.generated == []
    off_inner = CountingLLM()
    off = CachedLLM(off_inner, CallStore(None, "off"))
    off.generate([ChatRequest.of("a")])
    off.generate([ChatRequest.of("a")])
    assert len(off_inner.generated) == 2
    with pytest.raises(ValueError, match="mode"):
        CallStore.open(tmp_path, "sometimes")


def _writer(dir_, tag, n, q):
    try:
        store = CallStore.open(dir_, "readwrite")
        llm = CachedLLM(CountingLLM(), store)
        for i in range(n):
            llm.generate([ChatRequest.of(f"{tag}-{i}"), ChatRequest.of(f"shared-{i}")])
        q.put(("ok", tag))
    except Exception as e:  # noqa: BLE001
        q.put(("err", repr(e)))


def test_two_processes_write_one_store(tmp_path):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=_writer, args=(str(tmp_path), t, 40, q)) for t in ("p1", "p2")]
    for p in ps:
        p.start()
    for p in ps:
        p.join(timeout=120)
    results = [q.get(timeout=5) for _ in ps]
    assert all(r[0] == "ok" for r in results), results
    store = CallStore.open(tmp_path, "readonly")
    assert len(store) == 40 * 2 + 40  # p1-*, p2-*, shared-* once each
    inner = CountingLLM()
    llm = CachedLLM(inner, store)
    out = llm.generate([ChatRequest.of(f"p1-{i}") for i in range(40)] + [ChatRequest.of(f"p2-{i}") for i in range(40)])
    assert all(c.cached for c in out) and inner.generated == []


class SettingsLLM(CountingLLM):
    """A backend with the reply-shaping attributes of a real HTTP backend."""

    def __init__(self, backend="openai", model="m", base_url="http://a/v1", extra_body=None):
        super().__init__()
        self.backend, self.model, self.base_url, self.extra_body = backend, model, base_url, dict(extra_body or {})


BASE_REQ = dict(temperature=0.0, top_p=1.0, max_tokens=64, n=1, stop=(), seed=None, logprobs=False, sample_index=0)
SETUP_VARIANTS = {  # one field changed per case; the first setup fills the cache, the second must miss
    "backend": dict(llm=dict(backend="vllm")),
    "endpoint": dict(llm=dict(base_url="http://b/v1")),
    "model": dict(llm=dict(model="m2")),
    "extra_body": dict(llm=dict(extra_body={"top_k": 20})),
    "extra_body_value": dict(llm=dict(extra_body={"top_k": 40}), base_llm=dict(extra_body={"top_k": 20})),
    "prompt": dict(prompt="q2"),
    **{f: dict(req={f: v}) for f, v in [("temperature", 0.7), ("top_p", 0.5), ("max_tokens", 65), ("n", 2),
                                         ("stop", ("\n",)), ("seed", 3), ("logprobs", True), ("sample_index", 1)]},
}


@pytest.mark.parametrize("field", sorted(SETUP_VARIANTS))
def test_setups_differing_in_one_field_never_share_an_entry(tmp_path, field):
    v = SETUP_VARIANTS[field]
    store = CallStore.open(tmp_path, "readwrite")
    first = SettingsLLM(**v.get("base_llm", {}))
    CachedLLM(first, store).generate([ChatRequest.of("q", **BASE_REQ)])
    same = SettingsLLM(**v.get("base_llm", {}))
    assert CachedLLM(same, store).generate([ChatRequest.of("q", **BASE_REQ)])[0].cached  # control: a real hit
    second = SettingsLLM(**{**v.get("base_llm", {}), **v.get("llm", {})})
    out = CachedLLM(second, store).generate([ChatRequest.of(v.get("prompt", "q"), **{**BASE_REQ, **v.get("req", {})})])
    assert not out[0].cached and len(second.generated) == 1, f"{field}: served another setup's reply"


@pytest.mark.parametrize("change", ["rule_reply", "rule_pattern", "default", "scores", "match_on"])
def test_scripted_rule_tables_never_share_an_entry(tmp_path, change):
    from kgreason.llm.scripted import ScriptedLLM

    base = dict(rules=[{"pattern": "capital", "reply": "Paris"}], default="?", scores={"a": -1.0}, match_on="last_user")
    other = dict(base)
    other.update({"rule_reply": dict(rules=[{"pattern": "capital", "reply": "Lyon"}]),
                  "rule_pattern": dict(rules=[{"pattern": "capital of", "reply": "Paris"}]),
                  "default": dict(default="!"), "scores": dict(scores={"a": -2.0}),
                  "match_on": dict(match_on="prompt")}[change])
    store = CallStore.open(tmp_path, "readwrite")
    req = [ChatRequest.of("the capital of France?")]
    assert CachedLLM(ScriptedLLM(**base), store).generate(req)[0].text == "Paris"
    assert CachedLLM(ScriptedLLM(**base), store).generate(req)[0].cached
    second = ScriptedLLM(**other)
    out = CachedLLM(second, store).generate(req)
    assert not out[0].cached and len(second.calls) == 1


# ---------------------------------------------------------------- damaged caches (issue 18)


def test_a_file_that_is_not_a_cache_is_named_once_at_start_up(tmp_path):
    from omegaconf import OmegaConf

    from kgreason.storage.callstore import StoreCorrupt
    from kgreason.llm.cache import check_cache

    (tmp_path / "llm_calls.sqlite").write_bytes(b"this is not sqlite" * 100)  # an older cache, damaged
    with pytest.raises(StoreCorrupt, match=r"llm_calls\.sqlite: not a usable cache file"):
        check_cache(OmegaConf.create({"dir": str(tmp_path), "mode": "readwrite"}))
    check_cache(OmegaConf.create({"dir": str(tmp_path), "mode": "off"}))  # off: never opened


def test_an_entry_of_the_wrong_shape_is_never_a_reply(tmp_path):
    from kgreason.llm.scripted import ScriptedLLM

    store = CallStore.open(tmp_path, "readwrite")
    inner = ScriptedLLM(rules=[{"pattern": "q", "reply": "fresh"}])
    llm = CachedLLM(inner, store)
    req = ChatRequest.of("q")
    key = llm._key("generate", request_json(req))
    for bad in ({"texts": "not a list"}, {"texts": [None]}, ["x"], {"usage": {}}):
        store.put(key, bad)
        first = llm.generate([req])[0]
        assert first.texts == ("fresh",) and not first.cached, bad
        assert llm.generate([req])[0].cached  # the fresh reply replaced the bad entry
    # a line whose text no longer matches its checksum (a damaged disk block) is never a reply
    other = CallStore.open(tmp_path, "readwrite")
    other.put(key, {"texts": ["tampered"]})
    shard = other.path / other._own
    shard.write_bytes(shard.read_bytes().replace(b"tampered", b"tamperex"))
    again = CallStore.open(tmp_path, "readwrite")
    out = CachedLLM(ScriptedLLM(rules=[{"pattern": "q", "reply": "fresh"}]), again).generate([req])[0]
    assert out.texts == ("fresh",) and out.cached  # the older intact entry, not the damaged one


def test_a_prompt_with_a_lone_surrogate_is_cached_and_keys_of_other_text_are_unchanged(tmp_path):
    """Issue #57 M2: a lone UTF-16 surrogate (e.g. from a truncated emoji) raised UnicodeEncodeError
    in the key and in CallStore.put; it is now stored, and every other key stays what it was."""
    import hashlib

    payload = {"backend": "b", "model": "m", "settings": {}, "method": "generate", "request": {"q": "é ✓"}}
    old = hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                                    default=str).encode("utf-8")).hexdigest()
    assert cache_key("b", "m", "generate", {"q": "é ✓"}) == old  # the rule keys were made with
    inner = CountingLLM()
    llm = CachedLLM(inner, CallStore.open(tmp_path, "readwrite"))
    req = ChatRequest.of("half an emoji \ud83d")
    first = llm.generate([req])[0]
    again = CachedLLM(CountingLLM(), CallStore.open(tmp_path, "readonly")).generate([req])[0]
    assert again.cached and again.text == first.text and len(inner.generated) == 1
