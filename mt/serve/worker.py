"""The model worker process: the server's model loads and searches in a child process of its own.

Why a process, not a thread: a decoder step is hundreds of small torch calls, and each one takes
Python's GIL back when it returns. With the model in the server's process, the event loop (reading
requests, writing responses) held the GIL whenever a step wanted it, so answering clients while
a batch decoded slowed that batch by as much as the overlap won (greedy, 32 clients: the gap
between batches fell from 43 to 5 ms and each batch's time rose from 168 to 201-229 ms). In a
process of its own the model shares no GIL with the event loop: on the 2-core development machine
(AMD EPYC Zen 4, greedy, 32 clients, `--threads 1`) served throughput rose from 149.8 to 180.9
segments/s (medians of four alternating runs; docs/performance.md, "Serving").

`ModelProcess` is an `mt.decode.engine.Engine`: `search_ids` sends the batch down a pipe and
returns what the child's engine (`load_model`: a `.pt`, an ensemble or an `mt export` directory)
returns, calling `on_result` as each sentence's result arrives (the child's search hands them
over as sentences end). The child reads each checkpoint once and sends the server a `WorkerModel`:
the tokenizer, config and the model's provenance (files, sha256s, update, init_from, the model
card's data), so the server's own process never reads a checkpoint. The child is started with
`spawn` (safe with CUDA and threads), ignores SIGINT/SIGTERM (the server drains and then stops
it), and exits when the pipe closes, so it never outlives the server. If it dies (killed, out of
memory), the batch it held fails and a new one is started: by a watcher thread within
`WATCH_INTERVAL_S` (so /health turns 200 again without a request), or by the next search, whichever
comes first. A restarted child that finds other weights in the files than the first one loaded (a
checkpoint replaced on disk without a reload) is refused: the server would otherwise answer under
the old model's id (and cache) with the new weights; a reload (SIGHUP) loads the new ones.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, cast

from mt.config import Config, DecodeConfig
from mt.data.tokenizer import Tokenizer
from mt.decode.engine import Chooser, Engine, Results
from mt.decode.wanted import Choices, Wanted
from mt.deploy.loading import ModelProvenance
from mt.errors import MTError

log = logging.getLogger(__name__)

WATCH_INTERVAL_S = 1.0  # how often the watcher looks for a dead child
RETRY_AFTER_FAILURE_S = 10.0  # after a restart that failed, the watcher waits this long


@dataclass(frozen=True)
class WorkerModel:
    """What the server's process knows of the model its worker loaded (sent over the pipe, so
    picklable): enough to batch and decode for it and to identify it (/ready, /v1/model-card)."""

    tokenizer: Tokenizer
    cfg: Config
    max_positions: int
    samples: bool  # the engine can sample: mt's own models can; an `mt export` (CTranslate2) only searches
    constrains: bool  # the engine keeps glossary terms (mt's own models; not an `mt export`)
    # files, sha256s (`model_id`), update, init_from, the card's data (`card_source`)
    provenance: ModelProvenance

    @property
    def update(self) -> int:
        """The checkpoint's training update (an export's, from mt_export.json)."""
        return self.provenance.update


def _load(checkpoints: Sequence[Path], device: str, threads: int) -> tuple[Engine, WorkerModel]:
    """(engine, its description), in the child."""
    import torch

    from mt.decode.engine import NativeEngine
    from mt.deploy.loading import load_model

    if threads:
        torch.set_num_threads(threads)  # before load_model: a CTranslate2 engine takes it too
    loaded = load_model(checkpoints, device)
    engine = loaded.engine
    return engine, WorkerModel(loaded.tokenizer, loaded.config, engine.max_positions,
                               isinstance(engine, NativeEngine), bool(getattr(engine, "constrains", False)),
                               loaded.provenance)


def _serve(conn: Connection, checkpoints: Sequence[Path], device: str, threads: int) -> None:
    """The child: load, report, then run searches until the pipe closes or says stop (None)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C reaches the whole group;
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the server drains its requests, then stops us
    try:
        engine, loaded = _load(checkpoints, device, threads)
    except Exception as e:  # noqa: BLE001 - reported to the server as one line
        conn.send(("error", _one_line(e)))
        return
    conn.send(("ready", loaded))
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):  # the server is gone
            return
        if request is None:
            return
        if request[0] == "align":
            _align(conn, engine, loaded.tokenizer, request[1], request[2], request[3])
            continue
        if request[0] == "choose":
            _choose(conn, engine, *request[1:])
            continue
        if request[0] == "next":
            _next(conn, engine, *request[1:])
            continue
        src_ids, decode, n_best, sentence_ids, constraints, glue = request
        try:  # constraints: None, or a batch's glossary terms (one list per source)
            found = engine.search_ids(src_ids, decode, n_best=n_best, sentence_ids=sentence_ids,
                                      on_result=lambda i, results: conn.send(("result", i, results)),
                                      constraints=constraints, glue=glue)
            conn.send(("done", found))
        except (EOFError, OSError):
            return
        except Exception as e:  # noqa: BLE001 - this batch fails, the worker goes on
            conn.send(("error", _one_line(e)))


