"""The secret values a run holds, and the scrubber every writer of the run dir goes through.

Ground floor: imports nothing from kgreason. A key can reach a file in many ways: typed on the
command line (``+llm.api_key=sk-...``), typed by mistake where the *name* of its environment
variable belongs (``llm.api_key_env=sk-...``), quoted back by a server in an error message that
ends up in ``predictions.jsonl`` and the log, or copied into W&B. Redacting config keys by name
catches only the first. So the run registers every secret *value* it learns of, and every string
it writes (prediction rows, JSON files, the Hydra record, log records, W&B payloads) is passed
through :func:`scrub`, which replaces each registered value wherever it occurs.

Where values come from:

* config keys that look secret (``api_key``, ``password``, ``secret``, ``token``): their values;
* config keys ``<secret>_env`` (``api_key_env``, ``password_env``): the environment variable they
  name, when set; a value that is not a variable name is treated as the secret itself (and
  :func:`register_from_config` reports the mistake, without the value);
* anything a backend reads itself (``OpenAIChat`` registers the key it loads);
* the password of a URL with credentials (``http://user:password@host``), from any config value.

Besides the registered values, :func:`scrub` removes the user info of every URL it meets
(``http://user:pw@host/v1`` → ``http://host/v1``), registered or not and whatever its length, so
an error that quotes an endpoint never carries its credentials.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from typing import Any, Iterable, Mapping

SECRET_KEY = re.compile(r"(api[_-]?key|password|secret|token)$", re.I)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
REDACTED = "<redacted>"
MIN_LEN = 6  # shorter values would redact ordinary words; no real key is this short

_secrets: set[str] = set()
_lock = threading.Lock()


def register(value: Any) -> None:
    """Remember a secret value; from now on :func:`scrub` removes it from every string."""
    if isinstance(value, str) and len(value.strip()) >= MIN_LEN:
        with _lock:
            _secrets.add(value.strip())


def registered() -> int:
    """How many values are registered (for tests and the run record)."""
    return len(_secrets)


def forget_all() -> None:
    """Drop every registered value (tests; a new run in the same process keeps them, harmlessly)."""
    with _lock:
        _secrets.clear()


def scrub(text: str) -> str:
    """``text`` with every URL's user info removed and every registered secret value replaced by
    ``<redacted>``."""
    if not text or not isinstance(text, str):
        return text
    text = strip_url_credentials(text)
    if not _secrets:
        return text
    for s in sorted(_secrets, key=len, reverse=True):
        if s in text:
            text = text.replace(s, REDACTED)
    return text


def scrub_obj(obj: Any) -> Any:
    """A copy of a JSON-like object with every string (keys too) scrubbed."""
    if isinstance(obj, str):
        return scrub(obj)
    if isinstance(obj, Mapping):
        return {scrub_obj(k): scrub_obj(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(scrub_obj(v) for v in obj) if isinstance(obj, list) else tuple(scrub_obj(v) for v in obj)
    return obj


def _walk(node: Any, path: str) -> Iterable[tuple[str, str, Any]]:
    if isinstance(node, Mapping):
        for k, v in node.items():
            p = f"{path}.{k}" if path else str(k)
            yield p, str(k), v
            yield from _walk(v, p)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{path}[{i}]")


def _is_env_key(key: str) -> bool:
    return key.endswith("_env") and bool(SECRET_KEY.search(key[:-4]))


def register_from_config(container: Mapping[str, Any]) -> list[str]:
    """Register every secret a plain config holds or points at. Returns the mistakes that put a
    secret where a name belongs (messages name the key, never the value)."""
    problems = []
    for path, key, value in _walk(container, ""):
        if not isinstance(value, str) or not value:
            continue
        if _is_env_key(key):
            if ENV_NAME.match(value):
                register(os.environ.get(value))
            else:
                register(value)
                problems.append(f"{path} must be the NAME of an environment variable (e.g. OPENAI_API_KEY), "
                                "but its value looks like a key itself; export the key in a variable and "
                                f"set {path} to that variable's name (the value was not written anywhere)")
        elif SECRET_KEY.search(key):
            register(value)
        for m in URL_CREDENTIALS.finditer(value):
            register(m.group(2).partition(":")[2])
    return problems


#: the credentials of a URL (``scheme://user:password@host``): group 1 the scheme, group 2 the user info
URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)([^/?#@\s\"']+)@")


def strip_url_credentials(text: str) -> str:
    """``text`` with the user info of every URL in it removed (``http://user:pw@host/v1`` →
    ``http://host/v1``: still a URL a config can use)."""
    return URL_CREDENTIALS.sub(r"\1", text) if "@" in text else text


def config_secrets(container: Any) -> set[str]:
    """Every secret value a plain config holds or points at, without registering it: the values of
    secret-looking keys, the environment variables ``*_env`` keys name (when set here), a value put
    where such a name belongs, and the password of a URL with credentials (what
    :func:`register_from_config` registers, and the URLs' passwords). Values shorter than
    :data:`MIN_LEN` are left out (they would redact ordinary words; a URL's user info is stripped
    by :func:`strip_url_credentials` whatever its length)."""
    found: set[str] = set()

    def add(v: Any) -> None:
        if isinstance(v, str) and len(v.strip()) >= MIN_LEN:
            found.add(v.strip())

    for _path, key, value in _walk(container if isinstance(container, Mapping) else {}, ""):
        if not isinstance(value, str) or not value:
            continue
        if _is_env_key(key):
            add(os.environ.get(value) if ENV_NAME.match(value) else value)
        elif SECRET_KEY.search(key):
            add(value)
        for m in URL_CREDENTIALS.finditer(value):
            user, _colon, password = m.group(2).partition(":")
            add(password)
    return found


def scrub_with(text: str, values: Iterable[str]) -> tuple[str, bool]:
    """``text`` with each of ``values`` and every URL's credentials replaced by ``<redacted>``, and
    whether anything was (a scrubber that does not depend on what this process registered)."""
    out = strip_url_credentials(text)
    for v in sorted(values, key=len, reverse=True):
        if v and v in out:
            out = out.replace(v, REDACTED)
    return out, out != text


class ScrubbingFilter(logging.Filter):
    """Scrubs a log record's message and traceback before any handler formats it."""

    def filter(self, record: logging.LogRecord) -> bool:  # noqa: A003 - logging API
        message = record.getMessage()
        if not _secrets and "@" not in message and not record.exc_info and "@" not in (record.exc_text or ""):
            return True  # nothing registered and no URL user info to remove
        record.msg = scrub(message)
        record.args = ()
        if record.exc_info:
            record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        elif record.exc_text:
            record.exc_text = scrub(record.exc_text)
        return True


_FILTER = ScrubbingFilter()


def install_log_filter(logger: logging.Logger | None = None) -> None:
    """Put the scrubbing filter on every handler of ``logger`` (default: the root logger, where
    Hydra's console and file handlers live), so records from any module are scrubbed."""
    logger = logger or logging.getLogger()
    for h in logger.handlers:
        if _FILTER not in h.filters:
            h.addFilter(_FILTER)


class ScrubbingStream:
    """A text stream that scrubs what is written through it (stdout/stderr of the CLI: Hydra
    itself prints a failed job's overrides, and users send both streams to SLURM log files)."""

    def __init__(self, inner) -> None:
        self._inner = inner

    def write(self, text: str) -> int:
        self._inner.write(scrub(text))
        return len(text)

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


def scrub_std_streams() -> None:
    """Route ``sys.stdout`` and ``sys.stderr`` through :class:`ScrubbingStream` (CLI only; once)."""
    import sys

    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if not isinstance(stream, ScrubbingStream):
            setattr(sys, name, ScrubbingStream(stream))


__all__ = ["ScrubbingStream", "scrub_std_streams", "SECRET_KEY", "REDACTED", "register", "registered", "forget_all", "scrub", "scrub_obj",
           "register_from_config", "ScrubbingFilter", "install_log_filter", "URL_CREDENTIALS", "strip_url_credentials",
           "config_secrets", "scrub_with"]
