"""The only wiring: ``build(cfg)`` makes the components, ``run(cfg, out_dir)`` evaluates.

Read this file to learn the architecture (docs/architecture.md draws it). Every component is
built by ``hydra.utils.instantiate`` from its config group. The shared resources, the KG, the
retriever, the LLM (and the judge's), the embedder and the graph database, are built once here
and injected by constructor; this module owns them: :class:`Components` holds one ``ExitStack``
that closes every one of them, and :func:`run` closes it on success, on error and on Ctrl-C.

Reasoner constructor contract: every reasoner takes the keyword-only dependencies ``kg``,
``retriever``, ``llm``, ``embedder`` and ``graphdb`` (``build`` always passes all five; a reasoner
ignores those it does not use). The LLM and the graph database are lazy (built/opened on first
use) and the embedder loads its model on first use, so passing them costs nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import signal
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection, Mapping, Sequence

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from kgreason import preflight, progress, ranking
from kgreason.paths import shown
from kgreason.data.base import select_split
from kgreason.judges.base import judge_llm_config, judge_metrics
from kgreason.llm.accounting import PREPARE_ID, Ledger, MeteredLLM, example_ledger, ledger_metrics
from kgreason.llm.base import CacheMiss
from kgreason.llm.cache import check_cache
from kgreason.storage.llm_calls import CALL_LOG
from kgreason.llm.lazy import LazyLLM
from kgreason.metrics import METRICS, Metric, clinical, example_value, run_values
from kgreason.metrics.funnel import funnel_rates
from kgreason.metrics.qa import normalize_answer
from kgreason.record import check_resume, choices, run_record
from kgreason.runs import (PredictionStore, finished_run, gold_fields, lock_run_dir, protect_run_dir, scrub_secrets,
                           write_json)
from kgreason.secrets import scrub_obj
from kgreason.textio import forget_files_read
from kgreason.types import Example, Prediction, Usage, to_jsonable

log = logging.getLogger("kgreason")


class RunFailed(RuntimeError):
    """The run finished but more examples errored than ``max_error_rate`` allows."""


class LLMUnavailable(RuntimeError):
    """``max_consecutive_failures`` examples in a row failed on the LLM endpoint: the run stops
    instead of letting every remaining example retry against a dead server."""


# error types (the row's ``error`` prefix) that mean the LLM could not be reached or refused the
# call; a CacheMiss (readonly replay) or a parse failure is the example's own problem
_LLM_FAILURES = ("LLMError", "APIConnectionError", "APITimeoutError", "ConnectionError", "TimeoutError")


@dataclass
class Components:
    """What :func:`build` made. ``resources`` closes everything that holds a handle (DB
    connections, the falkordb server, the call-cache SQLite file, the embedder, the tracker), in
    reverse order of creation; ``close()`` (or ``with build(cfg) as c:``) runs it once."""

    dataset: Any
    kg: Any
    retriever: Any
    llm: Any
    reasoner: Any
    metrics: list[Metric]
    judge: Any = None
    tracker: Any = None
    embedder: Any = None
    graphdb: Any = None
    judge_llm: Any = None
    run_id: str | None = None  # the run dir's id (fingerprint.json): cache entries record who paid
    resources: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    def close(self) -> None:
        self.resources.close()

    def __enter__(self) -> "Components":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class RunResult:
    metrics: dict[str, float]
    reports: dict[str, Any] = field(default_factory=dict)
    out_dir: Path | None = None


def _without(cfg: DictConfig, *keys: str) -> DictConfig:
    c = OmegaConf.to_container(cfg, resolve=True)
    for k in keys:
        c.pop(k, None)
    return OmegaConf.create(c)


def _configured(node) -> bool:
    """A group option that builds something (``judge=none``/``graphdb=none`` leave it empty)."""
    return node is not None and bool(node.get("_target_"))


def _owned(stack: contextlib.ExitStack, obj):
    """Register ``obj.close`` (when it has one) on the run's stack; returns ``obj``."""
    close = getattr(obj, "close", None)
    if callable(close):
        stack.callback(close)
    return obj


def build(cfg: DictConfig, out_dir: Path | None = None) -> Components:
    """Build every component from its config group. On a failure half-way, what was already
    built is closed before the error propagates."""
    stack = contextlib.ExitStack()
    try:
        # the dataset first: a missing or malformed dataset file stops the run before the KG is
        # compiled into its cache (or anything else is opened or written)
        dataset = instantiate(_without(cfg.dataset, "metrics", "reports"))
        q = cfg.get("questions") or {}
        if str(q.get("split", "all")) != "all":  # a named split of the file (dev / heldout)
            select_split(dataset, str(q.split), int(q.get("dev_size", 20)), q.get("heldout_n"), int(q.get("seed", 0)),
                         int(q.get("heldout_skip") or 0))
        kg = instantiate(cfg.kg)
        retriever = _owned(stack, instantiate(cfg.retriever, kg=kg))
        if int(cfg.get("retrieval_batch") or 0) > 1:
            from kgreason.retrieval.prefetch import PrefetchingRetriever

            retriever = PrefetchingRetriever(retriever, chunk_size=int(cfg.retrieval_batch))
        embedder = _owned(stack, instantiate(cfg.embedder)) if _configured(cfg.get("embedder")) else None
        graphdb = _owned(stack, instantiate(cfg.graphdb, kg=kg)) if _configured(cfg.get("graphdb")) else None
        # every LLM handed out is metered: its calls land in the current example's ledger (issue 16)
        workers = example_workers(cfg)  # local/hf models batch across concurrent examples
        seed = int(cfg.get("seed") or 0)  # sampled requests carry it and a per-example sample index (docs/llm.md)
        # every cache key the run serves or stores is listed in <run dir>/calls.jsonl (kgreason bundle)
        call_log = str(Path(out_dir) / CALL_LOG) if out_dir is not None else None
        llm = _owned(stack, MeteredLLM(LazyLLM(cfg.llm, cfg.get("llm_cache"), example_workers=workers,
                                               call_log=call_log),
                                       purpose="answer", seed=seed))
        reasoner = _owned(stack, instantiate(cfg.reasoner, kg=kg, retriever=retriever, llm=llm,
                                             embedder=embedder, graphdb=graphdb))
        names = list(cfg.dataset.get("metrics", ["hits_at_1"]))
        # a reasoner's own per-example figures (SubQRAG: triples_written, Eq. 4), after the dataset's
        names += [n for n in getattr(reasoner, "metrics", ()) if n not in names]
        unknown = [n for n in names if n not in METRICS]
        if unknown:
            raise KeyError(f"dataset.metrics names unknown metrics {unknown}; known: {sorted(METRICS)}")
        judge = judge_llm = None
        if _configured(cfg.get("judge")):
            # the judge's own model (judge.llm), never silently the judged one (issue 16)
            judge_llm = _owned(stack, MeteredLLM(LazyLLM(judge_llm_config(cfg.judge, cfg.llm), cfg.get("llm_cache"),
                                                         call_log=call_log),
                                                 purpose="judge", seed=seed))
            judge = _owned(stack, instantiate(_without(cfg.judge, "llm", "allow_self_judging"), llm=judge_llm))
            judge_llm.get()  # built now: a judge that cannot start stops the run before the first example
        # partial: the run config holds _target_ keys that must not be instantiated
        tracker = _owned(stack, instantiate(cfg.tracking, _partial_=True)(
            out_dir=str(out_dir or "."), run_config=scrub_secrets(cfg)))
    except BaseException:
        stack.close()
        raise
    return Components(dataset=dataset, kg=kg, retriever=retriever, llm=llm, reasoner=reasoner,
                      metrics=[METRICS[n] for n in names], judge=judge, tracker=tracker,
                      embedder=embedder, graphdb=graphdb, judge_llm=judge_llm, resources=stack)


