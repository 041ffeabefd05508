"""Local SPARQL endpoints on loopback, for tests and the SPARQL benchmark.

* :class:`OxigraphServer`: the embedded ``pyoxigraph`` store behind a small HTTP server speaking
  the SPARQL 1.1 protocol (POST ``query=``, JSON results), so the fast tests exercise exactly the
  HTTP code path of :class:`kgreason.kg.sparql.SparqlEndpoint`. It can be told to misbehave
  (``fail_next`` 503s, ``delay_s`` per request, ``malformed`` bodies, ``empty_next`` SELECTs
  answered with no rows, ``partial_next`` answers flagged as Virtuoso flags an anytime-query
  cut: HTTP 206 and ``X-SQL-State: S1TAT``) to test the error paths.
* :class:`VirtuosoServer`: a private Virtuoso (Debian ``virtuoso-opensource`` 7.2.5, the version
  ToG's setup uses) with its own database directory and free ports, bulk-loading N-Triples with
  ``ld_dir`` + ``rdf_loader_run`` (the loader documented for Freebase dumps), stopped on exit.

Both are context managers whose ``url`` is the SPARQL endpoint.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Sequence


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OxigraphServer:
    """pyoxigraph over HTTP on 127.0.0.1 (see module docstring)."""

    def __init__(self, ntriples: str | Path | None = None, data: str | None = None) -> None:
        import pyoxigraph as ox

        self.ox = ox
        self.store = ox.Store()
        if ntriples is not None:
            self.store.bulk_load(path=str(ntriples), format=ox.RdfFormat.N_TRIPLES)
        if data is not None:
            self.store.load(data.encode("utf-8"), format=ox.RdfFormat.N_TRIPLES)
        self.fail_next = 0
        self.delay_s = 0.0
        self.malformed = False
        self.empty_next = 0  # the next N SELECTs whose text contains ``empty_match`` get no rows
        self.empty_match = ""
        self.partial_next = 0  # the next N answers carry a partial-result flag (and no rows)
        self.requests = 0
        self._httpd: ThreadingHTTPServer | None = None

    def _handle(self, body: bytes) -> tuple[int, bytes, dict[str, str]]:
        self.requests += 1
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.fail_next > 0:
            self.fail_next -= 1
            return 503, b"temporarily unavailable", {}
        if self.malformed:
            return 200, b"<html>not json</html>", {}
        form = urllib.parse.parse_qs(body.decode("utf-8"))
        q = form.get("query", [""])[0]
        try:
            res = self.store.query(q)
        except SyntaxError as e:
            return 400, str(e).encode(), {}
        out = res.serialize(format=self.ox.QueryResultsFormat.JSON)
        if q.lstrip().upper().startswith("SELECT"):
            no_rows = b'{"head":{"vars":[]},"results":{"bindings":[]}}'
            if self.partial_next > 0:
                self.partial_next -= 1
                return 206, no_rows, {"X-SQL-State": "S1TAT", "X-SQL-Message": "RC...: Returning incomplete results"}
            if self.empty_next > 0 and self.empty_match in q:
                self.empty_next -= 1
                return 200, no_rows, {}
        return 200, out, {}

    def __enter__(self) -> "OxigraphServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                n = int(self.headers.get("Content-Length", 0))
                code, out, extra = server._handle(self.rfile.read(n))
                self.send_response(code)
                for k, v in extra.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/sparql-results+json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *a):
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/sparql"
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()


_INI = """\
[Database]
DatabaseFile = {d}/virtuoso.db
ErrorLogFile = {d}/virtuoso.log
LockFile = {d}/virtuoso.lck
TransactionFile = {d}/virtuoso.trx
xa_persistent_file = {d}/virtuoso.pxa
ErrorLogLevel = 7
FileExtend = 200
MaxCheckpointRemap = 2000
Striping = 0
TempStorage = TempDatabase

[TempDatabase]
DatabaseFile = {d}/virtuoso-temp.db
TransactionFile = {d}/virtuoso-temp.trx
MaxCheckpointRemap = 2000
Striping = 0

[Parameters]
ServerPort = 127.0.0.1:{sql_port}
DisableUnixSocket = 1
MaxClientConnections = 10
CheckpointInterval = 60
CaseMode = 2
DirsAllowed = ., {d}, {load_dir}
NumberOfBuffers = {buffers}
MaxDirtyBuffers = {dirty}
ThreadsPerQuery = 2
AsyncQueueMaxThreads = 4
MaxQueryMem = 1G

[HTTPServer]
ServerPort = 127.0.0.1:{http_port}
ServerRoot = /var/lib/virtuoso-opensource-7/vsp
MaxClientConnections = 10
ServerThreads = 10
Charset = UTF-8
EnabledGzipContent = 0

