"""Where a method's model time goes, read from a run's traces (issue 70).

``kgreason bench tokens RUN_OR_BUNDLE [...]`` (``python -m kgreason.bench tokens``) reads every
``predictions.jsonl`` under the given run dirs, sweep dirs or bundles and reports, per run and per
prompt purpose (a trace step's ``prompt_id`` without its path/step indices: ``step_p1_t0`` →
``step``):

* ``calls`` and ``prompt tok`` / question, as the backend counted them;
* ``prefix-reusable``: the share of those prompt tokens that repeat the start of an earlier prompt
  (or an earlier prompt followed by its reply) of the same question, i.e. what a prefix cache that
  keeps every earlier state of the question could skip; ``previous-only``: the share a cache of one
  state (the previous call's prompt and reply, llama.cpp's own single-slot reuse) could skip.
  Both are measured on characters of the messages and converted with each prompt's own
  tokens-per-character ratio (a trace keeps texts, not token ids);
* ``reused``: the prompt tokens the backend reported it did not compute (``Usage.prompt_tokens_reused``:
  the llama.cpp route's prefix reuse, OpenAI's ``cached_tokens``); ``–`` where the run predates
  that count;
* ``completion tok`` / question and ``parsed``: the share of completion tokens up to the end of what
  the reply's parser read (the first JSON value for JSON replies, the parsed text otherwise);
* ``unparseable``: replies the parser rejected (re-asks included);
* ``model s`` / question: the backend's reported seconds (call cache hits report their original
  call's seconds); ``CPU s`` / question: the CPU seconds the in-process model spent (``Usage.cpu_s``:
  unlike wall seconds they do not grow when the machine is busy; ``–`` for runs that predate it
  or whose model ran elsewhere).

Scoring calls (``llm.score``) are not trace steps; their calls, tokens and seconds come from the
row's ``llm_usage`` (``score``): rows written before scoring tokens were counted show 0 tokens.

``--json PATH`` writes the numbers; ``--markdown PATH`` the table. Nothing here calls a model.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

_INDEX = re.compile(r"(_(?:p|t|d|r|s|round)?\d+)+$")


def purpose_of(prompt_id: str) -> str:
    """``step_p1_t0`` → ``step``, ``hypothesis_p2_t1`` → ``hypothesis``, ``prune_relations`` unchanged."""
    return _INDEX.sub("", str(prompt_id)) or str(prompt_id)


def conversation_text(messages: Sequence[dict]) -> str:
    """The text a prefix cache sees, message by message (role tags keep two roles apart)."""
    return "".join(f"<|{m.get('role', '')}|>{m.get('content', '')}\n" for m in messages)


def common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix of two strings."""
    return _lcp(_codes(a), _codes(b))


def _codes(s: str) -> "np.ndarray":
    import numpy as np

    return np.frombuffer(s.encode("utf-32-le"), dtype=np.uint32)


def _lcp(a, b) -> int:
    import numpy as np

    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


def parsed_end(reply: str, parsed: Any) -> int:
    """Characters of ``reply`` up to the end of what its parser read: the end of the first JSON
    value that decodes (for a dict/list result), else the end of the parsed text's first
    occurrence (a closing code fence right after it included); the whole reply when neither is found."""
    if not reply:
        return 0
    if isinstance(parsed, (dict, list)):
        dec = json.JSONDecoder()
        for m in re.finditer(r"[\[{]", reply):
            try:
                _, end = dec.raw_decode(reply, m.start())
            except ValueError:
                continue
            return end
        return len(reply)
    if isinstance(parsed, str) and parsed.strip():
        i = reply.find(parsed.strip())
        if i >= 0:
            end = i + len(parsed.strip())
            fence = re.match(r"\s*```", reply[end:])
            return end + (fence.end() if fence else 0)
    if isinstance(parsed, (int, float)) and not isinstance(parsed, bool):
        m = re.search(r"\d+", reply)
        if m:
            return m.end()
    return len(reply)


@dataclass
class PurposeStats:
    calls: int = 0
    prompt_tokens: float = 0.0
    reusable_tokens: float = 0.0
    previous_tokens: float = 0.0
    reused_tokens: float = 0.0
    reused_known: int = 0
    completion_tokens: float = 0.0
    parsed_tokens: float = 0.0
    unparseable: int = 0
    seconds: float = 0.0
    cpu_s: float = 0.0

    def add(self, other: "PurposeStats") -> None:
        for k in self.__dataclass_fields__:
            setattr(self, k, getattr(self, k) + getattr(other, k))


@dataclass
class RunStats:
    name: str
    method: str
    questions: int = 0
    by_purpose: dict[str, PurposeStats] = field(default_factory=lambda: defaultdict(PurposeStats))

    def total(self) -> PurposeStats:
        out = PurposeStats()
        for s in self.by_purpose.values():
            out.add(s)
        return out