def answer_and_score(c: Components, ex: Example) -> dict[str, Any]:
    """Run the reasoner on one example and score it; exceptions become recorded errors.
    Every LLM call made meanwhile (answering, scoring, indexing, judging) is counted in the
    example's ledger, stored as ``row["llm_usage"]``; every ranking by score that fed a prompt
    (:func:`kgreason.ranking.ranked`) in ``row["rankings"]``, which a replay serves back."""
    with example_ledger(payer=(c.run_id, ex.id) if c.run_id else None) as ledger, ranking.example(ex.id) as ranks:
        row = _answer_and_score(c, ex)
    row["llm_usage"] = ledger.to_json()
    if ranks:
        row["rankings"] = ranks
    return row


def _answer_and_score(c: Components, ex: Example) -> dict[str, Any]:
    try:
        pred = c.reasoner.answer(ex)
    except Exception as e:  # noqa: BLE001 - recorded per example, counted against max_error_rate
        log.warning("example %s failed: %s", ex.id, e)
        extra: dict[str, Any] = {"traceback": traceback.format_exc(limit=8)}
        if isinstance(getattr(e, "missed_request", None), dict):  # a replay's miss: what the method asks now
            extra["missed_request"] = e.missed_request
        pred = Prediction(example_id=ex.id, answers=(), error=f"{type(e).__name__}: {e}", extra=extra)
    pred = _with_dx_links(c, pred, ex)
    scores: dict[str, float | None] = {}
    for m in c.metrics:
        try:
            # an errored example scores each metric's worst value where the metric applies
            # (docs/metrics.md "Errored examples"), never its value on whatever the failure left
            v = example_value(m, pred, ex)
        except Exception as e:  # noqa: BLE001
            raise RuntimeError(f"metric {m.name} failed on example {ex.id}: {e}") from e
        scores[m.name] = None if v is None else float(v)
    row: dict[str, Any] = {
        "id": ex.id,
        "question": ex.question,
        "prediction": pred.answer,
        "predictions": list(pred.answers),
        **gold_fields(ex),  # answers, answer_groups, diagnoses: what `kgreason.score` needs
        "metrics": scores,
        "usage": to_jsonable(pred.usage),
        "error": pred.error,
        "extra": to_jsonable(pred.extra),
        "trace": to_jsonable(pred.trace),
    }
    if pred.rounds:
        row["rounds"] = to_jsonable(pred.rounds)
    if ex.hops is not None:
        row["hops"] = ex.hops
    if c.judge is not None and pred.error is None:
        try:
            js = c.judge.judge(ex, pred)
            row["judge"] = to_jsonable(js)
        except Exception as e:  # noqa: BLE001
            row["judge"] = {"error": f"{type(e).__name__}: {e}"}
    return row


def _with_dx_links(c: Components, pred: Prediction, ex: Example) -> Prediction:
    """Diagnosis P/R/F1 is entity-level (LogosKG A.2): when the run scores a ``dx_*`` metric and
    has a KG, every predicted, per-round and gold diagnosis string is linked to the KG (names,
    labels, aliases) and the links are recorded in ``extra["dx_entity_links"]``, which the metric
    reads and ``kgreason.score`` reads back from predictions.jsonl (metrics/clinical.py)."""
    if c.kg is None or not any(m.name.startswith("dx_") for m in c.metrics):
        return pred
    names = [*pred.answers, *(n for r in pred.rounds.values() for n in r), *(ex.diagnoses or ex.answers)]
    links = clinical.entity_links(c.kg, names)
    return dataclasses.replace(pred, extra={**pred.extra, clinical.LINKS_KEY: links})


def _prepare(c: Components, kept: list[Mapping[str, Any]] | None, out_dir: Path) -> Ledger:
    """The reasoner's run-level set-up (SubQRAG's corpus index), given the rows a resumed run
    keeps; ``kept=None``: nothing is left to answer, so no set-up. Its LLM calls are counted in
    their own ledger, paid by ``[run id, PREPARE_ID]``, so a resumed run counts the calls it paid
    for before the kill, as an uninterrupted run did; the ledger is kept in
    ``prepare_usage.json`` for a re-invocation that has nothing left to answer."""
    path = out_dir / "prepare_usage.json"
    earlier = Ledger.from_json(json.loads(path.read_text())) if path.exists() else Ledger()
    if kept is None:
        return earlier
    seen = {e["key"] for e in earlier.stores_built}
    progress.forget_stopped()  # a stop reported by this run is this set-up's, not an earlier run's
    with example_ledger(payer=(c.run_id, PREPARE_ID) if c.run_id else None) as led:
        try:
            built = _open_embedding_stores(c)
        except KeyboardInterrupt as e:  # the stop line says what a resume keeps of this step (nothing)
            e.kgreason_prepare_step = EMBEDDING_STEP  # type: ignore[attr-defined]
            raise
        # a store this run dir's earlier attempt built is counted again on resume, as its LLM calls
        # are; kept on disk before the reasoner's own set-up (SubQRAG's index can take hours), so a
        # kill there does not lose the build: the resumed attempt finds the store built
        stores = [*earlier.stores_built, *(b for b in built if b["key"] not in seen)]
        if len(stores) > len(earlier.stores_built):
            interim = Ledger.from_json(earlier.to_json())
            interim.stores_built = stores
            write_json(path, interim.to_json())
        c.reasoner.prepare(c.dataset, done=kept)
    led.stores_built = stores
    if led.by_purpose or led.stores_built:
        write_json(path, led.to_json())
    return led


