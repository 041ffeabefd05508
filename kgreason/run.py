"""The only wiring: ``build(cfg)`` makes the components, ``run(cfg, out_dir)`` evaluates.

Read this file to learn the architecture. Every component is built by ``hydra.utils.instantiate``
from its config group; the KG, retriever and LLM are built once and injected (keyword-only) into
the components that need them. Failure handling and tracker closing live here, not in the
components.
"""

from __future__ import annotations

import logging
import math
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from kgreason.metrics import METRICS, Metric
from kgreason.runs import PredictionStore, protect_run_dir, scrub_secrets, write_json
from kgreason.types import Example, Prediction, Usage, to_jsonable

log = logging.getLogger("kgreason")


class RunFailed(RuntimeError):
    """The run finished but more examples errored than ``max_error_rate`` allows."""


@dataclass
class Components:
    dataset: Any
    kg: Any
    retriever: Any
    llm: Any
    reasoner: Any
    metrics: list[Metric]
    judge: Any = None
    tracker: Any = None


@dataclass
class RunResult:
    metrics: dict[str, float]
    reports: dict[str, Any] = field(default_factory=dict)
    out_dir: Path | None = None


class LazyLLM:
    """Builds the configured LLM on first use, so runs whose reasoner never calls an LLM
    (retrieval_only, kg_dx) do not load a model."""

    def __init__(self, cfg: DictConfig, cache_cfg: DictConfig | None) -> None:
        import threading

        self._cfg, self._cache_cfg, self._llm = cfg, cache_cfg, None
        self._lock = threading.Lock()  # example_workers > 1: build once
        self.backend = str(cfg.get("backend", cfg.get("_target_", "?")))
        self.model = str(cfg.get("model", "?"))

    def get(self):
        if self._llm is None:
            with self._lock:
                if self._llm is None:
                    self._llm = wrap_with_cache(instantiate(self._cfg), self._cache_cfg)
        return self._llm

    @property
    def built(self) -> bool:
        return self._llm is not None

    def generate(self, requests):
        return self.get().generate(requests)

    def score(self, prompt, candidates):
        return self.get().score(prompt, candidates)


def wrap_with_cache(llm, cache_cfg):
    """Wrap an LLM in the persistent call cache when the LLM layer provides one."""
    if cache_cfg is None or str(cache_cfg.get("mode", "off")) == "off":
        return llm
    try:
        from kgreason.llm.cache import CachedLLM, CallStore
    except ImportError:  # cache module not available
        return llm
    return CachedLLM(llm, CallStore.open(cache_cfg.dir, mode=str(cache_cfg.mode)))


def _without(cfg: DictConfig, *keys: str) -> DictConfig:
    c = OmegaConf.to_container(cfg, resolve=True)
    for k in keys:
        c.pop(k, None)
    return OmegaConf.create(c)


def build(cfg: DictConfig, out_dir: Path | None = None) -> Components:
    kg = instantiate(cfg.kg)
    retriever = instantiate(cfg.retriever, kg=kg)
    if int(cfg.get("retrieval_batch") or 0) > 1:
        from kgreason.retrieval.prefetch import PrefetchingRetriever

        retriever = PrefetchingRetriever(retriever, chunk_size=int(cfg.retrieval_batch))
    llm = LazyLLM(cfg.llm, cfg.get("llm_cache"))
    reasoner = instantiate(cfg.reasoner, kg=kg, retriever=retriever, llm=llm)
    dataset = instantiate(_without(cfg.dataset, "metrics", "reports"))
    names = list(cfg.dataset.get("metrics", ["hits_at_1"]))
    unknown = [n for n in names if n not in METRICS]
    if unknown:
        raise KeyError(f"dataset.metrics names unknown metrics {unknown}; known: {sorted(METRICS)}")
    judge = None
    if cfg.get("judge") and cfg.judge.get("_target_"):
        judge = instantiate(cfg.judge, llm=llm)
    # partial: the run config holds _target_ keys that must not be instantiated
    tracker = instantiate(cfg.tracking, _partial_=True)(out_dir=str(out_dir or "."), run_config=scrub_secrets(cfg))
    return Components(dataset=dataset, kg=kg, retriever=retriever, llm=llm, reasoner=reasoner,
                      metrics=[METRICS[n] for n in names], judge=judge, tracker=tracker)


