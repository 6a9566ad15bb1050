"""Every command and Python snippet of the README and the documentation site runs, so neither can
rot. The pages run in the site's order in one working directory, as a reader would paste them
from a clone's root: `../shared/data` is the shared corpora where they are beside the clone
(TRANSDUCE_SHARED_DATA), else a stand-in for Multi30k's files made of number words (then what a
`console` block shows of the real corpus is not compared).

What a page's code blocks are, by the language of their fence:

- `sh`: commands, run by bash (`set -euo pipefail`), one block at a time;
- `console`: `$ ` lines are commands, the lines after one its output: each shown line must be a
  line of what the command prints;
- `python`: run by the Python under test;
- `yaml title="FILE"`: a file the next blocks use, written where its title says;
- anything else (`text`, `yaml` without a title, ...): shown, not run.

A block that cannot run here says so, with its reason, on the line before its fence:
`<!-- not run: needs a GPU -->`; a page whose every block is such a record (the results log)
says `<!-- commands not run: reason -->` once. Indented code blocks are not allowed in the
README and docs/: a block must say what it is.

Commands run as written except for what makes them fit a test (the `_PRELUDE` below): training stops
after a few updates (on fewer number words) and validates by its loss only (BLEU searched val's
1,014 sentences of the real corpus to their length limit: most of a Multi30k `train`'s 28 s),
searches after a few tokens (outputs of a model trained for five updates would run to their length
limit), the quickstart is the reduced one of
tests/test_quickstart.py, a server is started on a free port, asked to translate and stopped
(tests/docs_stand_ins.py), `pip install` checks the extras it names instead of installing. The
reader's own files (`train.en`, `train.de`, `valid.*`, `test.*`) are number words, and the Hugging
Face hub is a local cache holding a small OPUS-MT-shaped model under `Helsinki-NLP/opus-mt-en-de`
(tests/importers/opus_mt.py), read offline.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from .conftest import SHARED_DATA
from .test_docs import docs_hook

pytestmark = [pytest.mark.slow,  # runs every command of the docs
              pytest.mark.first]  # ten minutes and more: started first

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 900

_PRELUDE = r"""
set -euo pipefail
transduce() {
  case "${1:-}" in
    quickstart) command transduce "$@" train.max_updates=30 data.numbers_train_size=2000 \
                  train.validate_every=0 ;;
    train) if [[ " $* " == *" --resume "* ]]; then command transduce "$@" train.max_updates=7
           else command transduce "$@" train.max_updates=5 train.save_every=1 \
                  train.validate_every=0 train.bleu=false data.numbers_train_size=2000; fi ;;
    translate|evaluate) command transduce "$@" --max-len-a 0 --max-len-b 6 ;;
    serve) "$PYTHON" -m tests.docs_stand_ins serve transduce "$@" ;;
    *) command transduce "$@" ;;
  esac
}
uvicorn() { "$PYTHON" -m tests.docs_stand_ins serve uvicorn "$@"; }
gunicorn() { "$PYTHON" -m tests.docs_stand_ins serve gunicorn "$@"; }
pip() { "$PYTHON" -m tests.docs_stand_ins pip "$@"; }
"""

_FENCE = re.compile(r"^```(\w*)(.*)$")
_NOT_RUN = re.compile(r"^<!-- not run: (.+?) -->$")
_PAGE_NOT_RUN = re.compile(r"^<!-- commands not run: (.+?) -->$", re.M)
RUN = ("sh", "console", "python")


@dataclass
class Block:
    where: str  # file:line
    language: str
    info: str  # the fence's rest, e.g. title="my_domain.yaml"
    text: str
    not_run: str | None  # the reason, when marked


def blocks(path: Path) -> list[Block]:
    lines = path.read_text().splitlines()
    page_reason = _PAGE_NOT_RUN.search(path.read_text())
    found, i = [], 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            before = lines[i - 1].strip() if i else ""
            marked = _NOT_RUN.match(before)
            name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            found.append(Block(f"{name}:{i + 1}", fence.group(1),
                               fence.group(2).strip(), "\n".join(lines[i + 1:end]) + "\n",
                               marked.group(1) if marked else
                               page_reason.group(1) if page_reason else None))
            i = end
        i += 1
    return found


def indented_code(path: Path) -> list[int]:
    """Lines that start an indented code block (four spaces after a blank line, outside fences
    and lists)."""
    starts, fenced, in_list = [], False, False
    lines = path.read_text().splitlines()
    for n, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        if fenced:
            continue
        if re.match(r"^\s*([-*]|\d+\.) ", line):
            in_list = True
        elif line and not line.startswith(" "):
            in_list = False
        if (line.startswith("    ") and line.strip() and n and not lines[n - 1].strip()
                and not in_list):
            starts.append(n + 1)
    return starts


def pages() -> list[Path]:
    """The README, then the site's pages in the order of its navigation (mkdocs.yml), with the
    ones the build copies from benchmarks/ (docs/hooks/site_pages.py)."""
    copied = docs_hook("site_pages").COPIED
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    found = [ROOT / "README.md"]
    for entry in nav:
        (name,) = entry.values()
        if name in copied:
            found.append(ROOT / copied[name])
        elif (ROOT / "docs" / name).is_file():
            found.append(ROOT / "docs" / name)
    return found


PAGES = pages()


def test_every_page_is_in_the_navigation():
    listed = {p.name for p in PAGES}
    missing = [p.name for p in (ROOT / "docs").glob("*.md") if p.name not in listed]
    assert not missing, f"docs pages not in mkdocs.yml's nav: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_code_blocks_say_what_they_are(page):
    if page.parent.name == "benchmarks":  # a measurement log: its commands are its records
        assert not indented_code(page) or _PAGE_NOT_RUN.search(page.read_text()), (
            f"{page.name}: say why its commands are not run: <!-- commands not run: ... -->")
        return
    assert not indented_code(page), (
        f"{page.name}: indented code blocks at lines {indented_code(page)}; fence them as "
        "```sh, ```console, ```python or ```text")
    for block in blocks(page):
        if block.not_run is not None:
            assert block.not_run.strip(), f"{block.where}: `not run` needs its reason"


class Workspace:
    """A stand-in for a clone's root, shared by all pages, with what their commands read."""

    def __init__(self, root: Path):
        self.dir = root / "clone"
        self.dir.mkdir()
        for name in ("configs", "benchmarks", "scripts"):
            (self.dir / name).symlink_to(ROOT / name)
        (root / "shared").mkdir()
        self.real_corpora = (SHARED_DATA / "multi30k" / "train.en").is_file()
        if self.real_corpora:
            (root / "shared" / "data").symlink_to(SHARED_DATA)
        else:  # a user's clone: Multi30k's files, of number words
            self._stand_in_multi30k(root / "shared" / "data" / "multi30k")
        self.env = {**os.environ,
                    "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                    "PYTHON": sys.executable, "PYTHONPATH": str(ROOT),
                    "HF_HOME": str(root / "hf"), "HF_HUB_OFFLINE": "1",
                    "TRANSFORMERS_OFFLINE": "1", "TRANSDUCE_CACHE": str(root / "cache"),
                    "MPLBACKEND": "Agg"}
        self._own_files()
        self._hub(root / "hf" / "hub")
        self.ran: dict[str, str] = {}  # block text -> where it ran
        self.pages: dict[Path, list[str]] = {}  # page -> its failures

    def _own_files(self) -> None:
        for split in ("train", "valid", "test"):
            _number_words(self.dir, split, split, "de")

    @staticmethod
    def _stand_in_multi30k(directory: Path) -> None:
        directory.mkdir(parents=True)
        for split, name in (("train", "train"), ("valid", "val"), ("test", "test_2016_flickr")):
            for lang, words in (("de", "de"), ("fr", "fr"), ("cs", "de")):  # no Czech numbers
                _number_words(directory, split, name, words, suffix=lang)

    @staticmethod
    def _hub(hub: Path) -> None:
        from .importers.opus_mt import make_opus_mt

        commit = "0123456789abcdef0123456789abcdef01234567"
        repo = hub / "models--Helsinki-NLP--opus-mt-en-de"
        make_opus_mt(repo / "snapshots" / commit)
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(commit)

    def _bash(self, script: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", _PRELUDE + script], cwd=self.dir, env=self.env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=TIMEOUT)

    def run(self, block: Block) -> str | None:
        """None if the block did what it shows, else what went wrong."""
        if block.language == "yaml" and "title=" in block.info:
            name = shlex.split(block.info.split("title=", 1)[1])[0]
            (self.dir / name).parent.mkdir(parents=True, exist_ok=True)
            (self.dir / name).write_text(block.text)
            return None
        if block.language not in RUN or block.not_run is not None:
            return None
        if block.text in self.ran:
            return None  # the same commands, already run for an earlier page
        if block.language == "python":
            done = subprocess.run([sys.executable, "-"], input=block.text, cwd=self.dir,
                                  env=self.env, capture_output=True, text=True, timeout=TIMEOUT)
            failure = _failed(block, "python", done)
        elif block.language == "sh":
            failure = _failed(block, block.text, self._bash(block.text))
        else:
            failure = self._console(block)
        if failure is None:
            self.ran[block.text] = block.where
            print(f"ran {block.where} ({block.language})")
        return failure

    def _console(self, block: Block) -> str | None:
        for command, shown in _console_steps(block.text):
            done = self._bash(command)
            failure = _failed(block, command, done)
            if failure:
                return failure
            if not self.real_corpora:
                continue  # what it prints is of the real corpus
            printed = {" ".join(line.split()) for line in (done.stdout + done.stderr).splitlines()}
            missing = [line for line in shown if " ".join(line.split()) not in printed]
            if missing:
                return (f"{block.where}: `{command}` no longer prints {missing}; it printed:\n"
                        f"{done.stdout}{done.stderr}")
        return None


def _number_words(directory: Path, split: str, name: str, tgt_lang: str, *,
                  suffix: str | None = None) -> None:
    """NAME.en and NAME.SUFFIX (by default the target language): a split of the number-words
    corpus, 2,000 training pairs, 50 validation and 50 test ones."""
    from transduce.data.numbers import NumberWords

    pairs = list(NumberWords(split=split, tgt_lang=tgt_lang, sizes=(2000, 50, 50)).pairs())
    (directory / f"{name}.en").write_text("".join(s + "\n" for s, _ in pairs))
    (directory / f"{name}.{suffix or tgt_lang}").write_text("".join(t + "\n" for _, t in pairs))


def _console_steps(text: str) -> list[tuple[str, list[str]]]:
    steps: list[tuple[str, list[str]]] = []
    lines = iter(text.splitlines())
    for line in lines:
        if line.startswith("$ "):
            command = line[2:]
            while command.endswith("\\"):
                command = command[:-1] + " " + next(lines).strip()
            steps.append((command, []))
        elif line.strip() and steps:
            steps[-1][1].append(line)
    return steps


def _failed(block: Block, what: str, done: subprocess.CompletedProcess) -> str | None:
    if done.returncode == 0:
        return None
    return (f"{block.where}: exit code {done.returncode} from\n{what}\n--- output:\n"
            f"{done.stdout[-4000:]}{done.stderr[-4000:]}")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    return Workspace(tmp_path_factory.mktemp("docs"))


def _run_through(workspace: Workspace, page: Path) -> list[str]:
    """Runs every page up to `page` (each once), as a reader goes through them in order."""
    for earlier in PAGES[: PAGES.index(page) + 1]:
        if earlier not in workspace.pages:
            failures = []
            for block in blocks(earlier):
                failure = workspace.run(block)
                if failure:
                    failures.append(failure)
                    break  # what follows on the page depends on it
            workspace.pages[earlier] = failures
    return workspace.pages[page]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_pages_commands_run(workspace, page):
    page_reason = _PAGE_NOT_RUN.search(page.read_text())
    if page_reason:
        pytest.skip(f"{page.name}: {page_reason.group(1)}")
    runnable = [b for b in blocks(page) if b.language in RUN]
    if runnable and all(b.not_run is not None for b in runnable):
        pytest.skip(f"{page.name}: every block is marked not run ({runnable[0].not_run})")
    failures = _run_through(workspace, page)
    assert not failures, failures[0]


def test_the_reader_of_pages_finds_languages_titles_reasons_and_indented_code(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A page\n\n<!-- not run: needs a GPU -->\n```sh\ntransduce train x\n```\n\n"
                    "```yaml title=\"a.yaml\"\nmodel: {}\n```\n\n    indented code\n\n"
                    "- a list\n\n    its second paragraph\n")
    found = blocks(page)
    assert [(b.language, b.info, b.not_run) for b in found] == [
        ("sh", "", "needs a GPU"), ("yaml", 'title="a.yaml"', None)]
    assert found[1].text == "model: {}\n"
    assert indented_code(page) == [12]  # not the list item's paragraph
    assert _console_steps("$ a \\\n    b\nout 1\n\n$ c\n") == [("a  b", ["out 1"]), ("c", [])]
