"""File formats → :class:`~kgreason.kg.store.KG`.

(The DDXPlus knowledge base is read with the DDXPlus patients by :mod:`kgreason.data.ddxplus`.)

Every loader validates its input and raises :class:`KGFormatError` naming the file, the line
(1-based) and what was expected; a KG never silently loads from malformed input.

=====================  ==========================================================================
loader                 format
=====================  ==========================================================================
load_triples           generic ``head<d>rel<d>tail`` (TSV by default; ``.gz`` read transparently)
load_metaqa_kb         MetaQA ``kb.txt``: ``head|relation|tail``
load_pykeen            pykeen/ConvE splits (UMLS semantic network, FB15k-237) + optional id→name map
load_freebase_slice    FB15k-237 MID triples + ``entity2text.txt``; MIDs as ``m.xxx`` (ToG/CWQ form)
load_primekg           PrimeKG ``kg.csv`` (``x_name, relation, y_name, x_type, y_type, ...``) or the
                       DrugMechDB→PrimeKG pathway edge file (``source_node, relation, target_node``)
load_umls_rrf          UMLS Metathesaurus ``MRCONSO.RRF`` + ``MRREL.RRF`` (+ optional ``MRSTY.RRF``)
load_pkg               PubMed knowledge graph tables (papers, authorship, citations; see docs/data.md)
load_rog_subgraphs     RoG-style JSONL, one question per line with its ``graph`` triples (union KG)
=====================  ==========================================================================
"""

from __future__ import annotations

import contextvars
import csv
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from kgreason.kg.store import KG
from kgreason.textio import InputFileError, iter_lines, read_text

PathLike = str | Path

_DELIMITERS = {"\t": "\t", "tab": "\t", "\\t": "\t", "|": "|", "pipe": "|", ",": ",", "comma": ",",
               ";": ";", "semicolon": ";", " ": " ", "space": " "}


class KGFormatError(InputFileError):
    """Malformed KG input. The message reads ``<file>:<line>: <what was expected>``."""


#: the longest entity/relation name or label a loader accepts (``kg.max_name_chars``): far above
#: any real KG's longest label (UMLS strings, PrimeKG names and Freebase labels stay under ~3,000
#: characters), so only a corrupted line (a 20 MB field) is refused, naming file and line
MAX_NAME_CHARS = 4096
_NAME_LIMIT: contextvars.ContextVar[int] = contextvars.ContextVar("kg_max_name_chars", default=MAX_NAME_CHARS)


@contextmanager
def name_limit(max_chars: int | None):
    """Loaders inside this block refuse names longer than ``max_chars`` (``None``: the default)."""
    n = MAX_NAME_CHARS if max_chars is None else int(max_chars)
    if n < 1:
        raise KGFormatError("<config>", None, f"kg.max_name_chars={max_chars!r}: expected an integer >= 1")
    token = _NAME_LIMIT.set(n)
    try:
        yield n
    finally:
        _NAME_LIMIT.reset(token)


def _check_names(p: PathLike, line_no: int | None, fields: dict[str, str] | Sequence[str]) -> None:
    """Refuse a field over the name limit (the field is never echoed: it may be megabytes)."""
    limit = _NAME_LIMIT.get()
    items = fields.items() if isinstance(fields, dict) else enumerate(fields, 1)
    for key, v in items:
        if isinstance(v, str) and len(v) > limit:
            what = f"column {key!r}" if isinstance(key, str) else f"field {key}"
            raise KGFormatError(p, line_no, f"{what} is {len(v):,} characters long, over the name limit of "
                                f"{limit} (kg.max_name_chars; raise it if this KG really has such names)")


# ----------------------------------------------------------------------------- helpers


def _paths(path: PathLike | Sequence[PathLike]) -> list[Path]:
    if isinstance(path, (str, Path)):
        return [Path(path)]
    out = [Path(p) for p in path]
    if not out:
        raise KGFormatError("<no path>", None, "expected at least one file")
    return out


def _check_file(p: Path) -> None:
    if not p.exists():
        raise KGFormatError(p, None, "file not found")
    if p.is_dir():
        raise KGFormatError(p, None, "expected a file, got a directory")


