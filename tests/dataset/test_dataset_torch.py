"""PooledDataset under torch's DataLoader with worker processes (issue 18, extra `train`)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from egopool.dataset import EpisodeSampler, PooledDataset

pytestmark = pytest.mark.extra("train")

KEYS = ["d435_rgb", "d435_depth", "action", "hardware_ns"]
DELTA = {"d435_rgb": [-0.1, 0.0], "action": [0.0, 1 / 30]}


def test_dataloader_two_workers_gives_the_same_values(gop_task, tmp_path):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    ds = PooledDataset(gop_task.path, keys=KEYS, delta_timestamps=DELTA, cache_dir=tmp_path)
    assert isinstance(ds, torch.utils.data.Dataset)
    ref = PooledDataset(gop_task.path, keys=KEYS, delta_timestamps=DELTA, output="numpy", cache_dir=tmp_path)
    ds[0]  # the parent opens decoders first: the workers must not use them (no open container is pickled)
    assert pickle.loads(pickle.dumps(ds))._w is None
    sampler = EpisodeSampler(ds, run=16, seed=5)
    loader = DataLoader(ds, batch_size=8, sampler=sampler, num_workers=2, multiprocessing_context="fork")
    order = list(EpisodeSampler(ds, run=16, seed=5))
    seen = []
    for b, batch in enumerate(loader):
        assert batch["d435_rgb"].dtype == torch.uint8 and batch["d435_rgb"].shape[1:] == (2, 30, 40, 3)
        assert batch["d435_depth"].dtype == torch.uint16
        assert batch["d435_rgb_is_pad"].dtype == torch.bool
        for j, i in enumerate(batch["index"].tolist()):
            want = ref[i]
            for k in (*KEYS, "d435_rgb_is_pad", "action_is_pad", "frame_index"):
                np.testing.assert_array_equal(batch[k][j].numpy(), want[k], err_msg=f"{k} item {i}")
            seen.append(i)
        if b == 12:
            break
    assert seen == order[:len(seen)]


def test_spawned_workers_equal_values(gop_task, tmp_path):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    ds = PooledDataset(gop_task.path, keys=["d435_rgb"], cache_dir=tmp_path)
    ref = PooledDataset(gop_task.path, keys=["d435_rgb"], output="numpy", cache_dir=tmp_path)
    idx = [269, 3, 250, 100, 539, 271]
    loader = DataLoader(torch.utils.data.Subset(ds, idx), batch_size=2, num_workers=2,
                        multiprocessing_context="spawn")
    got = torch.cat([b["d435_rgb"] for b in loader]).numpy()
    np.testing.assert_array_equal(got, np.stack([ref[i]["d435_rgb"] for i in idx]))


def test_a_dataset_dropped_before_fork_does_not_hang_the_workers(gop_task, tmp_path):
    """A dataset that read items and was dropped closes its containers at once: left to the garbage collector
    (a PyAV container is a reference cycle) a forked worker's collector freed them and hung on FFmpeg threads
    that do not exist after fork (docs/decisions.md, training loader T3, and O41). ``timeout`` turns a hang into
    an error."""
    import gc

    pytest.importorskip("torch")
    from torch.utils.data import DataLoader, Subset

    gc.disable()  # the garbage stays uncollected until the fork, as it may in any program
    try:
        old = PooledDataset(gop_task.path, keys=["d435_rgb", "d435_depth"], output="numpy", cache_dir=tmp_path)
        old[0], old[300]
        del old
        ds = PooledDataset(gop_task.path, keys=["d435_depth"], output="numpy", cache_dir=tmp_path)
    finally:
        gc.enable()
    loader = DataLoader(Subset(ds, [0, 1, 269, 539]), batch_size=2, num_workers=2,
                        multiprocessing_context="fork", timeout=120)
    got = np.concatenate([b["d435_depth"].numpy() for b in loader])
    np.testing.assert_array_equal(got, np.stack([ds[i]["d435_depth"] for i in [0, 1, 269, 539]]))

