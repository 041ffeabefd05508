"""The call store on a shared filesystem (issue #58 item 5): append-only shards, one per process,
no SQLite WAL; torn and damaged lines never handed out; any string storable; older SQLite
caches migrated; ``kgreason cache stats|merge``."""

from __future__ import annotations

import json
import multiprocessing as mp
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kgreason.storage.callstore import KeyValueStore, StoreCorrupt, decode_line, encode_record, merge, stats

REPO = Path(__file__).resolve().parents[2]


def _value(tag: str, i: int) -> dict:
    return {"texts": [f"{tag}-{i}-" + "x" * (50 + i % 400)], "usage": {"calls": 1}, "paid_by": [tag, str(i)]}


def test_lone_surrogates_are_storable(tmp_path):
    """Issue #57 M2: text with a lone UTF-16 surrogate raised UnicodeEncodeError in put."""
    s = KeyValueStore(tmp_path / "c")
    s.put("k\ud800", {"texts": ["a\ud800b", "\udfff"]})
    assert KeyValueStore(tmp_path / "c", "readonly").get("k\ud800") == {"texts": ["a\ud800b", "\udfff"]}
    assert all(b < 128 for b in next((tmp_path / "c").iterdir()).read_bytes())  # ensure_ascii: one line each


def test_a_torn_last_line_is_skipped_and_never_poisons_the_store(tmp_path):
    s = KeyValueStore(tmp_path / "c")
    s.put("a", {"v": 1})
    s.put("b", {"v": 2})
    shard = s.path / s._own
    whole = shard.read_bytes()
    shard.write_bytes(whole + encode_record("c", {"v": 3})[:-20])  # a writer killed mid-write
    r = KeyValueStore(tmp_path / "c", "readonly")
    assert (r.get("a"), r.get("b"), r.get("c")) == ({"v": 1}, {"v": 2}, None)
    w = KeyValueStore(tmp_path / "c")  # a new process: its own shard, untouched by the torn one
    w.put("c", {"v": 33})
    assert KeyValueStore(tmp_path / "c", "readonly").get("c") == {"v": 33}
    st = stats(tmp_path / "c")
    assert (st["keys"], st["torn_tails"], st["damaged_lines"]) == (3, 1, 0)


def test_a_damaged_line_is_skipped_and_the_rest_is_read(tmp_path):
    s = KeyValueStore(tmp_path / "c")
    for i in range(3):
        s.put(f"k{i}", {"v": i})
    shard = s.path / s._own
    lines = shard.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"v":1', b'"v":7')  # checksum no longer matches
    shard.write_bytes(b"".join(lines))
    assert decode_line(lines[1]) is None and decode_line(lines[0])["value"] == {"v": 0}
    r = KeyValueStore(tmp_path / "c", "readonly")
    assert (r.get("k0"), r.get("k1"), r.get("k2")) == ({"v": 0}, None, {"v": 2})
    assert stats(tmp_path / "c")["damaged_lines"] == 1


def test_a_later_put_replaces_an_earlier_one_across_processes(tmp_path):
    a, b = KeyValueStore(tmp_path / "c"), KeyValueStore(tmp_path / "c")
    a.put("k", {"v": "old"})
    time.sleep(0.01)
    b.put("k", {"v": "new"})
    assert a.get("k") == {"v": "old"}  # a hit is not re-read...
    assert KeyValueStore(tmp_path / "c", "readonly").get("k") == {"v": "new"}  # ...a fresh open sees the newest
    assert len(KeyValueStore(tmp_path / "c", "readonly")) == 1


def _writer(dir_, tag, n, q):
    try:
        s = KeyValueStore(dir_)
        for i in range(n):
            s.put(f"{tag}-{i}", _value(tag, i))
            s.put(f"shared-{i}", _value("shared", i))  # overlapping keys: every writer stores the same value
            got = s.get(f"shared-{(i * 7) % n}")
            if got is not None and got != _value("shared", (i * 7) % n):
                raise AssertionError(f"{tag}: incomplete value for shared-{(i * 7) % n}")
        q.put(("ok", tag))
    except Exception as e:  # noqa: BLE001
        q.put(("err", f"{tag}: {e!r}"))


def _reader(dir_, tags, n, q):
    try:
        s = KeyValueStore(dir_)  # readwrite: a directory with nothing yet is no error
        seen, bad, t0 = 0, 0, time.time()
        while time.time() - t0 < 120:
            for tag in tags:
                for i in range(0, n, 3):
                    v = s.get(f"{tag}-{i}")
                    if v is None:
                        continue
                    seen += 1
                    if v != _value(tag, i):
                        bad += 1
            if seen and len(s) == len(tags) * n + n:
                break
        q.put(("ok", seen, bad) if bad == 0 else ("err", f"{bad} incomplete values"))
    except Exception as e:  # noqa: BLE001
        q.put(("err", repr(e)))


