"""Plain frozen dataclasses that cross every module boundary.

Nothing here imports anything heavy; every other module may import from here.

* :class:`Example` – one dataset item (KGQA question, multi-hop QA question, clinical case).
* :class:`Subgraph` – the result of one k-hop retrieval (entities per hop + activated triples).
* :class:`Message`, :class:`ChatRequest`, :class:`Completion`, :class:`Usage` – the LLM contract.
* :class:`Step`, :class:`Prediction` – what a reasoner returns, with its trace.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping

import numpy as np

NO_ID = -1  # the only sentinel for "no entity / no relation"


@dataclass(frozen=True, slots=True)
class Example:
    """One evaluation item.

    Attributes:
        id: stable id, unique within the dataset (used for resume).
        question: the question, or the clinical note text for diagnosis tasks.
        answers: gold answers with aliases (any match counts as correct for Hits@1).
        topic_entities: KG ids (names or MIDs, as the KG spells them) of the question's topic entities.
        topic_names: surface names of the topic entities, when the dataset gives them.
        gold_paths: gold relation paths, each a tuple of relation names.
        answer_groups: for datasets with several distinct gold answers, one tuple of aliases per
            answer (``all_answers_found`` needs every group; RoG's metrics count groups). Empty means ``(answers,)``.
        supporting: ids/titles of gold supporting passages (multi-hop QA).
        corpus: per-example passages ``(title, text)`` where the dataset ships them.
        findings: clinical findings / evidences (diagnosis tasks), as text.
        diagnoses: gold diagnoses (diagnosis tasks).
        hops: the gold hop count when the dataset states it.
        extra: anything else a loader wants to keep, JSON-serialisable.
    """

    id: str
    question: str
    answers: tuple[str, ...] = ()
    topic_entities: tuple[str, ...] = ()
    topic_names: tuple[str, ...] = ()
    gold_paths: tuple[tuple[str, ...], ...] = ()
    answer_groups: tuple[tuple[str, ...], ...] = ()
    supporting: tuple[str, ...] = ()
    corpus: tuple[tuple[str, str], ...] = ()
    findings: tuple[str, ...] = ()
    diagnoses: tuple[str, ...] = ()
    hops: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return to_jsonable(self)


@dataclass(frozen=True, slots=True)
class Subgraph:
    """Result of a k-hop query.

    Attributes:
        seeds: ``(s,)`` int32 seed entity ids.
        entities_by_hop: ``[h]`` = ``(n_h,)`` int32 ids of the entities produced at hop ``h+1``
            under the retriever's semantics (``within``/``exact``: first reached at hop h+1;
            ``walk``: the nonzeros of q·(SUB·OBJ)^(h+1)).
        triples_by_hop: ``[h]`` = ``(m_h, 3)`` int32 ``(head, rel, tail)`` triples activated at hop
            h+1 (Eq. 5–7 of LogosKG), already oriented in traversal direction is *not* applied:
            rows are always stored as in the KG (head, rel, tail).
        paths: reconstructed entity/relation paths ``(e0, r1, e1, ..., rk, ek)`` up to the cap.
        paths_truncated: True when more paths existed than the cap allowed.
        timed_out: True when the per-query time limit was hit; the hops computed so far are kept.
    """

    seeds: np.ndarray
    entities_by_hop: list[np.ndarray]
    triples_by_hop: list[np.ndarray]
    paths: tuple[tuple[int, ...], ...] = ()
    paths_truncated: bool = False
    timed_out: bool = False

    @property
    def hops(self) -> int:
        return len(self.entities_by_hop)

    def entities(self, hop: int | None = None) -> np.ndarray:
        """Entities at ``hop`` (1-based), or the sorted union over all hops when ``hop`` is None."""
        if hop is not None:
            return self.entities_by_hop[hop - 1]
        if not self.entities_by_hop:
            return np.zeros(0, dtype=np.int32)
        return np.unique(np.concatenate(self.entities_by_hop)).astype(np.int32)

    @property
    def triples(self) -> np.ndarray:
        """``(m, 3)`` int32: the distinct activated triples over all hops."""
        if not self.triples_by_hop:
            return np.zeros((0, 3), dtype=np.int32)
        allt = np.concatenate(self.triples_by_hop, axis=0)
        if len(allt) == 0:
            return allt.reshape(0, 3).astype(np.int32)
        return np.unique(allt, axis=0).astype(np.int32)


# ----------------------------------------------------------------------------- LLM contract


@dataclass(frozen=True, slots=True)
class Message:
    role: str  # "system" | "user" | "assistant"
    content: str


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One chat call. Every field that changes the answer is part of the cache key."""

    messages: tuple[Message, ...]
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 512
    n: int = 1
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logprobs: bool = False
    sample_index: int = 0  # distinguishes repeated sampled calls with otherwise equal requests
    # the JSON schema (canonical JSON text) of the reply's form, for structured output
    # (``llm.structured_output``); None = free text. Part of the cache key only when set.
    json_schema: str | None = None

    @staticmethod
    def of(prompt: str, system: str | None = None, **kw: Any) -> "ChatRequest":
        msgs = ((Message("system", system),) if system else ()) + (Message("user", prompt),)
        return ChatRequest(messages=msgs, **kw)


