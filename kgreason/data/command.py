"""``kgreason data``: list the datasets and KGs, download (``fetch``) or convert (``prepare``) them.

* ``kgreason data list [--json]`` — every ``conf/dataset/*.yaml`` and ``conf/kg/*.yaml`` option:
  where it comes from, its licence and size (:mod:`kgreason.data.catalog`), and the exact files a
  run reads, derived from the config itself (each path-like setting resolved with this machine's
  ``paths.*`` and environment), whether they are present, and which variable moves them.
* ``kgreason data fetch NAME [--full] [--dest DIR]`` — download from the upstream source, check
  size and SHA-256 where known, convert, place under the data root (resumable).
* ``kgreason data prepare NAME --from FILE [--dest DIR]`` — the same from a file you have (the
  licensed and credentialed ones: UMLS, ProbSum; MetaQA from its Google Drive folder); for
  ``freebase`` it prints the Virtuoso bulk-load steps.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from kgreason import paths as kpaths
from kgreason.data.catalog import CONFIGS, SOURCES, VARIANTS, Source, lookup

#: settings that name input files (besides any string built from ${paths.data} or ${oc.env:...})
PATH_KEYS = {"path", "corpus", "conditions", "evidences", "names", "aliases", "mrrel", "mrsty", "authorship",
             "citations", "authors", "relations_file"}
#: settings never treated as inputs
SKIP_KEYS = {"_target_", "loader", "cache_dir", "prefix", "hub_id", "default_graph", "name"}
_ENV = re.compile(r"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)")


@dataclass
class Need:
    setting: str            # e.g. "path", "path[1]", "path (hops=1)"
    value: str              # resolved
    env: str | None         # the variable that moves it (KGREASON_DATA, PROBSUM_CSV, ...)
    kind: str = "file"      # file | endpoint
    exists: bool | None = None
    bytes: int | None = None  # size on disk when present


def data_root(dest: str | None = None) -> Path:
    return Path(dest) if dest else Path(kpaths.resolve("data"))


def _paths_node(root: Path) -> dict[str, str]:
    return {"root": kpaths.resolve("root"), "data": str(root), "cache": kpaths.resolve("cache"),
            "models": kpaths.resolve("models"), "output": kpaths.resolve("output")}


def _leaves(raw: Any, res: Any, key: str = ""):
    """(setting, raw string, resolved value) for every leaf; list items keep their parent's key."""
    if isinstance(raw, dict):
        for k, v in raw.items():
            yield from _leaves(v, res.get(k) if isinstance(res, dict) else None, f"{key}.{k}" if key else str(k))
    elif isinstance(raw, list):
        for i, v in enumerate(raw):
            yield from _leaves(v, res[i] if isinstance(res, list) and i < len(res) else None, f"{key}[{i}]")
    else:
        yield key, raw, res


def config_needs(group: str, option: str, root: Path, conf: Path | None = None) -> list[Need]:
    """The files (and endpoints) ``conf/<group>/<option>.yaml`` reads, resolved against ``root``."""
    from omegaconf import OmegaConf

    conf = conf or kpaths.config_dir()
    node = OmegaConf.load(conf / group / f"{option}.yaml")
    variants = VARIANTS.get(f"{group}/{option}", {})
    combos = [dict(zip(variants, vals)) for vals in itertools.product(*variants.values())] if variants else [{}]
    out: list[Need] = []
    seen: set[tuple[str, str]] = set()
    for combo in combos:
        merged = OmegaConf.merge(node, combo)
        cfg = OmegaConf.create({"paths": _paths_node(root), "seed": 0, group: merged})
        resolved = OmegaConf.to_container(cfg, resolve=True)[group]
        raw = OmegaConf.to_container(merged, resolve=False)
        tag = " (" + ", ".join(f"{k}={v}" for k, v in combo.items()) + ")" if combo else ""
        for key, rv, val in _leaves(raw, resolved):
            base = re.sub(r"\[\d+\]$", "", key).rsplit(".", 1)[-1]
            if base in SKIP_KEYS or not isinstance(rv, str) or val is None:
                continue
            env = _ENV.search(rv)
            from_data = "${paths.data}" in rv
            if not (env or from_data or base in PATH_KEYS):
                continue
            var = env.group(1) if env else ("KGREASON_DATA" if from_data else None)
            value = str(val)
            if (key, value) in seen:
                continue
            seen.add((key, value))
            if "://" in value or base == "url":
                out.append(Need(key, value, var, "endpoint", None))
            else:
                p = Path(value)
                out.append(Need(key + tag, value, var, "file", p.is_file(), p.stat().st_size if p.is_file() else None))
    return out


def options(conf: Path | None = None) -> list[tuple[str, str]]:
    conf = conf or kpaths.config_dir()
    return [(g, p.stem) for g in ("dataset", "kg") for p in sorted((conf / g).glob("*.yaml"))]


