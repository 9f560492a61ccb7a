"""``egopool plot``: one PNG sheet per episode, of the documented size and not blank."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from egopool.cli.app import main


def _check_png(path):
    with Image.open(path) as im:
        assert im.format == "PNG" and im.size == (1600, 1200)
        px = np.asarray(im.convert("RGB"))
    colours = np.unique((px[::2, ::2].reshape(-1, 3).astype(np.int64) * [65536, 256, 1]).sum(axis=1))
    assert px.std() > 20 and len(colours) > 2000  # drawn (images, heat maps, lines), not blank
    return px


@pytest.mark.extra("interop")
def test_sim_and_demo_sheets(sim_task, demo_task, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert main(["plot", str(sim_task.path), "1", "2", "-o", str(tmp_path / "sim.png")]) == 0
    for n in (1, 2):
        _check_png(tmp_path / f"sim_N{n}.png")
    assert main(["plot", str(demo_task.path), "2", "-o", str(tmp_path / "demo.png"), "--json"]) == 0
    assert str(tmp_path / "demo.png") in capsys.readouterr().out
    a = _check_png(tmp_path / "demo.png")
    b = _check_png(tmp_path / "sim_N1.png")
    assert np.abs(a.astype(int) - b.astype(int)).mean() > 5  # different episodes, different sheets


def test_plot_of_a_missing_episode_is_one_line(sim_task, tmp_path, capsys):
    assert main(["plot", str(sim_task.path), "3", "-o", str(tmp_path / "x.png")]) == 1
    err = capsys.readouterr().err
    assert "no episode 3" in err and err.count("\n") == 1 and not (tmp_path / "x.png").exists()


@pytest.mark.extra("interop")
def test_an_n_given_twice_is_drawn_once(sim_task, tmp_path, capsys):
    """Found by qa12: `plot T 2 2` drew episode 2 twice into the same sim_N2.png."""
    pytest.importorskip("matplotlib")
    assert main(["plot", str(sim_task.path), "2", "2", "-o", str(tmp_path / "x.png"), "--json"]) == 0
    assert capsys.readouterr().out.split() == ["[", f'"{tmp_path / "x.png"}"', "]"]
    _check_png(tmp_path / "x.png")
