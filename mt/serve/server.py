"""Running the app under uvicorn: graceful SIGTERM/SIGINT (/ready turns 503 at once; after
--drain-seconds, stop accepting, finish what is in flight, exit 0), a second signal exits at once
(128 + signal); SIGHUP re-reads the --api-keys file and loads the checkpoints again without
dropping a request (`ServeState.reload`). Two models that claim one language pair stop the server
with that one-line error."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from types import FrameType

import uvicorn
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from mt.errors import MTError
from mt.serve.app import create_app
from mt.serve.settings import ServeSettings
from mt.serve.specs import Spec
from mt.serve.state import ReloadBusy, ServeState

log = logging.getLogger(__name__)


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, state: ServeState) -> None:
        super().__init__(config)
        self.state = state

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Not uvicorn's: it re-raises the signal after a graceful stop (the exit status would be
        # -15, not 0), and only a second SIGINT forces; here any second signal stops at once.
        name = signal.Signals(sig).name
        if self.should_exit or self.state.draining:
            sys.stderr.write(f"mt: serve: second {name}: exiting at once\n")
            sys.stderr.flush()
            os._exit(128 + sig)
        self.state.draining = True  # /ready 503 from now on
        drain = self.state.settings.drain_s
        if drain > 0:  # a load balancer sees /ready fail and stops sending before the listener closes
            log.info("serve: %s: /ready is 503; answering %g s more (--drain-seconds), "
                     "then finishing requests in flight and exiting", name, drain)
            timer = threading.Timer(drain, lambda: setattr(self, "should_exit", True))
            timer.daemon = True
            timer.start()
            return
        log.info("serve: %s: finishing requests in flight, then exiting", name)
        self.should_exit = True


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port, or a one-line MTError: a taken port or a host that is not
    this machine's fails here, before the model loads. The address family is uvicorn's rule: IPv6
    for an address with ':', else IPv4 (so "localhost" is 127.0.0.1, as under uvicorn itself)."""
    # proto IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say so, and without it
    # small responses wait out Nagle and delayed ACKs (~40 ms a request on loopback).
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM,
                         socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: restart over TIME_WAIT
        sock.bind((host, port))
    except OSError as e:  # socket.gaierror (an unknown name) included
        sock.close()
        raise MTError(f"--host {host} --port {port}: cannot listen there ({e.strerror or e})") from None
    return sock


def head_deadline_protocol(seconds: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (httptools or h11, as uvicorn picks) closing a connection whose next
    request head has not all arrived `seconds` after the connection opened or its last response
    ended. uvicorn has no such deadline: its keep-alive timer restarts on every byte, so a client
    sending a header a byte at a time (slowloris) held a connection for ever. The body has its own
    deadline in the app (408); a request being answered is never cut."""

    class HeadDeadline(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
        _head_timer: asyncio.TimerHandle | None = None
        _cycle_when_armed: object = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._head_timer is not None and self.cycle is not self._cycle_when_armed:  # a head arrived
                self._head_timer.cancel()
                self._head_timer = None

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._cycle_when_armed = self.cycle
            self._head_timer = self.loop.call_later(seconds, self._head_late)

        def _head_late(self) -> None:
            self._head_timer = None
            answering = self.cycle is not None and not self.cycle.response_complete
            if not answering and self.cycle is self._cycle_when_armed and not self.transport.is_closing():
                self.transport.close()

    return HeadDeadline


def run_server(settings: ServeSettings, specs: Sequence[Spec]) -> None:
    """Serve until SIGTERM/SIGINT (SIGHUP: reload). Access log lines go to the "mt.serve.access" logger."""
    sock = bind(settings.host, settings.port)
    app = create_app(settings, specs)
    # proxy_headers off: uvicorn's own X-Forwarded-For handling trusts 127.0.0.1 by default, so any
    # local client (or a local proxy the operator never named) could pick its address; mt reads the
    # header only from --trusted-proxy peers (`mt.serve.limits.client_address`). limit_concurrency:
    # connections and requests beyond --max-connections get uvicorn's 503 before any work.
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_config=None, access_log=False,
                            timeout_keep_alive=5, lifespan="on",
                            http=head_deadline_protocol(settings.timeout_s),
                            proxy_headers=False, limit_concurrency=settings.max_connections)
    host = f"[{settings.host}]" if ":" in settings.host else settings.host  # an IPv6 address in a URL
    log.info("serve: listening on http://%s:%d (docs at /docs)", host, settings.port)
    state: ServeState = app.state.serve
    server = _Server(config, state)
    state.on_fatal = lambda: setattr(server, "should_exit", True)
    # uvicorn handles SIGTERM/SIGINT only; the reload runs in a thread, not inside the signal handler
    signal.signal(signal.SIGHUP, lambda sig, frame: threading.Thread(
        target=_reload, args=(state,), name="mt-reload", daemon=True).start())
    with sock:
        server.run(sockets=[sock])
    if state.fatal is not None:
        raise MTError(state.fatal)


def _reload(state: ServeState) -> None:
    """SIGHUP: reload the keys and the models; a failure (logged by `reload`) leaves the old ones serving."""
    try:
        state.reload("SIGHUP")
    except ReloadBusy:
        log.warning("serve: SIGHUP: a reload is already running; this one is ignored")
    except MTError:
        pass  # logged, in one line, by ServeState.reload