def answer_and_score(c: Components, ex: Example) -> dict[str, Any]:
    """Run the reasoner on one example and score it; exceptions become recorded errors."""
    try:
        pred = c.reasoner.answer(ex)
    except Exception as e:  # noqa: BLE001 - recorded per example, counted against max_error_rate
        log.warning("example %s failed: %s", ex.id, e)
        pred = Prediction(example_id=ex.id, answers=(), error=f"{type(e).__name__}: {e}",
                          extra={"traceback": traceback.format_exc(limit=8)})
    scores: dict[str, float | None] = {}
    for m in c.metrics:
        try:
            v = m.per_example(pred, ex)
        except Exception as e:  # noqa: BLE001
            raise RuntimeError(f"metric {m.name} failed on example {ex.id}: {e}") from e
        scores[m.name] = None if v is None else float(v)
    row: dict[str, Any] = {
        "id": ex.id,
        "question": ex.question,
        "prediction": pred.answer,
        "predictions": list(pred.answers),
        "answers": list(ex.answers),
        "metrics": scores,
        "usage": to_jsonable(pred.usage),
        "error": pred.error,
        "extra": to_jsonable(pred.extra),
        "trace": to_jsonable(pred.trace),
    }
    if ex.hops is not None:
        row["hops"] = ex.hops
    if c.judge is not None and pred.error is None:
        try:
            js = c.judge.judge(ex, pred)
            row["judge"] = to_jsonable(js)
        except Exception as e:  # noqa: BLE001
            row["judge"] = {"error": f"{type(e).__name__}: {e}"}
    return row


def summarise(rows: list[Mapping[str, Any]], metrics: list[Metric], n_expected: int) -> dict[str, float]:
    """Run-level metrics from the prediction rows (pure; the same rows give the same dict)."""
    out: dict[str, float] = {}
    for m in metrics:
        vals = [r["metrics"].get(m.name) for r in rows]
        vals = [v for v in vals if v is not None]
        out[f"metric/{m.name}"] = float(m.aggregate(vals)) if vals else float("nan")
    usage = Usage.total(Usage(**{k: v for k, v in r.get("usage", {}).items() if k in Usage.__slots__}) for r in rows)
    n = max(len(rows), 1)
    out["llm/calls"] = usage.calls
    out["llm/cache_hits"] = usage.cache_hits
    out["llm/prompt_tokens"] = usage.prompt_tokens
    out["llm/completion_tokens"] = usage.completion_tokens
    out["llm/cost_usd"] = round(usage.cost_usd, 8)
    out["llm/parse_failures"] = usage.parse_failures
    out["llm/calls_per_question"] = usage.calls / n
    out["llm/tokens_per_question"] = (usage.prompt_tokens + usage.completion_tokens) / n
    spaces = [r["extra"]["search_space"] for r in rows if "search_space" in r.get("extra", {})]
    if spaces:
        out["retrieval/search_space"] = sum(spaces) / len(spaces)
    errors = sum(1 for r in rows if r.get("error"))
    out["run/n_examples"] = len(rows)
    out["run/n_expected"] = n_expected
    out["run/errors"] = errors
    out["run/error_rate"] = errors / n
    judge_rows = [r["judge"] for r in rows if isinstance(r.get("judge"), Mapping) and "scores" in r["judge"]]
    if judge_rows:
        keys = sorted({k for j in judge_rows for k in j["scores"]})
        for k in keys:
            vals = [j["scores"][k] for j in judge_rows if k in j["scores"]]
            out[f"judge/{k}"] = sum(vals) / len(vals)
        totals = [j["total"] for j in judge_rows if "total" in j]
        if totals:
            out["judge/pdsqi_total"] = sum(totals) / len(totals)
        # per-round judge scores (e.g. logoskg_dx baseline / round1 / round2 → judge/round1/<attr>)
        rounds = sorted({rd for j in judge_rows for rd in (j.get("per_round") or {})})
        for rd in rounds:
            rrows = [j["per_round"][rd] for j in judge_rows if rd in (j.get("per_round") or {})]
            for k in sorted({k for s in rrows for k in s}):
                vals = [s[k] for s in rrows if k in s]
                out[f"judge/{rd}/{k}"] = sum(vals) / len(vals)
            rtot = [j["per_round_total"][rd] for j in judge_rows if rd in (j.get("per_round_total") or {})]
            if rtot:
                out[f"judge/{rd}/pdsqi_total"] = sum(rtot) / len(rtot)
    # per-round diagnosis P/R/F1 written by logoskg_dx into extra["<round>_prf"] (App. A.2)
    for rd in ("baseline", "round1", "round2"):
        prf = [r["extra"][f"{rd}_prf"] for r in rows if isinstance(r.get("extra", {}).get(f"{rd}_prf"), Mapping)]
        for k in ("p", "r", "f1"):
            vals = [x[k] for x in prf if k in x]
            if vals:
                out[f"dx/{rd}_{k}"] = sum(vals) / len(vals)
    return {k: (round(v, 10) if isinstance(v, float) and not math.isnan(v) else v) for k, v in out.items()}