def _open_embedding_stores(c: Components) -> list[dict[str, Any]]:
    """Before the first example: the KG embedding stores the reasoner ranks with, opened or built
    once per machine (kgreason/storage/embedstore.py). Returns the stores built here (their stats), which
    ``prepare_usage.json`` and the ``prepare/*`` metrics count; timing.json's ``embedding`` lists all."""
    from kgreason.storage.embedstore import forms_of

    if c.embedder is None or c.kg is None or not hasattr(c.embedder, "kg_store"):
        return []
    built = []
    for form in forms_of(c.reasoner):
        st = c.embedder.kg_store(c.kg, form)
        if st is not None and st.built_here:
            s = st.stats()
            built.append({k: s[k] for k in ("form", "rows", "dtype", "build_precision", "build_s", "key")})
    return built


def summarise(rows: list[Mapping[str, Any]], metrics: list[Metric], n_expected: int,
              outside: Ledger | None = None, funnel: Sequence[str] = ()) -> dict[str, Any]:
    """Run-level metrics from the prediction rows (pure; the same rows give the same dict).
    ``outside``: LLM calls made outside any example (counted in ``llm/*`` too). ``funnel``: the
    reasoner's ordered stage names (``BaseReasoner.funnel``), which give the ``funnel/*`` keys:
    the share of the rows that reached each stage (:func:`kgreason.metrics.funnel.funnel_rates`;
    an errored row reaches none).

    One denominator (docs/metrics.md "Errored examples"): every score is a mean over all rows,
    answered or errored, that it applies to; an errored row scores the worst value
    (:func:`kgreason.metrics.run_values`; judge ratings: :func:`_judge_rows`). Counts that
    describe what the method did (``retrieval/*``, ``search_space``) are over the rows that
    report them. A metric that applies to no example is ``null`` (never NaN, never 0) and
    ``metric_notes/<name>`` says why."""
    out: dict[str, Any] = {}
    errored = [bool(r.get("error")) for r in rows]
    for m in metrics:
        vals = run_values(m, [r["metrics"].get(m.name) for r in rows], errored)
        vals = [v for v in vals if v is not None]
        out[f"metric/{m.name}"] = float(m.aggregate(vals)) if vals else None
        if not vals:
            out[f"metric_notes/{m.name}"] = _not_applicable(m.name, rows)
    usage = Usage.total(Usage(**{k: v for k, v in r.get("usage", {}).items() if k in Usage.__slots__}) for r in rows)
    # every LLM call by purpose from the rows' ledgers (rows of older runs: the reasoner's usage)
    ledgers = [Ledger.from_json(r["llm_usage"]) if "llm_usage" in r else Ledger.from_json({"answer": r.get("usage", {})})
               for r in rows]
    out.update(ledger_metrics(ledgers, len(rows), outside))
    # KG embedding stores built before the first example (counts; their seconds are in timing.json)
    stores = list(getattr(outside, "stores_built", None) or ())
    out["prepare/embedding_stores_built"] = len(stores)
    out["prepare/embedding_rows_built"] = sum(int(b.get("rows", 0)) for b in stores)
    out["llm/parse_failures"] = usage.parse_failures
    out["llm/reasks"] = usage.reasks
    n = max(len(rows), 1)
    out.update(retrieval_figures(rows))
    out.update(funnel_rates(rows, funnel))
    errors = sum(errored)
    out["run/n_examples"] = len(rows)
    out["run/n_expected"] = n_expected
    out["run/errors"] = errors
    out["run/error_rate"] = errors / n
    out["run/status"] = "complete" if len(rows) >= n_expected else "partial"
    out.update(judge_metrics(_judge_rows(rows)))  # judge/<attr>, judge/pdsqi_average, judge/<round>/...
    judge_errors = sum(1 for r in rows if isinstance(r.get("judge"), Mapping) and "error" in r["judge"])
    if judge_errors:  # never averaged in; counted so a half-judged run is visible
        out["judge/errors"] = judge_errors
    return {k: (round(v, 10) if isinstance(v, float) and not math.isnan(v) else v) for k, v in out.items()}


def retrieval_figures(rows: list[Mapping[str, Any]]) -> dict[str, float]:
    """What the method retrieved, over the rows that report it (errored rows report nothing):

    * ``retrieval/retrieved_size``: mean size of the set ``answer_coverage`` is measured over,
      ``extra["retrieved"]`` as distinct normalised names (the same normalisation the coverage
      test uses); ``retrieval/retrieved_size_n_paths`` likewise for ``retrieved_n_paths``;
    * ``retrieval/empty_rate``: mean of ``extra["retrieval_empty"]`` (the reasoner took its
      "nothing linked / nothing retrieved" path);
    * ``retrieval/search_space``: mean of ``extra["search_space"]``;
    * ``retrieval/pool_size``: mean of ``extra["pool_size"]``, the passages a text-QA question was
      retrieved from (rag_text, SubQRAG: the run's one pool, so every row holds the same number;
      ``passages=own``: the question's own paragraphs)."""
    out: dict[str, float] = {}
    extras = [r.get("extra") or {} for r in rows]
    for key, name in (("retrieved", "retrieval/retrieved_size"), ("retrieved_n_paths", "retrieval/retrieved_size_n_paths")):
        sizes = [len({normalize_answer(str(x)) for x in e[key]}) for e in extras if isinstance(e.get(key), list)]
        if sizes:
            out[name] = sum(sizes) / len(sizes)
    flags = [bool(e["retrieval_empty"]) for e in extras if e.get("retrieval_empty") is not None]
    if flags:
        out["retrieval/empty_rate"] = sum(flags) / len(flags)
    spaces = [e["search_space"] for e in extras if e.get("search_space") is not None]
    if spaces:
        out["retrieval/search_space"] = sum(spaces) / len(spaces)
    pools = [e["pool_size"] for e in extras if e.get("pool_size") is not None]
    if pools:
        out["retrieval/pool_size"] = sum(pools) / len(pools)
    return out


