"""Read-only guard for LLM Cypher: an injection battery must be rejected by layer one (the
guard) AND by layer two (the engine's read-only mode), and leave the DB unchanged."""

from __future__ import annotations

import pytest

from kgreason.kg.cypher import CypherError, KuzuDB
from kgreason.kg.cypher_guard import CypherRejected, check_read_only, enforce_limit

INJECTIONS = [
    # plain writes
    "CREATE (:Entity {id: 999999, name: 'x'})",
    "MATCH (n:Entity) DETACH DELETE n",
    "MATCH (n:Entity) DELETE n",
    "MATCH (n:Entity) SET n.name = 'pwned'",
    "MATCH (n:Entity) REMOVE n.label",
    "MERGE (n:Entity {id: 1})",
    "DROP TABLE film__film__directed_by",
    "MATCH (n:Entity) WHERE n.id = 1 RETURN n UNION MATCH (m:Entity) SET m.name = 'x' RETURN m",
    # case tricks
    "match (n:Entity) detach delete n",
    "MaTcH (n:Entity) sEt n.name = 'x'",
    # comments
    "MATCH (n:Entity) /* harmless */ SET n.name = 'x'",
    "MATCH (n:Entity) CRE/**/ATE (:Entity {id: 5})",
    "MATCH (n:Entity) // comment\nDELETE n",
    "MATCH (n:Entity) RETURN n /* unterminated",
    # unicode: full-width letters, homoglyphs, zero-width characters
    "MATCH (n:Entity) ＳＥＴ n.name = 'x'",
    "MATCH (n:Entity) \u0421REATE (:Entity {id: 7})",  # Cyrillic Es
    "MATCH (n:Entity) DE\u200bLETE n",
    "MATCH (n:Entity)\u00a0DELETE n",
    # multiple statements
    "MATCH (n:Entity) RETURN n; MATCH (m:Entity) DETACH DELETE m",
    "MATCH (n:Entity) RETURN n;;",
    "RETURN 1; RETURN 2",
    # LOAD CSV / COPY / FOREACH
    "LOAD CSV FROM 'file:///etc/passwd' AS line RETURN line",
    "COPY Entity FROM '/tmp/x.csv'",
    "MATCH p = (n:Entity)-[:R]->() FOREACH (x IN nodes(p) | SET x.name = 'x')",
    # procedures and subqueries
    "CALL { MATCH (n:Entity) DETACH DELETE n } RETURN 1",
    "CALL { MATCH (n:Entity) RETURN n } RETURN n",
    "MATCH (n) CALL apoc.refactor.rename.label('Entity', 'X') YIELD total RETURN total",
    "RETURN apoc.cypher.runFirstColumnSingle('MATCH (n) DETACH DELETE n', {})",
    "CALL db.createLabel('X')",
    "CALL dbms.security.createUser('a', 'b', false)",
    # string-concatenation trick: the write is built as data, then executed by a procedure
    "WITH 'MATCH (n) DETACH ' + 'DELETE n' AS q CALL apoc.cypher.runWrite(q, {}) YIELD value RETURN value",
    "WITH 'CRE' + 'ATE (n)' AS q CALL apoc.cypher.doIt(q, {}) YIELD value RETURN value",
    # quoting tricks: a string that closes early, an escaped quote
    "MATCH (n:Entity) WHERE n.name = 'a' SET n.name = 'b' RETURN n",
    "MATCH (n:Entity) WHERE n.name = 'it\\'s' SET n.x = 1 RETURN n",
    # not a read query at all
    "INSTALL httpfs",
    "ATTACH '/tmp/other.kuzu' AS other (dbtype kuzu)",
    "USE system SHOW USERS",
    "",
    # issue 18: inputs that crashed or exhausted kuzu in the run's own process
    "RETURN " + "[" * 800 + "1" + "]" * 800,          # parser stack overflow: SIGSEGV
    "RETURN " + "NOT " * 20000 + "true",              # the same through a long NOT chain
    "RETURN " + "[" * 350 + "1" + "]" * 350,          # ran 20 s past a 10 s limit
    # reading files or changing settings
    "LOAD FROM '/etc/passwd' RETURN *",
    "CALL threads=64",
    "COPY (MATCH (n:Entity) RETURN n.name) TO '/tmp/kgreason-exfil.csv'",
    # full-width quote that NFKC would turn into a real quote outside a literal
    "MATCH (n:Entity) WHERE n.name = \uff07x\uff07 RETURN n",
]

BENIGN = [
    "MATCH (n:Entity) WHERE n.name = 'SET' RETURN n.name",
    "MATCH (n:Entity) WHERE n.name = \"DETACH DELETE n\" RETURN n.name LIMIT 3",
    "MATCH (n:Entity) WHERE n.label CONTAINS 'create; drop' RETURN count(n) AS c",
    "MATCH (`set`:Entity) RETURN `set`.name LIMIT 1",
    "MATCH (s:Entity {name: $name})-[r:R]->(x:Entity) WHERE r.type = 'film.film.directed_by' RETURN DISTINCT x.name",
    "// find films\nMATCH (n:Entity) RETURN n.name LIMIT 2;",
    "OPTIONAL MATCH (n:Entity {id: 0}) RETURN n.name",
    "UNWIND [1, 2, 3] AS x RETURN x",
    "WITH 1 AS x RETURN x",
    "MATCH (a:Entity)-[:R*1..2]->(b:Entity) WHERE a.id = 0 RETURN DISTINCT b.id",
    "CALL db.labels() YIELD label RETURN label",
    "MATCH (n:Entity) WHERE EXISTS { MATCH (n)-[:R]->() } RETURN n.name ORDER BY n.name DESC LIMIT $k",
    "MATCH (n:Entity {name: 'O\\'Brien'}) RETURN n",
]