def _chunks(pending: list[Example], retriever, reasoner, size: int | None = None):
    """Yield the pending examples in chunks; with a prefetching retriever, first answer the
    k-hop queries the reasoner plans for the whole chunk in one batched ``retrieve_many``."""
    plan = getattr(reasoner, "retrieval_plan", None)
    if not hasattr(retriever, "prefetch") or plan is None:
        yield pending
        return
    size = size or int(getattr(retriever, "chunk_size", 0) or 64)
    for start in range(0, len(pending), size):
        chunk = pending[start:start + size]
        requests = []
        for ex in chunk:
            try:
                requests.extend(plan(ex))
            except Exception:  # noqa: BLE001 - answer() meets the same error and records it
                log.debug("retrieval_plan failed for %s", ex.id, exc_info=True)
        retriever.prefetch(requests)
        yield chunk


def run(cfg: DictConfig, out_dir: str | Path) -> RunResult:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    protect_run_dir(cfg, out_dir)  # before anything is built or written: secrets never reach a file
    t0 = time.perf_counter()
    hop_engine = str((cfg.get("reports") or {}).get("engine", "auto"))
    if hop_engine not in ("auto", "run", "scipy"):  # checked before any example is paid for
        raise ValueError(f"reports.engine: expected auto, run or scipy, got {hop_engine!r}")
    c = build(cfg, out_dir)
    try:
        (out_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(scrub_secrets(cfg))))
        store = PredictionStore(out_dir / "predictions.jsonl")
        examples = list(c.dataset)
        done_before = sum(1 for ex in examples if ex.id in store)
        if done_before and not cfg.get("resume", True):
            raise RuntimeError(f"{out_dir}/predictions.jsonl already has {done_before} examples and resume=false")
        log.info("dataset %s: %d examples (%d already done)", getattr(c.dataset, "name", "?"), len(examples), done_before)
        pending = [ex for ex in examples if ex.id not in store]
        workers = int(cfg.get("example_workers") or 1)
        if workers > 1 and not getattr(c.reasoner, "thread_safe", True):
            raise ValueError(f"example_workers={workers}: reasoner {type(c.reasoner).__name__} answers examples "
                             "in order (shared state); set example_workers=1")
        pool = ThreadPoolExecutor(workers, thread_name_prefix="example") if workers > 1 else None
        try:
            for chunk in _chunks(pending, c.retriever, c.reasoner):
                # with workers, examples run concurrently (their LLM calls overlap at the server);
                # rows are still appended in dataset order as each one's turn comes
                rows_iter = pool.map(lambda ex: answer_and_score(c, ex), chunk) if pool else \
                    (answer_and_score(c, ex) for ex in chunk)
                for row in rows_iter:
                    store.append(row)
                    if len(store) % 50 == 0:
                        log.info("%d/%d examples", len(store), len(examples))
                if hasattr(c.retriever, "clear"):
                    c.retriever.clear()
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        ids = {ex.id for ex in examples}
        rows = [r for r in store if r["id"] in ids]
        metrics = summarise(rows, c.metrics, len(examples))
        reports = build_reports(cfg, c, examples, rows, out_dir)
        write_json(out_dir / "metrics.json", metrics)
        timing: dict[str, Any] = {"wall_s": round(time.perf_counter() - t0, 3)}
        if hasattr(c.retriever, "stats") and isinstance(c.retriever.stats, dict):
            timing["retrieval_prefetch"] = dict(c.retriever.stats)
        write_json(out_dir / "timing.json", timing)
        _log_to_tracker(c.tracker, metrics, reports, rows, out_dir)
        rate, limit = metrics["run/error_rate"], cfg.get("max_error_rate")
        if limit is not None and cfg.get("fail_on_error_rate", True) and rate > float(limit):
            raise RunFailed(f"{metrics['run/errors']} of {len(rows)} examples failed "
                            f"(error rate {rate:.3f} > max_error_rate {limit}); see {out_dir}/predictions.jsonl")
        return RunResult(metrics=metrics, reports=reports, out_dir=out_dir)
    finally:
        c.tracker.close()


