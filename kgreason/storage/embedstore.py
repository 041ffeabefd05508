"""KG embedding stores: every text a KG gives a method to rank, embedded once per machine.

A **store** holds one unit vector per id of one *text form* of one KG, as a memory-mapped
``(n, dim)`` matrix (``float32``, or ``float16`` to halve it) indexed by that id:

* ``triple`` – ``KG.verbalise`` of triple ``i`` (``"head label | relation | tail label"``): rag's
  fact ranking (sgr.txt Eq. 4), SGR's subgraph scores;
* ``relation_words`` – relation ``i``'s name with ``.``/``_`` as spaces: ReKnoS's super-relation
  clustering;
* ``entity_label`` – ``KG.entity_label(i)``: the embedding entity linker's label matrix;
* ``tog_relation``, ``tog_entity`` – the texts ToG's embedding pruner scores (a relation's
  property words; ``"relation neighbour-label"``), distinct texts looked up by text.

Rankers that hold ids gather rows (:meth:`KGStore.triple_rows`, :meth:`KGStore.scores`); rankers
that hold texts call ``Embedder.encode``, which reads any text an open store holds from it
(:meth:`KGStore.text_row`) and embeds only the rest (the question).

A store lives in ``<store_dir>/kg/<key>/`` (``vectors.npy`` + ``meta.json``); the key hashes the
form, every text in id order (so a changed KG, or one ordered differently, is another store), the
embedder's model files and settings, and the dtype. It is built once, in length-sorted batches
with a progress bar, under a file lock, into a temporary directory renamed into place, so
concurrent runs and workers on one machine build it once and read the same file (a waiting run
logs for whom it waits). ``meta.json`` keeps the SHA-256 of ``vectors.npy``: a file that no
longer matches (or cannot be read), or whose row count is not the KG's number of texts, is named
in a warning and rebuilt. The matrix's bytes are reserved before it is written through the map
(:func:`reserved_npy`), so a full disk is a one-line :class:`StoreNoSpace` (never SIGBUS) and the
temporary directory is removed; one left by a build stopped with ``kill -9`` is removed by the
next build (:func:`clean_stale_tmp`). The compiled-KG cache and SubQRAG's index use the same
lock (:func:`store_lock`).

At question time a ranking is a gather of the candidates' rows and one matrix-vector product
(:meth:`KGStore.scores`), then a top-k that does not sort everything (:func:`top_k`); the only
text embedded is the question.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

log = logging.getLogger(__name__)

FORMAT = 1  # bump when the layout or the meaning of a form changes


def _words(x: str) -> str:
    return x.replace(".", " ").replace("_", " ")


def _triple_texts(kg) -> list[str]:
    labels = [kg.entity_label(i) for i in range(kg.n_entities)]
    rels = list(kg.relation_names)
    # exactly KG.verbalise, without a Python call per triple
    return [f"{labels[h]} | {rels[r]} | {labels[t]}" for h, r, t in zip(kg.heads.tolist(), kg.rels.tolist(),
                                                                         kg.tails.tolist())]


def _tog_entity_texts(kg) -> list[str]:
    labels = [kg.entity_label(i) for i in range(kg.n_entities)]
    rels = list(kg.relation_names)
    out = dict.fromkeys(_words(f"{rels[r]} {labels[t]}") for r, t in zip(kg.rels.tolist(), kg.tails.tolist()))
    out.update(dict.fromkeys(_words(f"{rels[r]} {labels[h]}") for h, r in zip(kg.heads.tolist(), kg.rels.tolist())))
    return list(out)


FORMS: dict[str, Callable[[object], list[str]]] = {
    "triple": _triple_texts,
    "relation_words": lambda kg: [_words(r) for r in kg.relation_names],
    "entity_label": lambda kg: [kg.entity_label(i) for i in range(kg.n_entities)],
    # ToG's embedding pruner (kgreason/reasoners/tog.py): a relation's property words, and
    # "relation neighbour-label" (either direction; distinct texts, looked up by text)
    "tog_relation": lambda kg: list(dict.fromkeys(_words(r.rsplit(".", 1)[-1]) for r in kg.relation_names)),
    "tog_entity": _tog_entity_texts,
}
DTYPES = ("float32", "float16")
BUILD_PRECISIONS = ("float32", "bfloat16")  # a build's forward-pass arithmetic (Embedder.build_precision)


def form_texts(kg, form: str) -> list[str]:
    """Every text of ``form`` for ``kg``, in id order."""
    if form not in FORMS:
        raise ValueError(f"embedding store form {form!r}: expected one of {', '.join(FORMS)}")
    return FORMS[form](kg)


def texts_digest(texts: Sequence[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        b = t.encode("utf-8")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


class StoreNoSpace(OSError):
    """A store (embedding store, compiled KG, partitioned KG) did not fit on its disk: the message
    names the directory and the bytes it needed; the half-written temporary copy is removed."""


def no_space_error(where: Path, needed: int, what: str, err: OSError | None = None, *,
                   at_least: bool = False) -> StoreNoSpace:
    """The :class:`StoreNoSpace` of ``what`` not fitting in ``where`` (``needed`` bytes)."""
    try:
        free = shutil.disk_usage(where).free
        left = f", {free:,} free"
    except OSError:
        left = ""
    need = f"{'at least ' if at_least else ''}{needed:,} bytes needed"
    e = StoreNoSpace(f"{what} in {where}: no space left on the device: {need}{left}; free some space or "
                     "point it at another directory")
    e.errno = err.errno if err is not None and err.errno else errno.ENOSPC
    return e


def out_of_space(err: OSError) -> bool:
    """``err`` says the disk (or the quota) is full: ENOSPC/EDQUOT, or numpy's short write
    (``np.save`` on a full disk: ``N requested and M written``, no errno)."""
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return err.errno is None and " requested and " in str(err) and str(err).endswith(" written")


def reserved_npy(path: Path, dtype, shape: tuple[int, ...], *, what: str = "store",
                 where: Path | None = None) -> np.memmap:
    """``np.lib.format.open_memmap(path, "w+", dtype, shape)`` whose bytes are reserved on the disk
    first (``posix_fallocate``): a sparse map on a full disk is killed by SIGBUS at the first page
    that finds no room, with no message; a reservation that does not fit is a
    :class:`StoreNoSpace` naming ``where`` (default: the file's directory) and the bytes needed
    (the file removed)."""
    path = Path(path)
    dtype = np.dtype(dtype)
    n_bytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    try:
        out = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=tuple(shape))
        size = path.stat().st_size
        fd = os.open(path, os.O_RDWR)
        try:
            try:
                if not hasattr(os, "posix_fallocate"):  # macOS
                    raise OSError(errno.ENOSYS, "no posix_fallocate")
                os.posix_fallocate(fd, 0, size)
            except OSError as e:
                if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                    raise
                _write_zeros(fd, size)  # no fallocate here: plain writes reserve the blocks
        finally:
            os.close(fd)
        return out
    except OSError as e:
        path.unlink(missing_ok=True)
        if out_of_space(e):
            raise no_space_error(Path(where) if where is not None else path.parent, n_bytes, what, e) from None
        raise


def _write_zeros(fd: int, size: int) -> None:
    """Write every block of ``[0, size)`` that holds no data yet (reserving it), keeping what is there."""
    block = 1 << 20
    pos = 0
    while pos < size:
        n = min(block, size - pos)
        data = os.pread(fd, n, pos)
        os.pwrite(fd, data + b"\0" * (n - len(data)), pos)
        pos += n


@contextmanager
def store_lock(lock_path: Path, what: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_path`` while ``what`` is built or read: one builder per
    machine, the others wait (logging for whom: the holder writes its pid and host into the lock
    file) and then read what it wrote. A file system without ``flock`` is named in a warning and
    the block runs unlocked."""
    import fcntl

    lock_path = Path(lock_path)
    with open(lock_path, "a+", encoding="utf-8") as f:
        locked = True
        try:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.seek(0)
                holder = f.read().strip() or "another process"
                log.warning("%s is being built by %s; waiting for it to finish (lock %s)", what, holder, lock_path)
                t0 = time.perf_counter()
                fcntl.flock(f, fcntl.LOCK_EX)
                log.warning("%s: waited %.1f s for %s; reading what it wrote", what, time.perf_counter() - t0, holder)
        except OSError as e:
            if isinstance(e, BlockingIOError):
                raise
            locked = False
            log.warning("%s: cannot lock %s (%s); going on unlocked, so two runs may build it twice", what,
                        lock_path, e)
        if locked:
            f.seek(0)
            f.truncate()
            f.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
            f.flush()
        yield


def clean_stale_tmp(base: Path, held: str | None = None) -> list[Path]:
    """Remove the ``<key>.tmp.<pid>/`` dirs under ``base`` that no build is writing: those of
    ``held`` (the key whose lock the caller holds, so no one else builds it), and those of any
    other key whose lock is free (taken without waiting while the dir is removed). A build
    stopped by ``kill -9`` or a signal leaves such a dir; the next build of the key, or of any
    key in ``base``, removes it. Returns the dirs removed."""
    import fcntl

    removed = []
    for p in sorted(Path(base).glob("*.tmp.*")):
        prefix, _, pid = p.name.rpartition(".tmp.")
        if not pid.isdigit() or not p.is_dir():
            continue
        if prefix == held:
            shutil.rmtree(p, ignore_errors=True)
        else:
            lock_p = Path(base) / f"{prefix}.lock"
            try:
                with open(lock_p, "a+") as f:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    shutil.rmtree(p, ignore_errors=True)
            except OSError:  # held: a build is writing it (or no flock here: left alone)
                continue
        if not p.exists():
            log.warning("removed %s, left by a build that was stopped (pid %s)", p, pid)
            removed.append(p)
    return removed


def top_k(sims: np.ndarray, k: int | None, tau: float | None = None) -> np.ndarray:
    """Indices of the best scores, best first, ties to the lower index: exactly
    ``np.argsort(-sims, kind="stable")[:k]`` (then ``sims >= tau``), but with an
    ``argpartition`` so only the candidates at or above the k-th score are sorted."""
    sims = np.asarray(sims)
    n = len(sims)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if k is None or k >= n:
        order = np.argsort(-sims, kind="stable")
    elif k <= 0:
        order = np.zeros(0, dtype=np.int64)
    else:
        kth = sims[np.argpartition(-sims, k - 1)[k - 1]]
        cand = np.flatnonzero(sims >= kth)  # ascending ids: the stable sort keeps ties in id order
        order = cand[np.argsort(-sims[cand], kind="stable")][:k]
    if tau is not None:
        order = order[sims[order] >= tau]
    return order.astype(np.int64, copy=False)


class KGStore:
    """One built store: ``matrix`` ``(n, dim)`` (a read-only memory map, or an array when the
    embedder has no directory), with the figures of how it was obtained."""

    def __init__(self, form: str, matrix: np.ndarray, key: str, path: Path | None, *, built_here: bool,
                 build_s: float, texts: list[str] | None = None, precision: str = "float32") -> None:
        self.form, self.matrix, self.key, self.path = form, matrix, key, path
        self.precision = precision
        self.built_here, self.build_s = built_here, build_s
        self._texts = texts
        self._text_rows: dict[str, int] | None = None
        self._triple_keys: tuple[np.ndarray, np.ndarray, tuple[int, int]] | None = None

    @property
    def n(self) -> int:
        return int(self.matrix.shape[0])

    @property
    def dtype(self) -> str:
        return str(self.matrix.dtype)

    @property
    def nbytes(self) -> int:
        return int(self.matrix.nbytes)

    def stats(self) -> dict:
        return {"form": self.form, "rows": self.n, "dim": int(self.matrix.shape[1]), "dtype": self.dtype,
                "build_precision": self.precision, "bytes": self.nbytes, "built_here": self.built_here,
                "build_s": round(self.build_s, 3),
                "key": self.key[:16], "path": str(self.path) if self.path else None}

    # ------------------------------------------------------------------ lookups
    def text_row(self, text: str) -> int:
        """The row of ``text`` (its first id), or ``-1``."""
        if self._text_rows is None:
            rows: dict[str, int] = {}
            for i, t in enumerate(self._texts or ()):
                rows.setdefault(t, i)
            self._text_rows = rows
        return self._text_rows.get(text, -1)

    def triple_rows(self, kg, triples: np.ndarray) -> np.ndarray:
        """Row ids of ``(m, 3)`` ``(head, relation, tail)`` id triples of ``kg`` (``-1`` where the
        triple is not one of the KG's; a repeated triple maps to its first id)."""
        if self.form != "triple":
            raise ValueError(f"triple_rows on a {self.form!r} store")
        triples = np.asarray(triples, dtype=np.int64).reshape(-1, 3)
        if self._triple_keys is None:
            n, r = int(kg.n_entities) + 1, int(kg.n_relations) + 1
            keys = (np.asarray(kg.heads, np.int64) * r + np.asarray(kg.rels, np.int64)) * n + np.asarray(kg.tails,
                                                                                                      np.int64)
            order = np.argsort(keys, kind="stable")  # first id of a repeated triple first
            self._triple_keys = (keys[order], order.astype(np.int64), (n, r))
        sk, ids, (n, r) = self._triple_keys
        if len(triples) == 0:
            return np.zeros(0, dtype=np.int64)
        q = (triples[:, 0] * r + triples[:, 1]) * n + triples[:, 2]
        pos = np.searchsorted(sk, q)
        pos_c = np.minimum(pos, len(sk) - 1)
        found = (pos < len(sk)) & (sk[pos_c] == q)
        return np.where(found, ids[pos_c], -1)

    # ------------------------------------------------------------------ ranking
    def scores(self, q: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """``(len(rows),)`` float32 cosines of the unit question vector ``q`` with the rows'
        vectors: one gather, one matrix-vector product."""
        rows = np.asarray(rows, dtype=np.int64)
        m = self.matrix[rows]
        return (m @ np.asarray(q, dtype=m.dtype)).astype(np.float32) if m.dtype == np.float32 else \
            (m.astype(np.float32) @ np.asarray(q, dtype=np.float32))


def model_fingerprint(model_path: str, max_length: int) -> str:
    """SHA-256 of the model directory's files (names and bytes) and the settings that change a vector."""
    h = hashlib.sha256()
    root = Path(model_path)
    for p in sorted(x for x in root.rglob("*") if x.is_file()):
        h.update(str(p.relative_to(root)).encode())
        h.update(_file_sha256(p).encode())
    h.update(json.dumps({"max_length": int(max_length), "normalize": True, "pooling": "model"}).encode())
    return h.hexdigest()


def store_key(form: str, texts_sha: str, model_fp: str, dtype: str) -> str:
    return hashlib.sha256(json.dumps([FORMAT, form, texts_sha, model_fp, dtype]).encode()).hexdigest()


def _read(path: Path, key: str, form: str, rows: int | None = None) -> np.ndarray | None:
    """The store at ``path`` if whole and matching (``rows`` rows, one per text of the KG, when
    given); ``None`` (with a warning naming the file) if damaged."""
    meta_p, vec_p = path / "meta.json", path / "vectors.npy"
    if not path.exists():
        return None
    try:
        meta = json.loads(meta_p.read_text())
        if meta.get("key") != key or meta.get("form") != form:
            raise ValueError("meta.json is for another store")
        if _file_sha256(vec_p) != meta.get("sha256"):
            raise ValueError("its SHA-256 differs from meta.json's")
        mat = np.load(vec_p, mmap_mode="r")
        if mat.shape != (meta["rows"], meta["dim"]) or str(mat.dtype) != meta["dtype"]:
            raise ValueError(f"shape {mat.shape} {mat.dtype} differs from meta.json's")
        if rows is not None and mat.shape[0] != rows:  # a matrix and meta.json that agree, for another KG
            raise ValueError(f"it has {mat.shape[0]:,} rows (meta.json too) where the KG has {rows:,} {form} texts")
        if mat.ndim != 2 or mat.shape[1] < 1:
            raise ValueError(f"shape {mat.shape} is not (rows, dim)")
        return mat
    except Exception as e:  # noqa: BLE001 - any damage means rebuild
        log.warning("embedding store %s is damaged (%s: %s); rebuilding it", vec_p, type(e).__name__, e)
        return None


def _embed_into(out: np.ndarray, texts: list[str], forward: Callable[[list[str]], np.ndarray], batch: int,
                desc: str) -> None:
    """Fill ``out[i]`` with the vector of ``texts[i]``: texts sorted by length (short batches pad
    little), ``batch`` texts per forward pass, progress shown."""
    from kgreason import progress

    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    chunk = max(batch, 1) * 8
    with progress.bar(len(texts), desc, "texts") as p:
        for s in range(0, len(order), chunk):
            ids = order[s:s + chunk]
            out[np.asarray(ids)] = forward([texts[i] for i in ids]).astype(out.dtype)
            p.update(len(ids))


def _build(tmp: Path, path: Path, base: Path, kg, form: str, texts: list[str], key: str, key_texts: str, embedder,
           dtype: str, precision: str, desc: str, t0: float) -> None:
    """Write the store into ``tmp`` (its bytes reserved first) and rename it to ``path``."""
    dim = embedder.dim
    what = f"embedding store {getattr(kg, 'name', 'kg')}/{form}"
    out = reserved_npy(tmp / "vectors.npy", dtype, (len(texts), dim), what=what, where=base)
    wide = None
    if dtype != "float32":  # the float32 store's vectors, rounded, when the machine has it
        k32 = store_key(form, key_texts, embedder.store_fingerprint(), "float32")
        wide = _read(base / k32[:32], k32, form, len(texts)) if (base / k32[:32]).exists() else None
    if wide is not None:
        out[:] = wide.astype(dtype)
    else:
        _embed_into(out, texts, embedder._forward_build, embedder.build_batch_size, desc)
    out.flush()
    del out
    meta = {"format": FORMAT, "key": key, "form": form, "kg": getattr(kg, "name", None), "rows": len(texts),
            "dim": dim, "dtype": dtype, "build_precision": precision, "model": embedder.model_name,
            "sha256": _file_sha256(tmp / "vectors.npy"),
            "build_s": round(time.perf_counter() - t0, 3)}
    text = json.dumps(meta, indent=1)
    try:
        (tmp / "meta.json").write_text(text)
    except OSError as e:
        if out_of_space(e):
            raise no_space_error(base, len(text), what, e) from None
        raise
    if path.exists():
        shutil.rmtree(path)  # the damaged one
    os.replace(tmp, path)


def open_store(kg, form: str, embedder, root: Path | None, dtype: str = "float32") -> KGStore:
    """The store of ``form`` for ``kg`` under ``root`` (built here if absent or damaged; in
    memory when ``root`` is None)."""
    if dtype not in DTYPES:
        raise ValueError(f"embedder.kg_store={dtype!r}: expected float32, float16 or null")
    texts = form_texts(kg, form)
    key_texts = texts_digest(texts)
    key = store_key(form, key_texts, embedder.store_fingerprint(), dtype)
    t0 = time.perf_counter()
    precision = getattr(embedder, "build_precision", "float32")
    desc = f"embedding store {getattr(kg, 'name', 'kg')}/{form}" + ("" if precision == "float32" else f" ({precision})")
    if root is None:
        mat = np.zeros((len(texts), embedder.dim), dtype=dtype)
        _embed_into(mat, texts, embedder._forward_build, embedder.build_batch_size, desc)
        return KGStore(form, mat, key, None, built_here=True, build_s=time.perf_counter() - t0, texts=texts,
                       precision=precision)
    base = Path(root) / "kg"
    base.mkdir(parents=True, exist_ok=True)
    path = base / key[:32]
    mat = _read(path, key, form, len(texts)) if path.exists() else None
    if mat is not None:
        return KGStore(form, mat, key, path, built_here=False, build_s=0.0, texts=texts, precision=precision)
    # one builder per store on the machine; the others wait, then read
    with store_lock(base / f"{key[:32]}.lock", f"embedding store {path}"):
        mat = _read(path, key, form, len(texts)) if path.exists() else None
        if mat is not None:
            return KGStore(form, mat, key, path, built_here=False, build_s=0.0, texts=texts, precision=precision)
        clean_stale_tmp(base, held=key[:32])  # builds stopped by kill -9 or a signal
        tmp = base / f"{key[:32]}.tmp.{os.getpid()}"
        try:
            tmp.mkdir()
            _build(tmp, path, base, kg, form, texts, key, key_texts, embedder, dtype, precision, desc, t0)
        except BaseException:  # a full disk, an error, Ctrl-C or SIGTERM: no half-built store is left
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        mat = np.load(path / "vectors.npy", mmap_mode="r")
    build_s = time.perf_counter() - t0
    log.info("embedding store %s: %d rows (%s, %.1f MB) built in %.1f s", path, len(texts), dtype,
             mat.nbytes / 1e6, build_s)
    return KGStore(form, mat, key, path, built_here=True, build_s=build_s, texts=texts, precision=precision)


def forms_of(reasoner) -> tuple[str, ...]:
    """The store forms a reasoner ranks with (its ``embed_forms``, or its pruner's)."""
    forms = getattr(reasoner, "embed_forms", None)
    if forms is None:
        forms = getattr(getattr(reasoner, "pruner", None), "embed_forms", ())
    return tuple(forms or ())


def main(argv: Sequence[str] | None = None) -> int:
    """``kgreason index kg [--forms triple ...] [overrides...]``: build (or check) the KG embedding
    stores of the configured KG and embedder before any run, e.g.
    ``kgreason index kg kg=freebase_slice`` or ``... embedder.kg_store=float16 embedder.device=cuda``."""
    import argparse
    import sys

    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from kgreason.paths import config_dir

    ap = argparse.ArgumentParser(prog="kgreason index kg", description=main.__doc__.split("\n")[0])
    ap.add_argument("--forms", nargs="+", default=["triple", "relation_words", "entity_label"],
                    help=f"text forms to build (of {', '.join(FORMS)})")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides of conf/config.yaml, e.g. kg=freebase_slice")
    argv = list(sys.argv[1:] if argv is None else argv)
    # key=value words are Hydra overrides wherever they stand (``--forms triple kg=x`` included)
    over = [t for t in argv if "=" in t and not t.startswith("-")]
    a = ap.parse_args([t for t in argv if t not in over])
    a.overrides = [*a.overrides, *over]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")  # progress lines off a terminal
    bad = [f for f in a.forms if f not in FORMS]
    if bad:
        ap.error(f"--forms: unknown {bad}; expected some of {', '.join(FORMS)}")
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose("config", overrides=list(a.overrides))
    kg = instantiate(cfg.kg)
    emb = instantiate(cfg.embedder)
    if emb.kg_store_dtype is None:
        ap.error("embedder.kg_store is null: no store to build")
    for form in a.forms:
        st = emb.kg_store(kg, form)
        print(json.dumps(st.stats()))
    return 0


__all__ = ["FORMS", "DTYPES", "BUILD_PRECISIONS", "KGStore", "open_store", "top_k", "form_texts", "texts_digest", "forms_of",
           "model_fingerprint", "store_key", "StoreNoSpace", "no_space_error", "out_of_space", "reserved_npy",
           "store_lock", "clean_stale_tmp"]