def _judge_worst(item: str) -> float | None:
    """The worst value of a judge item's rating scale, for an errored example: the bottom of a
    1-5 quality rating that applies to every output (PDSQI-9: cited, accurate, thorough, useful,
    organized, comprehensible, succinct). ``None`` (left out) for the 0/1 items, which record a
    property of the text or the record (abstraction needed, stigmatizing language), not a grade;
    for an item that applies only under a condition of the record (``synthesized``: only when
    abstraction is needed, which nobody judged for an errored example); and for items of
    unknown scale."""
    from kgreason.judges.pdsqi import BINARY, PDSQI_SCALES

    scale = PDSQI_SCALES.get(item)
    if scale is None or tuple(scale[0]) == BINARY or scale[1]:
        return None
    return float(min(scale[0]))


def _judge_rows(rows: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The judge objects the judge means are taken over: every judged row, and for every
    errored row (never judged: there is no output) one that rates each item the judged rows
    have at its scale's worst (:func:`_judge_worst`), the same for each round they have. A row
    the judge failed on (``judge.error``: a failure of the measurement, not of the method) is
    left out and counted as ``judge/errors``. No judged row: the run has no judge figures."""
    judged = [r["judge"] for r in rows if isinstance(r.get("judge"), Mapping) and "scores" in r["judge"]]
    if not judged:
        return []
    items = sorted({k for j in judged for k in j["scores"]})
    rounds = sorted({rd for j in judged for rd in (j.get("per_round") or {})})
    worst = {k: _judge_worst(k) for k in items}
    imputed = {"scores": worst, "per_round": {rd: dict(worst) for rd in rounds},
               "average_of": next((j["average_of"] for j in judged if j.get("average_of")), [])}
    return [r["judge"] if isinstance(r.get("judge"), Mapping) and "scores" in r["judge"] else imputed
            for r in rows if r.get("error") or (isinstance(r.get("judge"), Mapping) and "scores" in r["judge"])]


def _not_applicable(name: str, rows: list[Mapping[str, Any]]) -> str:
    """Why ``metric/<name>`` is null (the metric's per-example value was null for every row)."""
    if not rows:
        return "null: no example was answered"
    errors = sum(1 for r in rows if r.get("error"))
    if errors == len(rows):
        return f"null: all {len(rows)} examples errored"
    return (f"null: not applicable to any of the {len(rows)} examples (none has what {name} needs, e.g. gold "
            "diagnoses for dx_*, gold answers, a retrieved set or the prediction round it scores)")


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


class _ExampleProgress:
    """The example loop's progress (kgreason/progress.py): done/total with ETA, errors so far,
    the running headline metric (the dataset's first) and LLM calls in flight."""

    def __init__(self, total: int, done_before: int, headline: Metric | None) -> None:
        self.headline, self.vals, self.errors, self._t = headline, [], 0, 0.0
        self.p = progress.bar(total, "examples", "ex", initial=done_before, show_llm=True)

    def update(self, row: Mapping[str, Any]) -> None:
        self.errors += bool(row.get("error"))
        figures: dict[str, Any] = {"errors": self.errors}
        if self.headline is not None:
            v = row["metrics"].get(self.headline.name)
            if v is not None:
                self.vals.append(v)
            now = time.monotonic()
            if self.vals and now - self._t > 0.5:  # aggregate at most twice a second
                self._t = now
                figures[self.headline.name] = float(self.headline.aggregate(self.vals))
        self.p.update(1, **figures)

    def close(self, stopped: bool = False, quiet: bool = False) -> None:
        if self.headline is not None and self.vals:
            self.p.postfix[self.headline.name] = float(self.headline.aggregate(self.vals))
        self.p.close(stopped=stopped, quiet=quiet)


#: ``example_workers: auto`` with a model behind HTTP (an OpenAI-compatible server answers many
#: requests at once, so one question at a time would leave it idle; issue 60)
AUTO_HTTP_WORKERS = 16
HTTP_LLM_TARGETS = ("kgreason.llm.openai_http.",)


def example_workers(cfg: DictConfig) -> int:
    """``example_workers`` as a number. ``auto`` (the default) is :data:`AUTO_HTTP_WORKERS` with an
    HTTP model (``llm=openai``: vLLM, llama.cpp's server, an API) and 1 with an in-process model
    (local, hf, vllm's offline engine, scripted) or no model, and 1 for a reasoner that answers
    examples in order (``thread_safe = False``: SubQRAG's graph updates reach later questions).
    A number is taken as it is (the run refuses more than 1 for an in-order reasoner)."""
    v = cfg.get("example_workers")
    if v is None:
        return 1
    if isinstance(v, str) and v.strip() == "auto":
        if not getattr(_reasoner_class(cfg), "thread_safe", True):
            return 1
        target = str((cfg.get("llm") or {}).get("_target_", ""))
        return AUTO_HTTP_WORKERS if target.startswith(HTTP_LLM_TARGETS) else 1
    return int(v)


def _reasoner_class(cfg: DictConfig):
    from hydra.utils import get_class

    try:
        return get_class(str(cfg.reasoner._target_))
    except Exception:  # noqa: BLE001 - build() reports a bad _target_ with its own message
        return object


def _start_checks(cfg: DictConfig) -> bool:
    """Checks on the settings alone, before anything is built (kgreason/preflight.py): values out
    of range, an unset API key, a damaged call cache. Returns whether the run calls an LLM."""
    problems = preflight.check_settings(cfg)
    hop_engine = str((cfg.get("reports") or {}).get("engine", "auto"))
    if hop_engine not in ("auto", "run", "scipy"):
        problems.append(f"reports.engine={hop_engine!r}: expected auto, run or scipy")
    uses_llm = bool(getattr(_reasoner_class(cfg), "uses_llm", True)) or _configured(cfg.get("judge"))
    problems += preflight.check_llm_key(cfg, uses_llm)
    problems += preflight.check_local_llm(cfg, uses_llm)
    problems += _in_order_problem(cfg)
    preflight.require(problems)
    if uses_llm:
        try:
            check_cache(cfg.get("llm_cache"))
        except CacheMiss as e:  # readonly with nothing to read: a setting to fix, not a crash
            preflight.require([f"llm_cache.mode=readonly replays a call cache, but there is none to read ({e}); "
                               "give llm_cache.dir of the runs to replay, or set llm_cache.mode=readwrite"])
    return uses_llm


def _in_order_problem(cfg: DictConfig) -> list[str]:
    """More than one example at a time for a reasoner that answers in order (SubQRAG): refused
    before anything is built (it ended in a traceback once the components were up)."""
    try:
        workers = example_workers(cfg)
    except (TypeError, ValueError):
        return []  # check_settings names a value that is not a number or auto
    cls = _reasoner_class(cfg)
    if workers > 1 and not getattr(cls, "thread_safe", True):
        return [f"example_workers={workers}: reasoner {cls.__name__} answers examples in order (each question's "
                "graph updates reach the next); set example_workers=1 or auto"]
    return []


def _option(cfg: DictConfig, group: str, obj: Any) -> str:
    """The config option of ``group`` for messages: Hydra's choice; outside a Hydra app (tests,
    notebooks) the ``conf/<group>/*.yaml`` option that builds the same ``_target_`` and agrees
    with the node on the most plain settings, else the built object's name."""
    chosen = choices().get(group)
    if chosen:
        return chosen
    node = cfg.get(group) or {}
    target = str(node.get("_target_", ""))
    try:
        import yaml

        from kgreason.paths import config_dir

        best, best_score = None, -1
        for f in sorted((config_dir() / group).glob("*.yaml")):
            opt = yaml.safe_load(f.read_text(encoding="utf-8")) or {}
            if not isinstance(opt, dict) or opt.get("_target_") != target:
                continue
            score = sum(1 for k, v in opt.items() if not isinstance(v, (dict, list)) and node.get(k) == v)
            if score > best_score:
                best, best_score = f.stem, score
        if best:
            return best
    except Exception:  # noqa: BLE001 - a name for a message; never a reason to fail
        pass
    return str(getattr(obj, "name", None) or target.rsplit(".", 1)[-1].removeprefix("load_") or "?")


def _preflight(cfg: DictConfig, c: Components, examples: list[Example], uses_llm: bool) -> dict[str, Any]:
    """Checks that need the built components: does the reasoner serve the dataset's task, do the
    examples link to the KG (the rate is measured and returned), does the LLM endpoint answer."""
    pf = cfg.get("preflight") or {}
    report = preflight.check_fit(
        examples, c.kg, c.reasoner, dataset=_option(cfg, "dataset", c.dataset), kg_name=_option(cfg, "kg", c.kg),
        reasoner_name=_option(cfg, "reasoner", None), min_link_rate=float(pf.get("min_link_rate", 0.5)),
        sample=int(pf.get("sample", 500)))
    readonly = str((cfg.get("llm_cache") or {}).get("mode", "")) == "readonly"
    if uses_llm and not readonly and pf.get("probe_llm", True):
        wait_s = float(pf.get("probe_wait_s", 120.0))  # a busy endpoint (429/5xx) is waited for this long
        if (cfg.get("llm") or {}).get("base_url"):
            preflight.probe_llm(c.llm, f"llm={choices().get('llm', cfg.llm.get('model'))}", wait_s)
        if c.judge_llm is not None and (cfg.judge.get("llm") or {}).get("base_url"):
            preflight.probe_llm(c.judge_llm, "judge.llm", wait_s)
    return report


def _preflight_metrics(report: Mapping[str, Any]) -> dict[str, Any]:
    """The measured preflight figures as ``preflight/*`` keys of metrics.json."""
    names = {"example_rate": "link_rate", "examples": "examples_checked", "examples_linked": "examples_linked",
             "mentions": "mentions", "mentions_linked": "mentions_linked"}
    out: dict[str, Any] = {f"preflight/{v}": report[k] for k, v in names.items() if k in report}
    if "sampled" in report:
        out["preflight/sampled"] = int(bool(report["sampled"]))
    return out


def _is_llm_failure(row: Mapping[str, Any]) -> bool:
    return str(row.get("error") or "").split(":", 1)[0] in _LLM_FAILURES


def _write_record(cfg: DictConfig, c: Components, out_dir: Path, report: Mapping[str, Any]) -> None:
    """run.json (kgreason/record.py) and config.yaml in the run dir; the same record goes to
    the tracker's run config."""
    record = scrub_obj(run_record(cfg))  # the overrides as typed: a URL's password too
    record["preflight"] = dict(report)
    write_json(out_dir / "run.json", record)
    (out_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(scrub_secrets(cfg))))
    log_config = getattr(c.tracker, "log_config", None)
    if callable(log_config):
        log_config(record)


def _pending(examples: list[Example], store: PredictionStore, retry_errors: bool) -> list[Example]:
    """Examples still to answer: those without a row, and (``retry_errors``) those whose last
    row is an error. The store keeps the last row per id, so a retried example's new row wins."""
    def done(ex: Example) -> bool:
        row = store.rows.get(ex.id)
        return row is not None and not (retry_errors and row.get("error"))

    return [ex for ex in examples if not done(ex)]


class RunInterrupted(KeyboardInterrupt):
    """The run was stopped by a signal other than Ctrl-C (SIGTERM: ``kill``, a scheduler's
    stop); handled exactly as Ctrl-C is. ``signum`` gives the exit status (128 + signum)."""

    def __init__(self, signum: int) -> None:
        self.signum, self.signame = int(signum), signal.Signals(signum).name
        super().__init__(self.signame)


@contextlib.contextmanager
def _signals_as_interrupt(signals=(signal.SIGTERM,)):
    """While the run is on, SIGTERM raises :class:`RunInterrupted` (a KeyboardInterrupt) in the
    main thread, so it unwinds like Ctrl-C: resources closed, partial metrics written. Outside
    the main thread (a run started from a worker thread) signals are left alone."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise RunInterrupted(signum)

    old = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


@contextlib.contextmanager
def _signals_deferred(signals=(signal.SIGTERM,)):
    """While a run sums up (every example answered: metrics and reports computed, metrics.json
    written; seconds), a SIGTERM is held and raised as :class:`RunInterrupted` once the block is
    done, so the stop leaves a complete metrics.json rather than none. Ctrl-C still stops at once.
    Outside the main thread signals are left alone."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    old = {sig: signal.signal(sig, lambda signum, frame: got.append(signum)) for sig in signals}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
    if got:
        raise RunInterrupted(got[0])


def _run_metrics(c: Components, rows: list[Mapping[str, Any]], examples: list[Example], prepared: Ledger,
                 report: Mapping[str, Any]) -> dict[str, Any]:
    outside = prepared
    for meter in (c.llm, getattr(c.judge, "llm", None)):
        for p, u in getattr(getattr(meter, "outside", None), "by_purpose", {}).items():
            outside.add(p, u)
    stages = tuple(getattr(c.reasoner, "funnel", ()) or ())  # the reasoner's funnel, in stage order
    metrics = summarise(rows, c.metrics, len(examples), outside, funnel=stages)
    metrics.update(_preflight_metrics(report))
    return metrics


def go_on_hint(out_dir: Path) -> str:
    """How a stopped run goes on, for its interruption line: the same command again. A single
    run's launch finds its unfinished dir (``GoOn``, or the ``hydra.run.dir`` the command names);
    a sweep's launch finds its unfinished sweep (``GoOn.on_multirun_start``, or the
    ``hydra.sweep.dir`` it names), and each job resumes in its own dir."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        sweep = HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
    except Exception:  # noqa: BLE001 - only for the message
        sweep = False
    return "The same --multirun command goes on with this sweep." if sweep else "The same command goes on."


def _job_label() -> str:
    """`` of job N`` for a sweep's job (its dir is the sweep dir's ``N``), else nothing."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
            return f" of job {HydraConfig.get().job.num}"
    except Exception:  # noqa: BLE001 - only for the message
        pass
    return ""


