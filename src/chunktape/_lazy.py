"""Public names that load on first use (PEP 562): importing a package, or starting the CLI, pays only for what
is used. A package keeps its imports under ``TYPE_CHECKING`` for type checkers and its literal ``__all__``."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence

__all__ = ["lazy_names"]


def lazy_names(
    package: str, names: Sequence[str], homes: Sequence[str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: a name of ``names`` loads from the first of ``homes`` whose
    ``__all__`` lists it, and is kept in the package; any other name is tried as a submodule (``chunktape.faults``
    stays reachable after ``import chunktape``, as it was when the package imported it)."""
    namespace = sys.modules[package].__dict__
    public = frozenset(names)

    def __getattr__(name: str) -> object:
        if name in public:
            for home in homes:
                module = importlib.import_module(home)
                if name in module.__all__:
                    value: object = getattr(module, name)
                    namespace[name] = value
                    return value
        if not name.startswith("__"):
            try:
                return importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as error:
                if error.name != f"{package}.{name}":
                    raise
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*namespace, *public})

    return __getattr__, __dir__
