"""Issue 44 (3): ``kgreason serve`` is local unless the user says otherwise, and its proxy
answers 400 to a bad request without ever holding a thread on one."""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.error
import urllib.request

import pytest

from kgreason.bench.llm import FakeChatServer
from kgreason.llm import serve
from kgreason.llm.serve import KEY_ENV, LlamaServer, SlotProxy, is_loopback


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "192.168.1.5", "myhost.example", "10.0.0.1"])
def test_a_non_loopback_host_without_a_key_refuses_to_start(monkeypatch, capsys, host):
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.setattr(serve, "llama_server_available", lambda: pytest.fail("checked before anything else"))
    assert serve.main(["llm=local", "--host", host, "--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and f"--host {host}" in err and "--api-key" in err and KEY_ENV in err
    with pytest.raises(ValueError, match="needs an API key"):
        LlamaServer("m.gguf", "m", host=host)


@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_non_loopback_host_with_a_key_warns_and_goes_on(monkeypatch, capsys, how):
    monkeypatch.delenv(KEY_ENV, raising=False)
    args = ["llm=local", "--host", "0.0.0.0", "--port", "0"]
    if how == "flag":
        args += ["--api-key", "sk-serve-0123456789"]
    else:
        monkeypatch.setenv(KEY_ENV, "sk-serve-0123456789")
    monkeypatch.setattr(serve, "llama_server_available", lambda: "stop here")
    assert serve.main(args) == 2
    err = capsys.readouterr().err
    assert "warning: listening on 0.0.0.0" in err and "Authorization: Bearer" in err
    srv = LlamaServer("m.gguf", "m", host="0.0.0.0", api_key="sk-serve-0123456789")
    assert srv.override_line().endswith(f"llm.api_key_env={KEY_ENV} example_workers=1")


def test_loopback_names():
    assert all(is_loopback(h) for h in ("127.0.0.1", "localhost", "::1", "[::1]", "127.1.2.3"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "", "example.com", "10.1.1.1"))


def _raw(port: int, data: bytes, timeout: float = 10.0) -> bytes:
    """Send raw bytes, return everything the proxy answers before it closes (or the timeout)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except TimeoutError:
            pass
        return out


@pytest.fixture
def proxy():
    with FakeChatServer() as backend:
        p = SlotProxy([backend.port], read_timeout_s=1.0, max_body_bytes=1 << 20).start()
        try:
            yield p, backend
        finally:
            p.close()


BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()


@pytest.mark.parametrize("headers,body,says", [
    (b"Content-Length: -1\r\n", b"", b"bad Content-Length"),
    (b"Content-Length: abc\r\n", b"", b"bad Content-Length"),
    (b"Content-Length: 1e3\r\n", b"", b"bad Content-Length"),
    (b"Content-Length: 5\r\nContent-Length: 6\r\n", b"", b"bad Content-Length"),
    (b"", b"", b"needs a Content-Length"),
    (b"Transfer-Encoding: chunked\r\n", b"0\r\n\r\n", b"Transfer-Encoding"),
    (b"Content-Length: 99999999999\r\n", b"", b"over the proxy's limit"),
    # fewer bytes than announced: the request's deadline (issue 57 L3) or the read's timeout, whichever first
    (b"Content-Length: 500\r\n", b"{\"a\":", b"ended after 5 of the 500 bytes|not read within 1 s"),
    (b"Content-Length: 9\r\n", b"<html/>xx", b"not a JSON object"),
])
def test_the_proxy_answers_400_to_a_bad_request_and_frees_its_thread(proxy, headers, body, says):
    p, backend = proxy
    t0 = time.monotonic()
    out = _raw(p.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n" + body)
    assert re.match(rb"HTTP/1.1 40[08]", out) and re.search(says, out), out[:300]
    assert time.monotonic() - t0 < 8
    assert backend.requests == [] and p.stats()["refused"] + p.stats()["timed_out"] == 1
    # the proxy still answers (no thread or slot held by the bad request)
    ok = _raw(p.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
              + f"Content-Length: {len(BODY)}\r\n\r\n".encode() + BODY)
    assert ok.startswith(b"HTTP/1.1 200") and p.in_flight == [0]


def test_with_a_key_every_request_must_carry_it(proxy):
    _, backend = proxy
    p = SlotProxy([backend.port], api_key="sk-serve-0123456789").start()
    try:
        base = f"http://127.0.0.1:{p.port}"
        for path in ("/kgreason/stats", "/v1/models"):
            with pytest.raises(urllib.error.HTTPError) as ei:
                urllib.request.urlopen(base + path, timeout=5)
            assert ei.value.code == 401
        req = urllib.request.Request(base + "/v1/chat/completions", data=BODY,
                                     headers={"Authorization": "Bearer wrong", "Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as ei:
            urllib.request.urlopen(req, timeout=5)
        assert ei.value.code == 401 and backend.requests == []
        req = urllib.request.Request(base + "/v1/chat/completions", data=BODY,
                                     headers={"Authorization": "Bearer sk-serve-0123456789",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as r:
            assert json.loads(r.read())["choices"][0]["message"]["content"] == "echo: hi"
        assert "authorization" not in backend.headers[0]  # the key stops at the proxy
    finally:
        p.close()



def _trickle(port: int, prefix: bytes, data: bytes, every_s: float = 0.1) -> tuple[float | None, bytes]:
    """Send ``prefix`` at once, then ``data`` one byte every ``every_s`` seconds (bounded:
    ``len(data)`` bytes); return the seconds after which the proxy closed the connection (None:
    it never did) and what it sent back."""
    t0 = time.monotonic()
    got = b""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(prefix)
        s.setblocking(False)
        for i in range(len(data)):
            try:
                s.send(data[i:i + 1])
                time.sleep(every_s)
                chunk = s.recv(65536)
            except BlockingIOError:
                continue
            except OSError:  # reset or shut by the proxy
                return time.monotonic() - t0, got
            if not chunk:
                return time.monotonic() - t0, got
            got += chunk
    return None, got


@pytest.mark.parametrize("what", ["headers", "body"])
def test_a_trickling_client_is_closed_at_the_request_deadline_even_before_the_key_check(what):
    """Issue 57 L3: ``read_timeout_s`` bounded each ``recv``, so a client sending one byte every
    0.1 s held a handler thread for as long as it liked, before the key was even checked. Now
    the request line, headers and body must all arrive within ``read_timeout_s`` of the request's
    start; a slower client gets a 408 and its connection is closed."""
    with FakeChatServer() as backend:
        p = SlotProxy([backend.port], read_timeout_s=1.0, api_key="sk-serve-0123456789").start()
        try:
            head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-serve-0123456789\r\n"
                    + f"Content-Length: {len(BODY)}\r\n\r\n".encode())
            # 8 s of trickle at most, either way
            closed, got = _trickle(p.port, b"", head[:80]) if what == "headers" else _trickle(p.port, head, BODY[:80])
            assert closed is not None and closed < 1.0 + 2.0, closed
            assert got == b"" or got.startswith(b"HTTP/1.1 408"), got[:200]
            assert backend.requests == [] and p.stats()["timed_out"] == 1
            ok = _raw(p.port, head.replace(b"HTTP/1.1\r\n", b"HTTP/1.1\r\nConnection: close\r\n", 1) + BODY)
            assert ok.startswith(b"HTTP/1.1 200"), ok[:200]  # the proxy still answers
        finally:
            p.close()


def test_a_slot_reply_past_the_proxys_ceiling_is_a_502_not_read_whole():
    """The proxy buffers each reply: it reads at most ``max_reply_bytes`` of it (issue 57 M1's
    hole on the server route), and a longer one is answered 502, named."""
    with FakeChatServer() as backend:
        p = SlotProxy([backend.port], max_reply_bytes=2000).start()
        try:
            def ask(text):
                body = json.dumps({"model": "m", "messages": [{"role": "user", "content": text}]}).encode()
                return _raw(p.port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                            + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
            assert ask("hi").startswith(b"HTTP/1.1 200")
            out = ask("x" * 5000)
            assert out.startswith(b"HTTP/1.1 502") and b"passed the proxy's ceiling of 2000 bytes" in out, out[:300]
            assert p.in_flight == [0]
        finally:
            p.close()