def _write_partial(cfg: DictConfig, c: Components, examples: list[Example], out_dir: Path, prepared: Ledger,
                   report: Mapping[str, Any], why: BaseException) -> None:
    """metrics.json for the rows written before an interruption, marked ``run/partial``; the
    log says what stopped the run and how to resume it. The rows are re-read from the file,
    as a resume will see them."""
    signame = why.signame if isinstance(why, RunInterrupted) else "SIGINT (Ctrl-C)"
    try:
        store = PredictionStore(out_dir / "predictions.jsonl", required=ROW_KEYS)
        rows = [store.rows[ex.id] for ex in examples if ex.id in store]
        metrics = _run_metrics(c, rows, examples, prepared, report)
        metrics["run/partial"] = True
        metrics["run/status"] = "partial"
        metrics["run/interrupted_by"] = signame.split()[0]
        write_json(out_dir / "metrics.json", metrics)
        done = len(rows)
    except Exception as e:  # noqa: BLE001 - the interruption is what is reported
        log.error("could not write partial metrics.json: %s", e)
        done = -1
    log.warning("run interrupted by %s after %d of %d examples%s; kept in %s (metrics.json marked partial). %s",
                signame, done, len(examples), _job_label(), shown(out_dir), go_on_hint(out_dir))


#: written when Ctrl-C or SIGTERM stops a run in its set-up (before the examples it has left);
#: removed once a resume finishes the set-up. ``{"status": "stopped", "stage": "prepare",
#: "interrupted_by", "examples_done", "n_expected", "progress": {"what", "done", "total", "unit"} | null}``
PREPARE_STOPPED = "prepare_stopped.json"
#: the set-up step that opens or builds the KG embedding stores (named on an interruption there)
EMBEDDING_STEP = "embedding stores"


