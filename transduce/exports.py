"""A package's re-exports, loaded on first use (PEP 562).

`from transduce import Translator` works, but `import transduce.errors` (or any module of a low
floor) runs `transduce/__init__.py` without loading the floors above it, torch included: each
package's `__init__` names what it re-exports and where from, and this loads a name when it is
first asked for.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable


def lazy_exports(package: str, modules: dict[str, tuple[str, ...]]) -> tuple[Callable, Callable]:
    """The `__getattr__` and `__dir__` of `package`, which re-exports `modules[module]`, the
    names each module defines; its submodules are attributes too (`transduce.runtime`)."""
    exports = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str):
        if name not in exports:  # a submodule, as eager imports made them attributes
            try:
                return importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as error:
                if error.name != f"{package}.{name}":
                    raise
                raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(exports[name]), name)
        setattr(sys.modules[package], name, value)  # once: later lookups find it directly
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__
