"""Progress for long steps: a tqdm bar on a terminal, a periodic log line otherwise (CI, files).

Ground floor: imports nothing from kgreason. Two shapes:

* :class:`Progress` (``with progress.bar(total, "examples") as p: ... p.update(errors=0, hits_at_1=0.5)``)
  for counted work: examples, KG edges, corpus passages; shows done/total, rate, ETA and the
  caller's running figures (errors so far, the headline metric);
* :func:`stage` (``with progress.stage("converting SmolLM2 GGUF"): ...``) for one long call with no
  count (model conversion, a bulk graph-database load): a start line, a heartbeat every interval
  while it runs, and the elapsed time at the end.

LLM calls in flight are counted with :func:`llm_calls` (the LLM wrapper enters it around each
batch); every bar and heartbeat shows the current count, so a run stuck on a slow endpoint says so.

Nothing is printed per item. A ticker thread refreshes the bar (and writes the periodic log line)
even while no item finishes, so a 4-minute LLM call is visible as it happens. Settings (environment):
``KGREASON_PROGRESS`` = ``auto`` (bar on a TTY, log lines otherwise; the default) | ``bar`` |
``log`` | ``off``; ``KGREASON_PROGRESS_INTERVAL`` = seconds between log lines (default 30).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator

log = logging.getLogger("kgreason.progress")

_inflight = 0
_done = 0  # LLM requests answered in this process (any thread): a long step's heartbeat says how many
_inflight_lock = threading.Lock()
#: the sweep job this process runs ("job 3: reasoner=rag,seed=1"); prefixes every line in a sweep
_job = ""
#: where the last bar left by an exception stood (Ctrl-C, SIGTERM, an error): :func:`stopped_at`
_stopped: dict[str, Any] | None = None


def set_job(label: str) -> None:
    """Prefix this process's progress lines with ``[label]`` (a sweep's jobs print side by side)."""
    global _job
    _job = label


def _tag() -> str:
    return f"[{_job}] " if _job else ""


def stopped_at() -> dict[str, Any] | None:
    """The last bar an exception ended in this process: ``{"what", "done", "total", "unit"}``
    (``SubQRAG indexing``, 812 of 6256 ``passage``), or ``None``. A run stopped before its first
    example says with it how far its set-up got (kgreason/runner/run.py)."""
    return dict(_stopped) if _stopped else None


def forget_stopped() -> None:
    """Clear :func:`stopped_at` (a new step begins; an earlier bar's stop is not its own)."""
    global _stopped
    _stopped = None


def in_flight() -> int:
    """LLM calls currently waiting for a reply (all threads)."""
    return _inflight


def calls_done() -> int:
    """LLM requests answered so far in this process (the model's or the call cache's reply)."""
    return _done


@contextmanager
def llm_calls(n: int = 1) -> Iterator[None]:
    """Count ``n`` LLM calls as in flight for the duration of the block, then as done."""
    global _inflight, _done
    with _inflight_lock:
        _inflight += n
    try:
        yield
    finally:
        with _inflight_lock:
            _inflight -= n
            _done += n


def tool_log() -> None:
    """A tool run outside Hydra (``kgreason ask``, ``show``, ``bundle``, ``index``): kgreason's
    own log lines (this module's progress lines every interval, heartbeats, warnings) go to
    stderr as ``[HH:MM:SS] message``, as a run's go to its console. Without it they went nowhere
    (no handler: Python prints only warnings then), so a tool working for ten minutes and a hung
    one looked the same. Only the ``kgreason`` logger gets the handler, so other libraries' INFO
    lines stay unprinted; logging someone configured already (a handler on the root or on
    ``kgreason``: Hydra, pytest, a notebook) is left as it is. Idempotent."""
    lg = logging.getLogger("kgreason")
    if lg.handlers or logging.getLogger().handlers:
        return
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", "%H:%M:%S"))
    lg.addHandler(h)
    if lg.getEffectiveLevel() > logging.INFO:
        lg.setLevel(logging.INFO)


def mode() -> str:
    """``bar``, ``log`` or ``off`` for this process (see the module docstring)."""
    m = os.environ.get("KGREASON_PROGRESS", "auto").strip().lower()
    if m in ("bar", "log", "off"):
        return m
    try:
        import tqdm  # noqa: F401
    except ImportError:
        return "log"
    return "bar" if sys.stderr.isatty() else "log"


def interval() -> float:
    try:
        return max(0.01, float(os.environ.get("KGREASON_PROGRESS_INTERVAL", "30")))
    except ValueError:
        return 30.0


def _fmt_s(s: float | None) -> str:
    if s is None or s != s or s == float("inf"):
        return "?"
    s = int(round(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else (f"{m}m{sec:02d}s" if m else f"{sec}s")


def _fmt_v(v: Any) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


class Progress:
    """Counted progress; see the module docstring. Thread-safe ``update``."""

    def __init__(self, total: int | None, desc: str, unit: str = "it", *, initial: int = 0,
                 show_llm: bool = False) -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.n = initial
        self.initial = initial
        self.show_llm = show_llm
        self.postfix: dict[str, Any] = {}
        self.mode = mode()
        self.t0 = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._bar = None
        self._thread: threading.Thread | None = None
        if self.mode == "bar":
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, desc=_tag() + desc, unit=unit, initial=initial, dynamic_ncols=True, leave=True)
        if self.mode != "off":
            self._thread = threading.Thread(target=self._tick, name=f"progress-{desc}", daemon=True)
            self._thread.start()

    # -- reporting
    def _figures(self) -> dict[str, Any]:
        out = dict(self.postfix)
        if self.show_llm:
            out["llm_in_flight"] = in_flight()
        return out

    def line(self) -> str:
        """The log line for the current state (also what the bar's postfix shows)."""
        elapsed = time.monotonic() - self.t0
        done = self.n - self.initial
        rate = done / elapsed if elapsed > 0 else 0.0
        if self.total:
            left = self.total - self.n
            eta = left / rate if rate > 0 else None
            head = f"{self.desc}: {self.n}/{self.total} {self.unit} ({100 * self.n / self.total:.0f}%)"
            tail = f", elapsed {_fmt_s(elapsed)}, ETA {_fmt_s(eta) if left else '0s'}"
        else:
            head, tail = f"{self.desc}: {self.n} {self.unit}", f", elapsed {_fmt_s(elapsed)}"
        figs = self._figures()
        extra = " | " + " ".join(f"{k}={_fmt_v(v)}" for k, v in figs.items()) if figs else ""
        return f"{_tag()}{head}, {rate:.2f} {self.unit}/s{tail}{extra}"

    def _tick(self) -> None:
        wait = 1.0 if self.mode == "bar" else interval()
        while not self._stop.wait(wait):
            with self._lock:
                if self._bar is not None:
                    self._bar.set_postfix({k: _fmt_v(v) for k, v in self._figures().items()}, refresh=True)
                else:
                    log.info(self.line())

    def update(self, n: int = 1, **figures: Any) -> None:
        """``n`` more items done; ``figures`` (e.g. ``errors=2, hits_at_1=0.61``) replace the shown ones."""
        with self._lock:
            self.n += n
            self.postfix.update(figures)
            if self._bar is not None:
                self._bar.set_postfix({k: _fmt_v(v) for k, v in self._figures().items()}, refresh=False)
                self._bar.update(n)

    def close(self, stopped: bool = False, quiet: bool = False) -> None:
        """End the bar; ``stopped``: an exception ended the work, so the last line says
        "(stopped)", not "(done)", and :func:`stopped_at` keeps where it stood. ``quiet``: no last
        log line (the caller's own line says where the work stood)."""
        global _stopped
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            if stopped:
                _stopped = {"what": self.desc, "done": self.n, "total": self.total, "unit": self.unit}
            if self._bar is not None:
                self._bar.close()
                self._bar = None
            elif self.mode == "log" and not quiet:
                log.info(self.line() + (" (stopped)" if stopped else " (done)"))

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self.close(stopped=exc_type is not None)


def bar(total: int | None, desc: str, unit: str = "it", **kw: Any) -> Progress:
    return Progress(total, desc, unit, **kw)


def iterate(items, desc: str, total: int | None = None, unit: str = "it"):
    """Yield from ``items`` with a :class:`Progress` (``total`` from ``len(items)`` when possible)."""
    if total is None:
        try:
            total = len(items)
        except TypeError:
            total = None
    with Progress(total, desc, unit) as p:
        for x in items:
            yield x
            p.update()


@contextmanager
def stage(desc: str, lazy: bool = False) -> Iterator[None]:
    """One long uncounted step: a start line, a heartbeat each interval (with the LLM requests
    answered since the start and those in flight, when there are any), the elapsed time at the
    end. ``lazy``: nothing is printed for a step that ends before its first heartbeat (a page
    drawn in a second says nothing; one that takes minutes says so every interval)."""
    m = mode()
    if m == "off":
        yield
        return
    t0 = time.monotonic()
    done0 = calls_done()
    stop = threading.Event()
    desc = _tag() + desc
    said = [not lazy]
    if not lazy:
        log.info("%s ...", desc)

    def beat() -> None:
        while not stop.wait(interval() if m == "log" else 10.0):
            n, k = in_flight(), calls_done() - done0
            calls = ", ".join(x for x in (f"{k} LLM calls answered" if k else "", f"{n} in flight" if n else "") if x)
            log.info("%s: still running after %s%s", desc, _fmt_s(time.monotonic() - t0), f" ({calls})" if calls else "")
            said[0] = True

    t = threading.Thread(target=beat, name=f"stage-{desc}", daemon=True)
    t.start()
    ok = False
    try:
        yield
        ok = True
    finally:
        stop.set()
        t.join(timeout=5)
        if said[0]:
            log.info("%s: %s after %s", desc, "done" if ok else "failed", _fmt_s(time.monotonic() - t0))


__all__ = ["Progress", "set_job", "bar", "iterate", "stage", "llm_calls", "in_flight", "calls_done", "tool_log", "mode",
           "interval"]
