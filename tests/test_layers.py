"""The floors of the house, and arrows that point down only: every module of transduce on a
floor, no import from a lower floor to a higher one (read from the source, by AST), and the
ground floor importable alone, without torch."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "transduce"

# bottom to top; a module is on its package's floor (or its own, at the top level), except the
# settings: each package's config.py is a dataclass of settings, on the floor above the ground
FLOORS = [
    ("ground", {"errors", "files", "fields", "pauses", "exports", "runtime", "__init__"}),
    ("settings", {"config", "options", "*/config"}),
    ("kernels", {"kernels"}),
    ("model", {"model"}),
    ("data", {"data", "documents"}),
    ("runs", {"runs"}),
    ("decoding", {"decoding"}),
    ("training", {"training"}),
    ("commands", {"api", "cli", "quickstart", "translate_command", "search_options",
                  "evaluate_command", "average_command",
                  "score_command", "serve_command",
                  "models_command", "serve", "export", "engines", "importers", "visualize",
                  "__main__"}),
]


def floor(module: str) -> int:
    """The floor of `transduce.a.b` (a package's __init__ is its package's floor; the top
    package's, the ground)."""
    parts = module.split(".")[1:]
    if len(parts) >= 2 and parts[-1] == "config" and (PACKAGE / parts[0]).is_dir():
        parts = ["*/config"]
    name = parts[0] if parts else "__init__"
    for level, (_, names) in enumerate(FLOORS):
        if name in names:
            return level
    raise AssertionError(f"{module} is on no floor: add it to FLOORS")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    path = ROOT / Path(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _imports(path: Path) -> set[str]:
    """The transduce modules `path` imports (a `from package import module` counts as the
    module), at its top or inside its functions; not those for type checkers only."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):  # `if TYPE_CHECKING:` blocks never run
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            node.body = []
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(
                "transduce"):
            for alias in node.names:
                whole = f"{node.module}.{alias.name}"
                names.add(whole if _is_module(whole) else node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith("transduce"))
    return names


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_imports_from_a_higher_floor(path):
    name = _module_name(path)
    if path.name == "__init__.py" and name != "transduce":
        # a package's __init__ re-exports its own modules lazily (transduce.exports)
        assert _imports(path) <= {"transduce.exports"} | {
            m for m in _imports(path) if m.startswith(name)}, name
        return
    level = floor(name)
    higher = sorted(m for m in _imports(path) if floor(m) > level)
    assert not higher, (f"{name} ({FLOORS[level][0]}) imports from higher floors: "
                        f"{[(m, FLOORS[floor(m)][0]) for m in higher]}")


@pytest.mark.parametrize("module", ["transduce", "transduce.errors", "transduce.config",
                                    "transduce.decoding.config", "transduce.runtime"])
def test_the_ground_and_the_settings_import_without_torch(module):
    code = f"import sys, {module}; print(sorted(m for m in sys.modules if m == 'torch'))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    assert done.stdout.strip() == "[]", f"import {module} loads torch"


def test_the_top_package_still_gives_its_names():
    import transduce

    assert {"Translator", "Translation", "Transformer", "ModelConfig", "train", "resume"} <= set(
        dir(transduce))
    assert transduce.Translator.__name__ == "Translator"
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        transduce.Nothing  # noqa: B018


def test_submodules_are_attributes_of_their_package():
    code = "import transduce; transduce.runtime.tune(); print(transduce.kernels.path())"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    assert done.stdout.strip() in ("reference", "mkl", "onednn", "openblas")
