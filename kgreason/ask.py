"""``kgreason ask "QUESTION" [group=option ...] [key=value ...]``: one question, answered and seen.

The configuration is composed as the main entry composes it (the same ``conf/``, the same
overrides, the same typo check and start-up checks); the components are built by
:func:`kgreason.runner.run.build`, the reasoner's run-level set-up runs (SubQRAG's corpus index), and the
question is answered and scored by :func:`kgreason.runner.run.answer_and_score`, the code a run uses
for every example. The row is written as JSON and as the HTML page of
:mod:`kgreason.tables.question` (answer, every model call with its prompt and reply, the
subgraph the method used).

The question: when it is (up to case and spacing) a question of the configured dataset, that
example is answered, with its topic entities and gold answers (the page shows its scores);
``--id`` picks a dataset example by id. Any other text is a new question without gold: its
topic entities are ``--topic`` (repeatable; one the KG does not know is refused), or else the longest runs of words in the question
that name a KG entity (:func:`mentions`; not a method's linker, only ``ask``'s way to find a
start for a question typed by hand). Against a KG behind a SPARQL endpoint each name tried is one
query: at most :data:`MAX_REMOTE_LOOKUPS` per question, and ``ask`` says when it stopped there.

Nothing is written to ``outputs/runs``: the page and the row go to ``--out`` (default
``<paths.output>/ask/<date>/<time>_<reasoner>.html`` and ``.json`` beside it). LLM calls go
through the call cache like a run's (``llm_cache.mode=off`` to call the model again).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

from kgreason.paths import config_dir

#: longest run of words tried as an entity name
MAX_MENTION_WORDS = 8
#: the most entity-name lookups one question sends to a remote KG (a SPARQL endpoint: each lookup
#: is one query, up to :data:`MAX_MENTION_WORDS` per word; a pasted page of 2,000 words sent 15,987)
MAX_REMOTE_LOOKUPS = 256


def find_mentions(kg, question: str, max_lookups: int | None = None) -> tuple[list[str], bool]:
    """(entity names found in ``question``, whether the search stopped at ``max_lookups``): from
    the left, the longest run of at most :data:`MAX_MENTION_WORDS` words that names a KG entity
    (``kg.find_entity``: exact, then normalised name, label or alias) is taken and the search goes
    on after it. Runs of one word are taken only when capitalised (``Paris``, not ``which``).
    ``max_lookups``: at most that many ``find_entity`` calls (the names found until then are kept)."""
    words = re.findall(r"[\w'’.\-]+", question)
    out: list[str] = []
    i = lookups = 0
    while i < len(words):
        for n in range(min(MAX_MENTION_WORDS, len(words) - i), 0, -1):
            text = " ".join(words[i:i + n]).rstrip(".")
            if n == 1 and not text[:1].isupper():
                continue
            if max_lookups is not None and lookups >= max_lookups:
                return list(dict.fromkeys(out)), True
            lookups += 1
            e = kg.find_entity(text)
            if e >= 0:
                out.append(kg.entity_names[e])
                i += n
                break
        else:
            i += 1
    return list(dict.fromkeys(out)), False


def mentions(kg, question: str, max_lookups: int | None = None) -> list[str]:
    """The entity names of :func:`find_mentions` (see there)."""
    return find_mentions(kg, question, max_lookups)[0]


def lookup_cap(kg) -> int | None:
    """:data:`MAX_REMOTE_LOOKUPS` for a KG behind an endpoint (each lookup a query), else None."""
    return MAX_REMOTE_LOOKUPS if getattr(kg, "endpoint", None) is not None else None


def _norm(q: str) -> str:
    return " ".join(q.lower().split()).rstrip("?. ")


def compose(overrides: Sequence[str]):
    """The run configuration of ``overrides`` (Hydra's compose API on this install's conf/),
    with the group choices Hydra made (``cfg.hydra.runtime.choices``) returned beside it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf, open_dict

    import kgreason  # noqa: F401 - registers the ${kgreason.path:...} resolver conf/paths uses

    overrides = list(overrides)
    if not any(o.lstrip("+~").startswith("tracking=") for o in overrides):
        overrides.append("tracking=none")  # one question is not a run worth a W&B entry
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(version_base="1.3", config_dir=str(config_dir())):
            cfg = hydra_compose(config_name="config", overrides=overrides, return_hydra_config=True)
    finally:
        GlobalHydra.instance().clear()
    choices = {k: v for k, v in OmegaConf.to_container(cfg.hydra.runtime.choices).items()
               if not k.startswith("hydra") and v is not None}
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg, choices