def build_reports(cfg: DictConfig, c: Components, examples: list[Example], rows, out_dir: Path) -> dict[str, Any]:
    """Distributions that are not metrics: the hop distribution (written to hops.json)."""
    reports: dict[str, Any] = {}
    rep_cfg = cfg.get("reports") or {}
    if rep_cfg.get("hop_distribution", True):
        try:
            from kgreason.metrics.hops import hop_distribution
        except ImportError:
            return reports
        max_hops = int(rep_cfg.get("max_hops", 5))
        direction = str(rep_cfg.get("direction", "both"))
        hop_retriever = None
        engine = str(rep_cfg.get("engine", "auto"))
        if engine == "auto" and cfg.get("retriever") is not None:
            # batched engines (torch, partitioned) take the retrieve_many route; per-query CPU
            # engines gain nothing from it and the SciPy route stops at the first gold layer
            from hydra.utils import get_class

            from kgreason.retrieval.base import GraphRetriever

            cls = get_class(cfg.retriever._target_)
            engine = "run" if getattr(cls, "retrieve_many", None) is not GraphRetriever.retrieve_many else "scipy"
        if engine == "run" and cfg.get("retriever") is not None:
            # the run's engine (and device), rebuilt for shortest-distance layers: batched via
            # retrieve_many, so a torch/CUDA retriever answers a chunk in one product per hop
            hop_retriever = instantiate(cfg.retriever, kg=c.kg, semantics="within", direction=direction,
                                        max_paths=0, return_triples=False, timeout_ms=None)
        dist = hop_distribution(c.kg, examples, max_hops=max_hops, direction=direction,
                                retriever=hop_retriever, batch=int(rep_cfg.get("batch", 256)))
        reports["hop_distribution"] = dist
        write_json(out_dir / "hops.json", dist)
    return reports


def _log_to_tracker(tracker, metrics, reports, rows, out_dir: Path) -> None:
    tracker.log_metrics(metrics)
    hop = reports.get("hop_distribution")
    if hop:
        tracker.log_histogram("hops/distribution", hop["counts"])
        tracker.log_table("hops/table", [{"hops": k, "count": v} for k, v in hop["counts"].items()])
        png = out_dir / "hops.png"
        try:
            from kgreason.tables import plot_hops

            plot_hops(hop["counts"], png, title="hop distribution")
            tracker.log_image("hops/plot", str(png))
        except ImportError:
            pass
    table = []
    for r in rows:
        first = next(iter(r["metrics"].values()), None) if r["metrics"] else None
        table.append({
            "id": r["id"], "question": r["question"][:500], "prediction": r["prediction"],
            "gold": " | ".join(r["answers"][:5]), "correct": first, "hops": r.get("hops"),
            "calls": r.get("usage", {}).get("calls", 0), "error": r.get("error") or "",
        })
    tracker.log_table("predictions", table)
    judge_keys = sorted(k for k in metrics if k.startswith("judge/"))
    if judge_keys:
        tracker.log_table("judge/per_attribute", [{"attribute": k[6:], "mean": metrics[k]} for k in judge_keys])
