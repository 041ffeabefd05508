"""A child process that runs LLM-written Cypher against an embedded kuzu database, so that no
query can take the run down (SGR §3.4.1 executes model-written queries; issue 18).

kuzu runs inside the process that calls it. Some inputs crash or exhaust it before its own
query timeout applies: deeply nested list literals overflow the parser's stack (SIGSEGV), long
``NOT NOT ...`` chains do the same, ``RETURN size(range(1, 400000000))`` allocates gigabytes in
seconds, and a query that is still being planned does not see the timeout at all. In the run's
own process each of these kills or stalls every example after it, and because the LLM's reply is
cached, every resume dies on the same query.

:class:`CypherSandbox` keeps one worker process per database (``python -m kgreason.kg.sandbox``)
that opens the database read-only and answers one query at a time over pipes (JSON lines):

* **time**: kuzu's own query timeout inside the worker, and a hard deadline in the parent
  (the timeout plus a grace period, parsing and planning included): past it the worker is
  killed and the query fails with :class:`~kgreason.kg.cypher.CypherError`;
* **memory**: the worker's address space is capped with ``RLIMIT_AS`` (``memory_mb``); an
  allocation past it fails inside the worker (an error for that query) or kills it;
* **output**: at most ``limit`` rows, and at most ``max_output_bytes`` of JSON per reply;
* **crashes**: a worker that dies (a signal, an abort) makes that one query fail with the
  signal's name; the next query starts a fresh worker.

The worker only ever opens the database with ``read_only=True``; the guard
(:mod:`kgreason.kg.cypher_guard`) still runs first in the parent.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Mapping


class SandboxError(RuntimeError):
    """A sandboxed query failed: timed out, crashed the engine, ran out of memory, or returned
    too much. The message says which, and the run records it for that example."""


class CypherSandbox:
    """Read-only query worker for one kuzu database file.

    Args:
        db_file: the kuzu database path.
        memory_mb: address-space cap of the worker process.
        max_output_bytes: largest reply (rows as JSON) accepted from one query.
        grace_ms: added to a query's timeout before the parent kills the worker.
        start_timeout_s: how long the worker may take to open the database.
    """

    def __init__(self, db_file: str | Path, *, memory_mb: int = 2048, max_output_bytes: int = 4_000_000,
                 grace_ms: int = 2000, start_timeout_s: float = 60.0) -> None:
        self.db_file = str(db_file)
        self.memory_mb = int(memory_mb)
        self.max_output_bytes = int(max_output_bytes)
        self.grace_ms = int(grace_ms)
        self.start_timeout_s = float(start_timeout_s)
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()  # one query at a time per worker
        self.workers_lost = 0  # workers killed or crashed by a query (each query after starts a new one)

    # ------------------------------------------------------------------ process
    def _start(self) -> subprocess.Popen:
        env = dict(os.environ, MALLOC_ARENA_MAX="2", PYTHONUNBUFFERED="1")
        cmd = [sys.executable, "-m", "kgreason.kg.sandbox", self.db_file, str(self.memory_mb),
               str(self.max_output_bytes)]
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                env=env, start_new_session=True)
        reply = self._read(proc, time.monotonic() + self.start_timeout_s)
        if reply is None or not reply.get("ready"):
            self._kill(proc)
            why = (reply or {}).get("error") or "no answer"
            raise SandboxError(f"the Cypher sandbox could not open {self.db_file}: {why}")
        return proc

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
        for s in (proc.stdin, proc.stdout):
            try:
                s.close()
            except OSError:
                pass

    def _read(self, proc: subprocess.Popen, deadline: float) -> dict | None:
        """One JSON line from the worker, or None on time-out / exit."""
        fd = proc.stdout.fileno()
        buf = bytearray()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], min(left, 0.5))
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            buf += chunk
            if len(buf) > self.max_output_bytes + 4096:
                return {"error": f"output larger than {self.max_output_bytes} bytes"}
            if buf.endswith(b"\n"):
                return json.loads(buf)

    def _died(self, proc: subprocess.Popen) -> str:
        try:
            code = proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return "stopped answering"
        if code < 0:
            try:
                return f"crashed the database engine (signal {signal.Signals(-code).name})"
            except ValueError:
                return f"crashed the database engine (signal {-code})"
        return f"ended the database worker (exit status {code})"

    # ------------------------------------------------------------------ API
    def query(self, text: str, params: Mapping[str, Any] | None, limit: int, timeout_ms: int) -> list[dict]:
        """Rows of one read query (at most ``limit``). Raises :class:`SandboxError`."""
        msg = json.dumps({"q": text, "p": dict(params or {}), "limit": int(limit), "timeout_ms": int(timeout_ms)})
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._proc = self._start()
            proc = self._proc
            try:
                proc.stdin.write(msg.encode() + b"\n")
                proc.stdin.flush()
            except (BrokenPipeError, OSError):
                self._proc = None
                self.workers_lost += 1
                raise SandboxError(f"the query {self._died(proc)}") from None
            reply = self._read(proc, time.monotonic() + (timeout_ms + self.grace_ms) / 1000.0)
            if reply is None:
                try:  # EOF can arrive a moment before the exit status
                    proc.wait(timeout=0.5)
                except subprocess.TimeoutExpired:
                    pass
                self.workers_lost += 1
                if proc.poll() is None:  # still running past the deadline: parsing or planning
                    self._kill(proc)
                    self._proc = None
                    raise SandboxError(f"query timed out after {timeout_ms} ms (parsing and planning included); "
                                       "the worker was stopped")
                self._proc = None
                raise SandboxError(f"the query {self._died(proc)}")
            if "error" in reply:
                if "output larger" in reply["error"] and "rows)" not in reply["error"]:
                    self._kill(proc)  # the parent stopped reading mid-reply: the pipe is unusable
                    self._proc = None
                    self.workers_lost += 1
                raise SandboxError(reply["error"])
            return reply["rows"]

    def close(self) -> None:
        with self._lock:
            if self._proc is not None:
                try:
                    self._proc.stdin.close()
                    self._proc.wait(timeout=5)
                except (OSError, subprocess.TimeoutExpired):
                    pass
                self._kill(self._proc)
                self._proc = None

    def __del__(self) -> None:  # never leave a worker behind
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


# ====================================================================== worker side


def _jsonable(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return str(v)


def _worker(db_file: str, memory_mb: int, max_output_bytes: int) -> None:  # pragma: no cover - child process
    import resource

    limit = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    out = sys.stdout.buffer
    try:
        import kuzu

        p = Path(db_file)
        size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else \
            (p.stat().st_size if p.exists() else 0)
        # kuzu reserves max_db_size of address space up front (8 TB by default), which no
        # address-space cap admits: reserve twice the file, rounded up to a power of two
        db = kuzu.Database(db_file, read_only=True, buffer_pool_size=min(limit // 4, 512 << 20),
                           max_num_threads=1, max_db_size=1 << max(26, (2 * size).bit_length()))
        conn = kuzu.Connection(db)
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        out.write(json.dumps({"error": f"{type(e).__name__}: {e}"}).encode() + b"\n")
        out.flush()
        return
    out.write(b'{"ready": true}\n')
    out.flush()
    for line in sys.stdin.buffer:
        try:
            req = json.loads(line)
            conn.set_query_timeout(int(req["timeout_ms"]))
            res = conn.execute(req["q"], parameters=req["p"])
            cols = res.get_column_names()
            rows = []
            while res.has_next() and len(rows) < int(req["limit"]):
                rows.append({c: _jsonable(v) for c, v in zip(cols, res.get_next())})
            res.close()
            data = json.dumps({"rows": rows}, ensure_ascii=False).encode()
            if len(data) > max_output_bytes:
                data = json.dumps({"error": f"output larger than {max_output_bytes} bytes "
                                            f"({len(rows)} rows); ask for fewer or smaller values"}).encode()
        except MemoryError:
            data = json.dumps({"error": f"the query ran out of memory (the sandbox allows {memory_mb} MB)"}).encode()
        except Exception as e:  # noqa: BLE001 - the engine's error goes back to Refine
            text = str(e)
            if "bad_alloc" in text or "memory" in text.lower() and "buffer" in text.lower():
                text = f"the query ran out of memory (the sandbox allows {memory_mb} MB): {text}"
            data = json.dumps({"error": text[:2000]}).encode()
        out.write(data + b"\n")
        out.flush()


if __name__ == "__main__":  # pragma: no cover - child process
    _worker(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))


__all__ = ["CypherSandbox", "SandboxError"]