def _open(p: Path):
    """``with _open(p) as lines:`` strictly decoded UTF-8 lines (``kgreason.textio``): a bad
    byte, a NUL or a stray byte-order mark is a :class:`KGFormatError` with file and line."""
    _check_file(p)
    return _checked(p)


@contextmanager
def _checked(p: Path):
    try:
        with iter_lines(p) as lines:
            yield lines
    except InputFileError as e:
        if isinstance(e, KGFormatError):
            raise
        raise KGFormatError(e.path, e.line, e.message) from None


def _delimiter(delimiter: str, p: PathLike = "<config>") -> str:
    try:
        return _DELIMITERS[delimiter]
    except KeyError:
        raise KGFormatError(p, None, f"unknown delimiter {delimiter!r}; expected one of "
                            f"{sorted(k for k in _DELIMITERS if len(k) > 1 or k == ' ')} or a tab/|/,/; "
                            "character") from None


def _rows(p: Path, delimiter: str, *, header: bool = False, skip_blank: bool = True,
          trailing_empty: bool = False) -> Iterator[tuple[int, list[str]]]:
    """Yield ``(line_no, fields)``; raises on an empty file. ``trailing_empty`` drops the empty
    field after a final delimiter (UMLS ``.RRF`` lines end with ``|``)."""
    n = 0
    with _open(p) as f:
        for line_no, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                if skip_blank:
                    continue
            n += 1
            if header and n == 1:
                continue
            fields = line.split(delimiter)
            _check_names(p, line_no, fields)
            if trailing_empty:
                if not fields or fields[-1] != "":
                    raise KGFormatError(p, line_no, f"expected the line to end with {delimiter!r} (RRF format)")
                fields = fields[:-1]
            yield line_no, fields
    if n == 0:
        raise KGFormatError(p, None, "empty file: expected at least one triple")


def _csv_dicts(p: Path, required: Sequence[str], delimiter: str = ",") -> Iterator[tuple[int, dict[str, str]]]:
    with _open(p) as f:
        reader = csv.DictReader(f, delimiter=delimiter)
        if reader.fieldnames is None:
            raise KGFormatError(p, None, "empty file: expected a header line")
        missing = [c for c in required if c not in reader.fieldnames]
        if missing:
            raise KGFormatError(p, 1, f"header lacks column(s) {missing}; found {reader.fieldnames}")
        n = 0
        rows = iter(reader)
        while True:
            try:
                row = next(rows)
            except StopIteration:
                break
            except csv.Error as e:  # e.g. a field over csv's own size limit (131,072 characters)
                # the reader has not counted the line it failed on
                raise KGFormatError(p, reader.line_num + 1, f"unreadable CSV row ({e}); a field over the name limit "
                                    f"of {_NAME_LIMIT.get()} characters (kg.max_name_chars) is refused") from None
            n += 1
            if None in row or any(row[c] is None for c in required):
                raise KGFormatError(p, reader.line_num, f"expected {len(reader.fieldnames)} columns "
                                    f"({','.join(reader.fieldnames)})")
            _check_names(p, reader.line_num, {c: row[c] for c in required})
            yield reader.line_num, row
        if n == 0:
            raise KGFormatError(p, None, "no data rows after the header")


def read_name_map(path: PathLike, delimiter: str = "\t") -> dict[str, str]:
    """Read an ``id<TAB>name`` file (e.g. FB15k-237 ``entity2text.txt``)."""
    p = Path(path)
    d = _delimiter(delimiter, p)
    out: dict[str, str] = {}
    for line_no, fields in _rows(p, d):
        if len(fields) < 2 or not fields[0]:
            raise KGFormatError(p, line_no, f"expected 'id{d!r}name', got {len(fields)} field(s)")
        out[fields[0]] = d.join(fields[1:]).strip()
    return out


def _apply_names(kg_triples: list[tuple[str, str, str]], names: dict[str, str] | None, strict: bool,
                 names_path: PathLike | None, src: PathLike) -> dict[str, str] | None:
    if names is None:
        return None
    if strict:
        for h, _, t in kg_triples:
            for e in (h, t):
                if e not in names:
                    raise KGFormatError(names_path or src, None,
                                        f"entity {e!r} (from {src}) has no name in the name map "
                                        "(strict_names=True)")
    return names


