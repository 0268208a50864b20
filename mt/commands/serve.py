"""`mt serve`: check the model paths and the serve extra, then run the HTTP server (the work is
mt.serve's, behind the optional serve extra). The options are `ServeSettings`' fields."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from typing import Any

from mt.errors import MTError

SERVE_EXTRA_HINT = 'pip install -e ".[serve]"'


def serve_command(checkpoints: Sequence[str], **flags: Any) -> None:
    """`mt serve`: check the flags and the model paths, then run the HTTP server until SIGTERM.
    `checkpoints`: the `-c` values, one model each (an ensemble's paths joined by commas).
    `flags`: the values of `mt serve`'s options, by `ServeSettings` field name
    (`ServeSettings.from_flags`)."""
    from mt.serve.specs import parse_specs

    # A SIGHUP (logrotate's postrotate) before the server can reload would kill it (the default
    # action); until `run_server` installs the reload handler it is ignored: the models are about
    # to be read from the files as they are now anyway.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    specs = parse_specs(checkpoints)
    for spec in specs:
        for path in spec:
            if not path.exists():
                raise MTError(f"-c {path}: not found")
    try:
        import fastapi  # noqa: F401
        import fastapi_offline  # noqa: F401 - the /docs and /redoc files
        import multipart  # noqa: F401 - python-multipart, for form data
        import prometheus_client  # noqa: F401
        import py3langid  # noqa: F401 - /detect and source "auto"
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise MTError(f"mt serve: needs the serve extra ({e.name} is not installed); "
                      f"run: {SERVE_EXTRA_HINT}") from None
    from mt.serve.server import run_server
    from mt.serve.settings import ServeSettings

    run_server(ServeSettings.from_flags(**flags), specs)
