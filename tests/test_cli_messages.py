"""What the commands print keeps its brackets (issue 16 D): Rich markup is egopool's own styles only.

``egopool devices`` printed ``pip install 'egopool'`` (Rich took ``[devices]`` for a style tag); a
path, task name, message or note holding ``[interop]`` or ``[abc]`` lost it the same way.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from egopool.cli.app import main
from egopool.cli.output import STYLES, _only_our_styles


def test_devices_names_the_extra_in_text_and_json(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "pyrealsense2", None)  # `import pyrealsense2` raises ImportError
    assert main(["devices"]) == 0
    out = capsys.readouterr().out
    assert "note: RealSense: pyrealsense2 is not installed (EGOPOOL_EXTRAS=devices ./run ... in a checkout, or pip install 'egopool[devices]')" in out, out
    assert main(["devices", "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert "RealSense: pyrealsense2 is not installed (EGOPOOL_EXTRAS=devices ./run ... in a checkout, or pip install 'egopool[devices]')" in notes


def test_a_path_with_brackets_is_printed_as_it_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "rec[interop]" / "[abc]"
    assert main(["simulate", "--rig", "uvc3", "--seconds", "0.2", "--scale", "8", "--out", str(out_dir),
                 "--task", "t"]) == 0
    out = capsys.readouterr().out
    assert f"{out_dir / 't'}: 1 episode(s)" in " ".join(out.split()), out
    assert main(["ls", str(out_dir / "t")]) == 0
    assert "1 episode(s)" in capsys.readouterr().out


def test_only_our_styles_are_markup(capsys: pytest.CaptureFixture[str]) -> None:
    from egopool.cli.output import console

    console.print("[bold]N[/bold] [red]gone: 'egopool[server]' in /x/[a b]/y[/red] [0.0] \\[kept] [dim]d[/dim]")
    assert capsys.readouterr().out.strip() == "N gone: 'egopool[server]' in /x/[a b]/y [0.0] [kept] d"
    assert _only_our_styles("[yellow]w[/yellow] [/]") == "[yellow]w[/yellow] [/]"
    assert _only_our_styles("[interop]") == "\\[interop]" and "bold" in STYLES


def test_small_trips_of_a_new_user(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 28's smaller items: each now fails or explains itself."""
    import json as _json

    from egopool.cli.app import main

    assert main(["simulate", "--rig", "d435x2", "--episodes", "2", "--seconds", "0.3", "--scale", "8",
                 "--out", str(tmp_path), "--task", "t"]) == 0
    task = tmp_path / "t"
    (tmp_path / "pipeline.db").unlink()  # a task copied from elsewhere: no registry beside it
    capsys.readouterr()
    # pack of a missing N: refused, and no pipeline.db appears beside the task
    assert not (tmp_path / "pipeline.db").exists()
    assert main(["pack", str(task), "7", "-o", str(tmp_path / "zips")]) == 1
    assert "no episode 7" in capsys.readouterr().err
    assert not (tmp_path / "pipeline.db").exists() and not (tmp_path / "zips").exists()
    # show of an episode whose data parquet does not read: listed, and exit 1 (also with --json)
    broken = tmp_path / "broken"
    import shutil

    shutil.copytree(task, broken)
    data = sorted((broken / "data").rglob("*.parquet"))[1]
    data.write_bytes(b"garbage\n")
    assert main(["show", str(broken), "2"]) == 1
    assert "problem:" in capsys.readouterr().out
    assert main(["show", str(broken), "2", "--json"]) == 1
    shown = _json.loads(capsys.readouterr().out)
    assert (shown["complete"], shown["finished"], shown["damaged"]) == (False, True, True)
    assert main(["show", str(task), "2"]) == 0
    capsys.readouterr()
    # validate: a bad chunks_size once, and the fix named for it, for fps and for a non-object info.json
    info_path = task / "meta" / "info.json"
    good = info_path.read_text()
    for change, want in ((lambda d: d.update(chunks_size=-5), "the spec's default is 1000"),
                         (lambda d: d.update(fps="thirty"), "set the recording's frame rate")):
        doc = _json.loads(good)
        change(doc)
        info_path.write_text(_json.dumps(doc))
        assert main(["validate", str(task), "--json"]) == 1
        errors = [f for f in _json.loads(capsys.readouterr().out)["findings"] if f["severity"] == "error"]
        assert len(errors) == 1 and want in errors[0]["message"], errors
    # import lerobot of an egopool task says what it is (it said "KeyError: 'c'")
    assert main(["import", "lerobot", str(task), "--task", "x", "--out", str(tmp_path / "imp")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "this is an egopool task" in err and "egopool export lerobot" in err, err
    assert not (tmp_path / "imp").exists()
    info_path.write_text("[1, 2]")
    assert main(["validate", str(task)]) == 1
    out = capsys.readouterr().out
    assert "not a JSON object (it holds a JSON array)" in out and "restore it from a backup" in out
    info_path.write_text(good)


@pytest.mark.parametrize("uri", ["s3:/lab/imp", "S3://lab/imp", "s3:lab/imp"])
def test_a_misspelt_s3_uri_is_refused_and_no_s3_folder_appears(tmp_path: Path, uri: str,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 24 review: `import tum ... --out s3:/lab/imp` made a local folder `s3:` and ended in a traceback."""
    from egopool.cli.app import main

    monkeypatch.chdir(tmp_path)
    gt = Path(__file__).parent / "data" / "evo_trajectories" / "freiburg1_xyz-groundtruth.txt"
    assert main(["import", "tum", str(gt), "--frame", "tum_fr1_world", "--out", uri]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not an S3 URI" in err and "write s3://lab/imp" in err, err
    assert main(["ls", uri]) in (1, 2)
    assert "not an S3 URI" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", [["lerobot", "s3://b/x", "--task", "t"],
                                  ["tum", "s3://b/f.txt", "--frame", "tum_fr1_world"],
                                  ["euroc", "S3://b/e"], ["rgbd-frames", "s3:/b/f", "--frame", "ego_cam_optical"],
                                  ["aria", "s3://b/r.vrs", "--task", "t"]])
def test_an_import_source_in_a_bucket_is_refused_naming_the_uri(tmp_path, capsys, argv) -> None:
    """`import lerobot s3://b/x` said "s3:/b/x: no meta/info.json" (a lost slash, no fix): one line, nothing written."""
    out = tmp_path / "out"
    assert main(["import", *argv, "--out", str(out)]) == 1
    err = capsys.readouterr().err
    uri = "s3://b/" + argv[1].split("/")[-1]
    assert err.startswith(f"egopool: error: {uri}: ") and "is read from a local copy" in err, err
    assert f"aws s3 cp --recursive {uri} " in err and err.count("\n") == 1
    assert not out.exists()
