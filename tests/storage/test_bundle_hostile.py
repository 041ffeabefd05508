"""A bundle from a stranger is data, never a path (issue 73: H1, M1, M2, L1, L2, L4).

Each bundle here is made by hand the way a hostile sender would make it: from a committed
validation bundle (a real run's files) with its manifest edited and re-hashed, so that every
digest checks out and only the manifest's *meaning* is hostile. The CLI is run as a user runs it
(a subprocess, ``TMPDIR`` pointed at the test's own folder so that an unpack left behind is seen).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from kgreason.storage.bundle import BundleError, open_bundle
from kgreason.storage.callstore import LLM_STORE, KeyValueStore, decode_line, encode_record

REPO = Path(__file__).resolve().parents[2]
RUNNER = REPO / "experiments" / "validation" / "run_validation.py"
TABLE, ROW = "heldout_n100_llamacpp", "metaqa_io"
BASE = RUNNER.parent / "bundles" / TABLE / f"{ROW}.tar.gz"


def blobs_of(path: Path) -> dict[str, bytes]:
    """Every member of a (trusted, small) bundle, in archive order."""
    with tarfile.open(path, "r:gz") as t:
        return {m.name: t.extractfile(m).read() for m in t}


def pack(dst: Path, blobs: dict[str, bytes], edit=None, rehash: bool = True) -> Path:
    """Write ``blobs`` as a bundle, the manifest first; ``edit(manifest)`` changes the manifest,
    whose digests are then made to agree with the members (a careful forger)."""
    blobs = dict(blobs)
    man = json.loads(blobs.pop("manifest.json"))
    if rehash:
        man["entries"] = {n: hashlib.sha256(b).hexdigest() for n, b in blobs.items()}
    if edit is not None:
        man = edit(man) or man
    with tarfile.open(dst, "w:gz") as t:
        for name, data in [("manifest.json", json.dumps(man).encode()), *blobs.items()]:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
    return dst


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    (tmp / "T").mkdir(exist_ok=True)
    return {**os.environ, "TMPDIR": str(tmp / "T"), "KGREASON_CACHE_DIR": str(tmp / "kgcache"),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])), **extra}


def _kg(tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kgreason", *args], cwd=REPO, env=_env(tmp, **env),
                          capture_output=True, text=True, timeout=600)


def snapshot(d: Path) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _one_line_error(stderr: str, *needles: str) -> None:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
    for n in needles:
        assert n in lines[0], lines[0]


def _left_unpacked(tmp: Path) -> list[str]:
    return sorted(p.name for p in (tmp / "T").iterdir() if p.name.startswith("kgreason-"))


# ------------------------------------------------------------------------------------------ H1
@pytest.fixture
def victim(tmp_path):
    """A user's own partial run beside a private key, where a hostile manifest points."""
    (tmp_path / "T").mkdir()
    v = tmp_path / "T" / "victim"
    v.mkdir()
    b = blobs_of(BASE)
    for f in ("run.json", "metrics.json", "predictions.jsonl", "config.yaml", "calls.jsonl"):
        (v / f).write_bytes(b[f"runs/{ROW}/{f}"])
    (v / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nnot a real key\n")
    return v


def _outside(victim: Path, kind: str) -> str:
    # the unpack is <TMPDIR>/kgreason-*/<dir>/runs/<run dir>: three levels up is TMPDIR itself
    return "../../../victim" if kind == "dot-dot" else str(victim)


def _hostile(tmp: Path, run_dir: str) -> Path:
    def edit(man):
        man["runs"][0]["dir"] = run_dir
    return pack(tmp / "hostile.tar.gz", blobs_of(BASE), edit)


@pytest.mark.parametrize("kind", ["dot-dot", "absolute"])
@pytest.mark.parametrize("action", ["verify", "replay"])
def test_a_manifest_run_dir_outside_the_bundle_is_refused_and_the_victim_untouched(tmp_path, victim, kind, action):
    """`verify` reported "verified" for the victim's files and `replay --out` wrote into them."""
    bad = _hostile(tmp_path, _outside(victim, kind))
    before = snapshot(victim)
    args = ["--out", str(tmp_path / "out")] if action == "replay" else []
    r = _kg(tmp_path, "bundle", action, str(bad), *args)
    assert r.returncode == 2, (r.stdout[-2000:], r.stderr[-2000:])
    _one_line_error(r.stderr, "manifest.json", "run dir", "refused")
    assert "verified" not in r.stdout and "identical" not in r.stdout
    assert snapshot(victim) == before
    assert _left_unpacked(tmp_path) == []


def test_a_replay_writes_nowhere_a_bundles_overrides_say(tmp_path, monkeypatch):
    """A run's launch overrides come from the bundle's run.json: one naming where a run writes (a
    cache, a store, an index, the path roots) is a path of someone else's machine, and is left out."""
    from omegaconf import OmegaConf

    import kgreason.runner.run
    from kgreason.runner import replay

    blobs = blobs_of(BASE)
    rec = json.loads(blobs[f"runs/{ROW}/run.json"])
    elsewhere = tmp_path / "elsewhere"
    rec["overrides"] += [f"embedder.store_dir={elsewhere}/store", f"paths.cache={elsewhere}/cache"]
    blobs[f"runs/{ROW}/run.json"] = json.dumps(rec).encode()
    opened = open_bundle(pack(tmp_path / "b.tar.gz", blobs), tmp_path / "opened")
    seen = []
    monkeypatch.setattr(replay, "data_problem", lambda opened, rel: None)
    monkeypatch.setattr(kgreason.runner.run, "run", lambda cfg, out, **kw: seen.append(OmegaConf.to_yaml(cfg, resolve=True)))
    replay.replay_run(opened, ROW, tmp_path / "cache", tmp_path / "out")
    assert seen and str(elsewhere) not in seen[0]
    assert "llm_cache" in seen[0] and str(tmp_path / "cache") in seen[0]  # what the replay sets itself


def _runner(tmp_path, monkeypatch):
    """The validation runner's package (experiments/validation_runner/) pointed at ``tmp_path``."""
    import subprocess
    import sys

    monkeypatch.syspath_prepend(str(RUNNER.parents[1]))
    import validation_runner as mod

    monkeypatch.setattr(mod.places, "HERE", tmp_path)
    monkeypatch.setattr(mod.places, "ROOT", tmp_path)
    monkeypatch.setattr(mod.places, "BUNDLES", tmp_path / "bundles")
    monkeypatch.setattr(subprocess, "call", lambda cmd, cwd=None: 0)
    monkeypatch.setattr(mod.sitting, "run_row", lambda cmd, *budget: 0)
    assert sys.modules["validation_runner"] is mod
    return mod


def _commit_row(tmp_path: Path, bundle: Path) -> None:
    """``bundle`` committed as the row's bundle, its JSON row recording it (as a pull request could)."""
    entry = json.loads((RUNNER.parent / f"validation_{TABLE}.json").read_text())[ROW]
    dest = tmp_path / entry["bundle"]["file"]
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(bundle, dest)
    entry["bundle"]["sha256"] = hashlib.sha256(dest.read_bytes()).hexdigest()
    (tmp_path / f"validation_{TABLE}.json").write_text(json.dumps({ROW: entry}))


_ARGV = ["--split", "heldout", "--n", "100", "--route", "llamacpp", "--rows", ROW, "--from-bundle", "--no-bundle"]


@pytest.mark.parametrize("kind", ["dot-dot", "absolute"])
def test_from_bundle_refuses_a_run_dir_outside_the_bundle_and_copies_nothing(tmp_path, victim, monkeypatch,
                                                                             capsys, kind):
    """`--from-bundle` copied the folder the manifest named (a planted id_rsa) into the row's run dir."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "T"))
    _commit_row(tmp_path, _hostile(tmp_path, _outside(victim, kind)))
    mod = _runner(tmp_path, monkeypatch)
    before = snapshot(victim)
    assert mod.main([*_ARGV, "--cache", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err
    _one_line_error(err, "run dir", "refused", "Nothing was run")
    run_dir = tmp_path / "outputs" / "validation" / TABLE / ROW
    assert not (run_dir / "id_rsa").exists() and not (tmp_path / "cache").exists()
    assert snapshot(victim) == before
    assert _left_unpacked(tmp_path) == []


# ------------------------------------------------------------------------------------------ M1
ZEROS = 2 * 1024 ** 3


def _header(name: str, size: int) -> bytes:
    ti = tarfile.TarInfo(name)
    ti.size = size
    return ti.tobuf(tarfile.PAX_FORMAT)


def bomb(dst: Path, variant: str, size: int = ZEROS) -> Path:
    """A small .tar.gz whose one extra member unpacks to ``size`` zero bytes: several gzip
    members back to back (a valid gzip stream), so 2 GB of zeros costs about 2 MB on disk.
    ``variant``: ``unlisted`` (a member the manifest does not name), ``lying`` (the manifest
    names it with another size) or ``listed`` (named with its true size: only a ceiling stops it)."""
    blobs = blobs_of(BASE)
    man = json.loads(blobs.pop("manifest.json"))
    name = f"runs/{ROW}/zeros.bin" if variant == "unlisted" else f"runs/{ROW}/predictions.jsonl"
    blobs.pop(name, None)
    man["entries"] = {n: hashlib.sha256(b).hexdigest() for n, b in blobs.items()}
    if variant != "unlisted":
        man["entries"][name] = "0" * 64
        man["sizes"] = {n: len(b) for n, b in blobs.items()}
        man["sizes"][name] = size if variant == "listed" else 1000
    head = io.BytesIO()
    for n, data in [("manifest.json", json.dumps(man).encode()), *blobs.items()]:
        head.write(_header(n, len(data)) + data + b"\0" * (-len(data) % 512))
    head.write(_header(name, size))
    chunk = 64 * 1024 ** 2
    zeros = gzip.compress(b"\0" * chunk, 9)
    with open(dst, "wb") as f:
        f.write(gzip.compress(head.getvalue()))
        for _ in range(size // chunk):
            f.write(zeros)
        f.write(gzip.compress(b"\0" * (size % chunk + 1024)))
    return dst


def _peak_rss_mb(tmp: Path, *args: str) -> tuple[int, str, float]:
    """Run the kgreason CLI; its exit code, stderr and peak resident memory (MB, from wait4)."""
    err = tmp / "stderr.txt"
    with open(err, "w") as e:
        p = subprocess.Popen([sys.executable, "-m", "kgreason", *args], cwd=REPO, env=_env(tmp),
                             stdout=subprocess.DEVNULL, stderr=e)
        _pid, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, err.read_text(), usage.ru_maxrss / 1024


@pytest.mark.parametrize("action,variant", [("verify", "unlisted"), ("replay", "lying"), ("tables", "listed")])
def test_a_bundle_of_2gb_of_zeros_is_refused_in_bounded_memory(tmp_path, action, variant):
    """A 2 MB tarball holding 2 GB of zeros took 2.1 GB of memory in verify, replay and tables: every
    member was read whole before any check. The growth over the same command on the same bundle
    with 1 kB of zeros is measured (peak RSS of the process)."""
    big = bomb(tmp_path / "big.tar.gz", variant)
    small = bomb(tmp_path / "small.tar.gz", variant, size=1024)
    assert big.stat().st_size < 4 * 1024 ** 2
    out = ["--out", str(tmp_path / "o")] if action != "verify" else []
    cmd = ["bundle", action] if action != "tables" else ["tables"]
    rc0, _e0, base = _peak_rss_mb(tmp_path, *cmd, str(small), *out)
    rc, err, peak = _peak_rss_mb(tmp_path, *cmd, str(big), *out)
    assert rc == 2 and rc0 == 2, err[-2000:]
    entry = f"runs/{ROW}/zeros.bin" if variant == "unlisted" else f"runs/{ROW}/predictions.jsonl"
    _one_line_error(err, entry)
    assert peak - base < 200, f"{peak:.0f} MB peak against {base:.0f} MB for the small bundle"
    assert _left_unpacked(tmp_path) == [] and not (tmp_path / "o").exists()


# ------------------------------------------------------------------------------------------ L2
def _truncated(tmp: Path) -> Path:
    data = BASE.read_bytes()
    (tmp / "cut.tar.gz").write_bytes(data[: len(data) // 2])
    return tmp / "cut.tar.gz"


def _with_member(tmp: Path, name: str) -> Path:
    blobs = blobs_of(BASE)
    blobs[name] = b"{}"
    return pack(tmp / "member.tar.gz", blobs)


def _manifest(tmp: Path, edit) -> Path:
    return pack(tmp / "shape.tar.gz", blobs_of(BASE), edit)


def _set(key, value):
    def edit(man):
        man[key] = value
    return edit


def _run_field(**kv):
    def edit(man):
        man["runs"] = [{k: v for k, v in {**man["runs"][0], **kv}.items() if v is not None}]
    return edit


MALFORMED = {
    "truncated gzip": (_truncated, "truncated"),
    "a file that is also a folder": (lambda t: _with_member(t, f"runs/{ROW}/metrics.json/x"), "both a file and a folder"),
    "a member name too long for the file system": (lambda t: _with_member(t, f"runs/{ROW}/" + "a" * 300 + ".json"),
                                                   "too long"),
    "runs is not a list": (lambda t: _manifest(t, _set("runs", "all")), "manifest.json"),
    "a run without its dir": (lambda t: _manifest(t, _run_field(dir=None)), "manifest.json"),
    "a run dir that is not text": (lambda t: _manifest(t, _run_field(dir=5)), "manifest.json"),
    "entries is not an object": (lambda t: _manifest(t, _set("entries", ["manifest.json"])), "manifest.json"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_bundle_is_one_line_naming_what_is_wrong(tmp_path, capsys, monkeypatch, case):
    """Seven malformed bundles ended in tracebacks (`verify`, `replay`, `tables` alike)."""
    import tempfile

    from kgreason.runner import replay

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "T"))
    (tmp_path / "T").mkdir()
    make, says = MALFORMED[case]
    bad = make(tmp_path)
    for argv in (["verify", str(bad)], ["replay", str(bad), "--out", str(tmp_path / "o")]):
        assert replay.main(argv) == 2, (case, argv)
        err = capsys.readouterr().err
        _one_line_error(err, str(bad), says)
    with pytest.raises(BundleError):
        open_bundle(bad, tmp_path / "opened")
    assert not (tmp_path / "opened").exists() and _left_unpacked(tmp_path) == []


# ------------------------------------------------------------------------------------------ L4
def _with_unused_record(tmp: Path) -> tuple[Path, str]:
    blobs = blobs_of(BASE)
    extra = encode_record("f" * 64, {"texts": ["an answer no run of the bundle asked for"], "usage": {}},
                          backend="openai", model="m", method="generate", t=1.0)
    blobs["calls/llm_calls.jsonl"] += extra
    return pack(tmp / "extra.tar.gz", blobs), "f" * 64


def test_verify_fails_a_cache_entry_no_run_used(tmp_path):
    from kgreason.runner.replay import verify

    bad, key = _with_unused_record(tmp_path)
    lines = verify(open_bundle(bad, tmp_path / "o"))
    assert [(r, ok) for r, ok, _l in lines] == [(ROW, True), ("calls/llm_calls.jsonl", False)], lines
    assert "1 cache entry that no run of the bundle used" in lines[1][2] and key[:12] in lines[1][2], lines


def test_from_bundle_installs_only_the_replies_its_run_used(tmp_path, monkeypatch, capsys):
    """`--from-bundle` installed every record of the calls file into the user's cache, also one
    that no run of the bundle used, and a later ordinary run answered from it."""
    bad, key = _with_unused_record(tmp_path)
    _commit_row(tmp_path, bad)
    mod = _runner(tmp_path, monkeypatch)
    cache = tmp_path / "cache"
    mod.main([*_ARGV, "--cache", str(cache)])
    err = capsys.readouterr().err
    used = blobs_of(BASE)[f"runs/{ROW}/calls.jsonl"].decode().splitlines()
    keys = {json.loads(x)["key"] for x in used}
    store = KeyValueStore(cache / LLM_STORE, "readonly")
    assert keys and all(store.get(k) is not None for k in keys)
    assert store.get(key) is None and len(store) == len(keys)
    assert f"restored {sum(1 for _ in blobs_of(BASE)[f'runs/{ROW}/predictions.jsonl'].splitlines())}" in err
    assert "1 cache entry no run of the bundle used was left out" in err


def test_the_bundles_records_decode(tmp_path):
    """The committed bundle these tests start from is what they assume (a guard on the fixture)."""
    blobs = blobs_of(BASE)
    assert list(blobs)[0] == "manifest.json"
    assert all(decode_line(x) is not None for x in blobs["calls/llm_calls.jsonl"].splitlines())


# ------------------------------------------------------------------------------------------ M2, L1
def _edited_reply(blobs: dict[str, bytes]) -> dict[str, bytes]:
    """The first cache entry's reply changed, its line re-checksummed (a careful editor)."""
    lines = blobs["calls/llm_calls.jsonl"].splitlines(keepends=True)
    rec = decode_line(lines[0])
    rec["value"]["texts"] = ["an edited reply"]
    lines[0] = encode_record(rec["key"], rec["value"], backend=rec["backend"], model=rec["model"],
                             method=rec["method"], t=rec["t"])
    return {**blobs, "calls/llm_calls.jsonl": b"".join(lines)}


def test_a_used_out_dir_never_reads_identical_for_an_edited_bundle_and_no_unpack_is_left(tmp_path):
    """`replay --out D` into a D holding an earlier replay resumed the finished runs there: a bundle
    with an edited reply read `identical` (in a fresh D, `stale`). Every replay, refusals
    included, left its unpacked bundle in $TMPDIR. About 15 s (one scripted run, three replays)."""
    r = _kg(tmp_path, "reasoner=io", "llm=scripted", "dataset.limit=2", "tracking=none",
            f"llm_cache.dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 0, r.stderr[-3000:]
    assert _kg(tmp_path, "bundle", "export", str(tmp_path / "run"), "-o", str(tmp_path / "b.tar.gz")).returncode == 0
    d = tmp_path / "replayed"
    r = _kg(tmp_path, "bundle", "replay", str(tmp_path / "b.tar.gz"), "--out", str(d))
    assert r.returncode == 0 and "run: identical" in r.stdout.splitlines(), (r.stdout[-2000:], r.stderr[-2000:])
    assert _left_unpacked(tmp_path) == []
    edited = blobs_of(tmp_path / "b.tar.gz")
    man = json.loads(edited["manifest.json"])
    edited = _edited_reply(edited)
    man["sizes"]["calls/llm_calls.jsonl"] = len(edited["calls/llm_calls.jsonl"])
    edited["manifest.json"] = json.dumps(man).encode()
    pack(tmp_path / "edited.tar.gz", edited)
    before = snapshot(d)
    r = _kg(tmp_path, "bundle", "replay", str(tmp_path / "edited.tar.gz"), "--out", str(d))
    assert r.returncode == 2 and "identical" not in r.stdout, (r.stdout[-2000:], r.stderr[-2000:])
    _one_line_error(r.stderr, f"--out {d}", "not empty")
    assert snapshot(d) == before and _left_unpacked(tmp_path) == []
    r = _kg(tmp_path, "bundle", "replay", str(tmp_path / "edited.tar.gz"), "--out", str(tmp_path / "fresh"))
    assert r.returncode == 1 and "run: stale: example " in r.stdout, (r.stdout[-2000:], r.stderr[-2000:])
    assert _left_unpacked(tmp_path) == []