def status_of(src: Source | None, needs: list[Need]) -> str:
    if src is not None and src.access == "generated":
        return "generated, always present"
    files = [n for n in needs if n.kind == "file"]
    if not files:
        return "endpoint (not checked)" if needs else "nothing on disk"
    have = sum(bool(n.exists) for n in files)
    return "present" if have == len(files) else ("absent" if have == 0 else f"partial ({have}/{len(files)} files)")


def how_to_get(src: Source | None) -> str:
    if src is None:
        return "no catalog entry (add one to kgreason/data/catalog.py)"
    if src.access == "generated":
        return "nothing to get"
    parts = []
    if src.sample:
        parts.append(f"kgreason data fetch {src.name}" + (f" (needs pip install 'kgreason[{src.extra}]')"
                                                          if src.extra else ""))
    if src.full:
        parts.append(f"kgreason data fetch {src.name} --full  ({src.full.writes})")
    if src.prepare:
        parts.append(f"kgreason data prepare {src.name} --from " + ("DUMP" if src.name == "freebase" else "FILE"))
    return " | ".join(parts) or (src.notes or "see docs/data.md")


def listing(root: Path, conf: Path | None = None) -> list[dict]:
    rows = []
    for group, option in options(conf):
        key = f"{group}/{option}"
        src = SOURCES.get(CONFIGS.get(key, ""))
        try:
            needs = [] if (src and src.access == "generated") else config_needs(group, option, root, conf)
        except Exception as e:  # noqa: BLE001 - one unreadable config must not hide the others
            needs = [Need("(config)", f"{conf or kpaths.config_dir()}/{key}.yaml does not resolve: {e}", None,
                          "file", False)]
        rows.append({
            "config": key, "entry": src.name if src else None, "title": src.title if src else None,
            "source": src.upstream if src else None, "licence": src.licence if src else None,
            "size": src.size if src else None, "access": src.access if src else None,
            "notes": src.notes if src else None, "status": status_of(src, needs),
            "present": status_of(src, needs) in ("present", "generated, always present"),
            "needs": [asdict(n) for n in needs], "get": how_to_get(src),
        })
    return rows


def _root_line(root: Path, dest: str | None) -> str:
    if dest:
        return f"data root: {root} (--dest)"
    var = kpaths.ENV["data"]
    return f"data root: {root} ({var}={os.environ[var]})" if os.environ.get(var) else \
        f"data root: {root} ({var} unset: the default)"


def print_listing(rows: list[dict], root_line: str) -> None:
    print(root_line)
    for r in rows:
        print(f"\n{r['config']:<22} {r['status']:<26} {r['access'] or '?'}: {r['title'] or ''}")
        if r["access"] == "generated":
            continue
        print(f"    source:  {r['source']}")
        print(f"    licence: {r['licence']}")
        print(f"    size:    {r['size']}")
        for n in r["needs"]:
            mark = {True: f"ok ({(n['bytes'] or 0) / 1e6:,.1f} MB)", False: "MISSING", None: "not checked"}[n["exists"]]
            via = f"  [{n['env']}]" if n["env"] else ""
            if n["kind"] == "file" and not Path(n["value"]).is_absolute():
                via += " (relative to the working directory)"
            print(f"    needs:   {n['setting']} = {n['value']}{via}  {mark}")
        if r["notes"]:
            print(f"    note:    {r['notes']}")
        print(f"    get:     {r['get']}")


def _exports(written: list[Path]) -> list[str]:
    """``export VAR=...`` lines for files written where a variable-reading setting must be pointed.
    The files are always written under the data root, whatever the variable says (nothing is
    written outside ``--dest``); a variable that points elsewhere is named, not followed."""
    lines = []
    for var, test in (("PROBSUM_CSV", lambda p: p.name.endswith(".csv") and p.parent.name == "probsum"),
                      ("ROG_JSONL", lambda p: p.parent.name == "rog"),
                      ("UMLS_META", lambda p: p.suffix == ".RRF")):
        hit = next((p for p in written if test(p)), None)
        if hit is None:
            continue
        where = hit.parent if var == "UMLS_META" else hit
        now = os.environ.get(var)
        if not now:
            lines.append(f"export {var}={where}")
        elif Path(now).expanduser().resolve() != Path(where).resolve():
            lines.append(f"export {var}={where}   (it now points at {now}, which was not written: "
                         "nothing is written outside the data root)")
    return lines


def _report(src: Source, written: list[Path], full: bool) -> None:
    for p in written:
        print(f"  wrote {p} ({p.stat().st_size:,} bytes)")
    for line in _exports(written):
        print(f"  then: {line}")
    recipe = src.full if full else src.sample
    if recipe is not None and recipe.use:
        print(f"  use:  kgreason ... {recipe.use}")


def fetchable() -> list[str]:
    """The entries ``kgreason data fetch`` with no name gets: public, with a download recipe."""
    return [n for n, s in SOURCES.items() if s.access == "public" and s.sample is not None]


