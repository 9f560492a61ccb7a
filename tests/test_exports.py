"""The public surface (STYLE habit 8, httpx's test_exported_members)."""

from __future__ import annotations

import importlib
import pkgutil

import egopool


def test_all_is_sorted_and_unique():
    assert egopool.__all__ == sorted(egopool.__all__)
    assert len(set(egopool.__all__)) == len(egopool.__all__)


def test_every_exported_name_is_importable():
    namespace: dict[str, object] = {}
    exec("from egopool import *", namespace)  # noqa: S102 - the star import is what users write
    for name in egopool.__all__:
        assert hasattr(egopool, name), name
        assert name in namespace, name


def test_public_classes_and_functions_are_documented():
    for name in egopool.__all__:
        obj = getattr(egopool, name)
        if callable(obj):
            assert (obj.__doc__ or "").strip(), f"egopool.{name} has no docstring"


def test_every_module_all_names_exist():
    """Each module's own ``__all__`` lists only names it defines (catches stale re-exports)."""
    for info in pkgutil.walk_packages(egopool.__path__, "egopool."):
        if info.name == "egopool.__main__":
            continue  # runs the CLI when imported, by design
        mod = importlib.import_module(info.name)
        for name in getattr(mod, "__all__", []):
            assert hasattr(mod, name), f"{info.name}.__all__ names missing {name!r}"
