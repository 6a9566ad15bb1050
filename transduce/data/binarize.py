"""Tokenize a corpus once into a compact binary cache, reused until the data or tokenizer change.

A cache directory holds the token ids of each side back to back (`src.bin`, `tgt.bin`, uint16
when the vocabulary fits, else uint32), the length of every pair (`src.len`, `tgt.len`), the
number of each kept pair in the original corpus (`pairs.idx`), where each pair's tokens start
(`src.off`, `tgt.off`; written the first time a cache without them is opened) and `meta.json`
with the fingerprint it was built for. All are memory-mapped when used. Building streams the
corpus in chunks, so memory stays bounded whatever its size; it writes into a temporary
directory renamed into place at the end, so an interrupted build leaves no half-written cache
behind.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain, islice
from pathlib import Path

import numpy as np

from transduce.data.corpus import SkipCounts
from transduce.data.tokenizer import Tokenizers
from transduce.files import make_public

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
CHUNK_PAIRS = 20_000


@dataclass(frozen=True)
class PairFilter:
    """Which pairs to drop (each drop is counted). Lengths are in subword tokens."""

    skip_empty: bool = True  # a pair with an empty (or all-space) side
    max_length: int | None = 256  # either side longer than this
    max_length_ratio: float | None = 3.0  # longer side over shorter side, in tokens

    def too_long(self, src_lengths: np.ndarray, tgt_lengths: np.ndarray) -> np.ndarray:
        if self.max_length is None:
            return np.zeros(len(src_lengths), dtype=bool)
        return np.maximum(src_lengths, tgt_lengths) > self.max_length

    def bad_ratio(self, src_lengths: np.ndarray, tgt_lengths: np.ndarray) -> np.ndarray:
        if self.max_length_ratio is None:
            return np.zeros(len(src_lengths), dtype=bool)
        shorter = np.minimum(src_lengths, tgt_lengths)
        return (shorter > 0) & (np.maximum(src_lengths, tgt_lengths) > self.max_length_ratio
                                * shorter)


KEEP_ALL = PairFilter(skip_empty=False, max_length=None, max_length_ratio=None)


def fingerprint(corpus, tokenizers: Tokenizers, pair_filter: PairFilter) -> str:
    """Changes whenever the corpus (its description, files' size or time), the tokenizers or
    the filter change."""
    parts = [f"v{FORMAT_VERSION}", repr(corpus), tokenizers.fingerprint, repr(pair_filter)]
    for path in corpus.files:
        stat = Path(path).stat()
        parts.append(f"{Path(path).resolve()}:{stat.st_size}:{stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


class TokenizedCorpus:
    """A binarized corpus, memory-mapped: token ids of pair i via `src(i)` and `tgt(i)`."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.meta = json.loads((self.directory / "meta.json").read_text())
        dtype = np.dtype(self.meta["dtype"])
        # all memory-mapped: pages are read on use and the OS may drop them, so what a process
        # holds does not grow with the corpus (the offsets too, written beside it once)
        self.src_lengths = _memmap(self.directory / "src.len", np.int32)
        self.tgt_lengths = _memmap(self.directory / "tgt.len", np.int32)
        self.pair_ids = _memmap(self.directory / "pairs.idx", np.int64)
        self._src = _memmap(self.directory / "src.bin", dtype)
        self._tgt = _memmap(self.directory / "tgt.bin", dtype)
        self._src_start = _offsets(self.directory / "src.off", self.src_lengths)
        self._tgt_start = _offsets(self.directory / "tgt.off", self.tgt_lengths)

    def __len__(self) -> int:
        return len(self.src_lengths)

    def src(self, i: int) -> np.ndarray:
        return self._src[self._src_start[i] : self._src_start[i + 1]]

    def tgt(self, i: int) -> np.ndarray:
        return self._tgt[self._tgt_start[i] : self._tgt_start[i + 1]]

    @property
    def skips(self) -> SkipCounts:
        return SkipCounts(**self.meta["skips"])


def _offsets(path: Path, lengths: np.ndarray) -> np.ndarray:
    """Where each pair's tokens start (and the last ends), int64, memory-mapped from `path`:
    computed from the lengths and written there the first time (atomically: processes that
    open the corpus together may each write it), kept in memory where it cannot be written."""
    if path.is_file() and path.stat().st_size == 8 * (len(lengths) + 1):
        return np.memmap(path, dtype=np.int64, mode="r")
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        offsets.tofile(partial)
        os.replace(partial, path)
    except OSError:  # a read-only copy of the data
        partial.unlink(missing_ok=True)
        return offsets
    return np.memmap(path, dtype=np.int64, mode="r")


def _memmap(path: Path, dtype: np.dtype) -> np.ndarray:
    if path.stat().st_size == 0:  # np.memmap refuses empty files
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")


def binarize(corpus, tokenizers: Tokenizers, directory: Path, *,
             pair_filter: PairFilter = PairFilter(), name: str = "corpus",
             chunk_pairs: int = CHUNK_PAIRS) -> TokenizedCorpus:
    """The binarized corpus in `directory`: reused if built for the same fingerprint, else built.

    `corpus` is anything with `pairs()` (an iterator of (source, target) strings), `files` (the
    paths it reads, for the fingerprint) and a `repr` describing it.
    """
    directory = Path(directory)
    key = fingerprint(corpus, tokenizers, pair_filter)
    meta_path = directory / "meta.json"
    if meta_path.is_file() and json.loads(meta_path.read_text()).get("fingerprint") == key:
        cached = TokenizedCorpus(directory)
        log.info("%s: using the binarized cache in %s", cached.skips.report(name), directory)
        return cached
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}.tmp-"))
    make_public(tmp)  # mkdtemp makes it private; the cache is not
    try:
        _build(corpus, tokenizers, pair_filter, tmp, key, chunk_pairs)
        TokenizedCorpus(tmp)  # opening it writes its offsets beside it
        if directory.exists():
            shutil.rmtree(directory)
        os.replace(tmp, directory)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    built = TokenizedCorpus(directory)
    log.info("%s (binarized in %.1f s)", built.skips.report(name), built.meta["seconds"])
    return built


