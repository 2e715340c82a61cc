"""The compiled modules the install builds, checked where their packages load."""

from __future__ import annotations

import importlib

from pipeline.errors import NotBuilt


def require_built(package: str, *modules: str) -> None:
    """Import `package`'s compiled `modules`; a missing or unloadable one is `NotBuilt`
    naming it (else an import inside the half-loaded package says "circular import")."""
    for name in modules:
        try:
            importlib.import_module(f"{package}.{name}")
        except ImportError as exc:
            raise NotBuilt(f"{package}.{name}", str(exc)) from None
