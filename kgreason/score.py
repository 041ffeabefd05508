"""Re-score a predictions file without re-running anything.

``python -m kgreason.score PRED.jsonl [--metrics em,f1,hits_at_1] [--out metrics.json] [--dedupe OUT]``

Each line is a JSON object with at least:

* ``id`` – example id;
* ``prediction`` – the answer string, or a ranked list of answers (``predictions``, a ranked
  list, wins when present — a run's own ``predictions.jsonl`` has both);
* ``answers`` – gold answers with aliases (a list of strings), or a list of alias lists (one per
  distinct gold answer; then ``all_answers_found`` needs every group).

An id that appears on several lines (a run dir whose errored examples were retried on resume)
is scored once, from its **last** line, as the run itself does. ``--dedupe OUT`` also writes
the file with only those last lines (``OUT`` may be the input file itself).

Optional: ``answer_groups``, ``diagnoses`` (clinical; the ``dx_*`` metrics use them, else
``answers``), ``rounds``, ``extra`` (``retrieved``, ``search_space``, ``dx_entity_links``: the
run's ``{diagnosis string: KG entity name}``, so entity-level diagnosis P/R/F1 is reproduced
without the KG). Prints ``{metric: mean}`` as JSON
(examples where a metric is not applicable are left out of its mean, as in a run).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

from kgreason.metrics import METRICS, example_value, run_values
from kgreason.types import Example, Prediction

DEFAULT_METRICS = ("em", "f1", "hits_at_1", "all_answers_found")


class ScoreInputError(ValueError):
    """A predictions line is malformed; the message names the file and line."""


def _strs(value: Any, where: str, field: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ScoreInputError(f"{where}: field {field!r} must be a string or a list of strings, got {value!r:.80}")


def parse_line(obj: Any, where: str) -> tuple[Prediction, Example]:
    """One JSON object → ``(Prediction, Example)``; ``where`` is ``file:line`` for errors."""
    if not isinstance(obj, dict):
        raise ScoreInputError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    for key in ("id", "answers"):
        if key not in obj:
            raise ScoreInputError(f"{where}: missing required field {key!r} (need id, prediction, answers)")
    if "prediction" not in obj and "predictions" not in obj:
        raise ScoreInputError(f"{where}: missing required field 'prediction' (a string or a ranked list)")
    ranked = obj.get("predictions")
    ranked = _strs(ranked, where, "predictions") if ranked is not None else None
    if ranked is None or (not ranked and obj.get("prediction")):
        pred = obj.get("prediction")
        ranked = [] if pred is None else _strs(pred, where, "prediction")
    gold = obj["answers"]
    groups: list[list[str]] = []
    if isinstance(gold, list) and gold and all(isinstance(g, list) for g in gold):
        groups = [_strs(g, where, "answers[i]") for g in gold]
        answers = [a for g in groups for a in g]
    else:
        answers = _strs(gold, where, "answers")
    if "answer_groups" in obj and obj["answer_groups"]:
        if not isinstance(obj["answer_groups"], list):
            raise ScoreInputError(f"{where}: field 'answer_groups' must be a list of lists of strings")
        groups = [_strs(g, where, "answer_groups[i]") for g in obj["answer_groups"]]
    extra = obj.get("extra") or {}
    if not isinstance(extra, dict):
        raise ScoreInputError(f"{where}: field 'extra' must be an object")
    links = extra.get("dx_entity_links")
    if links is not None and not (isinstance(links, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                                   for k, v in links.items())):
        raise ScoreInputError(f"{where}: field 'extra.dx_entity_links' must be an object "
                              "{diagnosis string: KG entity name}")
    diagnoses = _strs(obj["diagnoses"], where, "diagnoses") if obj.get("diagnoses") else []
    ex = Example(id=str(obj["id"]), question=str(obj.get("question", "")), answers=tuple(answers),
                 answer_groups=tuple(tuple(g) for g in groups), diagnoses=tuple(diagnoses))
    rounds = obj.get("rounds") or {}
    if not isinstance(rounds, dict):
        raise ScoreInputError(f"{where}: field 'rounds' must be an object {{round name: [answers]}}")
    rounds = {str(k): tuple(_strs(v, where, f"rounds.{k}")) for k, v in rounds.items()}
    error = obj.get("error") or None  # an errored example scores each metric's worst value (docs/metrics.md)
    return Prediction(example_id=ex.id, answers=tuple(ranked), extra=extra, rounds=rounds,
                      error=None if error is None else str(error)), ex


def read_pairs(path: str | Path) -> list[tuple[Prediction, Example]]:
    """The file's ``(prediction, example)`` pairs, the last line per id winning (in the order
    ids first appear)."""
    path = Path(path)
    if path.is_dir():  # a run dir: its predictions
        if not (path / "predictions.jsonl").is_file():
            raise ScoreInputError(f"{path}: a directory without predictions.jsonl (give a run dir or its "
                                  "predictions.jsonl)")
        path = path / "predictions.jsonl"
    if not path.is_file():
        raise ScoreInputError(f"{path}: no such file")
    pairs: dict[str, tuple[Prediction, Example]] = {}
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{i}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ScoreInputError(f"{where}: invalid JSON ({e.msg} at column {e.colno})") from None
            pred, ex = parse_line(obj, where)
            pairs[ex.id] = (pred, ex)  # a later line for the same id replaces it, keeping its place
    return list(pairs.values())


def dedupe(path: str | Path, out: str | Path) -> tuple[int, int]:
    """Write ``path``'s lines to ``out`` keeping the last line per id, in the order ids first
    appear (how the run, ``score`` and ``tables`` read the file); lines are copied unchanged.
    ``out`` may be ``path`` itself (replaced atomically). Returns ``(ids kept, lines dropped)``."""
    path, out = Path(path), Path(out)
    last: dict[str, str] = {}
    n = 0
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, start=1):
            if not line.strip():
                continue
            n += 1
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ScoreInputError(f"{path}:{i}: invalid JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(obj, dict) or "id" not in obj:
                raise ScoreInputError(f"{path}:{i}: expected a JSON object with an 'id'")
            last[str(obj["id"])] = line if line.endswith("\n") else line + "\n"
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text("".join(last.values()), encoding="utf-8")
    tmp.replace(out)
    return len(last), n - len(last)


def score(pairs: Iterable[tuple[Prediction, Example]],
          metrics: Sequence[str] = DEFAULT_METRICS) -> dict[str, float | None]:
    """Mean of each metric over the pairs (``None`` values left out; ``None`` if none apply,
    as in a run's metrics.json: JSON has no NaN). An errored pair (its line has an ``error``)
    scores the metric's worst value under the run's rule (docs/metrics.md "Errored examples")."""
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise KeyError(f"unknown metrics {unknown}; known: {sorted(METRICS)}")
    pairs = list(pairs)
    out: dict[str, float | None] = {}
    for name in metrics:
        m = METRICS[name]
        vals = run_values(m, [example_value(m, p, e) for p, e in pairs], [bool(p.error) for p, _ in pairs])
        vals = [v for v in vals if v is not None]
        out[name] = float(m.aggregate(vals)) if vals else None
    # the same rounding as run.summarise, so a run's own file gives its metrics.json exactly
    return {k: (None if v is None or math.isnan(v) else round(v, 10)) for k, v in out.items()}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kgreason.score", description=__doc__.split("\n\n")[0])
    ap.add_argument("predictions", help="JSONL file: id, prediction, answers per line")
    ap.add_argument("--metrics", default=",".join(DEFAULT_METRICS),
                    help=f"comma-separated metric names (known: {', '.join(sorted(METRICS))})")
    ap.add_argument("--out", default=None, help="also write the JSON here")
    ap.add_argument("--per-example", default=None, metavar="PATH",
                    help="also write one JSON line per example: {id, <metric>: value or null}")
    ap.add_argument("--dedupe", default=None, metavar="OUT",
                    help="also write the file with only the last line per id (superseded error rows of "
                         "retried examples dropped) to OUT")
    args = ap.parse_args(argv)
    names = [m.strip() for m in args.metrics.split(",") if m.strip()]
    try:
        pairs = read_pairs(args.predictions)
        result = score(pairs, names)
        if args.dedupe:
            kept, dropped = dedupe(args.predictions, args.dedupe)
            print(f"{args.dedupe}: {kept} ids, {dropped} superseded line(s) dropped", file=sys.stderr)
    except (ScoreInputError, KeyError) as e:
        print(f"error: {e.args[0] if e.args else e}", file=sys.stderr)
        return 2
    if args.per_example:
        with open(args.per_example, "w", encoding="utf-8") as f:
            for p, e in pairs:
                vals = {n: example_value(METRICS[n], p, e) for n in names}
                f.write(json.dumps({"id": e.id, **vals}, sort_keys=True) + "\n")
    text = json.dumps(result, indent=2, sort_keys=True)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
