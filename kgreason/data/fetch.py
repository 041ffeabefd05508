"""Download, check and convert the datasets and KGs of :mod:`kgreason.data.catalog`.

Two thin network functions, :func:`download` (a URL → appended to a ``.part`` file, resuming with
an HTTP ``Range`` request) and :func:`hub_download` (a Hugging Face split → JSON Lines), are the
only code that touches the network. Everything after them — size and SHA-256 checks, unpacking,
conversion to the formats the loaders read, placing files under the data root — runs offline and
is tested on small files in the upstream formats (tests/data/test_data_cli.py).

Resuming: a download goes to ``<staging>/<name>.part``; an interrupted one leaves the bytes it got,
and the next ``kgreason data fetch`` asks the server for the rest (``Range: bytes=<have>-``; a
server that ignores it sends the whole file again, which replaces the part). A file already
complete (its size and hash match, or it exists when neither is known) is not fetched again.
Staged downloads stay in ``<data root>/.downloads/<name>/`` (delete them once converted).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import shutil
import sys
import urllib.error
import urllib.request
import zipfile
from fnmatch import fnmatch
from pathlib import Path
from typing import Callable, Iterable

from kgreason.data.catalog import Recipe, Remote, Source

USER_AGENT = "kgreason-data/0.1 (+https://github.com/; python urllib)"
CHUNK = 1 << 20


class FetchError(RuntimeError):
    """A download or conversion that cannot finish; the message says what to do next."""


# ----------------------------------------------------------------------------- network (thin)


def download(url: str, part: Path, timeout: float = 60.0) -> None:
    """Append the bytes of ``url`` that ``part`` lacks (``Range: bytes=<size of part>-``).

    ``file://`` URLs are read the same way (from the offset). A server answering 200 to a range
    request (it ignores ranges) restarts the part; 416 (range past the end) leaves it as it is.
    Raises whatever the transfer raises; the bytes already written stay in ``part``.
    """
    have = part.stat().st_size if part.exists() else 0
    if url.startswith("file://"):
        src = Path(urllib.request.url2pathname(url[len("file://"):]))
        with open(src, "rb") as fin, open(part, "ab") as fout:
            fin.seek(have)
            shutil.copyfileobj(fin, fout, CHUNK)
        return
    headers = {"User-Agent": USER_AGENT}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        resp = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416 and have:  # nothing left to send
            return
        raise
    with resp:
        status = getattr(resp, "status", None) or resp.getcode()
        if have and status == 206:
            rng = resp.headers.get("Content-Range", "")
            start = rng.split()[1].split("-")[0] if rng.startswith("bytes ") else str(have)
            if start != str(have):
                raise OSError(f"asked for bytes from {have}, the server sent {rng!r}")
        mode = "ab" if (have and status == 206) else "wb"
        with open(part, mode) as f:
            shutil.copyfileobj(resp, f, CHUNK)


def hub_download(hub_id: str, config: str | None, split: str, part: Path) -> None:
    """A Hugging Face dataset split → JSON Lines at ``part`` (needs ``pip install 'kgreason[hub]'``)."""
    from kgreason.data.kgqa import hub_records

    os.environ.pop("HF_HUB_OFFLINE", None)  # this command is the one place meant to download
    os.environ.pop("HF_DATASETS_OFFLINE", None)
    records = hub_records(hub_id, split, config)
    with open(part, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False, default=str) + "\n")


# ----------------------------------------------------------------------------- one file


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _check(path: Path, remote: Remote, verify: bool) -> str | None:
    """``None`` when ``path`` matches the remote's known size and hash (or ``verify`` is off),
    else what differs."""
    if not verify:
        return None
    size = path.stat().st_size
    if remote.size is not None and size != remote.size:
        return f"{size:,} bytes, expected {remote.size:,}"
    if remote.sha256:
        got = sha256_of(path)
        if got != remote.sha256:
            return f"SHA-256 {got}, expected {remote.sha256}"
    return None


def fetch_remote(remote: Remote, staging: Path, *, verify: bool = True, log: Callable[[str], None] = print) -> Path:
    """Bring one upstream file into ``staging`` (resumable; skipped when already complete).

    ``verify=False`` (``--no-verify``) accepts a transfer that ended without error whatever its
    size and hash."""
    staging.mkdir(parents=True, exist_ok=True)
    dest = staging / remote.name
    where = remote.url or f"hub:{remote.hub[0]}[{remote.hub[2]}]"  # type: ignore[index]
    if dest.exists() and _check(dest, remote, verify) is None:
        log(f"  {remote.name}: already complete ({dest.stat().st_size:,} bytes), not fetched again")
        return dest
    if dest.exists():
        dest.unlink()
    part = dest.with_name(dest.name + ".part")
    if remote.size is not None and part.exists() and part.stat().st_size > remote.size:
        part.unlink()  # longer than the file can be: start over
    have = part.stat().st_size if part.exists() else 0
    log(f"  {remote.name}: {'resuming at ' + format(have, ',') + ' bytes from' if have else 'from'} {where}")
    if remote.size is None or have < remote.size:
        try:
            if remote.hub:
                hub_download(*remote.hub, part)
            else:
                download(remote.url, part)  # type: ignore[arg-type]
        except ImportError:
            raise
        except Exception as e:  # noqa: BLE001 - network errors of every kind end the same way
            got = part.stat().st_size if part.exists() else 0
            raise FetchError(f"{where}: download stopped ({type(e).__name__}: {e}); {got:,} bytes kept in "
                             f"{part}; run the same command again to resume") from e
    got = part.stat().st_size
    if verify and remote.size is not None and got < remote.size:
        raise FetchError(f"{where}: got {got:,} bytes, expected {remote.size:,} (kept in {part}). If the "
                         "transfer was cut, run the same command again to resume; if it stays short, the upstream "
                         "file changed or the pin in kgreason/data/catalog.py is wrong (--no-verify accepts it)")
    bad = _check(part, remote, verify)
    if bad:
        bad_path = part.with_name(remote.name + ".mismatch")
        part.replace(bad_path)
        raise FetchError(f"{where}: the downloaded file has {bad} (moved to {bad_path}). The upstream file "
                         "changed or the pin in kgreason/data/catalog.py is wrong; check it, or pass "
                         "--no-verify to accept it")
    part.replace(dest)
    return dest


# ----------------------------------------------------------------------------- inputs


class Inputs:
    """Finds input files by name in a folder, a zip (nested zips too) or a single file, which
    is where a converter's upstream files are: the staging folder of a fetch, or ``--from``."""

    def __init__(self, src: Path, work: Path) -> None:
        self.src, self.work = Path(src), Path(work)
        if not self.src.exists():
            raise FetchError(f"{self.src}: no such file or folder")

    def _files(self) -> Iterable[Path]:
        if self.src.is_dir():
            yield from sorted(p for p in self.src.rglob("*") if p.is_file() and not p.name.endswith(".part"))
        else:
            yield self.src

    def find(self, *patterns: str, required: bool = True) -> Path | None:
        """The file whose name (or path inside a folder or archive) matches the first pattern that
        matches anything; archives, and archives inside them, are opened as needed."""
        for pattern in patterns:
            hit = self._find_one(pattern)
            if hit is not None:
                return hit
        if required:
            raise FetchError(f"{self.src}: no file named {' or '.join(patterns)} (in it or in its archives)")
        return None

    def _find_one(self, pattern: str) -> Path | None:
        def hit(name: str) -> bool:
            return fnmatch(name.rsplit("/", 1)[-1], pattern) or fnmatch(name, pattern) or fnmatch(name, "*/" + pattern)

        archives = []
        for f in self._files():
            rel = f.relative_to(self.src).as_posix() if self.src.is_dir() else f.name
            if self.src == self.work and rel.startswith("unpacked/"):
                continue  # our own extraction folder (staging == work)
            if hit(rel):
                return f
            if zipfile.is_zipfile(f):
                archives.append(f)
        while archives:  # breadth-first through (nested) archives
            arc = archives.pop(0)
            with zipfile.ZipFile(arc) as z:
                for m in z.namelist():
                    parts = Path(m).parts
                    if m.endswith("/") or "__MACOSX" in parts or ".." in parts or Path(m).is_absolute():
                        continue
                    if hit(m) or m.endswith(".zip"):
                        out = self.work / "unpacked" / arc.stem / m
                        info = z.getinfo(m)
                        if not (out.exists() and out.stat().st_size == info.file_size):
                            out.parent.mkdir(parents=True, exist_ok=True)
                            with z.open(m) as fin, open(out, "wb") as fout:
                                shutil.copyfileobj(fin, fout, CHUNK)
                        if hit(m):
                            return out
                        archives.append(out)
        return None