def fetch_all(root: Path, *, full: bool = False, verify: bool = True) -> int:
    """Fetch every :func:`fetchable` entry into ``root``, one after another: one that fails is
    reported and the others still come; then say what needs the user's hand. Exit 1 if any failed."""
    from kgreason.data.fetch import FetchError, NoNetwork, fetch

    names, failed = fetchable(), []
    extras = {n: SOURCES[n].missing_extra() for n in names if SOURCES[n].missing_extra()}
    names = [n for n in names if n not in extras]  # an entry whose extra set-up did not install: named below
    print(f"fetching {len(names)} entries into {root}: {', '.join(names)}")
    for i, name in enumerate(names, 1):
        src = lookup(name)
        print(f"[{i}/{len(names)}] {name}")
        try:
            _report(src, fetch(src, root, full=full, verify=verify), full)
        except NoNetwork as e:  # every other entry would fail the same way: one line, then stop
            print(f"kgreason data fetch: {e}", file=sys.stderr)
            return 1
        except (FetchError, OSError, ImportError) as e:
            failed.append(name)
            print(f"  error: {e}", file=sys.stderr)
    by_hand = [f"{n} ({s.access}: {how_to_get(s)})" for n, s in SOURCES.items()
               if s.access in ("manual", "licensed", "credentialed", "server", "export")]
    by_hand += [f"{n} (needs an extra set-up does not install: {cmd}, then kgreason data fetch {n})"
                for n, cmd in extras.items()]
    if by_hand:
        print("not fetched (need your hand; docs/data.md):\n  " + "\n  ".join(by_hand))
    if failed:
        print(f"kgreason data fetch: {len(failed)} of {len(names)} failed: {', '.join(failed)} "
              f"(again: kgreason data fetch {' '.join(failed)})", file=sys.stderr)
        return 1
    print(f"fetched {len(names)} entries into {root}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="kgreason data",
                                 description="list the datasets and KGs; download (fetch) or convert (prepare) them "
                                             "into the data root",
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="See docs/data.md. Entries: " + ", ".join(SOURCES))
    sub = ap.add_subparsers(dest="cmd", required=True)
    p_list = sub.add_parser("list", help="each dataset and KG option: source, licence, size, files, presence")
    p_list.add_argument("--json", action="store_true", help="print JSON instead of text")
    p_fetch = sub.add_parser("fetch", help="download NAME from its upstream source and convert it; no NAME: "
                             "every dataset and KG that needs no browser, licence or server")
    p_fetch.add_argument("names", nargs="*", metavar="NAME", help="entries of `kgreason data list` ("
                         + ", ".join(n for n, s in SOURCES.items() if s.sample or s.full) + "); none: "
                         + ", ".join(fetchable()))
    p_fetch.add_argument("--full", action="store_true",
                         help="the whole official release instead of the sample the default config reads")
    p_fetch.add_argument("--no-verify", action="store_true", help="accept a downloaded file whose size, SHA-256 or content check fails")
    p_prep = sub.add_parser("prepare", help="convert a file you already have (UMLS, ProbSum, MetaQA, ...)")
    p_prep.add_argument("name", metavar="NAME", help="umls, probsum, metaqa, freebase, or any fetchable entry")
    p_prep.add_argument("--from", dest="src", default=None, metavar="FILE",
                        help="the release file, archive or folder (freebase: the dump, optional)")
    for p in (p_list, p_fetch, p_prep):
        p.add_argument("--dest", default=None, metavar="DIR",
                       help="data root to check / write (default: $KGREASON_DATA, else paths.data's default)")
    try:
        args = ap.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as e:  # --help, or a usage error (argparse printed it)
        return int(e.code or 0)
    root = data_root(args.dest)
    from kgreason.data.fetch import FetchError, fetch, freebase_steps, prepare

    if args.cmd == "list":
        rows = listing(root)
        if args.json:
            print(json.dumps({"data_root": str(root), "entries": rows}, indent=2))
        else:
            print_listing(rows, _root_line(root, args.dest))
        return 0
    try:
        if args.cmd == "fetch":
            if not args.names:
                return fetch_all(root, full=args.full, verify=not args.no_verify)
            for name in args.names:
                src = lookup(name)
                if src.missing_extra():
                    print(f"error: kgreason data fetch {src.name} needs the `{src.extra}` extra, which set-up does "
                          f"not install: {src.missing_extra()}", file=sys.stderr)
                    return 1
                written = fetch(src, root, full=args.full, verify=not args.no_verify)
                _report(src, written, args.full)
            return 0
        src = lookup(args.name)
        if src.name == "freebase":
            print(freebase_steps(args.src))
            return 0
        if not args.src:
            print(f"error: kgreason data prepare {src.name} needs --from FILE", file=sys.stderr)
            return 2
        written = prepare(src, Path(args.src), root)
        _report(src, written, full=False)
        return 0
    except (FetchError, KeyError, ImportError, OSError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"error: {msg}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
