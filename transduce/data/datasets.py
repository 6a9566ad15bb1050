"""Known corpora by name: Multi30k (downloaded or local) and the synthetic number words."""

from __future__ import annotations

import gzip
import logging
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from transduce.data.config import DATASETS
from transduce.data.corpus import ParallelFiles
from transduce.data.numbers import NumberWords
from transduce.errors import DataError

log = logging.getLogger(__name__)

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
MULTI30K_LANGUAGES = ("en", "de", "fr", "cs")
MULTI30K_SPLITS = ("train", "val", "test_2016_flickr", "test_2017_flickr", "test_2018_flickr",
                   "test_2017_mscoco")


def default_cache_dir() -> Path:
    """$TRANSDUCE_CACHE, else $XDG_CACHE_HOME/transduce, else ~/.cache/transduce."""
    if "TRANSDUCE_CACHE" in os.environ:
        return Path(os.environ["TRANSDUCE_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "transduce"


def multi30k(split: str, src_lang: str = "en", tgt_lang: str = "de", *,
             data_dir: Path | None = None, cache_dir: Path | None = None,
             base_url: str = MULTI30K_URL) -> ParallelFiles:
    """One split of Multi30k task 1 as two aligned files.

    With `data_dir`, files `{split}.{lang}` (or `.gz`) are read from there; otherwise they are
    downloaded once from the dataset's GitHub repository into `cache_dir`.
    """
    if split not in MULTI30K_SPLITS:
        raise DataError(f"multi30k has no split {split!r}; choose one of {MULTI30K_SPLITS}")
    for lang in (src_lang, tgt_lang):
        if lang not in MULTI30K_LANGUAGES:
            raise DataError(f"multi30k has no language {lang!r}; choose from {MULTI30K_LANGUAGES}")
    if data_dir is not None:
        return ParallelFiles(_local_file(Path(data_dir), split, src_lang),
                             _local_file(Path(data_dir), split, tgt_lang))
    directory = Path(cache_dir or default_cache_dir()) / "multi30k"
    return ParallelFiles(*(_download(f"{base_url}/{split}.{lang}.gz", directory / f"{split}.{lang}")
                           for lang in (src_lang, tgt_lang)))


def _local_file(directory: Path, split: str, lang: str) -> Path:
    for name in (f"{split}.{lang}", f"{split}.{lang}.gz"):
        if (directory / name).is_file():
            return directory / name
    raise DataError(f"{directory}: neither {split}.{lang} nor {split}.{lang}.gz is there")


def _download(url: str, target: Path) -> Path:
    """Fetch a .gz file once and keep it unpacked at `target` (written atomically)."""
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    log.info("downloading %s", url)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        with (os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=60) as response,
              gzip.GzipFile(fileobj=response) as unpacked):
            shutil.copyfileobj(unpacked, out)
        os.replace(tmp, target)
    except (urllib.error.URLError, OSError, EOFError) as error:
        Path(tmp).unlink(missing_ok=True)
        reason = getattr(error, "reason", error)
        raise DataError(
            f"could not download {url} ({reason}); offline, get the files another way and point "
            f"at their directory with data.dir / --data-dir (files named {target.name} or "
            f"{target.name}.gz)") from None
    return target


def known_corpus(name: str, split: str, src_lang: str, tgt_lang: str, *,
                 data_dir: Path | None = None, cache_dir: Path | None = None, seed: int = 1):
    """A known dataset's split by name. Split names: train, valid, test (Multi30k: also its own
    names, with valid = val and test = test_2016_flickr)."""
    if name == "multi30k":
        split = {"valid": "val", "test": "test_2016_flickr"}.get(split, split)
        return multi30k(split, src_lang, tgt_lang, data_dir=data_dir, cache_dir=cache_dir)
    if name == "numbers":
        return NumberWords(split, src_lang, tgt_lang, seed=seed)
    raise DataError(f"data.dataset: unknown dataset {name!r}; choose one of {DATASETS} or give "
                    "data.train_src / data.train_tgt paths")
