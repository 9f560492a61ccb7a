"""The rerun-sdk and projectaria-tools releases egopool drives (egopool.interop._releases, issue 16 F)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from egopool.errors import EgopoolError
from egopool.interop._releases import ARIA, RERUN, Releases

ROOT = Path(__file__).resolve().parents[2]
MPS = ROOT / "tests" / "data" / "aria_mps_sample"


@pytest.mark.parametrize(("releases", "version", "ok"), [
    (RERUN, "0.26.0", True), (RERUN, "0.26.2", True), (RERUN, "0.33.0", True), (RERUN, "0.41.0", True),
    (RERUN, "0.41.9", True), (RERUN, "0.25.1", False), (RERUN, "0.42.0", False), (RERUN, "1.0.0", False),
    (RERUN, "0.27.0a1+dev", True), (RERUN, "dev", False),
    (ARIA, "1.7.1", True), (ARIA, "2.1.4", True), (ARIA, "2.3.0", True), (ARIA, "1.7.0", False),
    (ARIA, "1.5.9", False), (ARIA, "2.4.0", False),
])
def test_which_releases_are_driven(releases, version, ok):
    problem = releases.problem(version)
    assert (problem is None) == ok
    if not ok:
        assert problem == (f"{releases.dist} {version} is installed; egopool {releases.use} with "
                           f"{releases.dist} {releases.oldest} to {releases.newest} only")


def test_the_interop_extra_names_the_same_ranges():
    assert RERUN.requirement == "rerun-sdk>=0.26,<0.42"
    assert ARIA.requirement == "projectaria-tools>=1.7.1,<2.4"
    extra = re.search(r"^interop = \[(.*)\]$", (ROOT / "pyproject.toml").read_text(), re.M)
    assert extra is not None
    assert f'"{RERUN.requirement}"' in extra[1] and f'"{ARIA.requirement}"' in extra[1]


def test_a_missing_package_names_the_extra():
    missing = Releases("egopool-no-such-distribution", "0.1", "0.1", "writes nothing")
    with pytest.raises(EgopoolError, match=r"egopool-no-such-distribution, which is not installed") as err:
        missing.require()
    assert err.value.hint == "EGOPOOL_EXTRAS=interop ./run ... in a checkout, or pip install 'egopool[interop]'"


@pytest.mark.parametrize(("dist", "version", "command"), [
    ("rerun-sdk", "0.25.1", ["export", "rerun", "{task}", "-o", "{out}/x.rrd"]),
    ("rerun-sdk", "0.42.0", ["export", "rerun", "{task}", "-o", "{out}/x.rrd"]),
    ("projectaria-tools", "2.4.0", ["import", "aria", "--mps", str(MPS), "--task", "x", "--out", "{out}"]),
])
def test_a_release_egopool_cannot_drive_is_one_line(sim_task, tmp_path, dist, version, command):
    """Another release (issue 16 F: with rerun-sdk 0.28+ `export rerun` ended in a TypeError traceback) is
    refused before it is imported, in one line naming it, the range and the pip command, and nothing is
    written. It is installed as pip records a release (a dist-info directory first on sys.path): that
    record is all egopool reads before the import."""
    site = tmp_path / "site"
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    out = tmp_path / "out"
    out.mkdir()
    argv = [a.format(task=sim_task.path, out=out) for a in command]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT / "src")])}
    done = subprocess.run([sys.executable, "-m", "egopool", *argv], capture_output=True, text=True, env=env,
                          timeout=300)
    releases = RERUN if dist == "rerun-sdk" else ARIA
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert releases.problem(version) in done.stderr and f"pip install '{releases.requirement}'" in done.stderr
    assert list(out.iterdir()) == []
