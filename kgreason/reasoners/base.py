"""The reasoner kit: the :class:`BaseReasoner` every reasoner subclasses, the one LLM call
helper :func:`ask`, the one hop-budget rule :func:`hop_budget`, and the :class:`Trace` that
records each example's steps.

A reasoner is built once per run with settings (from YAML) and the injected dependencies
``kg``, ``retriever`` and ``llm`` (keyword-only; a reasoner that does not need one ignores it),
then called once per example::

    t = Trace()
    sub = t.retrieval("khop", retriever.retrieve(seeds, self.hop_budget(example)), kg)
    res = self.ask(t, "answer", request, parse_answers)   # call, trace, parse, re-ask
    return t.finish(example, res.value or [])

Re-ask policy (the same for every reasoner): when ``parser(reply)`` fails, the bad reply and
:data:`REASK_MESSAGE` (with the parser's error) are appended to the conversation and the model
is asked again, at most ``max_reasks`` times. Every failed parse counts in
``Usage.parse_failures`` and every follow-up call in ``Usage.reasks`` (run metrics
``llm/parse_failures`` and ``llm/reasks``); each call is one ``llm`` step of the trace, its
``attempt`` field 0 for the first ask.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from kgreason.llm.base import CacheMiss
from kgreason.llm.parsing import REASK_MESSAGE, ParseResult, reask_request
from kgreason.types import ChatRequest, Completion, Example, Prediction, Step, Subgraph, Usage, to_jsonable


class Reasoner(Protocol):
    def answer(self, example: Example) -> Prediction: ...


@dataclass(frozen=True, slots=True)
class ReaskPolicy:
    """How an unparseable reply is handled: ``max_reasks`` follow-up calls, each carrying the
    bad reply and ``message`` (``{error}`` = the parser's error)."""

    max_reasks: int = 0
    message: str = REASK_MESSAGE

    def __post_init__(self) -> None:
        if int(self.max_reasks) < 0:
            raise ValueError(f"max_reasks must be >= 0, got {self.max_reasks}")


def hop_budget(hops: int | None, example: Example, max_hops: int, *, gold_hops: bool = False) -> int:
    """The one hop-budget rule: ``hops`` when set (non-zero); else, only when ``gold_hops`` is
    switched on (``reasoner.gold_hops: true``, an oracle: MetaQA's per-hop protocol), the
    example's gold hop count when it has one; else ``max_hops``. The gold count is never read
    unless asked for, so a default run's figures use no gold hop counts."""
    gold = example.hops if gold_hops else None
    return int(hops or gold or max_hops)


def ask(llm, trace: "Trace", purpose: str, request: ChatRequest, parser: Callable[[str], ParseResult], *,
        policy: ReaskPolicy = ReaskPolicy(), prompt_id: str | None = None) -> ParseResult:
    """Send ``request``, record the call in ``trace``, parse the reply with ``parser`` and re-ask
    per ``policy`` while it does not parse. Returns the last :class:`ParseResult` (failed when
    every attempt failed; never raises for an unparseable reply).

    A readonly replay's miss (:class:`~kgreason.llm.base.CacheMiss`) is raised with the request
    named (``[request <purpose>]``: the trace's name for the call, ``hypothesis_p0_t1``, not only
    the metering purpose ``answer``) and kept on the exception (``missed_request``: the name, the
    attempt and the messages), so ``kgreason bundle replay`` can show what the method asks now
    beside the bundle's nearest request."""
    req = request
    res = ParseResult(False, None, "not asked")
    for attempt in range(int(policy.max_reasks) + 1):
        try:
            comp = llm.generate([req])[0]
        except CacheMiss as e:
            raise missed(e, prompt_id or purpose, attempt, req) from None
        res = parser(comp.text)
        trace.llm(purpose, req, comp, prompt_id=prompt_id, parsed=res.value, parse_ok=res.ok, attempt=attempt)
        if res.ok:
            break
        req = reask_request(req, comp.text, res.error, policy.message)
    return res


def missed(e: CacheMiss, name: str, attempt: int, request: ChatRequest) -> CacheMiss:
    """``e`` with the request named in its message and kept as ``e.missed_request``."""
    label = name + (f" (re-ask {attempt})" if attempt else "")
    out = type(e)(f"{e} [request {label}]")
    out.missed_request = {"name": name, "attempt": int(attempt),  # type: ignore[attr-defined]
                          "messages": [{"role": m.role, "content": m.content} for m in request.messages],
                          "temperature": request.temperature, "max_tokens": request.max_tokens}
    return out


class BaseReasoner:
    """What every reasoner declares. Subclasses set ``self.llm`` (when they call one) and, when
    they retrieve k hops, ``self.hops`` / ``self.max_hops``; they implement :meth:`answer`.

    Attributes:
        thread_safe: False when examples must run one at a time (``example_workers: 1``).
        reask: the :class:`ReaskPolicy` :meth:`ask` applies (set from ``max_reasks``).
        hops, max_hops, gold_hops: the inputs of :func:`hop_budget` (one rule for ``answer``
            and ``retrieval_plan``); ``gold_hops`` is the ``reasoner.gold_hops`` setting, off
            unless a reasoner's config switches it on.
    """

    thread_safe: bool = True
    reask: ReaskPolicy = ReaskPolicy()
    llm = None
    hops: int | None = None
    max_hops: int = 2
    gold_hops: bool = False  # True: hop_budget may read the example's gold hop count (an oracle)
    funnel: tuple[str, ...] = ()

    def answer(self, example: Example) -> Prediction:
        raise NotImplementedError

    def retrieval_plan(self, example: Example) -> list[tuple[list[int], int]]:
        """The ``(seed ids, hops)`` k-hop queries :meth:`answer` will make, for batched
        prefetching by the run loop. Default: no plan."""
        return []

    def prepare(self, examples: Sequence[Example], done: Sequence[dict] = ()) -> None:
        """Run-level set-up, called once by the run loop after build and before the first example:
        ``examples`` is the whole dataset (an ``ExampleSet``: iterable, with ``name`` and, for
        document datasets, ``corpus``), ``done`` the stored rows of the examples a resumed run
        already has (in dataset order), so a stateful reasoner can restore its state. Default: nothing.
        SubQRAG builds its corpus-level index here (subqrag.txt §2.1)."""

    def hop_budget(self, example: Example) -> int:
        """Hops for ``example`` under :func:`hop_budget` (used by ``answer`` and ``retrieval_plan``)."""
        return hop_budget(self.hops, example, self.max_hops, gold_hops=self.gold_hops)

    def ask(self, t: "Trace", purpose: str, request: ChatRequest, parser: Callable[[str], ParseResult], *,
            prompt_id: str | None = None) -> ParseResult:
        """:func:`ask` with this reasoner's LLM and re-ask policy."""
        return ask(self.llm, t, purpose, request, parser, policy=self.reask, prompt_id=prompt_id)

    def close(self) -> None:
        """Release what the reasoner opened itself (nothing by default)."""


class Trace:
    """Collects :class:`Step` records and summed LLM usage for one example."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.usage = Usage()
        self.extra: dict[str, Any] = {}
        self._t0 = time.perf_counter()

    def add(self, kind: str, name: str, **data: Any) -> Step:
        step = Step(kind=kind, name=name, data=to_jsonable(data))
        self.steps.append(step)
        return step

    def note(self, name: str, **data: Any) -> Step:
        return self.add("note", name, **data)

    def stage(self, name: str, value: bool | str = True) -> None:
        """Record that this question reached funnel stage ``name`` (bool) or which branch it took (str)."""
        self.extra.setdefault("funnel", {})[name] = value

    def llm(self, purpose: str, request: ChatRequest, completion: Completion, *,
            prompt_id: str | None = None, parsed: Any = None, parse_ok: bool = True,
            attempt: int = 0) -> Completion:
        """Record one LLM call (prompt, replies, parsed output, usage); ``attempt`` > 0 marks a
        re-ask (counted in ``Usage.reasks``)."""
        usage = completion.usage
        if not parse_ok:
            usage = usage + Usage(parse_failures=1)
        if attempt:
            usage = usage + Usage(reasks=1)
        self.usage = self.usage + usage
        self.add(
            "llm", purpose, prompt_id=prompt_id or purpose,
            messages=[{"role": m.role, "content": m.content} for m in request.messages],
            temperature=request.temperature, n=request.n, replies=list(completion.texts),
            parsed=parsed, parse_ok=parse_ok, cached=completion.cached, usage=usage,
            **({"attempt": attempt} if attempt else {}),
        )
        return completion

    def retrieval(self, name: str, sub: Subgraph, kg=None, **data: Any) -> Subgraph:
        """Record a k-hop retrieval: seeds, per-hop entity/triple counts, paths kept."""
        info = dict(
            # by id string (not internal id): the same record on every KG backend
            seeds=sorted(str(kg.entity_names[s]) for s in sub.seeds) if kg is not None else sub.seeds,
            hops=sub.hops,
            entities_per_hop=[int(len(e)) for e in sub.entities_by_hop],
            triples_per_hop=[int(len(t)) for t in sub.triples_by_hop],
            n_paths=len(sub.paths), paths_truncated=sub.paths_truncated, timed_out=sub.timed_out,
        )
        info.update(data)
        self.add("retrieve", name, **info)
        return sub

    def finish(self, example: Example, answers: Sequence[str], error: str | None = None,
               **extra: Any) -> Prediction:
        self.extra.update(extra)
        self.extra.setdefault("latency_s", round(time.perf_counter() - self._t0, 4))
        return Prediction(
            example_id=example.id, answers=tuple(answers), trace=tuple(self.steps), usage=self.usage,
            error=error, extra=to_jsonable(self.extra),
        )


def render(template: str, **values: Any) -> str:
    """Fill ``{name}`` placeholders without choking on JSON braces elsewhere in the prompt."""
    out = template
    for k, v in values.items():
        out = out.replace("{" + k + "}", str(v))
    return out


# ----------------------------------------------------------------------------- canonical tie order
# Score ties are broken by a canonical key, never by the KG's storage order (internal ids, triple
# order, a database's row order), so the same question gives the same ranked list on every KG
# backend and after a recompile (issue #32; tests/reasoners/test_tie_order.py).


def entity_key(kg, e: int) -> tuple[str, str]:
    """The canonical tie key of an entity: its id string (the MID, or the name where names are
    ids), then its label."""
    return (str(kg.entity_names[int(e)]), str(kg.entity_label(int(e)) or ""))


def canonical_entities(kg, ids) -> list[int]:
    """``ids`` in canonical order (:func:`entity_key`)."""
    return sorted((int(e) for e in ids), key=lambda e: entity_key(kg, e))


def entity_ranks(kg, ids) -> np.ndarray:
    """Each id's position in canonical order: the last key of an ``np.lexsort`` that breaks
    score ties canonically (``np.lexsort((entity_ranks(kg, c), -scores))``)."""
    ids = [int(e) for e in ids]
    order = sorted(range(len(ids)), key=lambda i: entity_key(kg, ids[i]))
    ranks = np.empty(len(ids), dtype=np.int64)
    ranks[np.asarray(order, dtype=np.int64)] = np.arange(len(ids))
    return ranks


_KEY_RANKS: dict[int, tuple[object, int, np.ndarray, np.ndarray]] = {}


def _key_ranks(kg) -> tuple[np.ndarray, np.ndarray] | None:
    """Per in-memory KG (up to 2M entities), computed once: each entity's position in
    :func:`entity_key` order and each relation's in name order, so :func:`canonical_triples` is
    one ``np.lexsort``. ``None`` for other KGs (a SPARQL source grows as it is read)."""
    if not hasattr(kg, "heads") or getattr(kg, "remote", False) or kg.n_entities > 2_000_000:
        return None
    hit = _KEY_RANKS.get(id(kg))
    if hit is not None and hit[0] is kg and hit[1] == kg.n_entities:
        return hit[2], hit[3]
    n = kg.n_entities
    er = np.empty(n, dtype=np.int64)
    er[np.asarray(sorted(range(n), key=lambda e: entity_key(kg, e)), dtype=np.int64)] = np.arange(n)
    names = [str(r) for r in kg.relation_names]
    rr = np.empty(len(names), dtype=np.int64)
    rr[np.asarray(sorted(range(len(names)), key=names.__getitem__), dtype=np.int64)] = np.arange(len(names))
    if len(_KEY_RANKS) > 8:
        _KEY_RANKS.clear()
    _KEY_RANKS[id(kg)] = (kg, n, er, rr)
    return er, rr


def canonical_triples(kg, triples: np.ndarray) -> np.ndarray:
    """``(m, 3)`` (head, relation, tail) id rows sorted by (head key, relation name, tail key)."""
    triples = np.asarray(triples)
    if len(triples) < 2:
        return triples
    ranks = _key_ranks(kg)
    if ranks is not None:  # the same order as the sort below (entity names are unique; lexsort is stable)
        er, rr = ranks
        t = triples.reshape(-1, 3).astype(np.int64, copy=False)
        return triples[np.lexsort((er[t[:, 2]], rr[t[:, 1]], er[t[:, 0]]))]
    rows = triples.tolist()
    order = sorted(range(len(rows)), key=lambda i: (entity_key(kg, rows[i][0]), str(kg.relation_names[rows[i][1]]),
                                                  entity_key(kg, rows[i][2])))
    return triples[np.asarray(order, dtype=np.int64)]


def load_schema(reasoner: str, step: str) -> str | None:
    """The JSON schema of ``<reasoner>/<step>``'s reply form (``prompts/<reasoner>/<step>.schema.json``),
    as compact JSON text for :attr:`~kgreason.types.ChatRequest.json_schema`; None for a prompt
    whose reply is free text. Sent only with ``llm.structured_output=true`` (docs/llm.md).

    The keys keep the file's order: a grammar writes an object's fields in the order its schema
    lists them, so sorting them would put SGR's "answer" before the "hypothesis" or "triple" that
    should lead to it (the option constrains the form, not the method)."""
    import json
    from importlib.resources import files

    from kgreason.paths import safe_component

    folder = safe_component(reasoner, "reasoner.prompts_dir")
    f = files("kgreason.reasoners").joinpath("prompts", folder, f"{safe_component(step, 'prompt step')}.schema.json")
    if not f.is_file():
        return None
    return json.dumps(json.loads(f.read_text()), separators=(",", ":"))


def load_prompt(reasoner: str, step: str) -> str:
    """Read ``kgreason/reasoners/prompts/<reasoner>/<step>.txt``."""
    from importlib.resources import files

    from kgreason.paths import safe_component

    folder = safe_component(reasoner, "reasoner.prompts_dir")  # a config value: one folder under prompts/
    return files("kgreason.reasoners").joinpath("prompts", folder, f"{safe_component(step, 'prompt step')}.txt").read_text()
