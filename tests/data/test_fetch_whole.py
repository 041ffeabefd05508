"""Issue 44 (1): a download is believed only when it is whole, and nothing is ever written outside
the data root. Against a local HTTP server on 127.0.0.1 (``http.server`` in a thread): a cut
download, an endless body, a zip bomb, a zip with ``../`` or a symlink, a stale unpacked archive,
a release that fails half way, a symlink planted in the root, a variable that points elsewhere,
two fetches of one dataset at once."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import io
import json
import stat
import threading
import time
import zipfile
from pathlib import Path

import pytest

from kgreason.data import command, fetch as fetch_mod
from kgreason.data.catalog import SOURCES, Recipe, Remote, Source

ASSETS = Path(__file__).resolve().parents[1] / "assets"
PRIMEKG = ("relation,display_relation,x_index,x_id,x_type,x_name,x_source,y_index,y_id,y_type,y_name,y_source\n"
           + "".join(f"protein_protein,ppi,{i},9796,gene/protein,P{i},NCBI,{i + 1},56992,gene/protein,K{i},NCBI\n"
                     for i in range(2000)))


class _Server(http.server.BaseHTTPRequestHandler):
    """GET /<name>: ``files[name]`` as ``modes[name]``: ``full`` (with Content-Length), ``nolength``
    (no length, connection-delimited), ``cut:N`` (no length, closes after N bytes), ``endless``."""

    files: dict = {}
    modes: dict = {}
    hits: list = []

    def do_GET(self):  # noqa: N802
        name = self.path.lstrip("/")
        type(self).hits.append(name)
        data, mode = self.files[name], self.modes.get(name, "full")
        self.send_response(200)
        if mode == "full":
            self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            if mode == "endless":
                block = b"x" * 65536
                while True:
                    self.wfile.write(block)
            n = int(mode.split(":")[1]) if mode.startswith("cut:") else len(data)
            self.wfile.write(data[:n])
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True

    def log_message(self, *a):
        pass


@pytest.fixture
def server(monkeypatch):
    for v in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.delenv(v, raising=False)
    handler = type("H", (_Server,), {"files": {}, "modes": {}, "hits": []})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield handler, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def root(tmp_path, monkeypatch):
    r = tmp_path / "data"
    r.mkdir()
    monkeypatch.setenv("KGREASON_DATA", str(r))
    for v in ("PROBSUM_CSV", "ROG_JSONL", "UMLS_META"):
        monkeypatch.delenv(v, raising=False)
    return r


def _source(name: str, convert: str, *remotes: Remote) -> Source:
    return Source(name, name, "test", "test", "test", "public", sample=Recipe(tuple(remotes), convert, "test"))


def _tree(p: Path) -> dict[str, int]:
    return {str(q.relative_to(p)): q.stat().st_size for q in sorted(p.rglob("*")) if q.is_file()}


def _zip(members: dict[str, bytes | str], links: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
        for name, target in (links or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            z.writestr(info, target)
    return buf.getvalue()


# ----------------------------------------------------------------------------- cut downloads


def test_a_cut_download_of_an_unpinned_csv_is_never_placed_and_never_complete(server, root):
    handler, base = server
    handler.files["kg.csv"] = PRIMEKG.encode()
    handler.modes["kg.csv"] = "cut:40000"  # the server closes early and never said how long the file is
    src = _source("pk", "primekg", Remote("kg.csv", f"{base}/kg.csv", check="rows:2000", max_size=1 << 20))
    with pytest.raises(fetch_mod.FetchError, match=r"kg\.csv.*records after the header, expected 2,000"):
        fetch_mod.fetch(src, root, log=lambda s: None)
    assert not (root / "primekg").exists() and not (root / ".downloads" / "pk" / "kg.csv").exists()
    # an earlier version's cut file lying in the staging folder is not "already complete" either
    (root / ".downloads" / "pk" / "kg.csv").write_bytes(PRIMEKG.encode()[:40000])
    handler.modes["kg.csv"] = "nolength"
    out: list[str] = []
    assert fetch_mod.fetch(src, root, log=out.append) == [root / "primekg" / "kg.csv"]
    assert (root / "primekg" / "kg.csv").read_text() == PRIMEKG and "fetched again" in "\n".join(out)
    n = len(handler.hits)
    fetch_mod.fetch(src, root, log=out.append)
    assert len(handler.hits) == n and "already complete" in out[-1] or "already complete" in "\n".join(out[-3:])


@pytest.mark.parametrize("check,data,cut", [
    ("json", json.dumps([{"a": i} for i in range(500)]).encode(), 3000),
    ("jsonl", "".join(json.dumps({"a": i}) + "\n" for i in range(500)).encode(), 3000),
    ("zip", _zip({"Release/train.txt": "".join(f"/m/{i * 7919 % 10007}\t/r\t/m/{i}\n" for i in range(5000))}), 9000),
])
def test_every_unpinned_kind_has_a_whole_file_check(server, tmp_path, check, data, cut):
    handler, base = server
    assert len(data) > cut
    handler.files["f"] = data
    handler.modes["f"] = f"cut:{cut}"
    r = Remote("f", f"{base}/f", check=check, max_size=1 << 20)
    with pytest.raises(fetch_mod.FetchError, match=f"moved to .*f.mismatch"):
        fetch_mod.fetch_remote(r, tmp_path, log=lambda s: None)
    assert not (tmp_path / "f").exists()
    handler.modes["f"] = "nolength"
    assert fetch_mod.fetch_remote(r, tmp_path, log=lambda s: None).read_bytes() == data


def test_a_transfer_shorter_than_the_server_announced_is_kept_to_resume(server, tmp_path):
    handler, base = server
    handler.files["f"] = b"0123456789" * 1000

    class Short(_Server):
        def do_GET(self):  # noqa: N802 - announces 10,000 bytes, sends 4,000 and closes
            self.send_response(200)
            self.send_header("Content-Length", "10000")
            self.end_headers()
            self.wfile.write(b"0123456789" * 400)
            self.close_connection = True

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Short)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with pytest.raises(fetch_mod.FetchError, match="run the same command again to resume"):
            fetch_mod.fetch_remote(Remote("f", f"http://127.0.0.1:{httpd.server_address[1]}/f", check=None,
                                          max_size=1 << 20), tmp_path, log=lambda s: None)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert not (tmp_path / "f").exists()


# ----------------------------------------------------------------------------- endless bodies


def test_an_endless_body_stops_at_the_pinned_size(server, tmp_path):
    handler, base = server
    handler.files["f"] = b""
    handler.modes["f"] = "endless"
    r = Remote("f", f"{base}/f", size=100_000, sha256="0" * 64)
    t0 = time.monotonic()
    with pytest.raises(fetch_mod.FetchError, match="more than the pinned size of 100,000 bytes"):
        fetch_mod.fetch_remote(r, tmp_path, log=lambda s: None)
    assert time.monotonic() - t0 < 30
    assert sum(_tree(tmp_path).values()) <= 100_000 and not (tmp_path / "f").exists()


def test_an_endless_body_of_an_unpinned_file_stops_at_its_ceiling(server, tmp_path):
    handler, base = server
    handler.files["f"] = b""
    handler.modes["f"] = "endless"
    r = Remote("f", f"{base}/f", check="json", max_size=300_000)
    with pytest.raises(fetch_mod.FetchError, match="more than this file's ceiling of 300,000 bytes"):
        fetch_mod.fetch_remote(r, tmp_path, log=lambda s: None)
    assert sum(_tree(tmp_path).values()) <= 300_000


def test_every_catalog_file_is_pinned_or_checked_and_bounded():
    for s in SOURCES.values():
        for recipe in (s.sample, s.full):
            for r in (recipe.remotes if recipe else ()):
                assert (r.size and r.sha256) or r.check, (s.name, r.name)
                assert r.hub or r.size or r.max_size, (s.name, r.name)
                assert fetch_mod.content_problem(Path("/nonexistent"), r.check) is not None or not r.check


# ----------------------------------------------------------------------------- archives


def test_a_zip_bomb_is_refused_at_the_ceiling(root, tmp_path):
    bomb = tmp_path / "MetaQA.zip"
    bomb.write_bytes(_zip({"MetaQA/kb.txt": b"\0" * (40 << 20)}))  # 40 MiB of zeros in ~40 KiB
    assert bomb.stat().st_size < 200_000
    before = _tree(tmp_path)
    with pytest.raises(fetch_mod.FetchError, match=r"MetaQA.zip: member MetaQA/kb.txt would unpack to 41,943,040 "
                                                   r"bytes, past the ceiling"):
        fetch_mod.prepare(SOURCES["metaqa"], bomb, root, log=lambda s: None)
    after = _tree(tmp_path)
    assert sum(after.values()) - sum(before.values()) < 1 << 20  # nothing unpacked, staging gone
    assert not (root / "metaqa").exists()


def test_a_member_whose_header_lies_about_its_size_stops_at_it(tmp_path):
    data = bytearray(_zip({"kb.txt": b"a" * 300_000}))
    # shrink the declared size in the local header and the central directory to 1,000 bytes
    for sig, off in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        i = data.find(sig)
        data[i + off:i + off + 4] = (1000).to_bytes(4, "little")
    z = tmp_path / "lie.zip"
    z.write_bytes(bytes(data))
    with pytest.raises(fetch_mod.FetchError, match=r"lie.zip: member kb.txt"):
        fetch_mod.Inputs(z, tmp_path / "unpack").find("kb.txt")
    assert sum(_tree(tmp_path / "unpack").values()) <= 1000


@pytest.mark.parametrize("members,links,says", [
    ({"MetaQA/kb.txt": "a|b|c\n", "../../escaped.txt": "x"}, None, "'../../escaped.txt' would unpack outside"),
    ({"MetaQA/kb.txt": "a|b|c\n", "/tmp/kgreason-abs-escape.txt": "x"}, None, "would unpack outside"),
    ({"MetaQA/1-hop/vanilla/qa_test.txt": "x"}, {"MetaQA/kb.txt": "/etc/passwd"}, "'MetaQA/kb.txt' is a symbolic link"),
])
def test_a_zip_with_dotdot_absolute_or_symlink_members_is_refused(root, tmp_path, members, links, says):
    z = tmp_path / "MetaQA.zip"
    z.write_bytes(_zip(members, links))
    with pytest.raises(fetch_mod.FetchError, match=says):
        fetch_mod.prepare(SOURCES["metaqa"], z, root, log=lambda s: None)
    assert not (tmp_path / "escaped.txt").exists() and not Path("/tmp/kgreason-abs-escape.txt").exists()
    assert not (root / "metaqa").exists()


METAQA_QA = "who directed [Kismet]\tWilliam Dieterle\n"


def test_a_stale_unpacked_archive_is_never_reused(root, tmp_path):
    z = tmp_path / "MetaQA.zip"
    z.write_bytes(_zip({"MetaQA/kb.txt": "Kismet|directed_by|William Dieterle\n",
                        "MetaQA/1-hop/vanilla/qa_test.txt": METAQA_QA}))
    fetch_mod.prepare(SOURCES["metaqa"], z, root, log=lambda s: None)
    # a new release of the same name whose kb.txt has the same size and other bytes
    z.write_bytes(_zip({"MetaQA/kb.txt": "Kismet|directed_by|William Dieterlf\n",
                        "MetaQA/1-hop/vanilla/qa_test.txt": METAQA_QA.replace("Dieterle", "Dieterlf")}))
    fetch_mod.prepare(SOURCES["metaqa"], z, root, log=lambda s: None)
    assert (root / "metaqa" / "kb.txt").read_text() == "Kismet|directed_by|William Dieterlf\n"
    assert [p.name for p in (root / ".downloads" / "metaqa").iterdir()] == [".lock"]  # nothing unpacked is kept


def test_a_corrupt_member_names_the_archive_and_the_member(root, tmp_path, capsys):
    data = bytearray(_zip({"MetaQA/kb.txt": "Kismet|directed_by|William Dieterle\n" * 200}))
    i = data.find(b"PK\x03\x04") + 30 + len("MetaQA/kb.txt")
    data[i + 5:i + 25] = b"\xff" * 20  # damage the deflate stream
    z = tmp_path / "MetaQA.zip"
    z.write_bytes(bytes(data))
    assert command.main(["prepare", "metaqa", "--from", str(z), "--dest", str(root)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {z}: member MetaQA/kb.txt cannot be unpacked") and "error: error" not in err


# ----------------------------------------------------------------------------- placing


FB = {"Release/train.txt": "/m/a\t/r/x\t/m/b\n", "Release/valid.txt": "/m/a\t/r/x\t/m/b\n",
      "Release/test.txt": "/m/b\t/r/x\t/m/a\n"}


def test_a_release_that_fails_half_way_leaves_the_old_files_as_they_were(root, tmp_path):
    src = tmp_path / "fb"
    src.mkdir()
    (src / "FB15K-237.2.zip").write_bytes(_zip(FB))
    (src / "entity2text.txt").write_text("/m/a\tA\n/m/b\tB\n")
    fetch_mod.prepare(SOURCES["fb15k237"], src, root, log=lambda s: None)
    d = root / "freebase_fb15k237"
    old = {p.name: p.read_bytes() for p in d.iterdir()}
    # the new release adds a MID without a name: the train split converts, the name check fails later
    (src / "FB15K-237.2.zip").write_bytes(_zip(FB | {"Release/train.txt": "/m/a\t/r/x\t/m/c\n"}))
    with pytest.raises(fetch_mod.FetchError, match="1 MID"):
        fetch_mod.prepare(SOURCES["fb15k237"], src, root, log=lambda s: None)
    assert {p.name: p.read_bytes() for p in d.iterdir()} == old
    assert gzip.decompress(old["train.txt.gz"]).decode() == FB["Release/train.txt"]


def test_a_symlink_planted_in_the_root_is_never_followed(root, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kb.txt").write_text("precious")
    (root / "metaqa").symlink_to(outside)
    z = tmp_path / "MetaQA.zip"
    z.write_bytes(_zip({"MetaQA/kb.txt": "Kismet|directed_by|William Dieterle\n",
                        "MetaQA/1-hop/vanilla/qa_test.txt": METAQA_QA}))
    with pytest.raises(fetch_mod.FetchError, match="outside its root"):
        fetch_mod.prepare(SOURCES["metaqa"], z, root, log=lambda s: None)
    assert _tree(outside) == {"kb.txt": 8} and (outside / "kb.txt").read_text() == "precious"
    # a symlink at a file's own name is replaced, not written through
    (root / "metaqa").unlink()
    (root / "metaqa").mkdir()
    (root / "metaqa" / "kb.txt").symlink_to(outside / "kb.txt")
    fetch_mod.prepare(SOURCES["metaqa"], z, root, log=lambda s: None)
    assert (outside / "kb.txt").read_text() == "precious" and not (root / "metaqa" / "kb.txt").is_symlink()


@pytest.mark.parametrize("name,var,src,target", [
    ("umls", "UMLS_META", "umls", "umls/META/MRCONSO.RRF"),
    ("probsum", "PROBSUM_CSV", "probsum.csv", "probsum/test.csv"),
])
def test_a_variable_never_moves_what_prepare_writes_outside_dest(root, tmp_path, monkeypatch, capsys, name, var,
                                                                  src, target):
    elsewhere = tmp_path / "elsewhere"
    monkeypatch.setenv(var, str(elsewhere / ("x.csv" if name == "probsum" else "META")))
    assert command.main(["prepare", name, "--from", str(ASSETS / src), "--dest", str(root)]) == 0
    assert (root / target).is_file() and not elsewhere.exists()
    assert "which was not written" in capsys.readouterr().out


# ----------------------------------------------------------------------------- concurrency


def test_a_second_fetch_of_one_dataset_waits_for_the_lock(root, tmp_path):
    work = root / ".downloads" / "x"
    said: list[str] = []
    with fetch_mod.dataset_lock(work, "x", log=lambda s: None):
        with pytest.raises(fetch_mod.FetchError, match=r"\.downloads/x/\.lock: still held by another `kgreason "
                                                       r"data` command for x"):
            with fetch_mod.dataset_lock(work, "x", log=said.append, wait_s=0.3):
                pass
    assert "waiting" in said[0]
    with fetch_mod.dataset_lock(work, "x", log=lambda s: None, wait_s=0):  # released: taken at once
        pass


def test_two_concurrent_fetches_of_one_dataset_both_succeed(server, root):
    handler, base = server
    data = json.dumps([{"ID": "x", "question": "q?", "topic_entity": {"m.0": "X"}, "answer": "Y"}] * 3000).encode()
    handler.files["cwq.json"] = data
    src = _source("cwq", "tog_json:cwq/tog_cwq.json", Remote("cwq.json", f"{base}/cwq.json", len(data),
                                                             hashlib.sha256(data).hexdigest()))
    errors: list[BaseException] = []

    def go():
        try:
            fetch_mod.fetch(src, root, log=lambda s: None)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=go) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and (root / "cwq" / "tog_cwq.json").read_bytes() == data
    assert handler.hits == ["cwq.json"]  # the others found it complete once the lock was theirs


def test_a_downloads_folder_that_leads_out_of_the_root_is_refused(root, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / ".downloads").symlink_to(outside)
    with pytest.raises(fetch_mod.FetchError, match=r"\.downloads/probsum: .*outside its root"):
        fetch_mod.prepare(SOURCES["probsum"], ASSETS / "probsum.csv", root, log=lambda s: None)
    assert list(outside.iterdir()) == [] and not (root / "probsum").exists()
