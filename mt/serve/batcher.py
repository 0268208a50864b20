"""Dynamic batching: segments from concurrent requests, decoded together by ONE model worker thread
(which drives the engine: in `mt serve`, the model's own process, `mt.serve.worker`).

A request submits its source lines (already split on '\n') with its decoding options and gets a
`Job` whose `future` resolves to one list of (text, score) per line, in the request's order. The
worker gathers while segments keep coming. It starts a round at once when clients come one at a
time and every translate request open on the server already has its segments queued
(`open_requests`: nobody else is on the way, so waiting would only add latency); otherwise once
`max_wait_ms` pass without a new segment (counted from the oldest segment's arrival, or, after a
round shared by several requests, from that round's end, so those clients' next segments join),
once a batch's worth is queued or as many requests are queued as that shared round had plus those
that queued while it ran (all of them come back; `_others_queued`), or at the
latest `GATHER_CAP` x `max_wait_ms` after that start. It then takes every queued segment that
shares the oldest segment's options, and decodes them in the same token-budgeted,
length-sorted batches `mt translate` uses (`mt.data.batching.decode_batches`, budget
decode.resources.max_tokens // rows per sentence) through the engine's own `search_ids`; the search itself
is `mt.decode`'s. Requests with other options wait for the next round. A segment holding glossary
terms carries its own (`Job.constraints`): such segments, of any requests, form rounds of their own
decoded by the constrained search, each with its terms; the others decode as without a glossary.

A request is answered as soon as its last segment's sentence ends: mt's searches hand
each sentence over when it stops (`on_result`), so short sentences' clients get their reply, and
come back with their next request, while the batch's longer sentences are still decoding.

Each segment keeps its index inside its own request as its `sentence_id`, so sampling draws are
those `mt translate` makes for the same lines, and results never depend on who else was batched
alongside. Cancelling a job (client gone, timeout) removes its queued segments at once and skips
its segments still in the current round, so no queue slot leaks. The worker never dies on a
failing batch: the jobs in it get the exception.

Every time the batcher reads or waits on goes through its `Clock` (`mt.serve.batchparts`). The
`Job` and what the batcher reads of its segments are `mt.serve.batchjob`'s.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import math
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from mt.config import DecodeConfig
from mt.data.batching import decode_batches
from mt.data.tokenizer import Tokenizer
from mt.decode.confidence import scored
from mt.decode.engine import Engine, Results, rows_per_sentence
from mt.errors import MTError
from mt.serve.batchjob import Job, fail_job, keeps_terms, segment_work
from mt.serve.batchparts import BatchStats, Clock, QueueFull, RealClock

log = logging.getLogger(__name__)


# A filling batch waits for the next segment at most max_wait_ms, and in all at most this many
# times max_wait_ms: 32 clients coming back after a shared round arrive over ~20-30 ms on 2 cores,
# longer than one 5 ms wait, and a fixed wait split them into two alternating half-size batches.
GATHER_CAP = 10
# Admission measures the worker's rate over this many of its latest batches (work-weighted: big
# batches, which a queue makes, count for what they did).
RATE_BATCHES = 16


@dataclass
class _Item:
    job: Job
    index: int  # the line's index inside its request: its sentence id for sampling
    queued_at: float

    @property
    def constrained(self) -> bool:
        """The segment holds glossary terms: the constrained beam search decodes it."""
        return keeps_terms(self.job, self.index)

    @property
    def key(self) -> tuple[object, ...]:
        """What the segments of one round share: options, and whether they keep terms (and then
        whether any piece is barred after a term: a model has one non-empty `glue`, its spaced
        target languages', so segments of several requests and targets share a batch safely)."""
        constrained = self.constrained
        return self.job.decode, self.job.n_best, constrained, constrained and bool(self.job.glue)


class Batcher:
    """The queue and its model worker. Thread-safe; `submit`/`cancel` may be called from any thread."""

    def __init__(self, engine: Engine, tokenizer: Tokenizer, *, max_wait_ms: float, queue_size: int,
                 on_batch: Callable[[BatchStats], None] | None = None,
                 on_depth: Callable[[int], None] | None = None,
                 on_failure: Callable[[int], None] | None = None,
                 open_requests: Callable[[], int] | None = None, clock: Clock | None = None,
                 admit_within_s: float | None = None, on_thread_restart: Callable[[], None] | None = None,
                 restart_delay_s: float = 1.0) -> None:
        self.engine, self.tokenizer = engine, tokenizer
        clock = RealClock() if clock is None else clock
        self._now, self._wait = clock.now, clock.wait
        self.max_wait_s = max_wait_ms / 1000.0
        self.queue_size = queue_size
        self._on_batch = on_batch or (lambda stats: None)
        self._on_depth = on_depth or (lambda depth: None)
        self._on_failure = on_failure or (lambda segments: None)  # a batch of that many segments failed
        self._open_requests = open_requests  # translate requests the server holds (None: unknown)
        self._queue: list[_Item] = []
        # Admission (`admit_within_s`, the server's --timeout): with work ahead of it, a request is
        # refused at once when the work queued before it, the round being decoded and its own would
        # take longer than that at the rate measured on the last batches (work = source tokens x
        # rows per sentence, per second). Without work ahead it is admitted: nothing delays it.
        self.admit_within_s = admit_within_s
        self._measured: collections.deque[tuple[int, float]] = collections.deque(maxlen=RATE_BATCHES)
        self._running_work = 0  # of the round being decoded, not yet done
        self._cond = threading.Condition()
        self._stopping = False
        self._free_at = 0.0  # when the worker finished its last round
        self._last_arrival = 0.0  # when the last segment was queued
        self._last_jobs = 0  # requests expected for the next round: the last round's + those queued during it
        self._answered = 0  # requests answered so far (by the worker)
        self._first_answer: float | None = None  # when the current round answered its first request
        # Supervision: a failing worker loop (a bug; `_decode` catches a batch's errors) fails its round,
        # is not `alive` (/health 503) for `restart_delay_s`, counts itself and runs again.
        self._on_thread_restart = on_thread_restart or (lambda: None)
        self.restart_delay_s = restart_delay_s
        self._round: list[_Item] = []  # the round being decoded (failed if the thread fails)
        self.crashed: str | None = None  # why the worker thread failed, until it runs again
        self._thread = threading.Thread(target=self._supervise, name="mt-serve-model", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ client side

    def encode(self, lines: Sequence[str], tokenizer: Tokenizer) -> tuple[list[list[int]], list[str]]:
        """Source ids per line (stripped as `mt translate` strips them, cut to the model's limit)
        and the warning `mt translate` gives for cut lines (empty when none)."""
        ids, cut = self._encode(lines, tokenizer)
        return ids, self.cut_warning(sum(cut), len(ids))

    def _encode(self, lines: Sequence[str], tokenizer: Tokenizer) -> tuple[list[list[int]], list[bool]]:
        """(source ids per line, cut to the model's limit; whether each line was cut)."""
        ids = tokenizer.encode_src([line.strip() for line in lines])
        limit = self.engine.max_positions - 1
        cut = [len(seq) > limit for seq in ids]
        return ([seq[:limit] for seq in ids] if any(cut) else ids), cut

    def cut_warning(self, cut: int, lines: int) -> list[str]:
        """The warning `mt translate` gives when `cut` of `lines` source lines were cut (none when 0)."""
        if not cut:
            return []
        limit = self.engine.max_positions - 1
        return [f"{cut} of {lines} source lines longer than {limit} pieces are truncated "
                f"(model.max_positions={limit + 1}, EOS included)"]

    def submit(self, lines: Sequence[str], decode: DecodeConfig, *, n_best: int | None,
               tokenizer: Tokenizer | None = None, constraints: list[list[list[int]]] | None = None,
               glue: tuple[int, ...] = ()) -> Job:
        """Queue `lines` for decoding with `decode` (n_best None: the one output `decode` asks
        for, score NaN; else that many hypotheses/samples). Raises QueueFull when they do not fit.
        `tokenizer`: the one encoding the sources, when not the batcher's own (a multi-pair
        model's, with a target tag in front: `Tokenizer.for_target`). `constraints`: each line's
        glossary terms as target pieces (its own: lines with none decode as without a glossary), `glue`
        the pieces barred after a term."""
        tokenizer = self.tokenizer if tokenizer is None else tokenizer
        ids, cut = self._encode(lines, tokenizer)
        if constraints is not None and len(constraints) != len(ids):
            raise ValueError(f"{len(constraints)} constraint lists for {len(ids)} lines")
        job = Job(ids, decode, n_best, self.cut_warning(sum(cut), len(ids)), cut=cut, constraints=constraints,
                  glue=glue, lines=[line.strip() for line in lines])
        job.tokens = [None] * len(ids)
        tagged = len(tokenizer.src_prefix)  # a line with no piece but the target tag is empty
        todo = [i for i, seq in enumerate(ids) if len(seq) > tagged]
        for i, seq in enumerate(ids):
            if len(seq) <= tagged:  # an empty line is an empty output, as in mt translate
                job.tokens[i] = [([], 0.0)]
        job.left = len(todo)
        if not todo:
            self._finish(job)
            return job
        now = self._now()
        with self._cond:
            if self._stopping:
                raise QueueFull("the server is shutting down")
            if len(self._queue) + len(todo) > self.queue_size:
                raise QueueFull(f"{len(self._queue)} segments queued, room for {self.queue_size}")
            self._admit(sum(segment_work(job, i) for i in todo))
            self._queue.extend(_Item(job, i, now) for i in todo)
            self._last_arrival = now
            self._on_depth(len(self._queue))
            self._cond.notify()
        return job

    def cancel(self, job: Job) -> None:
        """Drop what is left of `job` (its queued segments go at once; a running batch skips it)."""
        with self._cond:
            job.cancelled = True
            self._queue = [item for item in self._queue if item.job is not job]
            self._on_depth(len(self._queue))
        job.future.cancel()

    @property
    def alive(self) -> bool:
        """The worker thread is running (it ends only after `stop`; after a failure it is not
        alive until it runs again)."""
        return self._thread.is_alive() and self.crashed is None

    @property
    def depth(self) -> int:
        with self._cond:
            return len(self._queue)

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop the worker after its current batch; queued jobs fail."""
        with self._cond:
            self._stopping = True
            left, self._queue = self._queue, []
            self._on_depth(0)
            self._cond.notify_all()
        for item in left:
            fail_job(item.job, RuntimeError("server stopped"))
        self._thread.join(timeout)

    # ------------------------------------------------------------------ worker side

    def _take_round(self) -> list[_Item] | None:
        """Wait for segments, then take every queued one with the oldest one's options."""
        with self._cond:
            while not self._queue and not self._stopping:
                self._wait(self._cond, None)
            if self._stopping:
                return None
            first = self._queue[0]
            # After a round shared by several requests, their clients are about to come back with
            # their next segments: count the wait from the end of that round, so they join the next
            # batch instead of trickling into many small ones. Otherwise (one client) from arrival.
            since = max(first.queued_at, self._free_at) if self._last_jobs > 1 else first.queued_at
            cap = since + GATHER_CAP * self.max_wait_s
            budget = self._budget(first)
            while (not self._stopping and self._queue and self._queued_tokens() < budget
                   and not (self._last_jobs > 1 and self._queued_jobs() >= self._last_jobs)
                   and not (self._last_jobs <= 1 and self._nobody_else_coming())):
                # (the last round's requests all back: go)
                # max_wait_s without a new segment, never past the cap
                deadline = min(max(since, self._last_arrival) + self.max_wait_s, cap)
                remaining = deadline - self._now()
                if remaining <= 0:
                    break
                self._wait(self._cond, remaining)
            if self._stopping or not self._queue:
                return None if self._stopping else []
            key = self._queue[0].key
            taken = [item for item in self._queue if item.key == key]
            self._queue = [item for item in self._queue if item.key != key]
            self._round = taken  # off the queue: failed with the thread if it fails from here on
            self._on_depth(len(self._queue))
            return taken

    def _nobody_else_coming(self) -> bool:
        """Every translate request the server holds has its segments queued: waiting would only add
        latency (one client at a time). Not used after a shared round, whose clients come back
        over tens of milliseconds and reach the server one by one."""
        return self._open_requests is not None and self._open_requests() <= self._queued_jobs()

    def _queued_jobs(self) -> int:
        return len({id(item.job) for item in self._queue})

    def _admit(self, work: int) -> None:
        """QueueFull when, with work ahead, the queue, the running round and `work` would take longer
        than `admit_within_s` at the measured rate. Called under the lock."""
        ahead = sum(segment_work(item.job, item.index) for item in self._queue) + self._running_work
        done_work, seconds = sum(w for w, _ in self._measured), sum(t for _, t in self._measured)
        if self.admit_within_s is None or not ahead or done_work <= 0 or seconds <= 0:
            return
        rate = done_work / seconds
        expected = (ahead + work) / rate
        if expected > self.admit_within_s:
            raise QueueFull(f"the work ahead of it and its own would take ~{expected:.1f} s at the measured "
                            f"{rate:,.0f} tokens/s, over {self.admit_within_s:g} s",
                            retry_after=max(1, math.ceil(expected - self.admit_within_s)))

    def _queued_tokens(self) -> int:
        return sum(len(item.job.ids[item.index]) for item in self._queue)

    @staticmethod
    def _budget(item: _Item) -> int:
        """Sentences (= source tokens, one per sentence at least) per batch for the item's options."""
        return max(1, item.job.decode.resources.max_tokens
                   // rows_per_sentence(item.job.decode, constrained=item.constrained))

    def _supervise(self) -> None:
        """Run the worker loop until `stop`; restart it after a failure (see `__init__`)."""
        while True:
            try:
                self._run()
                return
            except Exception as e:  # noqa: BLE001 - a bug in the loop: its round fails, the loop runs again
                log.exception("serve: the batcher's worker thread failed; restarting it in %g s",
                              self.restart_delay_s)
                self.crashed = f"{type(e).__name__}: {e}"
                with self._cond:
                    failed, self._round, self._running_work = self._round, [], 0
                for job in {id(item.job): item.job for item in failed}.values():
                    fail_job(job, RuntimeError(f"the batcher's worker thread failed ({self.crashed})"))
                self._on_thread_restart()
                with self._cond:
                    if not self._stopping:
                        self._cond.wait(self.restart_delay_s)  # stop() ends the wait
                    stopping = self._stopping
                self.crashed = None
                if stopping:
                    return

    def _run(self) -> None:
        while True:
            taken = self._take_round()
            if taken is None:
                return
            if not taken:
                continue
            round_jobs = len({id(item.job) for item in taken})
            with self._cond:
                self._running_work = sum(segment_work(item.job, item.index) for item in taken)
            budget = self._budget(taken[0])
            lengths = np.array([len(item.job.ids[item.index]) for item in taken], dtype=np.int64)
            answered, late = self._answered, 0
            self._first_answer = None
            for batch in decode_batches(lengths, max_tokens=budget, max_sentences=budget):
                with self._cond:  # a job cancelled meanwhile is skipped
                    items = [taken[i] for i in batch.tolist() if not taken[i].job.cancelled]
                # only the last batch's late answers come at the round's end: earlier ones are early
                if items:
                    late = self._decode(items)
                with self._cond:
                    self._running_work -= sum(segment_work(taken[i].job, taken[i].index)
                                              for i in batch.tolist())
            with self._cond:
                self._running_work = 0
                self._free_at = self._now()
                self._last_jobs = round_jobs + self._others_queued(self._answered - answered - late)

    def _others_queued(self, early: int) -> int:
        """Queued requests that are not this round's clients coming back, when `early` of its requests
        were answered before it ended (as their sentences ended). Called under the lock.

        This round's clients come back, and those who queued during it are waiting: the next round
        waits for all of them (if only this round's count were awaited, a 20 + 12 split of 32
        clients would repeat itself for ever). A request queued after the round's first answer may
        be one of its `early` clients back already; one queued before cannot be."""
        jobs = {id(item.job): item.queued_at for item in self._queue}
        first = self._first_answer
        after = 0 if first is None else sum(queued_at >= first for queued_at in jobs.values())
        return len(jobs) - min(early, after)

    def _decode(self, items: list[_Item]) -> int:
        """Decode one batch. Each segment's result is recorded as soon as the engine hands it over
        (greedy and beam search do as each sentence ends), so a request whose segments are all done
        is answered while the batch's longer sentences go on, and its client can come back for the
        next round meanwhile. Returns the number of requests answered only after the search returned."""
        job0 = items[0].job
        src = [item.job.ids[item.index] for item in items]
        # a round's segments all keep terms, or none does (`_Item.key`)
        constraints = [item.job.constraints[item.index] for item in items] if items[0].constrained else None
        started, began = time.perf_counter(), self._now()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # lines were cut (and the warning noted) in `encode`
                found = self.engine.search_ids(src, job0.decode, n_best=job0.n_best,
                                               sentence_ids=[item.index for item in items],
                                               on_result=lambda i, hyps: self._record(items[i], hyps),
                                               constraints=constraints, glue=job0.glue if constraints else ())
        except Exception as e:  # noqa: BLE001 - a failing batch fails its jobs, never the worker
            if isinstance(e, MTError):  # a known cause (the worker is gone, or refused): one line
                log.error("serve: decoding a batch of %d segments failed: %s", len(items), e)
            else:
                log.exception("decoding a batch of %d segments failed", len(items))
            self._on_failure(len(items))
            for job in {id(item.job): item.job for item in items}.values():
                fail_job(job, e)
            return 0
        self._on_batch(BatchStats(len(items), int(sum(len(s) for s in src)), time.perf_counter() - started))
        with self._cond:  # the rate admission reads
            self._measured.append((sum(segment_work(item.job, item.index) for item in items),
                                   self._now() - began))
        return sum(self._record(item, hyps) for item, hyps in zip(items, found))  # those not handed over yet

    def _record(self, item: _Item, hyps: Results) -> bool:
        """Keep one segment's result (once); answer its request if that was its last. True when it was."""
        job = item.job
        with self._cond:
            if job.cancelled or job.tokens[item.index] is not None:
                return False
            job.tokens[item.index] = hyps
            job.left -= 1
            if job.left:
                return False
            self._answered += 1
            if self._first_answer is None:
                self._first_answer = self._now()
        self._finish(job)
        return True

    def _finish(self, job: Job) -> None:
        """Detokenise the job's outputs and resolve its future (unless it was cancelled)."""
        if job.future.done():
            return
        flat = [tokens for hyps in job.tokens for tokens, _ in hyps]  # type: ignore[union-attr]
        texts = iter(self.tokenizer.decode_tgt(flat))
        result = [[(next(texts), score) for _, score in hyps]  # type: ignore[union-attr]
                  for hyps in job.tokens]
        # a search that found nothing (a first pass's step) is not rated
        job.confidence = [scored(line, hyps[0][0], ids, len(found[0][0]), hyps[0][1], job.decode).confidence(
            job.decode) if hyps else math.nan
            for line, hyps, ids, found in zip(job.lines, result, job.ids, job.tokens)]  # type: ignore[index]
        try:
            job.future.set_result(result)
        except concurrent.futures.InvalidStateError:  # cancelled meanwhile (see fail_job)
            pass