# ----------------------------------------------------------------------------- generic triples


def read_triples(path: PathLike | Sequence[PathLike], delimiter: str = "\t", header: bool = False,
                 columns: Sequence[int] = (0, 1, 2), n_columns: int | None = 3) -> list[tuple[str, str, str]]:
    """Read ``(head, rel, tail)`` string triples from one or more delimited files.

    Args:
        path: file or list of files (e.g. train/valid/test splits), ``.gz`` allowed.
        delimiter: a character or name (``tab``, ``pipe``, ``comma``, ``semicolon``, ``space``).
        header: skip the first non-blank line of each file.
        columns: positions of head, relation and tail.
        n_columns: required number of fields per line (``None`` = at least ``max(columns)+1``).
    """
    d = _delimiter(delimiter)
    out: list[tuple[str, str, str]] = []
    hi, ri, ti = columns
    need = max(columns) + 1
    for p in _paths(path):
        for line_no, fields in _rows(p, d, header=header):
            if (n_columns is not None and len(fields) != n_columns) or len(fields) < need:
                raise KGFormatError(p, line_no, f"expected {n_columns or need} {d!r}-separated columns "
                                    f"(head, relation, tail), got {len(fields)}")
            h, r, t = fields[hi].strip(), fields[ri].strip(), fields[ti].strip()
            if not h or not r or not t:
                raise KGFormatError(p, line_no, "empty head, relation or tail")
            out.append((h, r, t))
    return out


def load_triples(path: PathLike | Sequence[PathLike], delimiter: str = "\t", header: bool = False,
                 columns: Sequence[int] = (0, 1, 2), n_columns: int | None = 3,
                 names: PathLike | None = None, strict_names: bool = False,
                 dedupe: bool = True, name: str = "kg") -> KG:
    """Generic delimited triple file(s) → KG.

    Args:
        names: optional ``id<TAB>name`` map; names become entity labels (so answers given by name
            link to ids).
        strict_names: raise when a KG entity is missing from the name map.
        dedupe: drop repeated identical triples (keeps first occurrence order).

    Raises:
        KGFormatError: missing/empty file, unknown delimiter, wrong column count, unnamed ids.
    """
    triples = read_triples(path, delimiter, header, columns, n_columns)
    if dedupe:
        triples = list(dict.fromkeys(triples))
    nm = read_name_map(names) if names is not None else None
    _apply_names(triples, nm, strict_names, names, _paths(path)[0])
    return KG.from_triples(triples, labels=nm, name=name)


def load_metaqa_kb(path: PathLike, name: str = "metaqa") -> KG:
    """MetaQA WikiMovies ``kb.txt`` (``head|relation|tail``); entity ids are the names, which is
    also how MetaQA questions mark their topic entity (``[name]``)."""
    return load_triples(path, delimiter="|", name=name)


def load_pykeen(path: PathLike | Sequence[PathLike], names: PathLike | None = None,
                strict_names: bool = False, name: str = "pykeen") -> KG:
    """pykeen / ConvE-style TSV splits (``head<TAB>relation<TAB>tail``), e.g. the UMLS semantic
    network (``umls_semnet/{train,valid,test}.txt``). Splits are concatenated and deduplicated."""
    return load_triples(path, "\t", names=names, strict_names=strict_names, name=name)


def _mid(x: str, style: str) -> str:
    """``/m/027rn`` ↔ ``m.027rn``."""
    if style == "dot" and x.startswith("/m/"):
        return "m." + x[3:]
    if style == "slash" and x.startswith("m."):
        return "/m/" + x[2:]
    return x


def _fb_relation(r: str, style: str) -> str:
    """``/people/person/spouse_s./people/marriage/spouse`` → ``people.person.spouse_s|people.marriage.spouse``
    (dot style: the Freebase/ToG spelling, CVT two-step paths joined by ``|``)."""
    if style != "dot":
        return r
    return "|".join(part.strip("/").replace("/", ".") for part in r.split("./"))


