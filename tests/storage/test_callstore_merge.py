"""`kgreason cache merge` never loses a paid reply (issue 73: M3, M4, L3).

An interrupted merge left every shard renamed ``.<name>.merging``: the store then read as empty,
``cache stats`` said there was no store, and a second merge merged nothing. Two merges at once
while jobs wrote destroyed hundreds of completed puts. A process that kept the store open across
a merge stopped seeing records written after it, its own included. Each case is checked with
real processes: a merge killed with SIGKILL at each of its steps, merges beside eight writers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kgreason.storage import cache_command
from kgreason.storage.callstore import KeyValueStore, merge, shard_files, stats

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def _fill(d: Path, shards: int = 3, per: int = 200) -> dict[str, dict]:
    """``shards`` shard files of ``per`` records each (one store object per shard)."""
    want = {}
    for s in range(shards):
        st = KeyValueStore(d)
        for i in range(per):
            k = f"k{s}-{i}"
            want[k] = {"texts": [f"reply {s}/{i}"]}
            st.put(k, want[k])
        st.close()
    assert len(shard_files(d)) == shards
    return want


def _all_there(d: Path, want: dict[str, dict]) -> None:
    st = KeyValueStore(d, "readonly")
    found = {k: st.get(k) for k in want}
    lost = [k for k, v in found.items() if v != want[k]]
    assert not lost, f"{len(lost)} of {len(want)} records not found (e.g. {lost[:3]}); dir holds {sorted(os.listdir(d))}"
    st.close()


def _stats_reads(d: Path, capsys, n: int) -> None:
    assert cache_command.main(["stats", str(d)]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert f", {n} keys," in out, out


# ------------------------------------------------------------------------------------------ M3
def test_a_merge_stopped_by_ctrl_c_in_its_grace_period_leaves_a_store_that_reads_whole(tmp_path, capsys):
    d = tmp_path / "llm_calls"
    want = _fill(d)
    p = subprocess.Popen([sys.executable, "-m", "kgreason", "cache", "merge", str(d), "--grace-s", "30"], cwd=REPO,
                         env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not any("merging" in n for n in os.listdir(d)):
        time.sleep(0.05)  # the merge has set its shards aside and sleeps through its grace period
    p.send_signal(signal.SIGINT)
    _out, err = p.communicate(timeout=60)
    assert "Traceback" not in err, err
    _all_there(d, want)
    _stats_reads(d, capsys, len(want))
    assert merge(d, grace_s=0)["keys"] == len(want)
    _all_there(d, want)


def test_the_leftovers_of_an_older_interrupted_merge_read_whole_and_the_next_merge_folds_them(tmp_path, capsys):
    """What an older kgreason's interrupted merge left (every shard hidden as `.<name>.merging`):
    the store read as empty (0 of 600 keys), `cache stats` said there was no store, and a second
    merge merged nothing."""
    d = tmp_path / "llm_calls"
    want = _fill(d)
    for p in shard_files(d):
        p.rename(d / f".{p.name}.merging")
    _all_there(d, want)  # read in place, read-only
    _stats_reads(d, capsys, len(want))
    assert cache_command.main(["stats", str(tmp_path)]) == 0  # given the llm_cache.dir too
    assert merge(d, grace_s=0)["keys"] == len(want)
    assert not [n for n in os.listdir(d) if "merging" in n]
    _all_there(d, want)


def test_a_merge_on_a_full_disk_is_one_line_and_every_record_stays_readable(tmp_path, capsys):
    from tmpfs_util import small_tmpfs

    with small_tmpfs(tmp_path / "disk", size="2m") as disk:
        d = disk / "llm_calls"
        want = _fill(d)
        st = os.statvfs(disk)
        (disk / "filler").write_bytes(b"x" * (st.f_bavail * st.f_frsize - 4096))
        assert cache_command.main(["merge", str(d), "--grace-s", "0"]) == 2
        err = capsys.readouterr().err
        assert "No space left on device" in err and str(d) in err and len(err.strip().splitlines()) == 1, err
        _all_there(d, want)
        (disk / "filler").unlink()
        _stats_reads(d, capsys, len(want))
        assert merge(d, grace_s=0)["keys"] == len(want)
        _all_there(d, want)


_KILLER = textwrap.dedent("""
    import os, signal, sys, time
    from kgreason.storage import callstore
    at, seen = int(sys.argv[2]), [0]

    def step(fn):
        def wrapped(*a, **kw):
            seen[0] += 1
            if seen[0] == at:
                os.kill(os.getpid(), signal.SIGKILL)
            return fn(*a, **kw)
        return wrapped

    for name in ("replace", "rename", "unlink", "fsync", "link", "ftruncate"):
        setattr(os, name, step(getattr(os, name)))
    time.sleep = step(time.sleep)
    callstore.merge(sys.argv[1], grace_s=0.01)
    print(seen[0])