def test_battery_size():
    assert len(INJECTIONS) >= 25


@pytest.mark.parametrize("q", INJECTIONS)
def test_injection_rejected_by_guard(q):
    with pytest.raises(CypherRejected) as ei:
        check_read_only(q)
    assert ei.value.reason


@pytest.mark.parametrize("q", BENIGN)
def test_benign_accepted(q):
    out = check_read_only(q)
    assert "//" not in out and not out.endswith(";")


def test_string_literals_kept_verbatim():
    assert check_read_only("MATCH (n) WHERE n.name = 'SET' RETURN n") == "MATCH (n) WHERE n.name = 'SET' RETURN n"
    # NFKC applies to code only: '8½' used to become '81⁄2', so such entities could not be found
    q = "ＭＡＴＣＨ (n:Entity) WHERE n.name = '8½ Women' AND n.label = `ﬁ` RETURN n.name"
    assert check_read_only(q) == "MATCH (n:Entity) WHERE n.name = '8½ Women' AND n.label = `ﬁ` RETURN n.name"


def test_enforce_limit():
    assert enforce_limit("MATCH (n) RETURN n", 10) == "MATCH (n) RETURN n LIMIT 10"
    assert enforce_limit("MATCH (n) RETURN n LIMIT 5000", 10) == "MATCH (n) RETURN n LIMIT 10"
    assert enforce_limit("MATCH (n) RETURN n limit 3", 10) == "MATCH (n) RETURN n LIMIT 3"
    assert enforce_limit("MATCH (n) RETURN n LIMIT $k", 10) == "MATCH (n) RETURN n LIMIT 10"


@pytest.fixture(scope="module")
def kuzu_db(tmp_path_factory, embedded_kg):
    db = KuzuDB(tmp_path_factory.mktemp("kuzu") / "db", row_limit=50, timeout_ms=5000)
    db.export(embedded_kg)
    yield db
    db.close()


def test_battery_leaves_db_unchanged_and_engine_layer_holds(kuzu_db, embedded_kg):
    before = (kuzu_db.counts(), kuzu_db.checksum())
    assert before[0] == (embedded_kg.n_entities, embedded_kg.n_triples)
    for q in INJECTIONS:
        with pytest.raises(CypherRejected):
            kuzu_db.run_read(q)
    # layer two: the raw read-only connection refuses every write that parses in kuzu
    writes = [
        "CREATE (:Entity {id: 999999, name: 'x', label: 'x', type: ''})",
        "MATCH (n:Entity) DETACH DELETE n",
        "MATCH (n:Entity) DELETE n",
        "MATCH (n:Entity) SET n.name = 'pwned'",
        "MERGE (n:Entity {id: 1})",
        "DROP TABLE film__film__directed_by",
        "MATCH (a:Entity {id: 0}), (b:Entity {id: 1}) CREATE (a)-[:film__film__directed_by {relation: 'x', rid: -1}]->(b)",
        "COPY Entity FROM '/tmp/does-not-matter.csv'",
    ]
    succeeded = []
    for q in writes + INJECTIONS:
        if not q or q.startswith(("INSTALL", "ATTACH", "LOAD FROM", "COPY (")) or len(q) > 500:
            # network / another file / a file read / crashes this process (the sandbox's tests)
            continue
        try:
            kuzu_db.raw_read_only_execute(q)
            succeeded.append(q)
        except RuntimeError as e:  # read-only violation or parse error
            assert "read-only" in str(e) or "Parser" in str(e) or "Binder" in str(e), (q, str(e))
    # kuzu itself runs two harmless reads and a setting change on this throwaway connection (the
    # guard is what refuses settings); no write got through
    assert succeeded == ["RETURN 1; RETURN 2", "CALL threads=64"]
    assert (kuzu_db.counts(), kuzu_db.checksum()) == before


def test_benign_run_and_row_limit(kuzu_db):
    rows = kuzu_db.run_read("MATCH (n:Entity) RETURN n.name AS name", limit=7)
    assert len(rows) == 7
    rows = kuzu_db.run_read("MATCH (n:Entity) WHERE n.name = 'SET' RETURN n.name AS name")
    assert rows == []
    with pytest.raises(CypherError):
        kuzu_db.run_read("MATCH (n:Nope) RETURN n")


@pytest.mark.parametrize("q", ["CALL current_setting('home_directory') RETURN *",
                               "CALL current_setting('file_search_path') RETURN *"])
def test_current_setting_is_not_allowed(q):
    """Issue #32 item 7: kuzu's current_setting('home_directory') handed the machine's home path to
    the model; no setting is needed to answer a question over the KG."""
    with pytest.raises(CypherRejected):
        check_read_only(q)