def load_freebase_slice(path: PathLike | Sequence[PathLike], names: PathLike | None = None,
                        aliases: PathLike | None = None, mid_style: str = "dot",
                        relation_style: str = "path", strict_names: bool = True,
                        name: str = "freebase_slice") -> KG:
    """FB15k-237 MID triples (``/m/x<TAB>/rel/path<TAB>/m/y``, ``.gz`` ok) → KG with English labels.

    Args:
        path: the split files (train/valid/test); all are loaded.
        names: ``MID<TAB>name`` (``entity2text.txt``); labels, so CWQ/WebQSP answers given by name
            link via :meth:`KG.find_entity`.
        aliases: optional second map (``FB15k_mid2name.txt``, ``Name_With_Underscores``) added as
            aliases.
        mid_style: ``dot`` writes ``m.027rn`` (ToG/CWQ/WebQSP spelling), ``slash`` keeps ``/m/027rn``.
        relation_style: ``path`` keeps ``/location/country/capital``; ``dot`` writes
            ``location.country.capital`` (CVT paths joined with ``|``).
        strict_names: every MID in the triples must have a name.
    """
    if mid_style not in ("dot", "slash"):
        raise KGFormatError("<config>", None, f"mid_style must be 'dot' or 'slash', got {mid_style!r}")
    raw = list(dict.fromkeys(read_triples(path, "\t")))
    triples = [(_mid(h, mid_style), _fb_relation(r, relation_style), _mid(t, mid_style)) for h, r, t in raw]
    labels = None
    if names is not None:
        labels = {_mid(k, mid_style): v for k, v in read_name_map(names).items()}
        _apply_names(triples, labels, strict_names, names, _paths(path)[0])
    al = None
    if aliases is not None:
        al = {v: _mid(k, mid_style) for k, v in read_name_map(aliases).items()}
    return KG.from_triples(triples, labels=labels, aliases=al, name=name)


# ----------------------------------------------------------------------------- PrimeKG

_PRIMEKG_COLS = ("x_name", "relation", "y_name", "x_type", "y_type")
_PATHWAY_COLS = ("source_node", "relation", "target_node", "source_type", "target_type")


def load_primekg(path: PathLike, entity_key: str = "name", relation_column: str = "relation",
                 name: str = "primekg") -> KG:
    """PrimeKG ``kg.csv`` → KG with node types (``gene/protein``, ``drug``, ``disease`` …).

    Also reads the DrugMechDB→PrimeKG pathway edge file (``benchmark_pathways_edges.csv``:
    ``source_node, source_type, source_index, relation, display_relation, target_node, ...``);
    the format is detected from the header. Repeated edges (a pathway edge file lists an edge
    once per pathway) are deduplicated.

    Args:
        entity_key: ``name`` uses ``x_name`` as the entity id (what questions mention);
            ``index`` uses PrimeKG's ``x_index`` with the name as label (names are not unique
            across node types in full PrimeKG).
        relation_column: ``relation`` (e.g. ``drug_protein``) or ``display_relation``
            (e.g. ``target``).
    """
    p = Path(path)
    with _open(p) as f:
        head = next(f, "")
    if not head.strip():
        raise KGFormatError(p, None, "empty file: expected a CSV header")
    cols = next(csv.reader([head]))
    if "x_name" in cols:
        keys = dict(h="x_name", t="y_name", ht="x_type", tt="y_type", hi="x_index", ti="y_index")
        required = list(_PRIMEKG_COLS)
    elif "source_node" in cols:
        keys = dict(h="source_node", t="target_node", ht="source_type", tt="target_type",
                    hi="source_index", ti="target_index")
        required = list(_PATHWAY_COLS)
    else:
        raise KGFormatError(p, 1, f"expected a PrimeKG header with {list(_PRIMEKG_COLS)} (kg.csv) or "
                            f"{list(_PATHWAY_COLS)} (pathway edges); found {cols}")
    if entity_key not in ("name", "index"):
        raise KGFormatError("<config>", None, f"entity_key must be 'name' or 'index', got {entity_key!r}")
    if relation_column not in cols:
        raise KGFormatError(p, 1, f"relation_column {relation_column!r} not in header {cols}")
    if entity_key == "index":
        required += [keys["hi"], keys["ti"]]
    triples: list[tuple[str, str, str]] = []
    types: dict[str, str] = {}
    labels: dict[str, str] = {}
    for line_no, row in _csv_dicts(p, required + [relation_column]):
        hn, tn, r = row[keys["h"]].strip(), row[keys["t"]].strip(), row[relation_column].strip()
        if not hn or not tn or not r:
            raise KGFormatError(p, line_no, "empty node name or relation")
        if entity_key == "index":
            h, t = row[keys["hi"]].strip(), row[keys["ti"]].strip()
            labels[h], labels[t] = hn, tn
        else:
            h, t = hn, tn
        # with entity_key="name", a name shared by two node types keeps its first type
        types.setdefault(h, row[keys["ht"]].strip())
        types.setdefault(t, row[keys["tt"]].strip())
        triples.append((h, r, t))
    triples = list(dict.fromkeys(triples))
    return KG.from_triples(triples, entity_types=types, labels=labels or None, name=name)


