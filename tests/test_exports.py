"""The public surface (STYLE habit 8, httpx's test_exported_members)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

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


#: Packages whose modules import an optional extra at import time (pyproject.toml), by extra.
_EXTRA_PACKAGES = {"server": "egopool.server."}


def _check_all_names(prefix: str = "egopool.", skip: tuple[str, ...] = ()) -> int:
    checked = 0
    for info in pkgutil.walk_packages(egopool.__path__, "egopool."):
        if info.name == "egopool.__main__" or not info.name.startswith(prefix) or info.name.startswith(skip):
            continue  # __main__ runs the CLI when imported, by design
        mod = importlib.import_module(info.name)
        for name in getattr(mod, "__all__", []):
            assert hasattr(mod, name), f"{info.name}.__all__ names missing {name!r}"
        checked += 1
    return checked


def test_every_module_all_names_exist():
    """Each module's own ``__all__`` lists only names it defines (catches stale re-exports).

    The modules of an optional extra are checked by the next test, where the extra is installed
    (a fresh clone's ``./run tests`` has no fastapi: found by qa12).
    """
    assert _check_all_names(skip=tuple(_EXTRA_PACKAGES.values())) > 100


@pytest.mark.extra("server")
def test_server_modules_all_names_exist():
    pytest.importorskip("fastapi")
    pytest.importorskip("python_multipart")
    assert _check_all_names(_EXTRA_PACKAGES["server"]) >= 5
