"""The prompts a bundled row sent, read from its traces: what the cost scripts beside this file
measure again (``grammar_overhead.py``, ``prefill_threads.py``)."""

from __future__ import annotations

import json
import tarfile


def first_prompts(bundle: str, n: int, name_prefix: str | None = None) -> list[list[dict]]:
    """The ``messages`` of the first model call of each of the first ``n`` questions of ``bundle``
    (its ``predictions.jsonl`` traces); with ``name_prefix``, the first call whose trace name
    starts with it (``hypothesis``: SGR's §3.5 hypothesis prompts)."""
    out: list[list[dict]] = []
    with tarfile.open(bundle) as t:
        for m in t.getmembers():
            if not m.name.endswith("predictions.jsonl"):
                continue
            for line in t.extractfile(m):
                for ev in json.loads(line).get("trace") or []:
                    msgs = (ev.get("data") or {}).get("messages")
                    if msgs and ev.get("kind") == "llm" and (ev.get("name") or "").startswith(name_prefix or ""):
                        out.append(msgs)
                        break
                if len(out) >= n:
                    return out
    return out