@dataclass(frozen=True, slots=True)
class Usage:
    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    cost_usd: float = 0.0
    parse_failures: int = 0
    reasks: int = 0  # follow-up calls made because a reply did not parse (reasoners/base.ask)
    reasoning_tokens: int = 0  # the part of completion_tokens a reasoning model spent reasoning
    usage_unknown: int = 0  # calls whose reply gave no token counts: their tokens and cost are not in the sums
    replies_cut: int = 0  # replies cut at the backend's max_reply_chars
    sampled_calls: int = 0  # requests made at temperature > 0 (counted by the metering layer, hits included)
    replies_cleaned: int = 0  # replies whose lone UTF-16 surrogates the backend replaced with U+FFFD
    # the part of prompt_tokens the backend did not compute because a cached prefix held them
    # (llama.cpp's prefix/state cache, OpenAI's ``cached_tokens``): computed = prompt - reused
    prompt_tokens_reused: int = 0
    # CPU seconds this process spent on the call (the in-process llama.cpp route measures it; 0 where the
    # model runs elsewhere): the model's work, which unlike latency_s does not grow when the machine is busy
    cpu_s: float = 0.0

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(Usage)))

    @staticmethod
    def total(items) -> "Usage":
        out = Usage()
        for u in items:
            out = out + u
        return out


@dataclass(frozen=True, slots=True)
class Completion:
    texts: tuple[str, ...]
    usage: Usage = Usage()
    token_logprobs: tuple[tuple[float, ...], ...] | None = None  # one tuple per text
    cached: bool = False

    @property
    def text(self) -> str:
        return self.texts[0] if self.texts else ""


# ----------------------------------------------------------------------------- reasoner output


@dataclass(frozen=True, slots=True)
class Step:
    """One trace step. ``kind`` is e.g. retrieve | llm | cypher | vote | link | update | note."""

    kind: str
    name: str
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Prediction:
    """What a reasoner returns for one example.

    Attributes:
        answers: the final answers, ranked.
        rounds: intermediate answer lists of a multi-round reasoner, by round name (e.g. the
            LogosKG diagnosis study's ``baseline`` / ``round1`` / ``round2``; the final list is
            ``answers``). The run scores each with the same metric code as ``answers``
            (``dx_<round>_f1`` ...) and the PDSQI judge judges each; reasoners never score
            themselves. Empty for single-round reasoners.
        extra: per-example scalars and diagnostics (search space, retrieved names, ...).
    """

    example_id: str
    answers: tuple[str, ...]  # ranked
    trace: tuple[Step, ...] = ()
    usage: Usage = Usage()
    error: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # per-example scalars (search space...)
    rounds: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def answer(self) -> str:
        return self.answers[0] if self.answers else ""


_PLAIN = frozenset((str, int, float, bool))


def to_jsonable(obj: Any) -> Any:
    """Convert dataclasses / numpy / tuples into plain JSON types."""
    if obj is None or type(obj) in _PLAIN:  # most of a trace's leaves (1.5M in SGR's 100 MetaQA rows)
        return obj
    if hasattr(obj, "__dataclass_fields__"):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in fields(obj)}
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, (np.bool_,)):
        return bool(obj)
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in obj]
    return obj


__all__ = [
    "NO_ID", "Example", "Subgraph", "Message", "ChatRequest", "Usage", "Completion", "Step",
    "Prediction", "to_jsonable", "asdict",
]