# ----------------------------------------------------------------------------- UMLS RRF

# Column layouts from the UMLS Reference Manual (§3.3.4 MRCONSO, §3.3.7 MRREL, §3.3.10 MRSTY).
MRCONSO_COLS = ("CUI", "LAT", "TS", "LUI", "STT", "SUI", "ISPREF", "AUI", "SAUI", "SCUI", "SDUI", "SAB",
                "TTY", "CODE", "STR", "SRL", "SUPPRESS", "CVF")
MRREL_COLS = ("CUI1", "AUI1", "STYPE1", "REL", "CUI2", "AUI2", "STYPE2", "RELA", "RUI", "SRUI", "SAB", "SL",
              "RG", "DIR", "SUPPRESS", "CVF")
MRSTY_COLS = ("CUI", "TUI", "STN", "STY", "ATUI", "CVF")


def _rrf(p: Path, cols: Sequence[str]) -> Iterator[tuple[int, dict[str, str]]]:
    for line_no, fields in _rows(p, "|", trailing_empty=True):
        if len(fields) != len(cols):
            raise KGFormatError(p, line_no, f"expected {len(cols)} '|'-separated fields + trailing '|' "
                                f"({'|'.join(cols)}|), got {len(fields)}")
        yield line_no, dict(zip(cols, fields))


def load_umls_rrf(mrconso: PathLike, mrrel: PathLike, mrsty: PathLike | None = None,
                  languages: Sequence[str] = ("ENG",), sources: Sequence[str] | None = None,
                  relation: str = "RELA", include_suppressed: bool = False, strict: bool = True,
                  name: str = "umls") -> KG:
    """UMLS Metathesaurus (licensed; UTS account) ``MRCONSO.RRF`` + ``MRREL.RRF`` → CUI-level KG.

    Entities are CUIs with the preferred English string as label (``TS=P, STT=PF, ISPREF=Y``
    first) and every other string as alias. MRREL's ``REL``/``RELA`` is "the relationship of the
    second concept to the first" (Reference Manual), so row ``CUI1|..|REL|CUI2|..|RELA`` becomes
    the triple ``(CUI2, RELA, CUI1)`` (e.g. ``(C-parent, 'isa'…)``). ``relation="RELA"`` uses
    RELA and falls back to REL when RELA is empty; ``relation="REL"`` uses REL only.

    Args:
        mrsty: optional ``MRSTY.RRF``: the first semantic type of each CUI becomes its entity type.
        languages: MRCONSO ``LAT`` values kept for names.
        sources: keep only MRREL rows from these ``SAB`` vocabularies (``None`` = all).
        include_suppressed: keep rows with ``SUPPRESS`` in ``O/E/Y``.
        strict: MRREL/MRSTY rows referencing a CUI with no kept MRCONSO name raise
            (dangling reference); otherwise such rows are skipped.
    """
    if relation not in ("RELA", "REL"):
        raise KGFormatError("<config>", None, f"relation must be 'RELA' or 'REL', got {relation!r}")
    pc, pr = Path(mrconso), Path(mrrel)
    rank: dict[str, tuple[int, str]] = {}
    aliases: dict[str, str] = {}
    langs = set(languages)
    for line_no, row in _rrf(pc, MRCONSO_COLS):
        if not row["CUI"].startswith("C"):
            raise KGFormatError(pc, line_no, f"expected a CUI (C1234567) in column 1, got {row['CUI']!r}")
        if row["LAT"] not in langs or (not include_suppressed and row["SUPPRESS"] in ("O", "E", "Y")):
            continue
        score = (row["TS"] != "P") + (row["STT"] != "PF") + (row["ISPREF"] != "Y")
        cur = rank.get(row["CUI"])
        if cur is None or score < cur[0]:
            rank[row["CUI"]] = (score, row["STR"])
        aliases.setdefault(row["STR"], row["CUI"])
    triples: list[tuple[str, str, str]] = []
    srcs = set(sources) if sources is not None else None
    for line_no, row in _rrf(pr, MRREL_COLS):
        if srcs is not None and row["SAB"] not in srcs:
            continue
        if not include_suppressed and row["SUPPRESS"] in ("O", "E", "Y"):
            continue
        c1, c2 = row["CUI1"], row["CUI2"]
        missing = [c for c in (c1, c2) if c not in rank]
        if missing:
            if strict:
                raise KGFormatError(pr, line_no, f"dangling reference: CUI {missing[0]} has no "
                                    f"{'/'.join(languages)} name in {pc}")
            continue
        r = (row["RELA"] or row["REL"]) if relation == "RELA" else row["REL"]
        if not r:
            raise KGFormatError(pr, line_no, "empty REL/RELA")
        triples.append((c2, r, c1))
    if not triples:
        raise KGFormatError(pr, None, "no relations kept (check languages/sources filters)")
    triples = list(dict.fromkeys(triples))
    types = None
    if mrsty is not None:
        ps = Path(mrsty)
        types = {}
        for line_no, row in _rrf(ps, MRSTY_COLS):
            if row["CUI"] not in rank:
                if strict:
                    raise KGFormatError(ps, line_no, f"dangling reference: CUI {row['CUI']} not in {pc}")
                continue
            types.setdefault(row["CUI"], row["STY"])
    labels = {c: s for c, (_, s) in rank.items()}
    aliases = {a: c for a, c in aliases.items() if labels.get(c) != a}
    return KG.from_triples(triples, labels=labels, aliases=aliases, entity_types=types, name=name)