def _align(conn: Connection, engine: Engine, tokenizer: Tokenizer, prefix: list[int], sources: list[str],
           targets: list[str]) -> None:
    """The child's answer to an align request: ("done", word alignments), or ("done", None) when the
    engine has no cross-attention to read (a CTranslate2 export)."""
    from mt.decode.align import align_words
    from mt.decode.engine import NativeEngine

    try:
        if not isinstance(engine, NativeEngine):
            conn.send(("done", None))
            return
        conn.send(("done", align_words(engine.model, tokenizer.with_prefix(prefix), sources, targets,
                                       device=engine.device)))
    except (EOFError, OSError):
        return
    except Exception as e:  # noqa: BLE001 - this request fails, the worker goes on
        conn.send(("error", _one_line(e)))


def _choose(conn: Connection, engine: Engine, src_ids: list[list[int]], choices: list[Choices],
            decode: DecodeConfig, n_best: int | None) -> None:
    """The child's answer to a choose request (the path's choice stage): ("done", each source's
    candidates ranked, `Chooser.choose_ids`)."""
    try:
        conn.send(("done", cast(Chooser, engine).choose_ids(src_ids, choices, decode, n_best=n_best)))
    except (EOFError, OSError):
        return
    except Exception as e:  # noqa: BLE001 - this request fails, the worker goes on
        conn.send(("error", _one_line(e)))


def _next(conn: Connection, engine: Engine, src_ids: list[list[int]], wanted: list[Wanted],
          decode: DecodeConfig, k: int) -> None:
    """The child's answer to a next-pieces request (the path's alternatives stage, one teacher-forced
    pass): ("done", each source's `k` most probable pieces after its prefix, `NativeEngine.next_ids`)."""
    try:
        if not hasattr(engine, "next_ids"):
            raise MTError("alternatives: this engine cannot rank next pieces (mt's own model can)")
        conn.send(("done", engine.next_ids(src_ids, wanted, decode, k)))
    except (EOFError, OSError):
        return
    except Exception as e:  # noqa: BLE001 - this request fails, the worker goes on
        conn.send(("error", _one_line(e)))


def _one_line(e: BaseException) -> str:
    return str(e) if isinstance(e, MTError) else f"{type(e).__name__}: {e}".splitlines()[0]