def _write_prepare_stopped(out_dir: Path, why: BaseException, done: int, n: int) -> None:
    """Say where a run stopped in its set-up (:func:`_prepare`, e.g. SubQRAG's index, hours on a
    CPU): the log line names how far the set-up's progress bar got and that the same command goes on, and
    ``prepare_stopped.json`` keeps the same for the tools that sum up sittings. No metrics.json:
    nothing new was answered, and an earlier sitting's rows keep their own metrics.json."""
    signame = why.signame if isinstance(why, RunInterrupted) else "SIGINT (Ctrl-C)"
    where = progress.stopped_at()
    try:
        write_json(out_dir / PREPARE_STOPPED, {"status": "stopped", "stage": "prepare",
                                               "interrupted_by": signame.split()[0], "examples_done": done,
                                               "n_expected": n, "progress": where})
    except OSError as e:  # the interruption is what is reported
        log.error("could not write %s: %s", out_dir / PREPARE_STOPPED, e)
    got = f" ({where['what']}: {where['done']} of {where['total']} {where['unit']} done)" if where else ""
    kept = ("what the set-up finished is kept (SubQRAG's index: every extracted passage) and a resume goes on "
            "from there")
    # an embedding store stopped mid-build (its bar shown or not yet: loading the model, the first
    # batch) is removed with its partial dir: the resume starts it again
    if getattr(why, "kgreason_prepare_step", None) == EMBEDDING_STEP or (
            where and str(where.get("what", "")).startswith("embedding store")):
        kept = ("an embedding store stopped mid-build is not kept: a resume builds it again from its first text "
                "(the store restarts)")
    log.warning("run interrupted by %s while preparing%s, with %d of %d examples answered%s in %s; %s. %s",
                signame, got, done, n, _job_label(), shown(out_dir), kept, go_on_hint(out_dir))