# ----------------------------------------------------------------------------- PubMed KG


def load_pkg(papers: PathLike, authorship: PathLike | None = None, citations: PathLike | None = None,
             authors: PathLike | None = None, delimiter: str = "\t", strict: bool = True,
             name: str = "pkg") -> KG:
    """PubMed knowledge graph (PKG 2.0, Xu et al.) tables → KG of papers and authors.

    Tables (delimited with a header; column names follow PKG 2.0):

    * ``papers``: ``PMID, ArticleTitle[, PubYear]`` → entities ``PMID:<id>`` (type ``paper``,
      label = title);
    * ``authorship``: ``AND_ID, PMID`` (disambiguated author id, paper) → ``(AUTHOR:<id>,
      authored, PMID:<pmid>)``;
    * ``authors`` (optional): ``AND_ID, FullName`` → author labels (type ``author``);
    * ``citations``: ``PMID, RefPMID`` → ``(PMID:<pmid>, cites, PMID:<ref>)``;
    * a ``PubYear`` column adds ``(PMID:<id>, published_in, YEAR:<y>)``.

    Args:
        strict: authorship/citation rows naming a PMID absent from ``papers`` raise (dangling
            reference); otherwise they are skipped.
    """
    d = _delimiter(delimiter)
    pp = Path(papers)
    labels: dict[str, str] = {}
    types: dict[str, str] = {}
    triples: list[tuple[str, str, str]] = []
    with _open(pp) as f:
        has_year = "PubYear" in (next(f, "").rstrip("\r\n").split(d))
    for _, row in _csv_dicts(pp, ["PMID", "ArticleTitle"], d):
        pid = f"PMID:{row['PMID'].strip()}"
        labels[pid] = row["ArticleTitle"].strip()
        types[pid] = "paper"
        if has_year and row["PubYear"].strip():
            y = f"YEAR:{row['PubYear'].strip()}"
            triples.append((pid, "published_in", y))
            types[y] = "year"
            labels[y] = row["PubYear"].strip()

    def paper(p: Path, line_no: int, pmid: str) -> str | None:
        pid = f"PMID:{pmid.strip()}"
        if pid not in types:
            if strict:
                raise KGFormatError(p, line_no, f"dangling reference: PMID {pmid!r} not in {pp}")
            return None
        return pid

    if authors is not None:
        pa = Path(authors)
        for _, row in _csv_dicts(pa, ["AND_ID", "FullName"], d):
            a = f"AUTHOR:{row['AND_ID'].strip()}"
            labels[a] = row["FullName"].strip()
            types[a] = "author"
    if authorship is not None:
        pa = Path(authorship)
        for line_no, row in _csv_dicts(pa, ["AND_ID", "PMID"], d):
            a = f"AUTHOR:{row['AND_ID'].strip()}"
            if authors is not None and a not in types:
                if strict:
                    raise KGFormatError(pa, line_no, f"dangling reference: author {row['AND_ID']!r} not in {authors}")
                continue
            types.setdefault(a, "author")
            pid = paper(pa, line_no, row["PMID"])
            if pid:
                triples.append((a, "authored", pid))
    if citations is not None:
        pc = Path(citations)
        for line_no, row in _csv_dicts(pc, ["PMID", "RefPMID"], d):
            src, dst = paper(pc, line_no, row["PMID"]), paper(pc, line_no, row["RefPMID"])
            if src and dst:
                triples.append((src, "cites", dst))
    triples = list(dict.fromkeys(triples))
    if not triples:
        raise KGFormatError(pp, None, "no edges: pass authorship and/or citations tables")
    return KG.from_triples(triples, labels=labels, entity_types=types,
                           extra_entities=[e for e, t in types.items() if t == "paper"], name=name)


