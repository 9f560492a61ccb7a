"""``egopool export lerobot --ray``: one Ray task per episode on a real local two-node cluster.

The export with :class:`~egopool.jobs.RayExecutor` must write the same dataset as the
in-process export, file by file: the same file names, equal parquet tables (schema and
key-value metadata included), every file byte-identical (stream-copied and re-encoded videos,
JSON). lerobot then loads the Ray export and every frame matches the
pooled reader. A damaged episode among good ones fails the export with the same one-line
error as in-process and leaves nothing behind. The CLI export through Ray Client
(``--ray ray://…``) is byte-identical too. The cluster is the ``ray_cluster`` fixture
(tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from egopool import StreamSpec, TaskWriter, open_task, vector_column
from egopool.codecs.video import read_rgb_frames
from egopool.errors import SchemaError
from egopool.interop import export_lerobot

from .lerobot_env import lerobot_dataset_class
from .test_lerobot_export import STATE, _check_against_reader

GRIP = "observation.gripper_state"


def build_mixed(root: Path) -> Path:
    """6 episodes of 5..10 rows: an even 32x24 stream (H.264 yuv420p: copied) and an odd 33x25 one (re-encoded)."""
    tw = TaskWriter(root, "mixed", fps=15.0, registry=False)
    rng = np.random.default_rng(9)
    for k in range(6):
        ep = tw.begin_episode([vector_column(GRIP, [3])], [StreamSpec("even", "rgb", 32, 24),
                                                           StreamSpec("odd", "rgb", 33, 25)])
        odd = rng.integers(0, 255, (25, 33, 3), np.uint8)  # a pattern that moves: a codec's usual input
        for i in range(5 + k):
            ep.add_frame({GRIP: rng.normal(size=3).astype(np.float32)}, hardware_ns=i + 1,
                         images={"even": rng.integers(0, 255, (24, 32, 3), np.uint8),
                                 "odd": np.roll(odd, i, axis=1)})
        ep.finish()
    return root / "mixed"


@pytest.fixture(scope="module")
def mixed_task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_mixed(tmp_path_factory.mktemp("mixed"))


def check_mixed(task, out: Path) -> None:
    """lerobot loads the export of ``mixed``: every item's state is exact, the copied stream within 1 level,
    the re-encoded (lossy second encode of random pixels) one within a mean of 12 levels."""
    ds = lerobot_dataset_class()("local/mixed", root=out, video_backend="pyav")
    assert ds.num_episodes == 6 and len(ds) == sum(5 + k for k in range(6)) and ds.fps == 15
    start = 0
    for e, ep in enumerate(task.episodes()):
        state = ep.table.column(GRIP).to_pylist()
        even, odd = list(ep.video("even")), list(ep.video("odd"))
        for fi in range(ep.length):
            item = ds[start + fi]
            assert (int(item["episode_index"]), int(item["frame_index"])) == (e, fi)
            np.testing.assert_array_equal(item["observation.state"].numpy(), np.float32(state[fi]))
            got_even = item["observation.images.even"].numpy().transpose(1, 2, 0) * 255.0
            got_odd = item["observation.images.odd"].numpy().transpose(1, 2, 0) * 255.0
            assert np.abs(got_even - even[fi]).max() <= 1.0 + 1e-3
            assert np.abs(got_odd - odd[fi]).mean() < 12.0
        start += ep.length


def ray_executor(cluster):
    from egopool.jobs import RayExecutor

    return RayExecutor(cluster.address)


def files_of(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def assert_same_dataset(a: Path, b: Path) -> None:
    """``a`` and ``b`` hold the same files, byte for byte (parquet tables compared first for a readable failure).

    Re-encoded videos are byte-identical too: the export turns off x264's macroblock-tree rate
    control, which otherwise gives other bytes for the same frames from run to run (decision K8).
    """
    names = files_of(a)
    assert names == files_of(b) and names
    for name in names:
        fa, fb = a / name, b / name
        if name.endswith(".parquet"):
            ta, tb = pq.read_table(fa), pq.read_table(fb)
            assert ta.schema.equals(tb.schema, check_metadata=True), name
            assert ta.equals(tb), name
        elif name.endswith(".mp4"):
            assert len(list(read_rgb_frames(fa))) > 0, name
        assert fa.read_bytes() == fb.read_bytes(), name


@pytest.mark.extra("interop")
@pytest.mark.extra("ray")
def test_ray_export_equals_in_process_file_by_file_and_lerobot_loads_it(ray_cluster, sim_task, mixed_task,
                                                                        tmp_path):
    # the full rig (4 copied RGB streams + depth in the parquet) and a task with copied and re-encoded streams
    cases = [(sim_task.path, STATE["sim_task"]), (mixed_task, [GRIP])]
    results = []
    with ray_executor(ray_cluster) as ex:
        import ray

        assert len([n for n in ray.nodes() if n["Alive"]]) == 2
        for k, (task, state) in enumerate(cases):
            local = export_lerobot(task, tmp_path / f"local{k}", state=state, lerobot="0.4")
            done: list[tuple[int, int]] = []
            remote = export_lerobot(task, tmp_path / f"ray{k}", state=state, executor=ex, lerobot="0.4",
                                    progress=lambda d, t: done.append((d, t)))
            n = len(local.plan.jobs)
            assert done == [(i, n) for i in range(1, n + 1)]
            assert [(p.index, p.episode_index, p.from_index, p.length, p.copied) for p in remote.parts] == \
                   [(p.index, p.episode_index, p.from_index, p.length, p.copied) for p in local.parts]
            assert_same_dataset(tmp_path / f"local{k}", tmp_path / f"ray{k}")
            assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left
            results.append(remote)
    assert {p.copied for p in results[1].parts} == {("observation.images.even",)}  # the odd one was re-encoded
    assert len(results[1].parts) == 6 and results[1].to_dict()["frames"] == sum(5 + k for k in range(6))
    _check_against_reader(sim_task, tmp_path / "ray0", results[0])
    check_mixed(open_task(mixed_task), tmp_path / "ray1")


@pytest.mark.extra("interop")
@pytest.mark.extra("ray")
def test_cli_export_with_ray_address_equals_in_process(ray_cluster, mixed_task, tmp_path):
    """``export lerobot --ray HOST:PORT`` and ``--ray ray://HOST:PORT`` (Ray Client) write the in-process files."""
    env = {**os.environ, "RAY_ADDRESS": ""}
    cmd = [sys.executable, "-m", "egopool", "export", "lerobot"]
    local = subprocess.run([*cmd, str(mixed_task), str(tmp_path / "a"), "--json"], capture_output=True, text=True,
                           env=env)
    remote = subprocess.run([*cmd, "--ray", ray_cluster.address, str(mixed_task), str(tmp_path / "b"), "--json"],
                            capture_output=True, text=True, env=env)
    # Ray Client (ray://): this process is only the driver, every episode is written by the cluster
    client = subprocess.run([*cmd, "--ray", ray_cluster.client_address, str(mixed_task), str(tmp_path / "c"),
                             "--json"], capture_output=True, text=True, env=env)
    assert local.returncode == remote.returncode == client.returncode == 0, remote.stderr + client.stderr
    a, b, c = json.loads(local.stdout), json.loads(remote.stdout), json.loads(client.stdout)
    assert a.pop("out").endswith("/a") and b.pop("out").endswith("/b") and c.pop("out").endswith("/c")
    assert a == b == c
    assert b["episodes"] == 6 and b["videos_copied"]["1"] == ["observation.images.even"]
    assert_same_dataset(tmp_path / "a", tmp_path / "b")
    assert_same_dataset(tmp_path / "a", tmp_path / "c")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "c"]  # no staging left


@pytest.mark.extra("interop")
@pytest.mark.extra("ray")
def test_a_damaged_episode_fails_the_ray_export_like_in_process_and_leaves_nothing(ray_cluster, mixed_task,
                                                                                  tmp_path):
    task = tmp_path / "work" / "mixed"
    shutil.copytree(mixed_task, task)
    videos = task / "videos" / "chunk-000" / "even"
    # N=4 (8 rows) gets N=2's video (6 frames): readable, planned, but one frame per row no longer holds
    shutil.copyfile(videos / "episode-001.mp4", videos / "episode-003.mp4")
    errors = []
    for k, executor in enumerate((None, "ray")):
        out = tmp_path / "out" / f"x{k}"
        with ray_executor(ray_cluster) if executor else contextlib.nullcontext() as ex:
            with pytest.raises(SchemaError) as err:
                export_lerobot(task, out, executor=ex, lerobot="0.4")
        errors.append(str(err.value))
        assert not out.parent.exists() or not list(out.parent.iterdir())  # no dataset, no staging directory
    assert errors[0] == errors[1]
    assert "'even' has 6 frames for 8 rows" in errors[0] and str(task) in errors[0]