[SPARQL]
ResultSetMaxRows = {max_rows}
MaxQueryExecutionTime = 120
MaxQueryCostEstimationTime = 400
"""


class VirtuosoServer:
    """A private ``virtuoso-t`` on loopback loading ``ntriples`` files into ``graph``.

    Args:
        workdir: empty directory for the database, ini and log (removed content on exit is the
            caller's business: pass a temporary directory).
        ntriples: N-Triples files (``.nt`` / ``.nt.gz``), all in one directory.
        graph: named graph to load into; queries without ``FROM`` see every graph.
        buffers: ``NumberOfBuffers`` (8 KiB pages; 10000 ≈ 80 MB, enough for FB15k-237).
        max_rows: ``ResultSetMaxRows`` (Virtuoso truncates SELECT results to it silently;
            :class:`~kgreason.kg.sparql.SparqlKG`'s ``max_rows`` must not exceed it).
    """

    def __init__(self, workdir: str | Path, ntriples: Sequence[str | Path], *,
                 graph: str = "http://rdf.freebase.com", buffers: int = 10000, max_rows: int = 100000,
                 startup_timeout_s: float = 120.0) -> None:
        self.binary = shutil.which("virtuoso-t")
        self.isql = shutil.which("isql-vt") or shutil.which("isql")
        if self.binary is None or self.isql is None:
            raise FileNotFoundError("virtuoso-t / isql-vt not on PATH: apt-get install -y virtuoso-opensource")
        self.dir = Path(workdir).resolve()
        self.dir.mkdir(parents=True, exist_ok=True)
        files = [Path(p).resolve() for p in ntriples]
        dirs = {f.parent for f in files}
        if len(dirs) != 1:
            raise ValueError(f"VirtuosoServer: N-Triples files must share one directory, got {sorted(dirs)}")
        self.load_dir, self.files, self.graph = dirs.pop(), files, graph
        self.sql_port, self.http_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.http_port}/sparql"
        self.buffers, self.max_rows, self.startup_timeout_s = int(buffers), int(max_rows), startup_timeout_s
        self.proc: subprocess.Popen | None = None
        self.load_seconds = 0.0

    def isql_exec(self, sql: str, timeout: float = 600) -> str:
        r = subprocess.run([self.isql, f"127.0.0.1:{self.sql_port}", "dba", "dba", f"exec={sql}"],
                           capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0 or "*** Error" in r.stdout or "*** Error" in r.stderr:
            raise RuntimeError(f"isql {sql!r} failed: {r.stdout[-500:]} {r.stderr[-500:]}")
        return r.stdout

    def __enter__(self) -> "VirtuosoServer":
        ini = self.dir / "virtuoso.ini"
        ini.write_text(_INI.format(d=self.dir, load_dir=self.load_dir, sql_port=self.sql_port,
                                   http_port=self.http_port, buffers=self.buffers,
                                   dirty=max(100, self.buffers * 3 // 4), max_rows=self.max_rows))
        self._log = open(self.dir / "stdout.log", "w")
        self.proc = subprocess.Popen([self.binary, "-f", "-c", str(ini)], cwd=self.dir,
                                     stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait_up()
            t0 = time.perf_counter()
            for f in self.files:
                self.isql_exec(f"ld_dir('{self.load_dir}', '{f.name}', '{self.graph}');")
            self.isql_exec("rdf_loader_run();")
            self.isql_exec("checkpoint;")
            errs = self.isql_exec("SELECT ll_file, ll_error FROM DB.DBA.LOAD_LIST WHERE ll_error IS NOT NULL;")
            if "0 Rows" not in errs:
                raise RuntimeError(f"Virtuoso bulk load reported errors: {errs[-800:]}")
            self.load_seconds = time.perf_counter() - t0
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _wait_up(self) -> None:
        deadline = time.time() + self.startup_timeout_s
        body = urllib.parse.urlencode({"query": "ASK { ?s ?p ?o }"}).encode()
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"virtuoso-t exited with {self.proc.returncode}; log: {self.log_tail()}")
            try:
                req = urllib.request.Request(self.url, data=body, headers={
                    "Accept": "application/sparql-results+json"})
                with urllib.request.urlopen(req, timeout=5) as r:
                    r.read()
                # the SQL port answers too once HTTP does; check so isql does not race it
                self.isql_exec("SELECT 1;", timeout=30)
                return
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.5)
        raise TimeoutError(f"Virtuoso at {self.url} did not answer within {self.startup_timeout_s}s; "
                           f"log: {self.log_tail()}")

    def log_tail(self, n: int = 1500) -> str:
        p = self.dir / "virtuoso.log"
        return p.read_text(errors="replace")[-n:] if p.exists() else "(no log)"

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.isql_exec("shutdown;", timeout=60)
            except Exception:  # noqa: BLE001 - fall back to a signal to our own child
                pass
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        if getattr(self, "_log", None) is not None:
            self._log.close()
        self.proc = None


def virtuoso_available() -> bool:
    return shutil.which("virtuoso-t") is not None and (shutil.which("isql-vt") or shutil.which("isql")) is not None


__all__ = ["OxigraphServer", "VirtuosoServer", "free_port", "virtuoso_available"]
