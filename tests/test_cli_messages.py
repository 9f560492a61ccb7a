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
    assert "note: RealSense: pyrealsense2 is not installed (pip install 'egopool[devices]')" in out, out
    assert main(["devices", "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert "RealSense: pyrealsense2 is not installed (pip install 'egopool[devices]')" in notes


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
