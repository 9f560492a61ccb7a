"""Shared tasks for the interop tests: the real-recordings demo and a simulated full rig (small)."""

from __future__ import annotations

import pytest

from egopool import open_task
from egopool.cli.app import main
from egopool.demo import run_demo


@pytest.fixture(scope="session")
def demo_task(tmp_path_factory):
    """The demo task (bundled real recordings): 2 episodes of 15 rows, RGB + 12-bit depth + ego trajectory."""
    summary = run_demo(tmp_path_factory.mktemp("demo"), episodes=2, max_seconds=1.0)
    return open_task(summary.task_dir)


@pytest.fixture(scope="session")
def sim_task(tmp_path_factory):
    """`egopool simulate --rig full`: 2 episodes of 21 rows (ego S80C + 2 grippers + 2 gloves, scale 4)."""
    root = tmp_path_factory.mktemp("sim")
    assert main(["simulate", "--rig", "full", "--episodes", "2", "--seconds", "0.7", "--scale", "4",
                 "--out", str(root)]) == 0
    return open_task(root / "sim_full")


@pytest.fixture(scope="session")
def d435x2_task(tmp_path_factory):
    """`egopool simulate --rig d435x2`: 2 episodes of 9 rows, 2 RealSense cameras, each RGB + 16-bit depth (small)."""
    root = tmp_path_factory.mktemp("d435")
    assert main(["simulate", "--rig", "d435x2", "--episodes", "2", "--seconds", "0.3", "--scale", "8",
                 "--out", str(root)]) == 0
    return open_task(root / "sim_d435x2")
