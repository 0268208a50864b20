"""What mt/cli.py's command declarations stand on: `options_of`, which gives a command one option
per field of a settings dataclass, and `run_app`, the console entry point's body: it prints each
`MTError` as one line on stderr and exits with code 2, prints each `MTWarning` as one line too, and
shows the library's stage reports (INFO messages of the loggers under "mt") on stdout, as plain
lines. Part of the cli stage: only mt/cli.py imports it.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import signal
import sys
import typing
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TextIO

import typer

from mt.errors import Interrupted, MTError, MTWarning


def options_of(
    settings: type,
    only: Sequence[str] = (),
    help: Mapping[str, str] | None = None,
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A decorator giving a command one keyword option per field of the dataclass `settings` that
    declares a flag (its metadata: flag, help, and `option_type`/`option_default` where the flag's
    value is not the field's), after the command's own parameters and in field order: every such
    field, or those named in `only`; `help` replaces a field's help where the command gives it
    another meaning. Typer reads options from the command's signature, so the decorated command's
    signature lists them; the command takes them as `**settings`."""
    hints = typing.get_type_hints(settings)
    chosen = [f for f in dataclasses.fields(settings)
              if "flag" in f.metadata and (not only or f.name in only)]
    options = [
        inspect.Parameter(
            f.name,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=f.metadata.get("option_type", hints[f.name]),
            default=typer.Option(f.metadata.get("option_default", f.default), f.metadata["flag"],
                                 help=(help or {}).get(f.name, f.metadata["help"])),
        )
        for f in chosen
    ]

    def declare(command: Callable[..., None]) -> Callable[..., None]:
        signature = inspect.signature(command)
        own = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        command.__signature__ = signature.replace(parameters=own + options)  # type: ignore[attr-defined]
        return command

    return declare


ShowWarning = Callable[[Warning | str, type[Warning], str, int, TextIO | None, str | None], None]


def _showing_mt_warnings(fallback: ShowWarning) -> ShowWarning:
    """A `warnings.showwarning` that prints MTWarning as 'mt: warning: ...' and passes others on."""
    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: TextIO | None = None, line: str | None = None) -> None:
        if issubclass(category, MTWarning):
            print(f"mt: warning: {message}", file=sys.stderr)
        else:
            fallback(message, category, filename, lineno, file, line)
    return show


class _StdoutLines(logging.Handler):
    """Stage reports (INFO and up from the "mt" loggers) as plain lines on the current sys.stdout."""

    def emit(self, record: logging.LogRecord) -> None:
        print(self.format(record), flush=True)


def _show_stage_reports() -> None:
    """Route the library's stage reports (prepare, fetch, plot) to stdout, once per process."""
    logger = logging.getLogger("mt")
    if not any(isinstance(h, _StdoutLines) for h in logger.handlers):
        logger.addHandler(_StdoutLines())
    logger.setLevel(logging.INFO)


def run_app(app: typer.Typer) -> None:
    """Run `app`; user errors become one line on stderr and exit 2.

    Also one line: an OSError (a full disk, a vanished folder; exit 2), a torch older than mt
    needs (exit 2) and a second SIGINT/SIGTERM during training (exit 128 + the signal number:
    130 / 143, as a shell reports a signal).
    """
    from mt import check_torch

    try:
        check_torch()
        _show_stage_reports()
        with warnings.catch_warnings():  # restores the filters and showwarning afterwards
            warnings.simplefilter("always", MTWarning)  # every time, as a message, not once per place
            warnings.showwarning = _showing_mt_warnings(warnings.showwarning)
            app()
    except MTError as e:
        print(f"mt: error: {e}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:  # e.g. ENOSPC outside an atomic write; the file named when the OS names it
        where = f"{e.filename}: " if e.filename else ""
        print(f"mt: error: {where}{e.strerror or e}".replace("\n", " "), file=sys.stderr)
        sys.exit(2)
    except Interrupted as e:
        name = signal.Signals(e.signum).name
        print(f"mt: interrupted by a second {name}: stopped at once without saving; the checkpoints on disk "
              f"hold the last saved state", file=sys.stderr)
        sys.exit(128 + e.signum)
    except KeyboardInterrupt:
        print("mt: interrupted", file=sys.stderr)
        sys.exit(130)
