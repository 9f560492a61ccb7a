"""Typer application and the one error boundary of the CLI.

Every :class:`~egopool.errors.EgopoolError` becomes one line on stderr and exit
code 1 (2 for usage errors, as click does); never a raw traceback for bad input.
An :class:`OSError` that escaped every library boundary (disk full, read-only file
system, a file where a directory belongs) is reported the same way, naming the path.
A Python warning (e.g. the writer's ``RuntimeWarning`` when the registry is unavailable)
becomes one ``egopool: warning: ...`` line, never a source line with a file name.

The command modules load lazily (issue 16 B): ``--help`` lists the commands from
:data:`egopool.cli.commands.COMMANDS` and ``egopool ls`` imports the module of ``ls`` alone.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

import typer
from typer.core import TyperCommand, TyperGroup

from .._sigint import loading_seam, sigint_deferred
from ..errors import EgopoolError, StorageError
from .commands import COMMANDS
from .help_format import plain_help, plain_params


if TYPE_CHECKING:
    import click.exceptions

    #: what ends a command with a code: ``typer.Exit`` (click's, or typer's vendored copy), each with ``exit_code``
    _ExitError = typer.Exit | click.exceptions.Exit


def _exception_types() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...],
                                tuple[type[_ExitError], ...]]:
    """(usage errors, aborts, exits) of every click flavour that may be raising.

    typer < 0.20 runs on click; newer releases raise their vendored copy
    (``typer._click``) even when a separate ``click`` is installed beside them, so
    both families are caught, whichever is present.
    """
    usage: list[type[BaseException]] = [typer.TyperException]
    aborts: list[type[BaseException]] = [typer.Abort]
    exits: list[type[_ExitError]] = [typer.Exit]
    try:
        from typer._click.exceptions import ClickException as VendoredClickException
        usage.append(VendoredClickException)
    except ImportError:  # pragma: no cover - older typer
        pass
    try:
        import click.exceptions as ce
        usage.append(ce.ClickException)
        aborts.append(ce.Abort)
        exits.append(ce.Exit)
    except ImportError:  # pragma: no cover - typer >= 0.20 without click
        pass
    return tuple(usage), tuple(aborts), tuple(exits)


_UsageError, _Abort, _Exit = _exception_types()


class _Unloaded(TyperCommand):
    """A listed command whose module is not imported yet: its name and summary, for ``--help``."""


class _LazyGroup(TyperGroup):
    """The root group: every command of :data:`~egopool.cli.commands.COMMANDS` is listed, and the
    one a command line names is imported when it is resolved (with Ctrl-C held back while it loads,
    as ``entry`` does for the CLI itself)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        loaded = {name: plain_help(cmd) for name, cmd in self.commands.items() if not isinstance(cmd, _Unloaded)}
        commands: dict[str, Any] = {}
        for name, _, summary in COMMANDS:
            commands[name] = loaded.pop(name, None) or _Unloaded(name, help=summary)
        commands.update(loaded)  # defined but not indexed: still runs (the index test names it)
        self.commands = commands

    def get_params(self, ctx: Any) -> list[Any]:
        return plain_params(super().get_params(ctx))

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and isinstance(self.commands.get(args[0]), _Unloaded):
            self._load(args[0])
        return super().resolve_command(ctx, args)

    def _load(self, name: str) -> None:
        modules = next(mods for n, mods, _ in COMMANDS if n == name)
        with sigint_deferred() as interrupted:
            loading_seam("commands")
            for mod in modules:
                importlib.import_module(f"{__package__}.{mod}")
        if interrupted:
            raise KeyboardInterrupt
        built = typer.main.get_command(app)
        for n, cmd in getattr(built, "commands", {}).items():
            if not isinstance(cmd, _Unloaded) and isinstance(self.commands.get(n), _Unloaded):
                self.commands[n] = cmd


app = typer.Typer(
    name="egopool",
    cls=_LazyGroup,
    help="Read, write, validate and maintain pooled_episodes_v1 robot/egocentric recordings.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        from .. import __version__

        print(f"egopool {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="Print egopool's version and exit.")) -> None:
    """Read, write, validate and maintain pooled_episodes_v1 robot/egocentric recordings."""


def register_commands() -> None:
    """Import every ``egopool.cli.*_cmd`` / ``*_cmds`` module; each attaches its commands to ``app``
    (idempotent). The CLI itself does not need it (commands load when named); for code that
    converts ``app`` as a whole, e.g. ``typer.main.get_command(app)``."""
    import pkgutil

    from .. import cli

    for mod in sorted(m.name for m in pkgutil.iter_modules(cli.__path__)):
        if mod.endswith(("_cmd", "_cmds")):
            importlib.import_module(f"{cli.__name__}.{mod}")


def _fit_output() -> None:
    """Piped output is not wrapped at 80 columns (paths and tables stay on one line for scripts)."""
    from .output import console

    if not console.is_terminal:
        console.width = 4096


def _one_line_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                      file: TextIO | None = None, line: str | None = None) -> None:
    """``warnings.showwarning`` of the CLI: the message's text on one line, no source location."""
    text = " ".join(str(message).split()) or category.__name__
    print(f"egopool: warning: {text}", file=file if file is not None else sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code. ``argv`` defaults to ``sys.argv[1:]``."""
    with warnings.catch_warnings():
        warnings.showwarning = _one_line_warning
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    try:
        _fit_output()
        from .ray_option import optional_ray_value

        from .output import stdout_only_json

        args = optional_ray_value(sys.argv[1:] if argv is None else argv)
        with stdout_only_json("--json" in args):
            rc = app(args=args, standalone_mode=False)
    except EgopoolError as exc:
        print(f"egopool: error: {exc.one_line()}", file=sys.stderr)
        return 1
    except _Exit as exc:
        return int(exc.exit_code or 0)
    except _UsageError as exc:
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:  # pragma: no cover
            print(f"egopool: error: {exc}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 2))
    except _Abort:
        print("egopool: aborted", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("egopool: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:  # last resort: users do hit full disks and read-only mounts
        print(f"egopool: error: {StorageError.from_os_error(exc, action='failed').one_line()}", file=sys.stderr)
        return 1
    # without standalone mode, click and typer return an explicit typer.Exit's code; typer turns
    # Ctrl-C into a silent Exit(130) (no command of egopool exits 130 itself)
    if rc == 130:
        print("egopool: interrupted", file=sys.stderr)
    return rc if isinstance(rc, int) and not isinstance(rc, bool) else 0