class ModelProcess:
    """An `Engine` running in a child process (see the module docstring). Raises MTError when the
    model cannot be loaded. `close` stops the child; searches are serialised."""

    def __init__(self, checkpoints: Sequence[Path], device: str, *, threads: int = 0,
                 on_restart: Callable[[], None] | None = None) -> None:
        self._args = (list(checkpoints), device, threads)
        self._on_restart = on_restart or (lambda: None)  # a dead child was replaced by a new one
        self._lock = threading.Lock()
        self._closed = threading.Event()
        # why a restart was refused (the files changed): searches fail with it
        self.refused: str | None = None
        self._restarting: int | None = None  # the dead child's exit code while a new one loads
        self.loaded = self._start()
        self.max_positions = self.loaded.max_positions
        self.constrains = self.loaded.constrains  # `Engine`'s flag: keeps glossary terms
        threading.Thread(target=self._watch, name="mt-serve-watch", daemon=True).start()

    def _watch(self) -> None:
        """Restart a dead child without waiting for a request (see the module docstring)."""
        wait = WATCH_INTERVAL_S
        while not self._closed.wait(wait):
            wait = WATCH_INTERVAL_S
            with self._lock:
                if self._closed.is_set() or self._proc.is_alive():
                    continue
                try:
                    self._restart()
                except MTError as e:
                    log.error("serve: restarting the model worker failed (trying again in %g s): %s",
                              RETRY_AFTER_FAILURE_S, e)
                    wait = RETRY_AFTER_FAILURE_S

    def _restart(self) -> None:
        """A new child in place of the dead one (under the lock); MTError if it cannot load the same model."""
        log.error("serve: the model worker process had exited (code %s); starting a new one",
                  self._proc.exitcode)
        self._restarting = self._proc.exitcode  # `exited` reports it until the new child is ready
        try:
            model = self._start()
        finally:
            self._restarting = None
        if model.provenance.model_id != self.loaded.provenance.model_id:
            self.close()
            self.refused = (f"the checkpoint changed on disk since it was loaded "
                            f"({model.provenance.model_id[:12]}, "
                            f"served as {self.loaded.provenance.model_id[:12]}); reload the server (SIGHUP)")
            raise MTError(self.refused)
        self._on_restart()

    def _start(self) -> WorkerModel:
        """Start a child and wait until it has loaded the model (MTError, child stopped, if it cannot)."""
        ctx = multiprocessing.get_context("spawn")
        self._conn, child_conn = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child_conn, *self._args), name="mt-serve-model",
                                 daemon=True)
        self._proc.start()
        child_conn.close()  # the child holds the only other end: its exit is our EOF
        kind, payload = self._receive()
        if kind != "ready":
            self._stop_child()  # not `close`: the watcher keeps trying (a file being replaced comes back)
            raise MTError(payload)
        return payload

    def memory_bytes(self) -> float:
        """The child's resident memory (Linux /proc), NaN where it cannot be read (not running, not Linux)."""
        try:
            pages = int(Path(f"/proc/{self._proc.pid}/statm").read_text().split()[1])
        except (OSError, ValueError, IndexError):
            return float("nan")
        return float(pages * os.sysconf("SC_PAGE_SIZE"))

    def exited(self) -> int | None:
        """The exit code of the child that is no longer running (also while its replacement loads), else
        None."""
        if self._restarting is not None:
            return self._restarting
        return None if self._proc.is_alive() else self._proc.exitcode

    def _receive(self) -> tuple[Any, ...]:
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            self._proc.join(5)
            raise MTError(f"the model worker process exited (code {self._proc.exitcode})") from None

    def _send(self, request: tuple[Any, ...]) -> None:
        """`request` to a live child (under the lock): one that died is restarted first; MTError when
        a restart was refused or the pipe is gone."""
        if self.refused is not None:
            raise MTError(self.refused)
        if not self._proc.is_alive():
            self._restart()
        try:
            self._conn.send(request)
        except OSError:
            raise MTError("the model worker process is gone") from None

    def search_ids(self, src_ids: list[list[int]], decode: DecodeConfig, *, n_best: int | None,
                   sentence_ids: list[int], on_result: Callable[[int, Results], None] | None = None,
                   constraints: list[list[list[int]]] | None = None, glue: Sequence[int] = (),
                   ) -> list[Results]:
        """`Engine.search_ids`, in the child; `on_result` runs here as each result arrives. The
        constraints travel with the batch (one list per source), so each sentence keeps its own terms."""
        with self._lock:
            self._send((src_ids, decode, n_best, sentence_ids, constraints, tuple(glue)))
            while True:
                message = self._receive()
                if message[0] == "result":
                    if on_result is not None:
                        on_result(message[1], message[2])
                elif message[0] == "done":
                    return message[1]
                else:
                    raise MTError(f"model worker: {message[1]}")

    def _ask(self, message: tuple) -> Any:
        """One request the child answers in one message (align, choose, next): its answer, or an
        MTError with the child's message."""
        with self._lock:
            self._send(message)
            kind, payload = self._receive()
            if kind != "done":
                raise MTError(f"model worker: {payload}")
            return payload

    def align(self, prefix: list[int], sources: list[str], targets: list[str]) -> list[list[int]] | None:
        """`mt.decode.align.align_words` of (source, translation) pairs, the sources after `prefix`
        (a target tag: `Tokenizer.src_prefix`), in the child; None when its engine cannot align (an
        export)."""
        return self._ask(("align", prefix, sources, targets))

    def choose_ids(self, src_ids: list[list[int]], choices: Sequence[Choices], decode: DecodeConfig, *,
                   n_best: int | None) -> list[Results]:
        """`Chooser.choose_ids` (the path's choice stage, one forced pass), in the child."""
        return self._ask(("choose", src_ids, list(choices), decode, n_best))

    def next_ids(self, src_ids: list[list[int]], wanted: Sequence[Wanted], decode: DecodeConfig,
                 k: int) -> list[list[tuple[int, float]]]:
        """`NativeEngine.next_ids` (the alternatives stage's one pass), in the child."""
        return self._ask(("next", src_ids, list(wanted), decode, k))

    def close(self, timeout: float = 10.0) -> None:
        """Stop the child after its current search (killed if it does not stop within `timeout`), and the
        watcher."""
        self._closed.set()
        self._stop_child(timeout)

    def _stop_child(self, timeout: float = 10.0) -> None:
        """Stop the child after its current search (killed if it does not stop within `timeout`)."""
        try:
            self._conn.send(None)
        except OSError:
            pass
        self._proc.join(timeout)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
        self._conn.close()
