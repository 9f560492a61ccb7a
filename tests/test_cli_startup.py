"""A command loads what it needs and nothing else (issue 16 B); the command index is complete.

``egopool --help`` lists every command from :data:`egopool.cli.commands.COMMANDS` without importing
a command module (nor pyarrow, numpy, PyAV, httpx, ...); ``ls`` / ``info`` / ``show`` import the
read path only. Whole processes, checked through ``sys.modules`` (the times are in
``benchmarks/bench_cli_startup.py``, never asserted here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import typer

from egopool import StreamSpec, TaskWriter, vector_column
from egopool.cli.app import app, register_commands
from egopool.cli.commands import COMMANDS
from egopool.cli.help_format import reflow

#: What no read-only look at a task needs: video decoding, the server and its client, Ray, torch,
#: pandas (pyarrow.dataset imports it), plotting and the viewer.
NOT_FOR_LOOKING = ("av", "fastapi", "uvicorn", "httpx", "ray", "torch", "pandas", "pyarrow.dataset", "matplotlib",
                   "rerun", "projectaria_tools", "mediapipe", "egopool.write", "egopool.codecs.video",
                   "egopool.codecs.depth")
NOT_FOR_HELP = ("pyarrow", "numpy", "PIL", *NOT_FOR_LOOKING)

_PROBE = """
import json, sys
from egopool.cli.app import main
rc = main(sys.argv[2:])
mods = json.loads(sys.argv[1])
cli = sorted(m for m in sys.modules if m.startswith("egopool.cli.") and m.endswith(("_cmd", "_cmds")))
sys.stderr.write("\\nPROBE " + json.dumps({"rc": rc, "loaded": [m for m in mods if m in sys.modules], "cli": cli}))
"""


def _probe(*argv: str, watch: tuple[str, ...]) -> tuple[str, dict]:
    proc = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(list(watch)), *argv], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "COLUMNS": "400"})
    err, _, probe = proc.stderr.rpartition("\nPROBE ")
    assert probe, proc.stderr
    return proc.stdout, json.loads(probe)


@pytest.fixture(scope="module")
def small_task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("startup")
    tw = TaskWriter(root, "small", registry=False)
    ep = tw.begin_episode([vector_column("observation.glove", [4])], [StreamSpec("cam", "rgb", 32, 24)],
                          sensors=["glove"])
    for i in range(3):
        ep.add_frame({"observation.glove": np.full(4, i, np.float32)}, images={"cam": np.full((24, 32, 3), 40, np.uint8)})
    ep.finish()
    return root / "small"


def test_help_lists_every_command_and_loads_none() -> None:
    out, probe = _probe("--help", watch=NOT_FOR_HELP)
    assert probe["rc"] == 0
    assert probe["loaded"] == [] and probe["cli"] == [], probe
    for name, _, summary in COMMANDS:
        assert any(line.split("│")[1].split() == [name, *summary.split()] for line in out.splitlines()
                   if line.count("│") == 2), (name, out)


@pytest.mark.parametrize("argv", [["ls"], ["info"], ["show", "1"], ["ls", "--json"]])
def test_looking_at_a_task_loads_the_read_path_only(small_task: Path, argv: list[str]) -> None:
    out, probe = _probe(argv[0], str(small_task), *argv[1:], watch=NOT_FOR_LOOKING)
    assert probe["rc"] == 0, out
    assert probe["loaded"] == [], probe
    assert probe["cli"] == ["egopool.cli.inspect_cmds"], probe
    if argv == ["ls", "--json"]:
        assert [r["length"] for r in json.loads(out)] == [3]


def test_a_group_loads_its_own_module_only() -> None:
    out, probe = _probe("export", "--help", watch=("fastapi", "ray", "torch"))
    assert probe["rc"] == 0 and probe["cli"] == ["egopool.cli.export_cmds"], probe
    assert "lerobot" in out and "rerun" in out and "tum" in out


def test_the_index_is_the_commands_the_modules_define() -> None:
    """Every top-level command and group is in COMMANDS with its module and the first paragraph of
    its help as summary, and COMMANDS lists nothing else (a new command fails here until indexed)."""
    register_commands()
    built = typer.main.get_command(app)
    defined: dict[str, tuple[set[str], str]] = {}
    for info in app.registered_commands:
        defined[info.name] = ({info.callback.__module__}, built.commands[info.name].help or "")
    for info in app.registered_groups:
        mods = {c.callback.__module__ for c in info.typer_instance.registered_commands}
        defined[info.name] = (mods, built.commands[info.name].help or "")
    assert [name for name, _, _ in COMMANDS] == list(dict.fromkeys(n for n, _, _ in COMMANDS))  # no duplicate
    assert {name for name, _, _ in COMMANDS} == set(defined)
    for name, modules, summary in COMMANDS:
        mods, help_text = defined[name]
        assert mods <= {f"egopool.cli.{m}" for m in modules}, (name, mods)
        assert summary == reflow(help_text).split("\n\n")[0], name


def test_an_unknown_command_is_named_with_the_nearest_one() -> None:
    _, probe = _probe("lss", watch=())
    assert probe["rc"] == 2 and probe["cli"] == []


def test_a_typo_gets_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    from egopool.cli.app import main

    assert main(["valdate"]) == 2
    err = capsys.readouterr().err
    assert "No such command 'valdate'" in err and "'validate'" in err


def test_each_command_loaded_alone_is_the_whole_command() -> None:
    """A fresh process naming one command gets all of it (a group's every subcommand, e.g. ``import aria``
    from its second module) and loads nothing but that command's modules."""
    register_commands()
    built = typer.main.get_command(app)
    for name, modules, _ in COMMANDS:
        out, probe = _probe(name, "--help", watch=())
        assert probe["rc"] == 0, (name, out)
        assert set(probe["cli"]) <= {f"egopool.cli.{m}" for m in (*modules, "ops_cmds", "export_cmds",
                                                                   "import_cmds")}, (name, probe)
        for sub in getattr(built.commands[name], "commands", {}):
            assert any(line.split("│")[1].split()[:1] == [sub] for line in out.splitlines()
                       if line.count("│") == 2), (name, sub, out)


def test_ctrl_c_while_a_command_loads_is_one_line(small_task: Path) -> None:
    """A Ctrl-C held back while the named command's modules load is acted on once they are in:
    ``egopool: interrupted``, exit 130, nothing else (the command does not run)."""
    script = """
import contextlib, sys
import egopool.cli.app as app

@contextlib.contextmanager
def interrupted_while_loading():
    yield [2]  # what sigint_deferred yields when SIGINT came in

app.sigint_deferred = interrupted_while_loading
sys.exit(app.main(sys.argv[1:]))
"""
    done = subprocess.run([sys.executable, "-c", script, "ls", str(small_task)], capture_output=True, text=True,
                          timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (130, "", "egopool: interrupted\n")
