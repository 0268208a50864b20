"""Running the app under uvicorn: graceful SIGTERM/SIGINT (stop accepting, finish what is in
flight, exit 0), a second signal exits at once (128 + signal)."""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

import uvicorn

from mt.serve.app import create_app
from mt.serve.settings import ServeSettings

log = logging.getLogger(__name__)


class _Server(uvicorn.Server):
    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Not uvicorn's: it re-raises the signal after a graceful stop (the exit status would be
        # -15, not 0), and only a second SIGINT forces; here any second signal stops at once.
        if self.should_exit:
            sys.stderr.write(f"mt: serve: second {signal.Signals(sig).name}: exiting at once\n")
            sys.stderr.flush()
            os._exit(128 + sig)
        log.info("serve: %s: finishing requests in flight, then exiting", signal.Signals(sig).name)
        self.should_exit = True


def run_server(settings: ServeSettings, checkpoints: Sequence[Path]) -> None:
    """Serve until SIGTERM/SIGINT. Access log lines go to the "mt.serve.access" logger."""
    app = create_app(settings, checkpoints)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_config=None, access_log=False,
                            timeout_keep_alive=5, lifespan="on")
    log.info("serve: listening on http://%s:%d (docs at /docs)", settings.host, settings.port)
    _Server(config).run()
