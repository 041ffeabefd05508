"""Freebase over SPARQL: the KG source KGQA papers use (``kg=freebase_sparql``).

ToG, ReKnoS and SGR ran CWQ / WebQSP / GrailQA against the whole of Freebase loaded into a
Virtuoso server and queried over SPARQL (ToG's README: Virtuoso 7.2.5, graph of the Freebase
``rdf.freebase.com/ns/`` dump). :class:`SparqlKG` points kgreason at any such SPARQL 1.1 endpoint
and implements :class:`kgreason.kg.source.KGSource`, so those reasoners run unchanged on it.

How it works
------------
* **Local materialisation.** Entities and facts get local int ids the first time they are met;
  ``heads``/``rels``/``tails`` hold the facts fetched so far. ``out_triples(e)``/``in_triples(e)``
  fetch ``e``'s facts in both directions if they are not local yet (*expansion*), then answer
  from the local index; the facts of an expanded entity are complete, ordered by (relation,
  other end's MID), whatever order the server returns them in.
* **Batched expansion.** :meth:`SparqlKG.prefetch` expands many entities with one query per
  direction per block of ``batch_size`` entities (a ``VALUES`` block), blocks running in
  parallel up to ``max_concurrency``; names of the newly reached entities come the same way.
  The k-hop retriever (:mod:`kgreason.retrieval.sparql`) expands a whole frontier per hop.
* **Relations** are the endpoint's predicates in the Freebase namespace whose objects are
  entities, minus metadata predicates (``type.object.name`` …); the list is read once at start-up
  (one query, cached) or from ``relations_file``, and sorted, so relation ids are stable.
* **Identifiers are validated, never trusted.** A MID reaching a query must match
  :data:`MID_RE` (``m.``/``g.`` ids), a relation :data:`RELATION_RE`; names an LLM writes
  (``find_entity``) only reach a query as an escaped string literal.
* **Cache.** Responses are stored in a shard directory (``<cache_dir>/sparql_calls/``, the LLM call
  cache's store) keyed by sha256 of (endpoint, default graph, query text). A batched answer is
  also split and stored per entity under the text of the single-entity query, and an expansion
  asks the endpoint only for the entities not stored yet: a sweep asks each entity's facts once,
  whatever blocks its frontiers form, and a re-run asks nothing.
* **Failures are loud.** A down, slow (past ``timeout_s``) or erroring endpoint is retried
  ``retries`` times with exponential backoff (each retry counted in ``stats``); then
  :class:`SparqlError` names the endpoint, the query kind and the cause. A malformed response
  raises at once. Nothing is ever turned into an empty neighbourhood.
* **Incomplete answers are not taken as complete.** An answer flagged as cut short (HTTP 206 or
  Virtuoso's ``X-SQL-State`` header of an anytime query past its time limit) counts as a failed
  attempt and is retried, never cached. A batched block (two or more entities) answered with no
  rows at all is asked once more, bypassing the cache, before the empty answer is believed:
  an all-empty block is rare in real data (every expanded entity was reached by a fact, most
  have a name), and a loaded server was seen to answer one names block with nothing (issue #32;
  ``stats["empty_rechecked"]`` / ``["empty_recovered"]`` count these).

Freebase CVT paths of FB15k-237 (``a.b.c|d.e.f`` in :func:`kgreason.kg.loaders.load_freebase_slice`)
are written as predicates ``ns:a.b.c..d.e.f`` by :func:`fb15k237_to_ntriples` (``|`` is not
allowed in an IRI); ``..`` never occurs in a real Freebase property.

What is *not* served: facts whose object is a literal (dates, numbers) are skipped, as the
in-memory KGs hold entity→entity facts only; whole-graph views (``SUB``/``OBJ``/``REL``, the
LogosKG matrix engines) raise :class:`~kgreason.kg.source.NeedsInMemoryKG`.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from kgreason.kg.source import NeedsInMemoryKG
from kgreason.kg.store import normalise_name

log = logging.getLogger(__name__)

FREEBASE_NS = "http://rdf.freebase.com/ns/"
#: Freebase machine ids: ``m.027rn``, ``g.11b6_2t1k2`` (lower-case base-32-ish, underscore)
MID_RE = re.compile(r"[mg]\.[0-9a-z_]{1,32}")  # always used with fullmatch (``$`` also matches before a final "\n")
#: Freebase property ids ``domain.type.property`` (FB15k-237 CVT paths joined by ``|``)
_PROP = r"[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)+"
RELATION_RE = re.compile(rf"{_PROP}(?:\|{_PROP})*")  # fullmatch only
CVT_SEP_IRI = ".."  # ``|`` of a CVT path as written in a predicate IRI
NAME_PREDICATE = "type.object.name"
ALIAS_PREDICATE = "common.topic.alias"
TYPE_PREDICATE = "type.object.type"
#: metadata predicates that are not KG relations (names, aliases, types, keys, descriptions)
DEFAULT_EXCLUDE = (NAME_PREDICATE, ALIAS_PREDICATE, TYPE_PREDICATE, "type.object.key",
                   "common.topic.description", "type.object.permission", "kg.object_profile.prominent_type")
MAX_LITERAL = 500


class SparqlError(RuntimeError):
    """A SPARQL request failed; the message names the endpoint, the query kind and the cause."""


class InvalidIdentifier(ValueError):
    """A string that should be a MID or a relation name is not one (it never reaches a query)."""


# ----------------------------------------------------------------------------- validation
def check_mid(mid: str) -> str:
    if not isinstance(mid, str) or not MID_RE.fullmatch(mid):
        raise InvalidIdentifier(f"not a Freebase MID (expected {MID_RE.pattern}): {mid!r}")
    return mid


def check_relation(rel: str) -> str:
    if not isinstance(rel, str) or not RELATION_RE.fullmatch(rel):
        raise InvalidIdentifier(f"not a Freebase relation name (expected {RELATION_RE.pattern}): {rel!r}")
    return rel


def relation_to_local(rel: str) -> str:
    """KG relation name → predicate local name (``a.b|c.d`` → ``a.b..c.d``)."""
    return check_relation(rel).replace("|", CVT_SEP_IRI)


def local_to_relation(local: str) -> str | None:
    """Predicate local name → KG relation name, or ``None`` when it is not a relation name."""
    rel = local.replace(CVT_SEP_IRI, "|")
    return rel if RELATION_RE.fullmatch(rel) else None


def string_literal(text: str, lang: str | None = None) -> str:
    """A SPARQL string literal for ``text``: every character that could end or escape the literal
    is escaped, control characters are refused. This is the only way free text enters a query."""
    if not isinstance(text, str) or len(text) > MAX_LITERAL:
        raise InvalidIdentifier(f"name literal must be a string of at most {MAX_LITERAL} characters")
    if any(ord(c) < 0x20 and c not in "\t\n\r" for c in text):
        raise InvalidIdentifier(f"control character in name literal {text!r}")
    esc = (text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
           .replace("\r", "\\r").replace("\t", "\\t"))
    if lang is not None and not re.fullmatch(r"[A-Za-z]{1,8}(-[A-Za-z0-9]{1,8})*", lang):
        raise InvalidIdentifier(f"bad language tag {lang!r}")
    return f'"{esc}"' + (f"@{lang}" if lang else "")


# ----------------------------------------------------------------------------- endpoint
class _Transient(Exception):
    pass


class SparqlEndpoint:
    """One SPARQL 1.1 endpoint: POSTed queries, JSON results, disk cache, retries, a concurrency bound.

    Args:
        url: the query service (``http://localhost:8890/sparql`` for Virtuoso).
        default_graph: sent as ``default-graph-uri`` (``None`` = the server's default dataset).
        timeout_s: per-request socket timeout; a request past it counts as a failed attempt.
        retries: extra attempts after a transient failure (connection refused/reset, timeout,
            HTTP 429/5xx), with backoff ``backoff_s * 2**attempt``.
        max_concurrency: requests in flight at once (a semaphore shared by all threads).
        cache_dir: directory of ``sparql_calls/`` (an older ``sparql_calls.sqlite`` is migrated); ``None`` = no disk cache.
        cache_mode: ``readwrite`` | ``readonly`` | ``off`` (as ``llm_cache.mode``).

    ``stats``: ``queries`` (asked), ``requests`` (sent over HTTP, retries included),
    ``cache_hits``, ``retries``, ``failures``, ``seconds`` (HTTP wall time), ``by_kind``.
    """

    def __init__(self, url: str, *, default_graph: str | None = None, timeout_s: float = 60.0,
                 retries: int = 3, backoff_s: float = 0.5, max_concurrency: int = 4,
                 cache_dir: str | Path | None = None, cache_mode: str = "readwrite") -> None:
        parsed = urllib.parse.urlparse(str(url))
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"kg.url must be an http(s) SPARQL endpoint URL, got {url!r}")
        if int(max_concurrency) < 1 or int(retries) < 0 or float(timeout_s) <= 0:
            raise ValueError("kg.max_concurrency ≥ 1, kg.retries ≥ 0 and kg.timeout_s > 0 are required")
        self.url, self.default_graph = str(url), default_graph
        self.timeout_s, self.retries, self.backoff_s = float(timeout_s), int(retries), float(backoff_s)
        self.max_concurrency = int(max_concurrency)
        self._sem = threading.BoundedSemaphore(self.max_concurrency)
        self._lock = threading.Lock()
        self.stats: dict[str, Any] = dict(queries=0, requests=0, cache_hits=0, retries=0, failures=0,
                                          seconds=0.0, empty_rechecked=0, empty_recovered=0, by_kind={})
        self.store = None
        if cache_dir is not None and cache_mode != "off":
            from kgreason.storage.callstore import KeyValueStore

            root = Path(str(cache_dir)).expanduser()
            self.store = KeyValueStore(root / "sparql_calls", mode=cache_mode, legacy=root / "sparql_calls.sqlite")

    def _count(self, key: str, n: float = 1) -> None:
        with self._lock:
            self.stats[key] += n

    def key(self, query: str) -> str:
        blob = json.dumps({"endpoint": self.url, "graph": self.default_graph, "query": query},
                          sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def query(self, kind: str, query: str, refresh: bool = False) -> dict:
        """The parsed JSON result of ``query`` (a SELECT or ASK); cached; raises SparqlError.
        ``refresh``: ask the endpoint even when the answer is stored (and store the new one)."""
        self._count("queries")
        with self._lock:
            self.stats["by_kind"][kind] = self.stats["by_kind"].get(kind, 0) + 1
        k = self.key(query)
        if self.store is not None and not refresh:
            hit = self.store.get(k)
            if hit is not None:
                self._count("cache_hits")
                return hit
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                self._count("retries")
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                res = self._send(kind, query)
                break
            except _Transient as e:
                last = e
        else:
            self._count("failures")
            raise SparqlError(f"SPARQL endpoint {self.url}: {kind} query failed after {self.retries + 1} "
                              f"attempt(s): {last}")
        if self.store is not None:
            self.store.put(k, res, backend="sparql", model=self.url, method=kind)
        return res

    def cached(self, query: str) -> dict | None:
        """The stored response of ``query`` without asking the endpoint (``None`` = not stored)."""
        if self.store is None:
            return None
        hit = self.store.get(self.key(query))
        if hit is not None:
            self._count("queries")
            self._count("cache_hits")
        return hit

    def remember(self, kind: str, query: str, result: dict) -> None:
        """Store ``result`` as the response of ``query`` (a per-entity share of a batched answer)."""
        if self.store is not None:
            self.store.put(self.key(query), result, backend="sparql", model=self.url, method=kind)

    def select(self, kind: str, query: str, refresh: bool = False) -> list[dict[str, dict]]:
        res = self.query(kind, query, refresh=refresh)
        return res["results"]["bindings"]

    def ask(self, kind: str, query: str) -> bool:
        return bool(self.query(kind, query)["boolean"])

    def select_many(self, kind: str, queries: Sequence[str],
                    recheck_empty: Sequence[bool] | None = None) -> list[list[dict[str, dict]]]:
        """Several SELECTs, at most ``max_concurrency`` in flight; results in query order.
        ``recheck_empty[i]``: an empty answer to query ``i`` is asked once more, past the cache,
        before it is believed (module docstring)."""
        if len(queries) <= 1:
            out = [self.select(kind, q) for q in queries]
        else:
            with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(queries))) as ex:
                out = list(ex.map(lambda q: self.select(kind, q), queries))
        for i, (q, rows) in enumerate(zip(queries, out)):
            if rows or not (recheck_empty and recheck_empty[i]):
                continue
            self._count("empty_rechecked")
            again = self.select(kind, q, refresh=True)
            if again:
                self._count("empty_recovered")
                log.warning("SPARQL endpoint %s answered a %s block with no rows, then with %d rows when "
                            "asked again: the endpoint is unreliable under this load", self.url, kind, len(again))
                out[i] = again
        return out

    def _send(self, kind: str, query: str) -> dict:
        form = {"query": query}
        if self.default_graph:
            form["default-graph-uri"] = self.default_graph
        body = urllib.parse.urlencode(form).encode("utf-8")
        req = urllib.request.Request(self.url, data=body, method="POST", headers={
            "Accept": "application/sparql-results+json",
            "Content-Type": "application/x-www-form-urlencoded"})
        with self._sem:
            self._count("requests")
            t0 = time.perf_counter()
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    raw = resp.read()
                    state = resp.headers.get("X-SQL-State")
                    if resp.status == 206 or state:  # an anytime query cut at the server's time limit
                        msg = resp.headers.get("X-SQL-Message")
                        raise _Transient(f"incomplete result (HTTP {resp.status}, X-SQL-State {state}"
                                         + (f": {msg})" if msg else ")"))
            except urllib.error.HTTPError as e:
                detail = e.read()[:300].decode("utf-8", "replace").strip()
                if e.code == 429 or e.code >= 500:
                    raise _Transient(f"HTTP {e.code} {e.reason}: {detail}") from None
                self._count("failures")
                raise SparqlError(f"SPARQL endpoint {self.url}: {kind} query rejected, HTTP {e.code} "
                                  f"{e.reason}: {detail}") from None
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
                reason = getattr(e, "reason", e)
                if isinstance(reason, TimeoutError) or "timed out" in str(reason):
                    raise _Transient(f"no answer within timeout_s={self.timeout_s:g}s") from None
                raise _Transient(f"cannot reach the endpoint ({reason})") from None
            finally:
                self._count("seconds", time.perf_counter() - t0)
        try:
            res = json.loads(raw.decode("utf-8"))
            if "boolean" not in res:
                rows = res["results"]["bindings"]
                if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
                    raise TypeError("results.bindings is not a list of objects")
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
            self._count("failures")
            snippet = raw[:120].decode("utf-8", "replace")
            raise SparqlError(f"SPARQL endpoint {self.url}: {kind} query returned a malformed result "
                              f"(expected SPARQL JSON results: {e}); starts with {snippet!r}") from None
        return res

    def close(self) -> None:
        if self.store is not None:
            self.store.close()


# ----------------------------------------------------------------------------- the KG source
class SparqlKG:
    """A KG served by a SPARQL endpoint, materialised locally as it is walked (module docstring).

    Args:
        endpoint: the :class:`SparqlEndpoint`.
        prefix: namespace of entities and relations (Freebase: ``http://rdf.freebase.com/ns/``).
        batch_size: entities per ``VALUES`` block of an expansion / name query.
        language: language tag of the names used as labels (untagged names are the fallback).
        relations: the relation names (skips the start-up relation query); ``relations_file``:
            a file of them, one a line.
        exclude: metadata predicates that are not relations.
        max_rows: ``LIMIT`` of one expansion query (``None`` = none); a block that hits it is
            re-asked entity by entity, and an entity that still hits it raises (never truncates).
        name: a short label for logs and tables.
    """

    remote = True

    def __init__(self, endpoint: SparqlEndpoint, *, prefix: str = FREEBASE_NS, batch_size: int = 100,
                 language: str = "en", relations: Sequence[str] | None = None,
                 relations_file: str | None = None, exclude: Sequence[str] = DEFAULT_EXCLUDE,
                 max_rows: int | None = None, name: str = "freebase_sparql") -> None:
        if not re.fullmatch(r"https?://[^\s<>\"{}|\\^`]+[/#]", prefix):
            raise ValueError(f"kg.prefix must be an http(s) namespace IRI ending in / or #, got {prefix!r}")
        if int(batch_size) < 1:
            raise ValueError(f"kg.batch_size must be ≥ 1, got {batch_size}")
        self.endpoint, self.prefix, self.name = endpoint, prefix, name
        self.endpoint_url = endpoint.url
        self.batch_size, self.language = int(batch_size), language
        self.max_rows = None if max_rows is None else int(max_rows)
        self._exclude = set(exclude)
        if relations is None and relations_file:
            relations = [ln.strip() for ln in Path(relations_file).read_text().splitlines() if ln.strip()]
        if relations is None:
            relations = self._fetch_relations()
        self.relation_names: list[str] = sorted(dict.fromkeys(check_relation(r) for r in relations))
        self._relation_index = {r: i for i, r in enumerate(self.relation_names)}
        self._rel_by_iri = {self.prefix + relation_to_local(r): i for i, r in enumerate(self.relation_names)}
        self.entity_names: list[str] = []
        self._entity_index: dict[str, int] = {}
        self.labels: list[str | None] = []
        self._cap = 1024
        self._h = np.zeros(self._cap, dtype=np.int32)
        self._r = np.zeros(self._cap, dtype=np.int32)
        self._t = np.zeros(self._cap, dtype=np.int32)
        self._m = 0
        self._facts: set[tuple[int, int, int]] = set()
        self._out: dict[int, list[int]] = {}
        self._in: dict[int, list[int]] = {}
        self._expanded: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._types: dict[int, list[str]] = {}
        self._lock = threading.RLock()
        self.type_names: list[str] = []

    # ------------------------------------------------------------------ sizes & vocab
    @property
    def n_entities(self) -> int:
        return len(self.entity_names)

    @property
    def n_relations(self) -> int:
        return len(self.relation_names)

    @property
    def n_triples(self) -> int:
        """Facts fetched so far (not the endpoint's size)."""
        return self._m

    @property
    def heads(self) -> np.ndarray:
        return self._h[: self._m]

    @property
    def rels(self) -> np.ndarray:
        return self._r[: self._m]

    @property
    def tails(self) -> np.ndarray:
        return self._t[: self._m]

    @property
    def entity_types(self) -> np.ndarray:
        return np.full(self.n_entities, -1, dtype=np.int32)

    @property
    def aliases(self) -> dict[str, str]:
        return {}

    def entity_id(self, name: str) -> int:
        i = self._entity_index.get(name)
        if i is not None:
            return i
        name = name.strip() if isinstance(name, str) else name  # "m.01a\n" from a data file is m.01a
        i = self._entity_index.get(name)
        if i is not None:
            return i
        if isinstance(name, str) and MID_RE.fullmatch(name) and self._exists(name):
            return self._intern(name)
        raise KeyError(f"unknown entity {name!r} in KG {self.name!r} ({self.endpoint_url})")

    def entity_ids(self, names: Iterable[str]) -> np.ndarray:
        return np.array([self.entity_id(n) for n in names], dtype=np.int32)

    def find_entity(self, mention: str) -> int:
        """Id by MID, then by English name or alias (exact, then whitespace/underscore-normalised,
        then lower-case forms of the mention); ``-1`` if none. Several entities with one name:
        an alias match wins over a name match (as in the in-memory store), then the smallest MID."""
        if not isinstance(mention, str) or not mention.strip():
            return -1
        i = self._entity_index.get(mention)
        if i is not None:
            return i
        if MID_RE.fullmatch(mention.strip()):  # surrounding whitespace (a trailing "\n") is not part of an id
            mention = mention.strip()
            i = self._entity_index.get(mention)
            if i is not None:
                return i
            return self._intern(mention) if self._exists(mention) else -1
        if len(mention) > MAX_LITERAL or any(ord(c) < 0x20 for c in mention):
            return -1
        spaced = re.sub(r"\s+", " ", mention.replace("_", " ")).strip()
        forms = list(dict.fromkeys([mention, spaced, spaced.title(), normalise_name(mention)]))
        lits = " ".join(string_literal(f, self.language) for f in forms)
        q = (f"SELECT DISTINCT ?e ?p WHERE {{ VALUES ?n {{ {lits} }} VALUES ?p {{ {self._iri(ALIAS_PREDICATE)} "
             f"{self._iri(NAME_PREDICATE)} }} ?e ?p ?n . }}")
        best = None
        for row in self.endpoint.select("find_entity", q):
            mid = self._mid_of(row, "e")
            if mid is None:
                continue
            rank = (0 if row["p"]["value"].endswith(ALIAS_PREDICATE) else 1, mid)
            best = rank if best is None or rank < best else best
        if best is None:
            return -1
        i = self._intern(best[1])
        self._fetch_labels([i])
        return i

    def relation_id(self, name: str) -> int:
        try:
            return self._relation_index[name]
        except KeyError:
            raise KeyError(f"unknown relation {name!r} in KG {self.name!r} ({self.endpoint_url})") from None

    def has_relation(self, name: str) -> bool:
        return name in self._relation_index

    def entity_label(self, i: int) -> str:
        i = int(i)
        if self.labels[i] is None:
            self._fetch_labels([i])
        lab = self.labels[i]
        return lab if lab else self.entity_names[i]

    def type_of(self, i: int) -> str | None:
        """The first (sorted) ``type.object.type`` of entity ``i``; ``None`` when it has none."""
        i = int(i)
        if i not in self._types:
            q = (f"SELECT DISTINCT ?t WHERE {{ {self._iri(check_mid(self.entity_names[i]))} "
                 f"{self._iri(TYPE_PREDICATE)} ?t . }}")
            ts = sorted(r["t"]["value"][len(self.prefix):] for r in self.endpoint.select("types", q)
                        if r.get("t", {}).get("value", "").startswith(self.prefix))
            self._types[i] = ts
        return self._types[i][0] if self._types[i] else None

    def verbalise(self, triple: Sequence[int]) -> str:
        h, r, t = (int(x) for x in triple)
        return f"{self.entity_label(h)} | {self.relation_names[r]} | {self.entity_label(t)}"

    # ------------------------------------------------------------------ facts
    def out_triples(self, entity: int) -> np.ndarray:
        entity = int(entity)
        if entity not in self._expanded:
            self.prefetch([entity])
        return self._expanded[entity][0]

    def in_triples(self, entity: int) -> np.ndarray:
        entity = int(entity)
        if entity not in self._expanded:
            self.prefetch([entity])
        return self._expanded[entity][1]

    def prefetch(self, entities: Iterable[int]) -> None:
        """Expand every entity of ``entities`` not expanded yet: one query per direction per
        ``batch_size`` block of entities whose facts are not cached, then the names of the
        entities that appeared."""
        with self._lock:
            todo = sorted({int(e) for e in np.asarray(list(entities), dtype=np.int64).ravel().tolist()}
                          - self._expanded.keys())
            if not todo:
                return
            mids = [check_mid(self.entity_names[e]) for e in todo]
            before = self.n_entities
            rows = self._expand(mids)
            rows.sort()
            for s, p, o in rows:
                self._add(self._intern(s), p, self._intern(o))
            for e in todo:
                self._expanded[e] = (self._sorted(self._out.get(e, []), self._t),
                                     self._sorted(self._in.get(e, []), self._h))
            new = [i for i in list(todo) + list(range(before, self.n_entities)) if self.labels[i] is None]
            self._fetch_labels(new)

    def _sorted(self, tids: list[int], other: np.ndarray) -> np.ndarray:
        arr = np.array(tids, dtype=np.int64)
        if len(arr) == 0:
            return arr
        key = sorted(range(len(arr)), key=lambda k: (int(self._r[arr[k]]), self.entity_names[int(other[arr[k]])]))
        return arr[key]

    # The disk cache holds one entry per (entity, direction) and per entity name, stored under the
    # text of the single-entity query, although the endpoint is asked in VALUES blocks: a later
    # run, whatever blocks its frontiers form, finds every fact already asked for.
    def _query(self, direction: str, mids: Sequence[str], limit: bool = True) -> str:
        vals = " ".join(self._iri(check_mid(m)) for m in mids)
        lim = f" LIMIT {self.max_rows}" if (self.max_rows and limit) else ""
        if direction == "out":
            return (f"SELECT ?s ?p ?o WHERE {{ VALUES ?s {{ {vals} }} ?s ?p ?o . "
                    f"FILTER(isIRI(?o) && STRSTARTS(STR(?o), \"{self.prefix}\")) }}{lim}")
        return (f"SELECT ?s ?p ?o WHERE {{ VALUES ?o {{ {vals} }} ?s ?p ?o . "
                f"FILTER(isIRI(?s) && STRSTARTS(STR(?s), \"{self.prefix}\")) }}{lim}")

    def _expand(self, mids: Sequence[str]) -> list[tuple[str, int, str]]:
        rows: list[dict] = []
        todo: list[tuple[str, list[str]]] = []
        for direction in ("out", "in"):
            missing = []
            for m in mids:
                hit = self.endpoint.cached(self._query(direction, [m], limit=False))
                if hit is None:
                    missing.append(m)
                else:
                    rows.extend(self._bindings(hit, "neighbourhood"))
            todo += [(direction, missing[i:i + self.batch_size]) for i in range(0, len(missing), self.batch_size)]
        rows.extend(self._ask_blocks(todo))
        return self._facts_of(rows)

    def _ask_blocks(self, todo: list[tuple[str, list[str]]]) -> list[dict]:
        if not todo:
            return []
        results = self.endpoint.select_many("neighbourhood", [self._query(d, b) for d, b in todo],
                                            recheck_empty=[len(b) > 1 for _, b in todo])
        rows: list[dict] = []
        for (direction, block), res in zip(todo, results):
            if self.max_rows and len(res) >= self.max_rows:
                if len(block) > 1:
                    rows.extend(self._ask_blocks([(direction, [m]) for m in block]))
                    continue
                raise SparqlError(f"SPARQL endpoint {self.endpoint_url}: neighbourhood query for {block[0]} "
                                  f"({direction}) hit kg.max_rows={self.max_rows}; raise it rather than "
                                  f"truncate the neighbourhood")
            var = "s" if direction == "out" else "o"
            per: dict[str, list[dict]] = {m: [] for m in block}
            for row in res:
                v = row.get(var, {}).get("value", "") if isinstance(row, dict) else ""
                if v.startswith(self.prefix) and v[len(self.prefix):] in per:
                    per[v[len(self.prefix):]].append(row)
            for m, mine in per.items():
                self.endpoint.remember("neighbourhood", self._query(direction, [m], limit=False),
                                       {"results": {"bindings": mine}})
            rows.extend(res)
        return rows

    def _bindings(self, res: dict, kind: str) -> list[dict]:
        try:
            rows = res["results"]["bindings"]
        except (KeyError, TypeError):
            raise SparqlError(f"SPARQL endpoint {self.endpoint_url}: cached {kind} response is malformed") from None
        return rows

    def _facts_of(self, rows: list[dict]) -> list[tuple[str, int, str]]:
        out: list[tuple[str, int, str]] = []
        for row in rows:
            try:
                s, p, o = row["s"]["value"], row["p"]["value"], row["o"]["value"]
            except (KeyError, TypeError):
                raise SparqlError(f"SPARQL endpoint {self.endpoint_url}: neighbourhood query returned a "
                                  f"row without ?s ?p ?o: {row!r}") from None
            r = self._rel_by_iri.get(p)
            if r is None:
                continue
            sm, om = s[len(self.prefix):], o[len(self.prefix):]
            if s.startswith(self.prefix) and o.startswith(self.prefix) and MID_RE.fullmatch(sm) and MID_RE.fullmatch(om):
                out.append((sm, r, om))
        return out

    def _add(self, h: int, r: int, t: int) -> None:
        if (h, r, t) in self._facts:
            return
        self._facts.add((h, r, t))
        if self._m == self._cap:
            self._cap *= 2
            for k in ("_h", "_r", "_t"):
                arr = np.zeros(self._cap, dtype=np.int32)
                arr[: self._m] = getattr(self, k)[: self._m]
                setattr(self, k, arr)
        tid = self._m
        self._h[tid], self._r[tid], self._t[tid] = h, r, t
        self._m += 1
        self._out.setdefault(h, []).append(tid)
        self._in.setdefault(t, []).append(tid)

    def _intern(self, mid: str) -> int:
        i = self._entity_index.get(mid)
        if i is None:
            i = len(self.entity_names)
            self._entity_index[check_mid(mid)] = i
            self.entity_names.append(mid)
            self.labels.append(None)
        return i

    def _name_query(self, mids: Sequence[str]) -> str:
        vals = " ".join(self._iri(check_mid(m)) for m in mids)
        return f"SELECT ?e ?n WHERE {{ VALUES ?e {{ {vals} }} ?e {self._iri(NAME_PREDICATE)} ?n . }}"

    def _fetch_labels(self, ids: Sequence[int]) -> None:
        ids = [int(i) for i in ids if self.labels[int(i)] is None]
        if not ids:
            return
        rows: list[dict] = []
        missing = []
        for i in ids:
            hit = self.endpoint.cached(self._name_query([self.entity_names[i]]))
            if hit is None:
                missing.append(self.entity_names[i])
            else:
                rows.extend(self._bindings(hit, "names"))
        blocks = [missing[k:k + self.batch_size] for k in range(0, len(missing), self.batch_size)]
        answers = self.endpoint.select_many("names", [self._name_query(b) for b in blocks],
                                            recheck_empty=[len(b) > 1 for b in blocks])
        for block, res in zip(blocks, answers):
            per: dict[str, list[dict]] = {m: [] for m in block}
            for row in res:
                mid = self._mid_of(row, "e")
                if mid in per:
                    per[mid].append(row)
            for m, mine in per.items():
                self.endpoint.remember("names", self._name_query([m]), {"results": {"bindings": mine}})
            rows.extend(res)
        found: dict[str, tuple[int, str]] = {}
        for row in rows:
            mid = self._mid_of(row, "e")
            n = row.get("n", {})
            if mid is None or not isinstance(n.get("value"), str):
                continue
            lang = n.get("xml:lang", "")
            rank = 0 if lang == self.language else (1 if not lang else 2)
            if rank < 2 and (mid not in found or (rank, n["value"]) < found[mid]):
                found[mid] = (rank, n["value"])
        for i in ids:
            self.labels[i] = found.get(self.entity_names[i], (0, ""))[1]

    def _exists(self, mid: str) -> bool:
        iri = self._iri(check_mid(mid))
        return self.endpoint.ask("entity_exists", f"ASK {{ {{ {iri} ?p ?o }} UNION {{ ?s ?p {iri} }} }}")

    def _fetch_relations(self) -> list[str]:
        q = (f"SELECT DISTINCT ?p WHERE {{ ?s ?p ?o . FILTER(isIRI(?o) && STRSTARTS(STR(?p), \"{self.prefix}\")) }}")
        rels = []
        for row in self.endpoint.select("relations", q):
            local = row.get("p", {}).get("value", "")[len(self.prefix):]
            rel = local_to_relation(local)
            if rel is not None and local not in self._exclude:
                rels.append(rel)
        if not rels:
            raise SparqlError(f"SPARQL endpoint {self.endpoint.url}: relations query found no predicate in "
                              f"{self.prefix}; is the Freebase graph loaded (kg.default_graph)?")
        return rels

    def _iri(self, local: str) -> str:
        return f"<{self.prefix}{local}>"

    def _mid_of(self, row: dict, var: str) -> str | None:
        v = row.get(var, {}).get("value", "")
        if not v.startswith(self.prefix):
            return None
        m = v[len(self.prefix):]
        return m if MID_RE.fullmatch(m) else None

    # ------------------------------------------------------------------ whole-graph views
    def _whole(self, what: str):
        raise NeedsInMemoryKG(f"{what} needs the whole graph in memory; kg={self.name!r} is the SPARQL "
                              f"endpoint {self.endpoint_url} (use kg=freebase_slice, or retriever=sparql)")

    SUB = property(lambda self: self._whole("KG.SUB (LogosKG matrix engines)"))
    OBJ = property(lambda self: self._whole("KG.OBJ (LogosKG matrix engines)"))
    REL = property(lambda self: self._whole("KG.REL (LogosKG matrix engines)"))
    out_csr = property(lambda self: self._whole("KG.out_csr"))
    in_csr = property(lambda self: self._whole("KG.in_csr"))

    def degree(self):
        self._whole("KG.degree()")

    def entities_of_type(self, type_name: str):
        self._whole("entities_of_type (embedding linker candidates)")

    @property
    def triples(self) -> np.ndarray:
        return np.stack([self.heads, self.rels, self.tails], axis=1)

    def __repr__(self) -> str:
        return (f"SparqlKG(name={self.name!r}, endpoint={self.endpoint_url!r}, relations={self.n_relations}, "
                f"local_entities={self.n_entities}, local_triples={self.n_triples})")


def freebase_sparql(url: str, *, default_graph: str | None = None, prefix: str = FREEBASE_NS,
                    timeout_s: float = 60.0, retries: int = 3, backoff_s: float = 0.5,
                    max_concurrency: int = 4, batch_size: int = 100, language: str = "en",
                    relations_file: str | None = None, max_rows: int | None = None,
                    cache_dir: str | None = None, cache_mode: str = "readwrite",
                    name: str = "freebase_sparql") -> SparqlKG:
    """Hydra target of ``conf/kg/freebase_sparql.yaml``: endpoint + source; reads the relation
    list at once, so a down endpoint stops the run before the first example."""
    ep = SparqlEndpoint(url, default_graph=default_graph, timeout_s=timeout_s, retries=retries,
                        backoff_s=backoff_s, max_concurrency=max_concurrency, cache_dir=cache_dir,
                        cache_mode=cache_mode)
    return SparqlKG(ep, prefix=prefix, batch_size=batch_size, language=language,
                    relations_file=relations_file, max_rows=max_rows, name=name)


# ----------------------------------------------------------------------------- FB15k-237 → N-Triples
def _nt_literal(text: str, lang: str = "en") -> str:
    esc = (text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r"))
    return f'"{esc}"@{lang}'


def fb15k237_to_ntriples(path: str | Sequence[str], out: str | Path, *, names: str | None = None,
                         aliases: str | None = None, prefix: str = FREEBASE_NS) -> dict[str, int]:
    """Write the FB15k-237 slice as N-Triples in the Freebase namespace (``.gz`` if ``out`` ends so).

    The same facts, names and aliases as ``kg=freebase_slice``
    (:func:`kgreason.kg.loaders.load_freebase_slice` with ``mid_style=dot, relation_style=dot``):
    ``<ns/m.x> <ns/rel> <ns/m.y>``; names as ``type.object.name`` ``@en``; aliases
    (``Name_With_Underscores``) as ``common.topic.alias`` with spaces. Returns line counts.
    """
    from kgreason.kg.loaders import _fb_relation, _mid, read_name_map, read_triples

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if out.suffix == ".gz" else open
    counts = dict(facts=0, names=0, aliases=0)
    seen: set[str] = set()
    with opener(out, "wt", encoding="utf-8") as f:
        for h, r, t in dict.fromkeys(read_triples(path, "\t")):
            hm, tm = check_mid(_mid(h, "dot")), check_mid(_mid(t, "dot"))
            rel = relation_to_local(_fb_relation(r, "dot"))
            f.write(f"<{prefix}{hm}> <{prefix}{rel}> <{prefix}{tm}> .\n")
            seen.update((hm, tm))
            counts["facts"] += 1
        for src, pred, key in ((names, NAME_PREDICATE, "names"), (aliases, ALIAS_PREDICATE, "aliases")):
            if src is None:
                continue
            for mid, text in read_name_map(src).items():
                m = _mid(mid, "dot")
                if m not in seen:
                    continue  # the name files cover FB15k (a superset); keep the slice's entities
                if not MID_RE.fullmatch(m):
                    continue
                txt = text.replace("_", " ") if key == "aliases" else text
                f.write(f"<{prefix}{m}> <{prefix}{pred}> {_nt_literal(txt)} .\n")
                counts[key] += 1
    return counts


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m kgreason.kg.sparql convert OUT.nt.gz [--data DIR]``: the FB15k-237 slice as N-Triples."""
    import argparse
    import os

    ap = argparse.ArgumentParser(prog="python -m kgreason.kg.sparql")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert", help="FB15k-237 slice → N-Triples in the Freebase namespace")
    c.add_argument("out")
    c.add_argument("--data", default=os.path.join(os.environ.get("KGREASON_DATA", "../shared/data"),
                                                  "freebase_fb15k237"))
    a = ap.parse_args(argv)
    d = Path(a.data)
    counts = fb15k237_to_ntriples([str(d / f"{s}.txt.gz") for s in ("train", "valid", "test")], a.out,
                                  names=str(d / "entity2text.txt"), aliases=str(d / "FB15k_mid2name.txt"))
    print(json.dumps({"out": a.out, **counts}))


if __name__ == "__main__":
    main()
