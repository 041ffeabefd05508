"""Repeats of one configuration are not seeds: the runs of a folder whose ``run.json`` holds the
same config fingerprint (kgreason/record.py: the resolved config without the keys that cannot
change a result; the seed is in it) are one setting run more than once, e.g. a run stopped and
started again into a new dir, or the same command repeated next day. The table keeps the newest
complete one (by when its ``metrics.json`` was written; the newest partial one when none is
complete) and lists the others as superseded, instead of averaging them as seeds or refusing to
average a partial one with a complete one. Runs of different seeds have different fingerprints
and stay seeds; dirs without a fingerprint (made before ``run.json``) are left as they are."""

from __future__ import annotations

from collections import defaultdict

from kgreason.tables.collect import Collected, Job


def supersede(c: Collected) -> list[str]:
    """Drop from ``c`` (its frame and jobs) every run superseded by a newer run of the same
    configuration; mark missing runs of a kept configuration. Returns the note naming them."""
    same: dict[str, list[Job]] = defaultdict(list)
    for j in c.jobs.values():
        if j.fingerprint:
            same[j.fingerprint].append(j)
    kept: dict[str, Job] = {}
    pairs: list[tuple[str, str]] = []
    for fp, jobs in same.items():
        complete = [j for j in jobs if not j.partial and j.failed is None]
        keep = max(complete or jobs, key=lambda j: (j.finished, j.name))
        kept[fp] = keep
        pairs += [(j.name, keep.name) for j in jobs if j is not keep]
    for m in c.missing:
        keep = kept.get(c.fingerprints.get(m["job"], ""))
        if keep is not None:
            m["reason"] = f"superseded by {keep.name} (the same configuration, run again); {m['reason']}"
    if not pairs:
        return []
    gone = {a for a, _ in pairs}
    for name in gone:
        c.jobs.pop(name, None)
    c.df = c.df[~c.df["job"].isin(gone)].reset_index(drop=True)
    listed = "; ".join(f"{a} superseded by {b}" for a, b in sorted(pairs))
    return [f"Superseded run(s), left out (the same configuration as a newer run kept in the table; repeats are "
            f"not seeds): {listed}"]