def _build(corpus, tokenizers: Tokenizers, pair_filter: PairFilter, out: Path, key: str,
           chunk_pairs: int) -> None:
    start = time.perf_counter()
    vocab = max(tokenizers.src.vocab_size, tokenizers.tgt.vocab_size)
    dtype = np.uint16 if vocab <= np.iinfo(np.uint16).max + 1 else np.uint32
    skips = SkipCounts()
    files = {n: open(out / n, "wb") for n in ("src.bin", "tgt.bin", "src.len", "tgt.len",
                                                "pairs.idx")}
    try:
        for first, chunk in _chunks(corpus.pairs(), chunk_pairs):
            numbers = np.arange(first, first + len(chunk))
            if pair_filter.skip_empty:
                empty = np.fromiter((not s.strip() or not t.strip() for s, t in chunk),
                                    dtype=bool, count=len(chunk))
                skips.count("empty", (numbers[empty] + 1).tolist())
                chunk = [pair for pair, e in zip(chunk, empty.tolist(), strict=True) if not e]
                numbers = numbers[~empty]
            srcs = tokenizers.src.encode_batch([s for s, _ in chunk])
            tgts = tokenizers.tgt.encode_batch([t for _, t in chunk])
            src_len = np.fromiter(map(len, srcs), dtype=np.int32, count=len(srcs))
            tgt_len = np.fromiter(map(len, tgts), dtype=np.int32, count=len(tgts))
            too_long = pair_filter.too_long(src_len, tgt_len)
            bad_ratio = pair_filter.bad_ratio(src_len, tgt_len) & ~too_long
            skips.count("too_long", (numbers[too_long] + 1).tolist())
            skips.count("length_ratio", (numbers[bad_ratio] + 1).tolist())
            keep = ~(too_long | bad_ratio)
            if not keep.all():
                kept = keep.tolist()
                srcs = [x for x, k in zip(srcs, kept, strict=True) if k]
                tgts = [x for x, k in zip(tgts, kept, strict=True) if k]
            _write(files, numbers[keep], (srcs, src_len[keep]), (tgts, tgt_len[keep]), dtype)
            skips.kept += int(keep.sum())
            if (first + len(chunk)) // 1_000_000 > first // 1_000_000:
                log.info("binarized %s pairs so far", f"{first + len(chunk):,}")
    finally:
        for f in files.values():
            f.close()
    meta = {"fingerprint": key, "format": FORMAT_VERSION, "corpus": str(corpus),
            "dtype": np.dtype(dtype).name, "pairs": skips.kept, "skips": skips.to_dict(),
            "seconds": round(time.perf_counter() - start, 3)}
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")


def _chunks(pairs: Iterator[tuple[str, str]], size: int) -> Iterator[tuple[int, list]]:
    first = 0
    while chunk := list(islice(pairs, size)):
        yield first, chunk
        first += len(chunk)


def _write(files: dict, numbers: np.ndarray, src: tuple, tgt: tuple, dtype) -> None:
    """Append the kept pairs: `src` and `tgt` are (token id lists, lengths)."""
    for side, (seqs, lengths) in (("src", src), ("tgt", tgt)):
        tokens = np.fromiter(chain.from_iterable(seqs), dtype=dtype, count=int(lengths.sum()))
        files[f"{side}.bin"].write(tokens.tobytes())
        files[f"{side}.len"].write(lengths.astype(np.int32).tobytes())
    files["pairs.idx"].write(numbers.astype(np.int64).tobytes())
