"""BucketSampler (issue 25): every item exactly once per epoch over 2 ranks x 2 DataLoader workers, the two-stage
shuffle's locality, and resuming mid-epoch from a saved state gives exactly the remaining items."""

from __future__ import annotations

import numpy as np
import pytest

from egopool.dataset import BucketSampler, PooledDataset

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402


def _ds(task, tmp_path):
    return PooledDataset(task.path, keys=["timestamp"], cache_dir=tmp_path)


def _indices(loader) -> list[int]:
    return [int(i) for b in loader for i in b["index"]]


def test_two_ranks_with_two_workers_each_see_every_item_once_per_epoch(gop_task, tmp_path):
    ds = _ds(gop_task, tmp_path)
    for epoch in (0, 1):
        seen: list[int] = []
        per_rank = []
        for rank in (0, 1):
            s = BucketSampler(ds, run=40, buffer=3, seed=5, rank=rank, world_size=2)
            s.set_epoch(epoch)
            got = _indices(DataLoader(ds, batch_size=7, sampler=s, num_workers=2, multiprocessing_context="fork"))
            per_rank.append(got)
            seen += got
        assert sorted(seen) == list(range(540)), epoch  # exactly once: nothing repeated, nothing dropped
        assert [len(g) for g in per_rank] == [270, 270]
        assert per_rank[0] != sorted(per_rank[0])  # shuffled
    s0, s1 = BucketSampler(ds, run=40, seed=5, rank=0, world_size=2), BucketSampler(ds, run=40, seed=5, rank=0,
                                                                                     world_size=2)
    s1.set_epoch(1)
    assert list(s0) != list(s1)  # a new order each epoch


def test_the_shuffle_mixes_items_only_within_a_buffer_of_units(gop_task, tmp_path):
    ds = _ds(gop_task, tmp_path)
    s = BucketSampler(ds, run=30, buffer=2, seed=1)
    order = list(s)
    assert sorted(order) == list(range(540))
    units = [i // 30 if i < 270 else 9 + (i - 270) // 30 for i in range(540)]  # 9 runs of 30 rows per episode
    for k in range(0, 540, 60):  # each buffer: 60 items of exactly 2 units, no item of any other
        assert len({units[i] for i in order[k:k + 60]}) == 2
    assert list(BucketSampler(ds, run=30, buffer=2, seed=1)) == order  # the seed fixes it
    assert list(BucketSampler(ds, shuffle=False)) == list(range(540))


def test_resuming_mid_epoch_gives_the_remaining_items(gop_task, tmp_path):
    ds = _ds(gop_task, tmp_path)
    full = list(BucketSampler(ds, run=50, buffer=4, seed=9, rank=1, world_size=2))
    s = BucketSampler(ds, run=50, buffer=4, seed=9, rank=1, world_size=2)
    loader = DataLoader(ds, batch_size=8, sampler=s, num_workers=2, multiprocessing_context="fork")
    got: list[int] = []
    for b, batch in enumerate(loader):
        got += [int(i) for i in batch["index"]]
        if b == 4:
            break  # the workers have prefetched further: the state names what the loop received
    state = s.state_dict(consumed=len(got))
    assert state["position"] == 40 and state["epoch"] == 0
    resumed = BucketSampler(ds, run=50, buffer=4, seed=9, rank=1, world_size=2)
    resumed.load_state_dict(state)
    assert len(resumed) == 270 - 40
    rest = _indices(DataLoader(ds, batch_size=8, sampler=resumed, num_workers=2, multiprocessing_context="fork"))
    assert got == full[:40] and rest == full[40:]
    assert resumed.state_dict() == {**state, "epoch": 1, "position": 0}  # the epoch done: the next one
    with pytest.raises(ValueError, match="world_size=2, this sampler 4"):
        BucketSampler(ds, seed=9, rank=1, world_size=4).load_state_dict(state)


def test_a_batch_is_read_sorted_and_returned_in_the_asked_order(gop_task, tmp_path):
    ds = PooledDataset(gop_task.path, keys=["d435_rgb"], delta_timestamps={"d435_rgb": [-0.1, 0.0]},
                       output="numpy", cache_dir=tmp_path)
    idx = [300, 5, 299, 4, 539]
    got = ds.__getitems__(idx)
    assert [int(x["index"]) for x in got] == idx
    for i, x in zip(idx, got, strict=True):
        np.testing.assert_array_equal(x["d435_rgb"], ds[i]["d435_rgb"])