def test_eight_writers_and_a_reader_lose_nothing_and_leave_no_wal(tmp_path):
    """Eight processes write distinct and overlapping keys while a ninth reads: no error, no lost
    entry, every value read is whole; the directory (as if on a shared filesystem) holds only
    shard files: no SQLite file, no -wal, no -shm."""
    n, tags = 60, [f"w{i}" for i in range(8)]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    d = str(tmp_path / "shared" / "llm_calls")
    reader = ctx.Process(target=_reader, args=(d, tags, n, q))
    writers = [ctx.Process(target=_writer, args=(d, t, n, q)) for t in tags]
    reader.start()
    for p in writers:
        p.start()
    for p in [*writers, reader]:
        p.join(timeout=300)
    results = [q.get(timeout=10) for _ in range(9)]
    assert all(r[0] == "ok" for r in results), results
    s = KeyValueStore(d, "readonly")
    assert len(s) == 8 * n + n
    for t in tags + ["shared"]:
        for i in range(n):
            assert s.get(f"{t}-{i}") == _value(t, i), (t, i)
    files = [p.name for p in (tmp_path / "shared").rglob("*") if p.is_file()]
    assert len(files) == 8 and all(f.endswith(".jsonl") for f in files), files
    assert not any(f.endswith(("-wal", "-shm", ".sqlite")) for f in files)
    st = stats(d)
    assert (st["shards"], st["keys"], st["records"], st["damaged_lines"], st["torn_tails"]) == (8, 9 * n, 16 * n, 0, 0)


def _old_sqlite(path: Path, rows: dict) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE calls (key TEXT PRIMARY KEY, backend TEXT, model TEXT, method TEXT, "
                   "value TEXT NOT NULL, created REAL)")
        for k, v in rows.items():
            db.execute("INSERT INTO calls VALUES (?,?,?,?,?,?)", (k, "b", "m", "generate", json.dumps(v), 1.0))
    db.close()


def test_an_older_sqlite_cache_is_read_in_place_readonly_and_migrated_readwrite(tmp_path):
    from kgreason.storage.llm_calls import CallStore

    _old_sqlite(tmp_path / "llm_calls.sqlite", {"k1": {"texts": ["one"]}, "k2": {"texts": ["two"]}})
    ro = CallStore.open(tmp_path, "readonly")
    assert ro.get("k1") == {"texts": ["one"]} and len(ro) == 2
    assert not (tmp_path / "llm_calls").exists()  # readonly writes nothing
    rw = CallStore.open(tmp_path, "readwrite")
    assert (tmp_path / "llm_calls" / "legacy-sqlite.jsonl").is_file()
    rw.put("k2", {"texts": ["newer"]})
    again = CallStore.open(tmp_path, "readonly")
    assert again.get("k1") == {"texts": ["one"]} and again.get("k2") == {"texts": ["newer"]}
    (tmp_path / "llm_calls.sqlite").write_bytes(b"gone bad later")  # no longer read once migrated
    assert CallStore.open(tmp_path, "readonly").get("k1") == {"texts": ["one"]}


def test_a_damaged_older_sqlite_cache_is_named(tmp_path):
    (tmp_path / "sparql_calls.sqlite").write_bytes(b"not a database" * 50)
    with pytest.raises(StoreCorrupt, match=r"sparql_calls\.sqlite: not a usable cache file"):
        KeyValueStore(tmp_path / "sparql_calls", legacy=tmp_path / "sparql_calls.sqlite")


def test_merge_folds_shards_into_one_and_keeps_every_key(tmp_path):
    d = tmp_path / "c"
    for w in range(3):
        s = KeyValueStore(d)
        for i in range(10):
            s.put(f"k{i}", {"v": f"{w}-{i}"})  # the same keys: the last writer's value wins
            s.put(f"own{w}-{i}", {"v": i})
        time.sleep(0.01)
    reader = KeyValueStore(d, "readonly")
    assert reader.get("k3") == {"v": "2-3"}
    out = merge(d, grace_s=0)
    assert out["merged"] == 3 and out["keys"] == 40
    # one shard left (beside the merges' lock file, .merge.lock)
    assert [p.name.startswith("merged-") for p in d.iterdir() if p.name != ".merge.lock"] == [True]
    after = KeyValueStore(d, "readonly")
    assert after.get("k3") == {"v": "2-3"} and after.get("own1-9") == {"v": 9} and len(after) == 40
    assert reader.get("own0-0") == {"v": 0}  # a store open across the merge still reads


def test_cache_cli_stats_and_merge(tmp_path):
    d = tmp_path / "cache"
    for _ in range(2):
        KeyValueStore(d / "llm_calls").put("k", {"texts": ["x"]}, backend="b", model="m", method="generate")
    r = subprocess.run([sys.executable, "-m", "kgreason", "cache", "stats", str(d)], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "llm_calls: 2 shards, 2 records, 1 keys" in r.stdout and "b/m/generate: 1" in r.stdout
    r = subprocess.run([sys.executable, "-m", "kgreason", "cache", "merge", str(d), "--grace-s", "0"], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "llm_calls: 2 shards merged into 1 (1 keys)" in r.stdout
    r = subprocess.run([sys.executable, "-m", "kgreason", "cache", "stats", str(tmp_path / "nope")], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no call store" in r.stderr and "Traceback" not in r.stderr


def test_the_cache_tools_help_example_names_a_directory_a_run_writes(tmp_path, monkeypatch):
    """``kgreason cache --help`` shows ``kgreason cache stats DIR``: DIR, as an installed kgreason
    lays out its cache (``paths.cache`` = ~/.cache/kgreason, the store in ``llm_calls/``), must be
    one ``stats`` accepts. It named ``~/.cache/kgreason/llm``, a directory nothing writes."""
    import os
    import shlex

    from kgreason.cli import TOOLS
    from kgreason.storage import cache_command

    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    installed_cache = home / ".cache" / "kgreason"  # kgreason/paths.py's default outside a clone
    KeyValueStore(installed_cache / "llm_calls").put("k", {"texts": ["x"]}, backend="b", model="m", method="generate")
    words = shlex.split(TOOLS["cache"].example.split("|")[0])
    assert words[:3] == ["kgreason", "cache", "stats"], words
    assert cache_command.main(["stats", os.path.expanduser(words[3])]) in (0, None)