def run(cfg: DictConfig, out_dir: str | Path, *, first: int | None = None,
        only: Collection[str] | None = None) -> RunResult:
    """Evaluate ``cfg`` into ``out_dir``, holding the run dir's lock throughout (a second run on
    the dir raises :class:`~kgreason.runs.RunDirLocked` before touching anything). A run that
    stops on a start-up check or while answering (not on a signal: that writes partial
    metrics) leaves ``failed.json`` with its one-line reason (:func:`_write_failed`).

    ``first``: answer only the first ``first`` examples of the configured questions, in their
    order (``kgreason bundle replay --first K``: a bundle's fixed prefix); the reasoner's set-up
    still sees the whole dataset (a passage pool, SubQRAG's index), as the bundled run's did.
    ``only``: answer only the examples with these ids, in the configured order (the replay of a
    partial run's bundle: the questions it holds replies for, not the config's other ones)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with _signals_as_interrupt(), lock_run_dir(out_dir):
        stage = {"name": "startup"}
        try:
            return _run(cfg, out_dir, stage, first, only)
        except Exception as e:
            _write_failed(out_dir, e, stage["name"])
            e.kgreason_stage = stage["name"]  # the caller (app.py) knows failed.json is decided on
            raise


FAILED = "failed.json"
#: what every row of a run's predictions.jsonl has; a line without them is set aside as damaged
ROW_KEYS = ("id", "metrics")


def _one_line(e: BaseException) -> str:
    """The message of what stopped the run on one line (Hydra's instantiate wrapper removed)."""
    from hydra.errors import InstantiationException

    while isinstance(e, InstantiationException) and e.__cause__ is not None:
        e = e.__cause__
    text = " ".join(x.strip() for x in str(e).splitlines() if x.strip())
    return (text or type(e).__name__)[:1000]


def complete_run_in(out_dir: Path) -> bool:
    """The dir holds a finished run that did not fail (its metrics.json is complete)."""
    return finished_run(out_dir)


def _write_failed(out_dir: Path, e: BaseException, stage: str) -> None:
    """``failed.json`` = {"status": "failed", "reason": one line, "stage": "startup" | "run"}
    (docs/metrics.md; ``tables`` and ``report`` print the reason). Not written when the run was
    refused the dir because of what is already in it (``stage`` "claim": another config,
    ``resume=false``), nor over a finished run that a later attempt failed to start on."""
    if stage == "claim" or (stage == "startup" and complete_run_in(out_dir)):
        return
    try:
        write_json(out_dir / FAILED, {"status": "failed", "reason": _one_line(e), "stage": stage})
    except OSError as err:  # the failure itself is what is reported
        log.error("could not write %s: %s", out_dir / FAILED, err)


def _run(cfg: DictConfig, out_dir: Path, stage: dict[str, str], first: int | None = None,
         only: Collection[str] | None = None) -> RunResult:
    protect_run_dir(cfg, out_dir)  # before anything is built or written: secrets never reach a file
    t0 = time.perf_counter()
    forget_files_read()  # run.json lists the data files this run reads (not an earlier job's)
    uses_llm = _start_checks(cfg)  # bad settings stop here, before any example is paid for
    with build(cfg, out_dir) as c:  # closes every resource on success, error and Ctrl-C
        examples = list(c.dataset)
        if only is not None:  # a replay of a partial run's bundle: the questions it answered
            keep = set(only)
            examples = [e for e in examples if e.id in keep]
        if first is not None:  # a replay of a bundle's fixed prefix: the first questions, in order
            examples = examples[: max(int(first), 0)]
        report = _preflight(cfg, c, examples, uses_llm)  # a run that cannot mean anything stops here
        workers = example_workers(cfg)
        if str(cfg.get("example_workers")) == "auto":
            if not getattr(c.reasoner, "thread_safe", True):
                log.info("example_workers=auto: %s answers examples in order (its state reaches later "
                         "questions), so one example at a time", type(c.reasoner).__name__)
            elif workers > 1:
                log.info("example_workers=auto: %d examples at a time against the HTTP model (set "
                         "example_workers=N to change it; rows are written in dataset order)", workers)
        if workers > 1 and not getattr(c.reasoner, "thread_safe", True):
            raise ValueError(f"example_workers={workers}: reasoner {type(c.reasoner).__name__} answers examples "
                             "in order (shared state); set example_workers=1")
        stage["name"] = "claim"  # refusals here leave what the dir holds as it is
        store = PredictionStore(out_dir / "predictions.jsonl", required=ROW_KEYS)  # damaged lines set aside
        done_before = sum(1 for ex in examples if ex.id in store)
        if done_before and not cfg.get("resume", True):
            raise RuntimeError(f"{out_dir}/predictions.jsonl already has {done_before} examples and resume=false")
        # the dir's record is written only once every check passed (a refused resume leaves it intact)
        c.run_id = check_resume(out_dir, cfg, allow_changes=bool(cfg.get("resume_allow_changes", False)))
        stage["name"] = "startup"
        _write_record(cfg, c, out_dir, report)
        (out_dir / FAILED).unlink(missing_ok=True)  # an earlier attempt's failure: this one got past the checks
        pending = _pending(examples, store, bool(cfg.get("retry_errors", True)))
        log.info("dataset %s: %d examples (%d already done, %d to retry)", getattr(c.dataset, "name", "?"),
                 len(examples), len(examples) - len(pending), len(pending) - (len(examples) - done_before))
        todo = {ex.id for ex in pending}
        kept = [store.rows[ex.id] for ex in examples if ex.id in store and ex.id not in todo]
        try:
            prepared = _prepare(c, kept if pending else None, out_dir)
        except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM in the set-up: no example is answered yet
            _write_prepare_stopped(out_dir, e, len(examples) - len(pending), len(examples))
            raise
        (out_dir / PREPARE_STOPPED).unlink(missing_ok=True)  # an earlier sitting's stop: the set-up is done now
        stage["name"] = "run"
        if pending:
            _mark_metrics_stale(out_dir)  # before the first new row: a kill -9 from here never leaves them "complete"
        try:
            _answer_all(cfg, c, pending, store, len(examples) - len(pending), workers)
        except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: what was answered is summed up, then the run stops
            _write_partial(cfg, c, examples, out_dir, prepared, report, e)
            raise
        try:
            with _signals_deferred():  # a SIGTERM now waits until metrics.json is written
                rows = [store.rows[ex.id] for ex in examples if ex.id in store]  # dataset order, last row per id
                metrics = _run_metrics(c, rows, examples, prepared, report)
                reports = build_reports(cfg, c, examples, rows, out_dir)
                write_json(out_dir / "metrics.json", metrics)
        except RunInterrupted as e:
            log.warning("run stopped by %s as it summed up%s: all %d examples are answered and metrics.json is "
                        "complete in %s; timing.json and the tracker's log were not written (the same command "
                        "writes them)", e.signame, _job_label(), len(rows), shown(out_dir))
            raise
        timing: dict[str, Any] = {"wall_s": round(time.perf_counter() - t0, 3)}
        if hasattr(c.retriever, "stats") and isinstance(c.retriever.stats, dict):
            timing["retrieval_prefetch"] = dict(c.retriever.stats)
        endpoint = getattr(c.kg, "endpoint", None)  # a SPARQL source: requests, cache hits, retries, rechecks
        if isinstance(getattr(endpoint, "stats", None), dict):
            timing["kg_endpoint"] = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in endpoint.stats.items()}
        if hasattr(c.embedder, "timing"):  # store builds, texts embedded, ranking time per question
            timing["embedding"] = c.embedder.timing()
            if prepared.stores_built:  # this run dir's builds before its first example, earlier attempts included
                timing["embedding"]["prepare_builds"] = list(prepared.stores_built)
                timing["embedding"]["prepare_build_s"] = round(sum(float(b["build_s"]) for b in prepared.stores_built), 3)
        if c.graphdb is not None and callable(getattr(c.graphdb, "stats", None)) and (g := c.graphdb.stats()):
            timing["graphdb"] = g  # the graph database a replay exports (bundle manifests name it)
        write_json(out_dir / "timing.json", timing)
        _log_to_tracker(c.tracker, metrics, reports, rows, out_dir,
                        hop_title=f"{getattr(c.dataset, 'name', '?')} on KG {getattr(c.kg, 'name', '?')}")
        rate, limit = metrics["run/error_rate"], cfg.get("max_error_rate")
        if limit is not None and cfg.get("fail_on_error_rate", True) and rate > float(limit):
            raise RunFailed(f"{metrics['run/errors']} of {len(rows)} examples failed "
                            f"(error rate {rate:.3f} > max_error_rate {limit}); see {out_dir}/predictions.jsonl")
        return RunResult(metrics=metrics, reports=reports, out_dir=out_dir)