def _usage(d: dict | None) -> dict:
    return d if isinstance(d, dict) else {}


def question_stats(row: dict) -> dict[str, PurposeStats]:
    """One question's per-purpose figures from its trace and its ``llm_usage`` (scoring calls)."""
    out: dict[str, PurposeStats] = defaultdict(PurposeStats)
    earlier: list = []  # every earlier prompt, and every earlier prompt + its first reply (code points)
    previous = None
    for step in row.get("trace") or ():
        if step.get("kind") != "llm":
            continue
        d = step.get("data") or {}
        u = _usage(d.get("usage"))
        s = out[purpose_of(d.get("prompt_id") or step.get("name") or "?")]
        text = conversation_text(d.get("messages") or ())
        pt = float(u.get("prompt_tokens", 0) or 0)
        per_char = pt / len(text) if text else 0.0
        codes = _codes(text)
        best = max((_lcp(codes, e) for e in earlier), default=0)
        prev = _lcp(codes, previous) if previous is not None else 0
        s.calls += int(u.get("calls", 0) or 0) + int(u.get("cache_hits", 0) or 0)
        s.prompt_tokens += pt
        s.reusable_tokens += best * per_char
        s.previous_tokens += prev * per_char
        if "prompt_tokens_reused" in u:
            s.reused_tokens += float(u.get("prompt_tokens_reused") or 0)
            s.reused_known += 1
        ct = float(u.get("completion_tokens", 0) or 0)
        replies = [str(r) for r in d.get("replies") or ()]
        s.completion_tokens += ct
        if replies and ct:
            total_chars = sum(len(r) for r in replies) or 1
            used = sum(parsed_end(r, d.get("parsed")) if d.get("parse_ok", True) else 0 for r in replies[:1])
            s.parsed_tokens += ct * min(1.0, used / total_chars)
        if not d.get("parse_ok", True):
            s.unparseable += 1
        s.seconds += float(u.get("latency_s", 0) or 0)
        s.cpu_s += float(u.get("cpu_s", 0) or 0)
        reply = replies[0] if replies else ""
        previous = _codes(text + reply)
        earlier += [codes, previous]
    score = _usage(_usage(row.get("llm_usage")).get("score"))
    if score:
        s = out["score (P_θ)"]
        s.calls += int(score.get("calls", 0) or 0) + int(score.get("cache_hits", 0) or 0)
        s.prompt_tokens += float(score.get("prompt_tokens", 0) or 0)
        if "prompt_tokens_reused" in score:
            s.reused_tokens += float(score.get("prompt_tokens_reused") or 0)
            s.reused_known += 1
        s.seconds += float(score.get("latency_s", 0) or 0)
        s.cpu_s += float(score.get("cpu_s", 0) or 0)
    return out


