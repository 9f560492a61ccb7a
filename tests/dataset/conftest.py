"""Tasks for the dataset tests: simulated rigs (several GOPs per stream, every column kind) and the demo."""

from __future__ import annotations

import pytest

from egopool import open_task
from egopool.cli.app import main
from egopool.demo import run_demo


def _simulate(root, *args: str):
    assert main(["simulate", *args, "--out", str(root)]) == 0


@pytest.fixture(scope="session")
def gop_task(tmp_path_factory):
    """`simulate --rig d435x2`: 2 episodes of 270 rows, 40x30; RGB keyframes at 0 and 250, HEVC depth at 0 and ~250."""
    root = tmp_path_factory.mktemp("gop")
    _simulate(root, "--rig", "d435x2", "--episodes", "2", "--seconds", "9", "--scale", "16")
    return open_task(root / "sim_d435x2")


@pytest.fixture(scope="session")
def ffv1_task(tmp_path_factory):
    """`simulate --rig d435x2 --depth-codec ffv1`: lossless depth, 1 episode of 30 rows."""
    root = tmp_path_factory.mktemp("ffv1")
    _simulate(root, "--rig", "d435x2", "--episodes", "1", "--seconds", "1", "--scale", "16", "--depth-codec", "ffv1")
    return open_task(root / "sim_d435x2")


@pytest.fixture(scope="session")
def full_task(tmp_path_factory):
    """`simulate --rig full`: 2 episodes of 21 rows: IMU, trajectories, force matrices, gloves, hand poses."""
    root = tmp_path_factory.mktemp("full")
    _simulate(root, "--rig", "full", "--episodes", "2", "--seconds", "0.7", "--scale", "8")
    return open_task(root / "sim_full")


@pytest.fixture(scope="session")
def demo_task(tmp_path_factory):
    """The demo task (bundled real recordings): 2 episodes of 15 rows, RGB + 12-bit depth."""
    summary = run_demo(tmp_path_factory.mktemp("demo"), episodes=2, max_seconds=1.0)
    return open_task(summary.task_dir)


@pytest.fixture(autouse=True)
def _collect_datasets():
    """Free each test's datasets in this process after it: a dataset left in a reference cycle would otherwise be
    collected later, possibly in a forked DataLoader worker of another test, which hangs on the FFmpeg threads its
    open containers no longer have there (docs/decisions.md T3, O41)."""
    yield
    import gc

    gc.collect()
