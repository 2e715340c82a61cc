"""A package's public names, each loaded from its module when first asked for: the role
packages name their entry points in `__all__` without importing their modules (or each
other's) when the package is imported."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package`: name -> getattr(package.exports[name], name)."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(f"{package}.{exports[name]}"), name)

    return __getattr__