def _example(c, question: str, example_id: str | None, topics: Sequence[str]):
    from kgreason.types import Example

    examples = list(c.dataset)
    if example_id is not None:
        hit = next((ex for ex in examples if ex.id == example_id), None)
        if hit is None:
            raise KeyError(f"the dataset has no example {example_id!r} (e.g. {', '.join(e.id for e in examples[:5])})")
        return hit
    same = next((ex for ex in examples if _norm(ex.question) == _norm(question)), None)
    if same is not None and not topics:
        return same
    if topics and c.kg is not None:
        unknown = [t for t in topics if c.kg.find_entity(t) < 0]
        if unknown:  # a run from no entity would answer nothing and look like the method's failure
            raise KeyError(f"--topic {unknown[0]!r}: the KG has no entity of that name or id "
                           "(give its name, label, alias or id as the KG spells it)")
    if not topics and c.kg is not None:
        topics, capped = find_mentions(c.kg, question, lookup_cap(c.kg))
        if capped:
            print(f"kgreason ask: stopped looking for entity names after {MAX_REMOTE_LOOKUPS} lookups at the KG's "
                  f"endpoint (found {len(topics)}); name the topic entities with --topic NAME", file=sys.stderr)
    return Example(id="ask", question=question, topic_entities=tuple(topics))


def ask(question: str, overrides: Sequence[str] = (), *, example_id: str | None = None,
        topics: Sequence[str] = (), out: str | Path | None = None) -> tuple[dict[str, Any], Path]:
    """Answer one question with the configuration of ``overrides``; write its page. Returns the
    prediction row (as ``predictions.jsonl`` stores it) and the page's path."""
    from omegaconf import OmegaConf

    from kgreason.app import quiet_logs, set_hub_mode
    from kgreason.runner.run import _open_embedding_stores, _start_checks, answer_and_score, build
    from kgreason.runs import scrub_secrets
    from kgreason.tables.question import question_page
    from kgreason.textio import utf8_safe

    from kgreason import progress

    cfg, choices = compose(overrides)
    set_hub_mode(cfg)
    progress.tool_log()  # the set-up's and the answer's progress lines on stderr, as a run prints them
    quiet_logs()
    _start_checks(cfg)  # the settings, the API key, the local model, the call cache: as a run checks them
    reasoner = choices.get("reasoner", "?")
    with progress.stage(f"kgreason ask: loading the KG and the method (reasoner={reasoner})", lazy=True):
        c = build(cfg)
    with c:
        ex = _example(c, question, example_id, topics)
        if ex.id == "ask" and not ex.topic_entities and c.kg is not None:
            print("kgreason ask: no KG entity named in the question; a method that starts from topic entities "
                  "finds none (give one with --topic NAME)", file=sys.stderr)
        with progress.stage("kgreason ask: preparing (embedding stores, the method's index)", lazy=True):
            _open_embedding_stores(c)  # a store build shows its own bar
            c.reasoner.prepare(c.dataset, done=[])  # SubQRAG's corpus index; nothing for the others
        # one line each interval while the method answers (a ToG question makes 15 model calls: minutes on a CPU)
        with progress.stage(f"kgreason ask: answering {'example ' + ex.id if ex.id != 'ask' else 'the question'} "
                            f"with reasoner={reasoner}"):
            row = answer_and_score(c, ex)
        stages = tuple(getattr(c.reasoner, "funnel", ()) or ())
    if not (ex.answers or ex.diagnoses):
        row["metrics"] = {}  # a question typed by hand has no gold: nothing to score
    record = {"choices": choices, "config": scrub_secrets(cfg),
              "overrides": list(overrides), "topic_entities": list(ex.topic_entities)}
    if out is None:
        now = datetime.now()
        root = Path(str(cfg.paths.output)) / "ask" / now.strftime("%Y-%m-%d")
        out = root / f"{now.strftime('%H-%M-%S')}_{choices.get('reasoner', 'reasoner')}.html"
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # text UTF-8 can hold (a question typed in another encoding arrives as lone surrogates)
    out.write_text(utf8_safe(question_page(row, record, source="kgreason ask", stages=stages)), encoding="utf-8")
    out.with_suffix(".json").write_text(utf8_safe(json.dumps({"row": row, "record": record}, indent=1,
                                                             ensure_ascii=False, default=str)), encoding="utf-8")
    return row, out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="kgreason ask",
        description="Answer one question with any method and write one HTML page: the answer, every model call "
                    "(prompt and reply) and a drawing of the subgraph the method used.",
        epilog="Overrides are those of a run (kgreason --help), e.g. reasoner=tog llm=openai llm.model=gpt-4o-mini.")
    ap.add_argument("question", help="the question (quote it); a question of the configured dataset is that example")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, as for a run: group=option key=value")
    ap.add_argument("--topic", action="append", default=[], help="a topic entity (KG name or id); repeatable")
    ap.add_argument("--id", dest="example_id", default=None, help="answer this example of the dataset instead")
    ap.add_argument("--out", default=None, help="the page to write (default <paths.output>/ask/<date>/<time>_<reasoner>.html)")
    args = ap.parse_intermixed_args(argv)  # --topic/--out/--id anywhere, before or among the overrides
    bad = [o for o in args.overrides if "=" not in o and not o.startswith(("+", "~"))]
    if bad:
        print(f"kgreason ask: error: {bad[0]!r} is not an override (group=option or key=value); quote the question "
              "as one argument", file=sys.stderr)
        return 2
    from kgreason.runner.overrides import check

    typo = check(args.overrides)
    if typo:
        print(f"kgreason ask: error: {typo}", file=sys.stderr)
        return 2
    from kgreason.app import _unwrap, debug, is_user_error

    try:
        row, path = ask(args.question, args.overrides, example_id=args.example_id, topics=args.topic, out=args.out)
    except Exception as e:  # noqa: BLE001 - a configuration or data error reads as one or two lines
        if debug() or not (is_user_error(e) or isinstance(e, KeyError)):
            raise
        print(f"kgreason ask: error: {e.args[0] if isinstance(e, KeyError) and e.args else _unwrap(e)}", file=sys.stderr)
        return 2
    for line in summary_lines(row):
        print(line)
    print(f"page: {path}")
    return 0


