"""Every command's ``--help`` as the field's command lines print it (issue 16 D).

Typer 0.2x printed ``<bool>`` beside flags, ``<list[Path]>`` / ``<path>`` beside arguments, ``{task}``
and ``{TASK}`` in the usage line, ``[[RECORDING.vrs]]``, ``[[COLUMN]...]...`` and kept the docstrings'
line breaks (ragged lines). Now: ``Usage: egopool ls [OPTIONS] TASK``, ``--out PATH``, a flag alone,
each paragraph one block the terminal wraps; an extra's name (``egopool[ray]``) is never eaten.
"""

from __future__ import annotations

import re

import pytest
import typer

from egopool.cli.app import app, main, register_commands
from egopool.cli.help_format import reflow

_TYPER_LABEL = re.compile(r"<(bool|path|int|float|str|text|uuid|datetime|int range|float range|list\[[^>]*\])>",
                          re.IGNORECASE)
_BRACED = re.compile(r"\{[A-Za-z][A-Za-z0-9_.]*\}(?:\.\.\.)?")


def _paths() -> list[list[str]]:
    register_commands()
    out: list[list[str]] = []

    def walk(cmd: object, path: list[str]) -> None:
        out.append(path)
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return out


PATHS = _paths()


def _help(path: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main([*path, "--help"]) == 0
    return capsys.readouterr().out


def test_every_command_is_checked() -> None:
    assert len(PATHS) > 30 and ["export", "tum"] in PATHS and ["import", "aria"] in PATHS and ["record"] in PATHS


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "egopool")
def test_help_has_plain_metavars_and_whole_paragraphs(path: list[str], capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    out = _help(path, capsys)
    assert not _TYPER_LABEL.search(out), _TYPER_LABEL.search(out)
    assert not _BRACED.search(out), _BRACED.search(out)
    assert "[[" not in out and "]...]" not in out
    usage = next(line for line in out.splitlines() if "Usage:" in line)
    assert usage.split("[OPTIONS]")[0].rstrip().endswith(" ".join(["egopool", *path])[len("egopool"):]), usage
    # each paragraph of the command's own help is one line at 400 columns (no docstring line breaks)
    register_commands()
    cmd = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    lines = [" ".join(line.strip(" │").split()) for line in out.splitlines()]
    # an extra named in the command's or an option's help is shown with its name (Rich markup ate it)
    texts = [cmd.help or "", *(getattr(p, "help", None) or "" for p in cmd.params)]
    flat = " ".join(out.replace("│", " ").split())
    for extra in {m for t in texts for m in re.findall(r"egopool\\?\[(\w+)\]", t)}:
        assert f"egopool[{extra}]" in flat, (extra, out)
    for para in (reflow(cmd.help) or "").split("\n\n"):
        para = " ".join(para.split())
        if para and len(para) < 380 and "[" not in para and "\\" not in para:
            assert para in lines, (para, out)


def test_the_usage_lines_name_arguments_as_written(capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    expected = {("ls",): "ls [OPTIONS] TASK", ("validate",): "validate [OPTIONS] TASK...",
                ("record",): "record [OPTIONS] TASK", ("show",): "show [OPTIONS] TASK N",
                ("import", "aria"): "import aria [OPTIONS] [RECORDING.vrs]",
                ("export", "tum"): "export tum [OPTIONS] TASK N [COLUMN]...",
                ("export", "rerun"): "export rerun [OPTIONS] TASK [N]..."}
    for path, usage in expected.items():
        out = _help(list(path), capsys)
        assert re.search(r"Usage: .* " + re.escape(usage) + r"\s*$", out, re.MULTILINE), (usage, out)


def test_options_show_click_metavars_and_flags_none(capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    out = _help(["export", "rerun"], capsys)
    assert re.search(r"--out\s+-o\s+PATH\s", out) and re.search(r"--stride\s+INTEGER \[x>=1\]\s", out)
    out = _help(["import", "aria"], capsys)
    assert re.search(r"--out\s+PATH\s", out) and re.search(r"--fps\s+FLOAT\s", out) and re.search(r"--task\s+TEXT", out)
    assert re.search(r"--json\s+Print the result as JSON", out)


def test_an_extra_in_help_is_shown_with_its_name(capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    assert "pip install 'egopool[ray]'" in _help(["validate"], capsys)
    assert "pip install 'egopool[keypoints]'" in _help(["keypoints", "extract"], capsys)


def test_a_help_text_keeps_its_brackets_and_our_styles() -> None:
    """A help text (docstring, option help) is reflowed; an unescaped ``[server]`` stays text, as does an
    escaped ``\\[ray]``; egopool's own styles stay styles."""
    from egopool.cli.help_format import _plain_text

    assert _plain_text("Serve it\n(pip install 'egopool[server]').\n\n"
                       "Needs 'egopool\\[ray]'; [bold]x[/bold]") == \
        "Serve it (pip install 'egopool\\[server]').\n\nNeeds 'egopool\\[ray]'; [bold]x[/bold]"
