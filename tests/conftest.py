"""Shared pytest set-up: tests of optional extras.

Mark a test of an optional extra with ``@pytest.mark.extra("server")`` (the extra's name in
pyproject.toml) and skip it with ``pytest.importorskip`` when the extra is not installed.
CI sets ``EGOPOOL_REQUIRE_EXTRAS`` (``all`` or a comma list): a marked test of a required
extra that skips is reported as a failure, so a test that skips in CI cannot pass silently.
"""

from __future__ import annotations

import os

import pytest


def _required() -> set[str]:
    raw = os.environ.get("EGOPOOL_REQUIRE_EXTRAS", "")
    return {name.strip() for name in raw.split(",") if name.strip()}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "extra(name): test of an optional extra (pyproject.toml)")
    config.addinivalue_line("markers", "keypoints: runs in the keypoints venv (numpy < 2, mediapipe)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if not report.skipped:
        return
    required = _required()
    for mark in item.iter_markers("extra"):
        name = mark.args[0]
        if "all" in required or name in required:
            report.outcome = "failed"
            report.longrepr = f"extra {name!r} is required here (EGOPOOL_REQUIRE_EXTRAS) but its test skipped: {report.longrepr}"
            return