def summary_lines(row: dict[str, Any]) -> list[str]:
    """What ``kgreason ask`` prints before the page's path: the answer; for a question of the
    dataset (it has gold answers) the gold answers and the example's scores by their labels; and
    the model calls (how many the call cache answered) with their tokens."""
    from kgreason.tables.labels import metric_label

    answer = row.get("prediction") or "(no answer)"
    out = [f"answer: {answer}" + (f"   (error: {row['error']})" if row.get("error") else "")]
    gold = [str(g) for g in (row.get("answers") or row.get("diagnoses") or [])]
    if gold:
        shown = "; ".join(gold[:5]) + (f"; … ({len(gold)} in all)" if len(gold) > 5 else "")
        out.append(f"gold: {shown}   (example {row.get('id')} of the dataset)")
        scores = [(k, v) for k, v in (row.get("metrics") or {}).items() if v is not None]
        if scores:
            out.append("score: " + " · ".join(f"{metric_label(k)} {v:.3f}" if isinstance(v, float) else
                                              f"{metric_label(k)} {v}" for k, v in scores))
    usage = {p: u for p, u in (row.get("llm_usage") or {}).items() if isinstance(u, dict)}
    calls = sum(int(u.get("calls") or 0) for u in usage.values())
    hits = sum(int(u.get("cache_hits") or 0) for u in usage.values())
    tokens = sum(int(u.get("prompt_tokens") or 0) + int(u.get("completion_tokens") or 0) for u in usage.values())
    parts = [f"{calls} model call(s)", f"{hits} answered by the call cache" if hits else "",
             f"{tokens:,} tokens" if tokens else ""]
    out.append("calls: " + ", ".join(x for x in parts if x))
    return out


__all__ = ["ask", "compose", "mentions", "find_mentions", "main", "summary_lines"]