""")


def _merge_killed_at(d: Path, step: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _KILLER, str(d), str(step)], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=120)


def test_a_merge_killed_at_each_of_its_steps_loses_no_record(tmp_path, capsys):
    """Each file-system step of a merge (a rename, a sync, a removal, its grace sleep) is where a
    SIGKILL lands in turn: every record stays readable, `cache stats` reads the store, and the
    next merge finishes the work. About 10 s."""
    probe = tmp_path / "probe"
    _fill(probe)
    r = _merge_killed_at(probe, 10 ** 9)
    assert r.returncode == 0, r.stderr
    steps = int(r.stdout.split()[-1])
    assert steps >= 5, steps
    for k in range(1, steps + 1):
        d = tmp_path / f"k{k}"
        want = _fill(d)
        r = _merge_killed_at(d, k)
        assert r.returncode == -signal.SIGKILL, (k, r.returncode, r.stderr[-2000:])
        _all_there(d, want)
        _stats_reads(d, capsys, len(want))
        assert merge(d, grace_s=0)["keys"] == len(want), k
        _all_there(d, want)
        assert len(shard_files(d)) == 1 and not [n for n in os.listdir(d) if "merging" in n or ".tmp" in n], \
            (k, os.listdir(d))


# ------------------------------------------------------------------------------------------ L3
def test_a_store_opened_before_a_merge_sees_every_record_written_after_it(tmp_path):
    """A writer missed 50 of 50 of its own later records, a reader 5,887 of 15,106 lookups."""
    d = tmp_path / "llm_calls"
    writer, reader, other = KeyValueStore(d), KeyValueStore(d), KeyValueStore(d)
    for i in range(50):
        writer.put(f"a{i}", i)
        other.put(f"o{i}", i)
    assert all(reader.get(f"a{i}") == i for i in range(50))  # the reader's index holds both shards
    merge(d, grace_s=0)
    for i in range(50):
        writer.put(f"b{i}", i)
        other.put(f"p{i}", i)
    for st, name in ((writer, "writer"), (reader, "reader"), (other, "other")):
        missed = [k for p in "abop" for i in range(50) if st.get(k := f"{p}{i}") != i]
        assert not missed, f"the {name} missed {len(missed)} of 200 records (e.g. {missed[:3]})"
    merge(d, grace_s=0)  # and a second merge, folding the shards written after the first
    assert all(reader.get(f"b{i}") == i and writer.get(f"p{i}") == i for i in range(50))


# ------------------------------------------------------------------------------------------ M4
_WRITER = textwrap.dedent("""
    import sys, time
    from kgreason.storage.callstore import KeyValueStore
    d, who, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    st = KeyValueStore(d)
    with open(sys.argv[4], "w") as log:
        for i in range(n):
            st.put(f"{who}-{i}", {"texts": [f"{who} {i}"]})
            log.write(f"{who}-{i}\\n")  # written only once the put returned: a completed put
            log.flush()
            time.sleep(0.002)
""")

_MERGER = textwrap.dedent("""
    import sys, time
    from kgreason.storage.callstore import merge
    end = time.time() + float(sys.argv[2])
    while time.time() < end:
        merge(sys.argv[1], grace_s=0.05)
""")


@pytest.mark.slow
def test_two_merges_beside_eight_writers_lose_no_completed_put(tmp_path, capsys):
    """Two merges at once while jobs wrote destroyed 574, 750 and 903 of 2,400 completed puts, and
    one merge ended in a traceback. Ten processes for about 10 s on 2 cores."""
    d = tmp_path / "llm_calls"
    d.mkdir()
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(d), f"w{i}", "300", str(tmp_path / f"w{i}.log")],
                                cwd=REPO, env=ENV, stderr=subprocess.PIPE, text=True) for i in range(8)]
    mergers = [subprocess.Popen([sys.executable, "-c", _MERGER, str(d), "6"], cwd=REPO, env=ENV,
                                stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in writers + mergers:
        _out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and "Traceback" not in err, err[-3000:]
    done = [k for i in range(8) for k in (tmp_path / f"w{i}.log").read_text().split()]
    assert len(done) == 2400
    _all_there(d, {k: {"texts": [k.replace("-", " ")]} for k in done})
    _stats_reads(d, capsys, 2400)
    assert merge(d, grace_s=0)["keys"] == 2400