# ----------------------------------------------------------------------------- writing


def _place(src: Path, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.copyfile(src, tmp)
    tmp.replace(dest)
    return dest


def _write_jsonl(records: Iterable[dict], dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    tmp.replace(dest)
    return dest


def _validated(path: Path, parse, label: str) -> list[dict]:
    """Records of ``path`` (JSON list / JSON Lines), each checked by a loader's record parser."""
    from kgreason.data.kgqa import read_records

    recs = read_records(path)
    for i, r in enumerate(recs):
        parse(r, f"{path}: record {i}")
    return recs


def env_target(var: str, default: Path) -> Path:
    """Where a setting that reads ``$VAR`` looks: the variable when set, else ``default``."""
    v = os.environ.get(var)
    return Path(v) if v else default


# ----------------------------------------------------------------------------- converters
# Each takes (inputs, root, targets) and returns the files it wrote. ``targets`` is the text after
# the ':' in a recipe's ``convert`` (comma-separated paths under the root), or "".


def _remote_names(recipe: Recipe | None) -> list[str]:
    return [r.name for r in recipe.remotes] if recipe else []


def _pairs(inputs: Inputs, targets: str, names: list[str]) -> list[tuple[Path, str]]:
    """(input file, target under the root) for recipes whose files keep their format: a single
    ``--from`` file goes to the first target; otherwise each file is found by its download name
    or by the target's own name."""
    outs = targets.split(",")
    if inputs.src.is_file():
        return [(inputs.src, outs[0])]
    return [(inputs.find(n, Path(t).name), t) for n, t in zip(names, outs)]


def conv_place(inputs: Inputs, root: Path, targets: str, names: list[str]) -> list[Path]:
    """Upstream files already in the loader's format: copy each to its place."""
    return [_place(src, root / t) for src, t in _pairs(inputs, targets, names)]


def conv_tog_json(inputs: Inputs, root: Path, targets: str, names: list[str]) -> list[Path]:
    """ToG / WebQSP-official JSON question files: every record must parse as the KGQA loaders
    read it (``parse_tog``), then the file is placed unchanged."""
    from kgreason.data.kgqa import parse_tog

    outs = []
    for src, t in _pairs(inputs, targets, names):
        _validated(src, parse_tog, t)
        outs.append(_place(src, root / t))
    return outs


def conv_metaqa(inputs: Inputs, root: Path, targets: str = "", names: list[str] | None = None,
                sample: int = 1000, seed: int = 0) -> list[Path]:
    """Official MetaQA layout (``kb.txt``, ``{1,2,3}-hop/vanilla/qa_test.txt``) → ``metaqa/kb.txt``,
    ``metaqa/{h}-hop/qa_test.txt`` (the full test set) and ``metaqa/{h}hop_test_sample1000.jsonl``
    (a seeded draw of ``sample`` questions, the file ``dataset=metaqa`` reads by default; each
    record says whether its topic and answers are KB entities, ``covered_by_kb``)."""
    from kgreason.data.metaqa import load_metaqa
    from kgreason.kg.loaders import load_metaqa_kb

    kb_src = inputs.find("kb.txt")
    kg = load_metaqa_kb(kb_src)  # raises KGFormatError with file:line on a malformed row
    nodes = set(kg.entity_names)
    out = [_place(kb_src, root / "metaqa" / "kb.txt")]
    for h in (1, 2, 3):
        src = inputs.find(f"{h}-hop/vanilla/qa_test.txt", f"{h}-hop/qa_test.txt", f"{h}hop_qa_test.txt",
                          required=False)
        if src is None:
            continue
        es = load_metaqa(str(src), hops=h, keep_brackets=True)  # every line checked
        out.append(_place(src, root / "metaqa" / f"{h}-hop" / "qa_test.txt"))
        examples = list(es)
        pick = random.Random(seed).sample(range(len(examples)), min(sample, len(examples)))
        recs = []
        for i in pick:
            ex = examples[i]
            topic = ex.topic_entities[0]
            recs.append({"id": f"{h}-hop-test-{i}", "question": ex.question, "topic_entity": topic,
                         "answers": list(ex.answers),
                         "covered_by_kb": topic in nodes and all(a in nodes for a in ex.answers)})
        out.append(_write_jsonl(recs, root / "metaqa" / f"{h}hop_test_sample1000.jsonl"))
    if len(out) == 1:
        raise FetchError(f"{inputs.src}: no MetaQA question file ({{1,2,3}}-hop/vanilla/qa_test.txt)")
    return out


def conv_hotpotqa(inputs: Inputs, root: Path, targets: str = "", names: list[str] | None = None) -> list[Path]:
    """HotpotQA official dev JSON (a list) → JSON Lines, each record checked by the loader."""
    from kgreason.data.multihop import parse_hotpot

    src = inputs.find("hotpot_dev_distractor_v1.json", "hotpot_*.json", "*.json", "*.jsonl")
    recs = _validated(src, parse_hotpot, "hotpotqa")
    return [_write_jsonl(recs, root / "hotpotqa" / (src.stem + ".jsonl"))]


def conv_musique(inputs: Inputs, root: Path, targets: str = "", names: list[str] | None = None) -> list[Path]:
    """MuSiQue official JSONL (``musique_ans_v1.0_dev.jsonl``, or the hub copy) → the same,
    every record checked by the loader."""
    from kgreason.data.multihop import parse_musique

    src = inputs.find("musique_ans_v1.0_dev.jsonl", "musique_dev.jsonl", "musique*dev*.jsonl", "*.jsonl")
    recs = _validated(src, parse_musique, "musique")
    return [_write_jsonl(recs, root / "musique" / "musique_ans_v1.0_dev.jsonl")]


def conv_twowiki(inputs: Inputs, root: Path, targets: str = "", names: list[str] | None = None) -> list[Path]:
    """2WikiMultiHopQA official ``dev.json`` (in the release zip) → ``2wikimultihopqa/dev.jsonl``."""
    from kgreason.data.multihop import parse_hotpot

    src = inputs.find("dev.json")
    recs = _validated(src, parse_hotpot, "twowiki")
    return [_write_jsonl(recs, root / "2wikimultihopqa" / "dev.jsonl")]


def conv_ddxplus(inputs: Inputs, root: Path, targets: str = "", names: list[str] | None = None,
                 split: str = "test") -> list[Path]:
    """DDXPlus release (``release_conditions.json``, ``release_evidences.json``,
    ``release_<split>_patients.zip`` holding the patients CSV) → ``ddxplus/``; every file is read
    by the DDXPlus reader first (errors name file, line and field)."""
    from kgreason.data.ddxplus import load_ddxplus, read_conditions, read_evidences

    cond, evid = inputs.find("release_conditions.json"), inputs.find("release_evidences.json")
    read_conditions(cond), read_evidences(evid)
    pats = inputs.find(f"release_{split}_patients.csv", f"release_{split}_patients")
    if zipfile.is_zipfile(pats):  # a zip that holds only the CSV
        pats = Inputs(pats, inputs.work).find(f"release_{split}_patients*")
    out = [_place(cond, root / "ddxplus" / "release_conditions.json"),
           _place(evid, root / "ddxplus" / "release_evidences.json"),
           _place(pats, root / "ddxplus" / f"release_{split}_patients.csv")]
    load_ddxplus(str(out[2]), str(out[0]), str(out[1]), limit=50)  # the rows decode with these JSONs
    return out


def conv_fb15k237(inputs: Inputs, root: Path, targets: str = "", names: list[str] | None = None) -> list[Path]:
    """FB15k-237 release zip (``Release/{train,valid,test}.txt``) + kg-bert's ``entity2text.txt``
    and ``FB15k_mid2name.txt`` → ``freebase_fb15k237/{split}.txt.gz`` and the two name maps."""
    from kgreason.kg.loaders import read_name_map, read_triples

    d = root / "freebase_fb15k237"
    d.mkdir(parents=True, exist_ok=True)
    out, mids = [], set()
    for split in ("train", "valid", "test"):
        src = inputs.find(f"Release/{split}.txt", f"{split}.txt")
        for h, _, t in read_triples(src, "\t"):  # every line checked: head<TAB>relation<TAB>tail
            mids.update((h, t))
        dest = d / f"{split}.txt.gz"
        tmp = dest.with_name(dest.name + ".tmp")
        with open(src, "rb") as fin, gzip.open(tmp, "wb") as fout:
            shutil.copyfileobj(fin, fout, CHUNK)
        tmp.replace(dest)
        out.append(dest)
    names_src = inputs.find("entity2text.txt")
    missing = mids - set(read_name_map(names_src))
    if missing:
        raise FetchError(f"{names_src}: {len(missing)} MID(s) of the triples have no name, e.g. {sorted(missing)[0]}")
    out.append(_place(names_src, d / "entity2text.txt"))
    aliases = inputs.find("FB15k_mid2name.txt", required=False)
    if aliases is not None:
        read_name_map(aliases)
        out.append(_place(aliases, d / "FB15k_mid2name.txt"))
    return out


def conv_primekg(inputs: Inputs, root: Path, targets: str = "", names: list[str] | None = None) -> list[Path]:
    """PrimeKG ``kg.csv``: the header must be PrimeKG's; placed as ``primekg/kg.csv``."""
    import csv

    from kgreason.kg.loaders import _PRIMEKG_COLS

    src = inputs.find("kg.csv")
    with open(src, encoding="utf-8", newline="") as f:
        header = next(csv.reader(f), [])
    missing = [c for c in _PRIMEKG_COLS if c not in header]
    if missing:
        raise FetchError(f"{src}:1: not a PrimeKG kg.csv: header lacks {missing}; found {header[:12]}")
    return [_place(src, root / "primekg" / "kg.csv")]


def conv_rog(inputs: Inputs, root: Path, targets: str = "", names: list[str] | None = None) -> list[Path]:
    """RoG JSONL (``id, question, answer, q_entity, a_entity, graph``) → where ROG_JSONL points
    (else ``<data>/rog/webqsp_test.jsonl``); every line's graph is checked."""
    from kgreason.kg.loaders import read_rog_graphs

    src = inputs.find("rog_webqsp_test.jsonl", "*.jsonl")
    read_rog_graphs(src)
    return [_place(src, env_target("ROG_JSONL", root / "rog" / "webqsp_test.jsonl"))]


def conv_probsum(inputs: Inputs, root: Path, targets: str = "", names: list[str] | None = None) -> list[Path]:
    """ProbSum CSV (``File ID, Assessment, Subjective Sections, Objective Sections, Summary``) →
    where PROBSUM_CSV points (else ``<data>/probsum/test.csv``)."""
    from kgreason.data.clinical import load_probsum

    src = inputs.find("*.csv")
    load_probsum(str(src))  # raises DataError naming the file/line/column
    return [_place(src, env_target("PROBSUM_CSV", root / "probsum" / "test.csv"))]


def _rrf_check(path: Path, n_fields: int, lines: int = 1000) -> None:
    with open(path, encoding="utf-8", errors="strict") as f:
        for i, line in enumerate(f, 1):
            if i > lines:
                break
            got = line.rstrip("\n").rstrip("\r").count("|")
            if got != n_fields:
                raise FetchError(f"{path}:{i}: expected {n_fields} '|'-terminated fields (the UMLS RRF layout), "
                                 f"got {got}")


def conv_umls(inputs: Inputs, root: Path, targets: str = "", names: list[str] | None = None) -> list[Path]:
    """UMLS release (zip, or its ``META`` folder) → ``MRCONSO.RRF``, ``MRREL.RRF`` (and
    ``MRSTY.RRF``) in the folder UMLS_META points at (else ``<data>/umls/META``); the first lines
    of each are checked against the Reference Manual's column counts."""
    from kgreason.kg.loaders import MRCONSO_COLS, MRREL_COLS, MRSTY_COLS

    dest = env_target("UMLS_META", root / "umls" / "META")
    out = []
    for name, cols, required in (("MRCONSO.RRF", MRCONSO_COLS, True), ("MRREL.RRF", MRREL_COLS, True),
                                 ("MRSTY.RRF", MRSTY_COLS, False)):
        src = inputs.find(f"META/{name}", name, required=required)
        if src is None:
            continue
        _rrf_check(src, len(cols))
        target = dest / name
        if target.exists() and target.stat().st_size == src.stat().st_size and target.resolve() != src.resolve():
            out.append(target)  # same size: already copied
            continue
        out.append(target if target.resolve() == src.resolve() else _place(src, target))
    return out


CONVERTERS: dict[str, Callable[..., list[Path]]] = {
    "place": conv_place, "tog_json": conv_tog_json, "metaqa": conv_metaqa, "hotpotqa": conv_hotpotqa,
    "musique": conv_musique, "twowiki": conv_twowiki, "ddxplus": conv_ddxplus, "fb15k237": conv_fb15k237,
    "primekg": conv_primekg, "rog": conv_rog, "probsum": conv_probsum, "umls": conv_umls,
}


def run_converter(spec: str, inputs: Inputs, root: Path, names: list[str]) -> list[Path]:
    kind, _, targets = spec.partition(":")
    try:
        return CONVERTERS[kind](inputs, root, targets, names)
    except (FetchError, KeyError):
        raise
    except Exception as e:  # noqa: BLE001 - loader errors (DataError, KGFormatError) name file:line already
        raise FetchError(f"{type(e).__name__}: {e}") from e


# ----------------------------------------------------------------------------- fetch / prepare


def fetch(source: Source, root: Path, *, full: bool = False, verify: bool = True,
          log: Callable[[str], None] = print) -> list[Path]:
    """``kgreason data fetch``: download the recipe's files into ``<root>/.downloads/<name>``,
    check them, convert, place under ``root``. Returns the files written."""
    recipe = source.full if full else source.sample
    if recipe is None:
        if full and source.sample is not None:
            raise FetchError(f"{source.name}: the sample is the whole release; run `kgreason data fetch {source.name}`")
        how = source.notes or (f"Use `kgreason data prepare {source.name} --from FILE`." if source.prepare
                               else "See docs/data.md.")
        raise FetchError(f"{source.name} ({source.access}): nothing to download from here. {how}")
    staging = root / ".downloads" / source.name
    log(f"{source.name}: {len(recipe.remotes)} file(s) into {staging}")
    for r in recipe.remotes:
        fetch_remote(r, staging, verify=verify, log=log)
    shutil.rmtree(staging / "unpacked", ignore_errors=True)  # archives may have been fetched anew
    written = run_converter(recipe.convert, Inputs(staging, staging), root, _remote_names(recipe))
    return written


def prepare(source: Source, src: Path, root: Path, *, log: Callable[[str], None] = print) -> list[Path]:
    """``kgreason data prepare NAME --from FILE``: the same conversion from a file you have."""
    work = root / ".downloads" / source.name
    work.mkdir(parents=True, exist_ok=True)
    inputs = Inputs(Path(src), work)
    if source.prepare:
        return run_converter(source.prepare, inputs, root, [])
    recipe = source.sample or source.full
    if recipe is None:
        raise FetchError(f"{source.name} ({source.access}): nothing to prepare; {source.notes}")
    return run_converter(recipe.convert, inputs, root, _remote_names(recipe))


def freebase_steps(dump: str | None, endpoint: str = "http://localhost:8890/sparql") -> str:
    """The commands that load a Freebase RDF dump into Virtuoso 7 (docs/data.md has the why)."""
    from kgreason.data.catalog import FREEBASE_DUMP_URL

    d = Path(dump).resolve().parent if dump else Path("/data/freebase")
    name = Path(dump).name if dump else "freebase-rdf-latest.gz"
    return f"""Full Freebase is served by a SPARQL endpoint, not read from a file. Steps (Virtuoso 7.2.5, as ToG):

1. Dump ({'yours: ' + str(d / name) if dump else 'not given'}):
     mkdir -p {d} && cd {d}
     {'# already there' if dump else 'curl -C - -LO ' + FREEBASE_DUMP_URL}
   optional: keep English and non-text triples only (~125 GB instead of ~400 GB unzipped).
2. Server: apt-get install -y virtuoso-opensource   (Debian 12: 7.2.5; virtuoso-t, isql-vt)
   In virtuoso.ini: DirsAllowed = ., {d}
                    NumberOfBuffers / MaxDirtyBuffers sized to your RAM (64 GB free: 5450000 / 4000000)
                    [SPARQL] ResultSetMaxRows >= kg.max_rows (10000), MaxQueryExecutionTime >= kg.timeout_s
3. Load (hours to a day; disk: plan for 300 GB or more):
     isql-vt 1111 dba dba exec="ld_dir('{d}', '{name}', 'http://freebase.com');"
     isql-vt 1111 dba dba exec="rdf_loader_run();"      # run several at once to use more cores
     isql-vt 1111 dba dba exec="checkpoint;"
     isql-vt 1111 dba dba exec="SELECT * FROM DB.DBA.LOAD_LIST WHERE ll_error IS NOT NULL;"   # must list nothing
4. Check:
     curl -s {endpoint} --data-urlencode 'query=SELECT ?n WHERE {{ <http://rdf.freebase.com/ns/m.027rn> <http://rdf.freebase.com/ns/type.object.name> ?n }}'
   lists "Dominican Republic".
5. Run: export FREEBASE_SPARQL_URL={endpoint}
     kgreason dataset=cwq kg=freebase_sparql retriever=sparql reasoner=tog llm=openai
"""


__all__ = ["download", "hub_download", "fetch_remote", "fetch", "prepare", "Inputs", "FetchError", "CONVERTERS",
           "freebase_steps", "sha256_of", "env_target"]