def _mark_metrics_stale(out_dir: Path) -> None:
    """An earlier sitting's ``metrics.json`` (a finished run whose errored examples are retried, a
    partial one) stops being the run's figures once this sitting appends rows: it is marked
    ``run/status: partial`` (``run/partial: true``) before the first new row, so a sitting killed
    where it cannot write anything (``kill -9``, a power cut) leaves a run that ``tables`` marks
    partial and the same command resumes, never the old numbers shown as complete. The end of
    the sitting (or its Ctrl-C/SIGTERM) writes the new figures over it."""
    path = out_dir / "metrics.json"
    try:
        m = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return
    except (OSError, ValueError):
        m = None
    if not isinstance(m, dict):  # unreadable: it can hold no figure of this run any more
        path.unlink(missing_ok=True)
        return
    if m.get("run/status") == "partial" and m.get("run/partial") is True:
        return
    m.update({"run/status": "partial", "run/partial": True})
    write_json(path, m)


def _answer_all(cfg: DictConfig, c: Components, pending: list[Example], store: PredictionStore,
                done_before: int, workers: int) -> None:
    """The example loop: answer ``pending`` (concurrently with ``workers`` threads), append each
    row as its turn comes (dataset order), and stop after ``max_consecutive_failures`` examples
    in a row failed on the LLM endpoint (:class:`LLMUnavailable`)."""
    pool = ThreadPoolExecutor(workers, thread_name_prefix="example") if workers > 1 else None
    bar = _ExampleProgress(done_before + len(pending), done_before, c.metrics[0] if c.metrics else None)
    max_fail, streak = int(cfg.get("max_consecutive_failures") or 0), 0
    try:
        for chunk in _chunks(pending, c.retriever, c.reasoner):
            # with workers, examples run concurrently (their LLM calls overlap at the server);
            # rows are still appended in dataset order as each one's turn comes
            rows_iter = pool.map(lambda ex: answer_and_score(c, ex), chunk) if pool else \
                (answer_and_score(c, ex) for ex in chunk)
            for row in rows_iter:
                store.append(row)
                bar.update(row)
                streak = streak + 1 if _is_llm_failure(row) else 0
                if max_fail and streak >= max_fail:
                    raise LLMUnavailable(
                        f"stopped after {streak} examples in a row failed on the LLM (max_consecutive_failures="
                        f"{max_fail}); last error: {str(row['error'])[:300]}. The rows so far are kept in "
                        f"{store.path}; fix the endpoint and run again in the same dir: errored examples are "
                        "retried (retry_errors=true)")
            if hasattr(c.retriever, "clear"):
                c.retriever.clear()
    except BaseException as e:
        # a stop: the last line says "(stopped)", not "(done)"; for Ctrl-C or SIGTERM the run's one
        # interruption line says where it stood instead (_write_partial), so the bar adds no line
        bar.close(stopped=True, quiet=isinstance(e, KeyboardInterrupt))
        raise
    else:
        bar.close()
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def build_reports(cfg: DictConfig, c: Components, examples: list[Example], rows, out_dir: Path) -> dict[str, Any]:
    """Distributions that are not metrics: the hop distribution (written to hops.json) and the
    reasoner's own report when it has a ``report()`` method (written to reasoner.json)."""
    reports: dict[str, Any] = {}
    rep_cfg = cfg.get("reports") or {}
    reasoner_report = getattr(c.reasoner, "report", None)
    if callable(reasoner_report):  # a reasoner's run-level facts (ReKnoS: super-relation groups)
        reports["reasoner"] = reasoner_report()
        write_json(out_dir / "reasoner.json", reports["reasoner"])
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
            hop_retriever = _owned(c.resources, instantiate(
                cfg.retriever, kg=c.kg, semantics="within", direction=direction, max_paths=0,
                return_triples=False, timeout_ms=None))
        dist = hop_distribution(c.kg, examples, max_hops=max_hops, direction=direction,
                                retriever=hop_retriever, batch=int(rep_cfg.get("batch", 256)))
        reports["hop_distribution"] = dist
        write_json(out_dir / "hops.json", dist)
    return reports


def _log_to_tracker(tracker, metrics, reports, rows, out_dir: Path, hop_title: str = "?") -> None:
    tracker.log_metrics(metrics)
    hop = reports.get("hop_distribution")
    if hop:
        tracker.log_histogram("hops/distribution", hop["counts"])
        tracker.log_table("hops/table", [{"hops": k, "count": v} for k, v in hop["counts"].items()])
        if hop.get("counts_per_example"):  # the minimum over each example's golds (the per-question figure)
            tracker.log_histogram("hops/distribution_per_example", hop["counts_per_example"])
        png = out_dir / "hops.png"
        try:
            from kgreason.tables import plot_hops

            plot_hops(hop["counts"], png, title=f"hop distribution (query–gold pairs): {hop_title}",
                      unit=hop.get("unit", "pair"))
            tracker.log_image("hops/plot", str(png))
        except ImportError:
            pass
    table = []
    for r in rows:
        first = next(iter(r["metrics"].values()), None) if r["metrics"] else None
        table.append({
            "id": r["id"], "question": r["question"][:500], "prediction": r["prediction"],
            "gold": " | ".join(r["answers"][:5]), "correct": first, "hops": r.get("hops"),
            "calls": sum(u.get("calls", 0) for u in (r.get("llm_usage") or {}).values()), "error": r.get("error") or "",
        })
    tracker.log_table("predictions", table)
    judge_keys = sorted(k for k in metrics if k.startswith("judge/"))
    if judge_keys:
        tracker.log_table("judge/per_attribute", [{"attribute": k[6:], "mean": metrics[k]} for k in judge_keys])