# ----------------------------------------------------------------------------- RoG subgraphs


def iter_jsonl(path: PathLike) -> Iterator[tuple[int, dict]]:
    p = Path(path)
    n = 0
    with _open(p) as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise KGFormatError(p, line_no, f"expected one JSON object per line ({e.msg})") from None
            if not isinstance(rec, dict):
                raise KGFormatError(p, line_no, "expected a JSON object")
            n += 1
            yield line_no, rec
    if n == 0:
        raise KGFormatError(p, None, "empty file: expected one JSON object per line")


def read_rog_graphs(path: PathLike, graph_field: str = "graph") -> dict[str, list[tuple[str, str, str]]]:
    """``{question id: [(h, r, t), ...]}`` from a RoG-style JSONL (fields ``id``, ``graph``)."""
    p = Path(path)
    out: dict[str, list[tuple[str, str, str]]] = {}
    for line_no, rec in iter_jsonl(p):
        qid = rec.get("id")
        g = rec.get(graph_field)
        if qid is None or not isinstance(g, list):
            raise KGFormatError(p, line_no, f"expected fields 'id' and '{graph_field}' (list of [h, r, t])")
        trip = []
        for i, t in enumerate(g):
            if not isinstance(t, (list, tuple)) or len(t) != 3:
                raise KGFormatError(p, line_no, f"{graph_field}[{i}]: expected [head, relation, tail], got {t!r}")
            trip.append((str(t[0]), str(t[1]), str(t[2])))
            _check_names(p, line_no, trip[-1])
        out[str(qid)] = trip
    return out


def load_rog_subgraphs(path: PathLike, graph_field: str = "graph", name: str = "rog_subgraphs") -> KG:
    """Per-question subgraphs (RoG / GNN-RAG ``rmanluo/RoG-webqsp`` style JSONL: ``{"id", "question",
    "answer", "q_entity", "a_entity", "graph": [[h, r, t], ...]}``) → one KG, the deduplicated
    union of all subgraphs (use :func:`read_rog_graphs` for the per-question triples)."""
    graphs = read_rog_graphs(path, graph_field)
    triples = list(dict.fromkeys(t for g in graphs.values() for t in g))
    if not triples:
        raise KGFormatError(path, None, f"every '{graph_field}' is empty")
    return KG.from_triples(triples, name=name)


__all__ = [
    "KGFormatError", "MAX_NAME_CHARS", "name_limit", "read_triples", "read_name_map", "load_triples", "load_metaqa_kb", "load_pykeen",
    "load_freebase_slice", "load_primekg", "load_umls_rrf", "load_pkg", "read_rog_graphs",
    "load_rog_subgraphs", "MRCONSO_COLS", "MRREL_COLS", "MRSTY_COLS",
]
