"""Whether a package index (any HTTP(S) URL) answers, before pip is asked to use it.

usage: python scripts/reachable.py URL [TIMEOUT_S]

Exit 0 when the host answers an HTTP request within TIMEOUT_S (default 10) seconds, whatever the
status (a 404 still means the index is there); else exit 1 with one line on stderr naming the URL
and why (the name does not resolve, the connection is refused or times out). `make setup` runs it
before installing torch from PyTorch's CPU index: pip itself, pointed at an unreachable index,
retries every request and printed about 30 "Retrying ... NameResolutionError" warnings before the
set-up fell back to pip's own index (issue 74). Standard library only: it runs before anything is
installed.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request


def reachable(url: str, timeout: float = 10.0) -> str | None:
    """None when ``url``'s host answers an HTTP request; else why not, in a few words."""
    req = urllib.request.Request(url, method="HEAD", headers={"User-Agent": "kgreason-setup"})
    try:
        with urllib.request.urlopen(req, timeout=timeout):
            return None
    except urllib.error.HTTPError:  # an answer: the index is there
        return None
    except urllib.error.URLError as e:
        reason = e.reason
        return str(getattr(reason, "strerror", None) or reason)
    except (OSError, ValueError) as e:  # a timeout, a malformed URL
        return str(e) or type(e).__name__


def main(argv: list[str]) -> int:
    if not argv or len(argv) > 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    timeout = float(argv[1]) if len(argv) > 1 else 10.0
    why = reachable(argv[0], timeout)
    if why is None:
        return 0
    print(f"setup: {argv[0]} cannot be reached ({why})", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