def _method(run_dir: Path) -> str:
    """The run's reasoner: the class its config instantiates (``kgreason.reasoners.sgr.SGR`` → ``sgr``)."""
    cfg = run_dir / "config.yaml"
    if cfg.is_file():
        import yaml

        try:
            doc = yaml.safe_load(cfg.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError:
            return "?"
        target = str(((doc.get("reasoner") or {}) if isinstance(doc, dict) else {}).get("_target_", ""))
        m = re.match(r"kgreason\.reasoners\.(\w+)", target)
        if m:
            return m.group(1)
    return "?"


def prediction_rows(run_dir: Path) -> Iterable[dict]:
    """The rows of a run dir's ``predictions.jsonl`` (errored rows too; a line that is not a JSON
    object, such as one cut by a kill, is skipped)."""
    for line in (run_dir / "predictions.jsonl").read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            yield row


def run_stats(run_dir: Path, name: str | None = None) -> RunStats:
    """Figures of one run dir (its ``predictions.jsonl``); errored rows count as questions."""
    st = RunStats(name=name or run_dir.name, method=_method(run_dir))
    for row in prediction_rows(run_dir):
        st.questions += 1
        for p, s in question_stats(row).items():
            st.by_purpose[p].add(s)
    return st


def collect(paths: Iterable[str | Path]) -> list[RunStats]:
    """Every run under ``paths`` (run dirs, sweep dirs, bundles), in path order."""
    from kgreason.storage.bundle import readable

    out: list[RunStats] = []
    for path in paths:
        with readable(path) as (root, _):
            label = Path(path).name.removesuffix(".tar.gz")
            runs = sorted(p.parent for p in Path(root).rglob("predictions.jsonl"))
            if not runs:
                raise FileNotFoundError(f"{path}: no predictions.jsonl (not a run dir, sweep dir or bundle)")
            for r in runs:
                out.append(run_stats(r, label if len(runs) == 1 else f"{label}/{r.name}"))
    return out


def _share(x: float, of: float) -> str:
    return f"{100 * x / of:.0f} %" if of else "–"


def rows(stats: Sequence[RunStats], per_purpose: bool = True) -> list[dict[str, Any]]:
    """The table's rows: one per run (``purpose`` = ``all``), then one per purpose when asked."""
    out = []
    for st in stats:
        n = max(st.questions, 1)
        items = [("all", st.total())] + (sorted(st.by_purpose.items(), key=lambda kv: -kv[1].prompt_tokens)
                                         if per_purpose else [])
        for purpose, s in items:
            out.append({
                "run": st.name, "method": st.method, "purpose": purpose, "questions": st.questions,
                "calls_per_q": s.calls / n, "prompt_tokens_per_q": s.prompt_tokens / n,
                "prefix_reusable": s.reusable_tokens / s.prompt_tokens if s.prompt_tokens else None,
                "previous_only": s.previous_tokens / s.prompt_tokens if s.prompt_tokens else None,
                "reused": (s.reused_tokens / s.prompt_tokens if s.prompt_tokens else None) if s.reused_known else None,
                "completion_tokens_per_q": s.completion_tokens / n,
                "parsed": s.parsed_tokens / s.completion_tokens if s.completion_tokens else None,
                "unparseable": s.unparseable, "unparseable_share": s.unparseable / s.calls if s.calls else None,
                "model_s_per_q": s.seconds / n,
                "cpu_s_per_q": s.cpu_s / n if s.cpu_s else None,
            })
    return out


def markdown(table: Sequence[dict[str, Any]]) -> str:
    def pct(v: float | None) -> str:
        return "–" if v is None else f"{100 * v:.0f} %"

    head = ("| run | purpose | calls / q | prompt tok / q | prefix-reusable | previous-only | reused | "
            "completion tok / q | parsed | unparseable | model s / q | CPU s / q |\n|---|---|---|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in table:
        bold = r["purpose"] == "all"
        name = f"**{r['run']}** ({r['method']})" if bold else ""
        unp = f"{r['unparseable']} ({pct(r['unparseable_share'])})" if r["unparseable_share"] is not None else "0"
        lines.append(f"| {name} | {r['purpose']} | {r['calls_per_q']:.1f} | {r['prompt_tokens_per_q']:,.0f} | "
                     f"{pct(r['prefix_reusable'])} | {pct(r['previous_only'])} | {pct(r['reused'])} | "
                     f"{r['completion_tokens_per_q']:,.0f} | {pct(r['parsed'])} | {unp} | {r['model_s_per_q']:.1f} | "
                     f"{'–' if r['cpu_s_per_q'] is None else format(r['cpu_s_per_q'], '.1f')} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kgreason bench tokens",
                                 description="tokens read and written per method and prompt, from run traces")
    ap.add_argument("paths", nargs="+", help="run dirs, sweep dirs or bundles (.tar.gz)")
    ap.add_argument("--summary", action="store_true", help="one line per run (no per-purpose lines)")
    ap.add_argument("--json", dest="json_out", help="write the table as JSON here")
    ap.add_argument("--markdown", help="write the Markdown table here")
    ap.add_argument("--write-block", metavar="DOC",
                    help="replace the generated block of DOC (between '<!-- generated: bench tokens' and "
                         "'<!-- end generated: bench tokens -->') with the table and the command that made it")
    a = ap.parse_args(list(argv) if argv is not None else None)
    try:
        stats = collect(a.paths)
    except (FileNotFoundError, ValueError) as e:
        print(f"kgreason bench tokens: error: {e}", file=sys.stderr)
        return 2
    table = rows(stats, per_purpose=not a.summary)
    md = markdown(table)
    print(md, end="")
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    if a.markdown:
        Path(a.markdown).write_text(md, encoding="utf-8")
    if a.write_block:
        try:
            write_block(Path(a.write_block), md, "kgreason bench tokens " + " ".join(a.paths))
        except ValueError as e:
            print(f"kgreason bench tokens: error: {e}", file=sys.stderr)
            return 2
    return 0


BEGIN, END = "<!-- generated: bench tokens", "<!-- end generated: bench tokens -->"


def write_block(doc: Path, table: str, command: str) -> None:
    """Put ``table`` between the generated-block markers of ``doc`` (the command in the first marker)."""
    text = doc.read_text(encoding="utf-8")
    i, j = text.find(BEGIN), text.find(END)
    if i < 0 or j < i:
        raise ValueError(f"{doc}: no generated block (a line starting {BEGIN!r} and one {END!r})")
    eol = text.index("\n", i)
    block = f"{BEGIN} ({command}) -->\n{table}"
    doc.write_text(text[:i] + block + text[j:], encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
