"""The layers point one way: model <- data <- decoding <- training <- serving and the CLI."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "transduce"


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize("package, forbidden", [
    ("model", ("transduce.data", "transduce.decoding", "transduce.training", "transduce.runs")),
    ("data", ("transduce.decoding", "transduce.training", "transduce.runs")),
    ("decoding", ("transduce.training",)),
    ("runs", ("transduce.training", "transduce.decoding")),
])
def test_a_lower_layer_imports_nothing_from_a_higher_one(package, forbidden):
    for module in (PACKAGE / package).rglob("*.py"):
        bad = sorted(name for name in _imports(module) if name.startswith(forbidden))
        assert not bad, f"{module.relative_to(PACKAGE.parent)} imports {bad}"
