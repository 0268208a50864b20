"""The serve batcher without HTTP: segments of concurrent jobs are merged into shared batches, each
job gets exactly its own results in order (equal to `translate_lines`), cancelled jobs free
their queue slots, a full queue refuses, and jobs with other options are never mixed.

The waiting rules run on a `FakeClock`: time moves only when a test advances it, and each step
returns once the batcher's worker has reacted and is waiting again, so every batch's composition
is exact and no assert depends on the machine's speed (a slow machine cannot fail them, a fast one
cannot pass them by luck)."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mt.decode.translate import search_lines, translate_lines
from mt.deploy.loading import load_model
from mt.serve.batcher import GATHER_CAP, Batcher, BatchStats, QueueFull

REPO = Path(__file__).resolve().parents[1]


class FakeClock:
    """A `Batcher`'s clock whose time moves only by `advance`. Its `wait` ends only when the
    batcher's condition is notified (a submit, `advance`, stop), never because time ran out.

    `step(action)` runs `action` with the worker waiting, then returns once the worker has reacted
    and waits again, having seen the current time; `advance` is such a step. Every step leaves the
    worker waiting, so the next one starts from a settled batcher (begin with `started`)."""

    def __init__(self) -> None:
        self.t = 0.0
        self._blocks = 0  # waits the worker entered, each having seen the time then current
        self._blocked_at = -1.0  # the time the latest of them had seen
        self._state = threading.Condition()
        self._seen = threading.local()  # the time each thread last read
        self._cond: threading.Condition | None = None  # the batcher's, known from its first wait

    def now(self) -> float:
        with self._state:
            self._seen.t = self.t
            return self.t

    def wait(self, cond: threading.Condition, timeout: float | None) -> bool:
        with self._state:
            self._cond = cond
            if timeout is not None and getattr(self._seen, "t", None) != self.t:
                return False  # time moved since the caller read it: let it look again
            self._blocks += 1
            self._blocked_at = self.t
            self._state.notify_all()
        return cond.wait(None if timeout is None else 60.0)  # 60 s: a bound only; notifies end it

    def started(self) -> None:
        """Return once the worker waits for its first segments."""
        with self._state:
            assert self._state.wait_for(lambda: self._blocks >= 1, 30), "the batcher's worker never waited"

    def step(self, action: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """action(*args, **kwargs), then wait until the worker has reacted (see the class docstring)."""
        with self._state:
            before = self._blocks
        result = action(*args, **kwargs)
        with self._state:
            assert self._state.wait_for(lambda: self._blocks > before and self._blocked_at == self.t, 30), \
                "the batcher's worker did not settle within 30 s"
        return result

    def advance(self, seconds: float, *, settle: bool = True) -> None:
        """Move time on and wake the worker; with `settle`, return once it has seen the new time and
        waits again (not while a held engine keeps it decoding: then settle=False)."""
        def move() -> None:
            with self._state:
                self.t += seconds
                cond = self._cond
            if cond is not None:
                with cond:
                    cond.notify_all()

        if settle:
            self.step(move)
        else:
            move()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    from mt.deploy.tiny import synthetic_sentences, write_random_checkpoint
    path = write_random_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny.pt")
    loaded = load_model([path], "cpu")
    return loaded.engine, loaded.tokenizer, loaded.config, synthetic_sentences(40, 7)


def _batcher(engine, tokenizer, **kwargs: Any) -> tuple[Batcher, FakeClock, list[BatchStats]]:
    """(a Batcher on a fake clock, that clock, the stats of its batches), once its worker waits for segments."""
    clock, stats = FakeClock(), []
    batcher = Batcher(engine, tokenizer, queue_size=1000, clock=clock, on_batch=stats.append, **kwargs)
    clock.started()
    return batcher, clock, stats


def _done(jobs: list) -> list[bool]:
    return [job.future.done() for job in jobs]


def test_the_default_clock_is_real_time(tiny) -> None:
    """Without a clock the batcher reads and waits exactly as before the seam existed: the very
    functions `time.monotonic` and `threading.Condition.wait`, nothing wrapped around them."""
    engine, tokenizer, cfg, lines = tiny
    batcher = Batcher(engine, tokenizer, max_wait_ms=5, queue_size=10)
    try:
        assert batcher._now is time.monotonic and batcher._wait is threading.Condition.wait
    finally:
        batcher.stop()


def test_concurrent_jobs_share_batches_and_get_their_own_results(tiny) -> None:
    engine, tokenizer, cfg, lines = tiny
    batcher, clock, stats = _batcher(engine, tokenizer, max_wait_ms=1500)
    try:
        requests = [lines[i * 5:(i + 1) * 5] + [""] for i in range(8)]  # an empty line stays empty
        jobs = [None] * len(requests)

        def send(i: int) -> None:
            jobs[i] = batcher.submit(requests[i], cfg.decode, n_best=None)

        threads = [threading.Thread(target=send, args=(i,)) for i in range(len(requests))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not any(_done(jobs))  # time has not moved: all 8 wait for max_wait
        clock.advance(1.5)
        results = [job.future.result(timeout=0) for job in jobs]
    finally:
        batcher.stop()
    for request, result in zip(requests, results):
        expected = translate_lines(engine, tokenizer, request, cfg.decode, device="cpu")
        assert [hyps[0][0] for hyps in result] == expected
        assert result[-1] == [("", 0.0)]
    # One round of all 40 non-empty lines, decoded once each: one batch (40 short lines fit decode.max_tokens).
    assert [s.segments for s in stats] == [40]


def test_nbest_and_sampling_match_the_library(tiny) -> None:
    engine, tokenizer, cfg, lines = tiny
    batcher = Batcher(engine, tokenizer, max_wait_ms=0, queue_size=1000)
    try:
        beam = dataclasses.replace(cfg.decode, search=dataclasses.replace(cfg.decode.search, beam=3, n_best=3))
        nbest = batcher.submit(lines[:6], beam, n_best=3).future.result(timeout=60)
        sampled = dataclasses.replace(cfg.decode, search=dataclasses.replace(cfg.decode.search, sampling=True, seed=5))
        drawn = batcher.submit(lines[:6], sampled, n_best=None).future.result(timeout=60)
    finally:
        batcher.stop()
    assert nbest == search_lines(engine, tokenizer, lines[:6], beam, n_best=beam.search.n_best, device="cpu").nbest()
    assert [h[0][0] for h in drawn] == translate_lines(engine, tokenizer, lines[:6], sampled, device="cpu")


def test_cancel_frees_queue_slots_and_full_queue_refuses(tiny) -> None:
    engine, tokenizer, cfg, lines = tiny
    depths: list[int] = []
    clock = FakeClock()  # time never moves: nothing leaves the queue but by cancel
    batcher = Batcher(engine, tokenizer, max_wait_ms=1000, queue_size=5, on_depth=depths.append, clock=clock)
    try:
        job = batcher.submit(lines[:4], cfg.decode, n_best=None)
        assert batcher.depth == 4
        with pytest.raises(QueueFull):
            batcher.submit(lines[4:6], cfg.decode, n_best=None)
        batcher.cancel(job)
        assert batcher.depth == 0 and depths[-1] == 0
        assert job.future.cancelled()
        other = batcher.submit(lines[4:9], cfg.decode, n_best=None)  # the freed slots are usable again
        assert batcher.depth == 5
        batcher.cancel(other)
    finally:
        batcher.stop()


def test_jobs_with_other_options_are_not_mixed(tiny) -> None:
    engine, tokenizer, cfg, lines = tiny
    batcher, clock, stats = _batcher(engine, tokenizer, max_wait_ms=800)
    try:
        greedy = clock.step(batcher.submit, lines[:3], cfg.decode, n_best=None)
        beam = clock.step(batcher.submit, lines[3:7], dataclasses.replace(cfg.decode, search=dataclasses.replace(cfg.decode.search, beam=2)), n_best=None)
        clock.advance(0.8)  # the greedy round alone; the beam job waits max_wait after it (its clients may come back)
        assert _done([greedy, beam]) == [True, False] and [s.segments for s in stats] == [3]
        clock.advance(0.8)
        assert beam.future.done()
    finally:
        batcher.stop()
    assert [s.segments for s in stats] == [3, 4]


def test_a_filling_batch_waits_while_segments_keep_coming(tiny) -> None:
    """Segments arriving closer together than max_wait (0.1 s apart, max_wait 0.3 s) join one
    batch even when they span more than max_wait; it starts once max_wait passes without one."""
    engine, tokenizer, cfg, lines = tiny
    batcher, clock, stats = _batcher(engine, tokenizer, max_wait_ms=300)
    try:
        jobs = []
        for line in lines[:6]:
            jobs.append(clock.step(batcher.submit, [line], cfg.decode, n_best=None))
            clock.advance(0.1)
            assert not any(_done(jobs)) and not stats  # at 0.6 s, twice max_wait after the first, still none
        clock.advance(0.3)
        assert all(_done(jobs))
    finally:
        batcher.stop()
    assert [s.segments for s in stats] == [6]


def test_a_steady_stream_starts_a_batch_by_the_gather_cap(tiny) -> None:
    """Segments that never stop coming (0.07 s apart, max_wait 0.3 s) start a batch at the latest
    GATHER_CAP x max_wait after the first: at the first step past it, with every segment so far."""
    engine, tokenizer, cfg, lines = tiny
    batcher, clock, stats = _batcher(engine, tokenizer, max_wait_ms=300)
    try:
        jobs = []
        while not any(_done(jobs)):
            assert clock.t < GATHER_CAP * 0.3, "no batch started by GATHER_CAP x max_wait"
            jobs.append(clock.step(batcher.submit, [lines[len(jobs) % len(lines)]], cfg.decode, n_best=None))
            clock.advance(0.07)
        assert all(_done(jobs)) and clock.t - 0.07 < GATHER_CAP * 0.3 <= clock.t
    finally:
        batcher.stop()
    assert sum(s.segments for s in stats) == len(jobs) == 43


def test_a_shared_round_starts_as_soon_as_its_requests_are_back(tiny) -> None:
    """After a round shared by 3 requests, the next round starts when 3 requests are queued again,
    without waiting out max_wait (2 s) for a 4th: time does not move and it starts."""
    engine, tokenizer, cfg, lines = tiny
    batcher, clock, stats = _batcher(engine, tokenizer, max_wait_ms=2000)
    try:
        first = [clock.step(batcher.submit, [line], cfg.decode, n_best=None) for line in lines[:3]]
        clock.advance(2.0)
        assert all(_done(first)) and [s.segments for s in stats] == [3]
        second = []
        for line in lines[3:6]:
            assert not any(_done(second))
            second.append(clock.step(batcher.submit, [line], cfg.decode, n_best=None))
        assert all(_done(second)) and clock.t == 2.0
    finally:
        batcher.stop()
    assert [s.segments for s in stats] == [3, 3]


class _HeldEngine:
    """Holds its first search until `release` is set (`started` is set when it begins): a round
    long enough for requests to queue during it. Then searches as the engine does."""

    def __init__(self, engine) -> None:
        self.engine, self.max_positions = engine, engine.max_positions
        self.started, self.release = threading.Event(), threading.Event()

    def search_ids(self, *args, **kwargs):
        self.started.set()
        assert self.release.wait(30)
        return self.engine.search_ids(*args, **kwargs)


def test_requests_queued_during_a_round_are_awaited_with_its_own(tiny) -> None:
    """3 requests share a round; 2 more queue while it runs. The next round waits for all 5 (the 3
    come back), without waiting out max_wait (2 s): one batch of 5, not 3 and then 2."""
    engine, tokenizer, cfg, lines = tiny
    held = _HeldEngine(engine)
    batcher, clock, stats = _batcher(held, tokenizer, max_wait_ms=2000)
    try:
        first = [clock.step(batcher.submit, [line], cfg.decode, n_best=None) for line in lines[:3]]
        clock.advance(2.0, settle=False)
        assert held.started.wait(30) and batcher.depth == 0  # the round took the 3 and is decoding
        waiting = [batcher.submit([line], cfg.decode, n_best=None) for line in lines[3:5]]
        clock.advance(0.1, settle=False)  # the round takes time: its answers come after the 2 queued
        clock.step(held.release.set)
        assert all(_done(first)) and not any(_done(waiting))
        back = []
        for line in lines[5:8]:
            assert not any(_done(waiting + back))
            back.append(clock.step(batcher.submit, [line], cfg.decode, n_best=None))
        assert all(_done(waiting + back)) and clock.t == 2.1
    finally:
        held.release.set()
        batcher.stop()
    assert [s.segments for s in stats] == [3, 5]


def test_a_lone_request_starts_at_once_but_waits_for_one_on_its_way(tiny) -> None:
    """With one translate request open on the server and its segments queued, the round starts
    without waiting out max_wait (2 s; time does not move); with a second request open (received,
    not yet queued) it waits for it, and both share one batch."""
    engine, tokenizer, cfg, lines = tiny
    open_requests = [1]
    batcher, clock, stats = _batcher(engine, tokenizer, max_wait_ms=2000, open_requests=lambda: open_requests[0])
    try:
        assert clock.step(batcher.submit, [lines[0]], cfg.decode, n_best=None).future.done()

        open_requests[0] = 2
        first = clock.step(batcher.submit, [lines[1]], cfg.decode, n_best=None)
        assert not first.future.done()  # the second request is still being read
        second = clock.step(batcher.submit, [lines[2]], cfg.decode, n_best=None)
        assert _done([first, second]) == [True, True] and clock.t == 0.0
    finally:
        batcher.stop()
    assert [s.segments for s in stats] == [1, 2]


class _GatedEngine:
    """Hands the first source's result over as a search does when that sentence ends, then holds
    the batch until released: a batch whose longer sentences are still decoding."""

    def __init__(self, engine) -> None:
        self.engine, self.max_positions = engine, engine.max_positions
        self.handed, self.release = threading.Event(), threading.Event()

    def search_ids(self, src_ids, decode, *, n_best, sentence_ids, on_result=None, constraints=None, glue=()):
        found = self.engine.search_ids(src_ids, decode, n_best=n_best, sentence_ids=sentence_ids,
                                       constraints=constraints, glue=glue)
        on_result(0, found[0])
        self.handed.set()
        assert self.release.wait(30)
        return found


def test_a_request_is_answered_when_its_sentences_end_not_its_batch(tiny) -> None:
    engine, tokenizer, cfg, lines = tiny
    gated = _GatedEngine(engine)
    batcher, clock, stats = _batcher(gated, tokenizer, max_wait_ms=300)
    try:
        jobs = [clock.step(batcher.submit, [line], cfg.decode, n_best=None) for line in lines[:2]]
        clock.advance(0.3, settle=False)
        assert gated.handed.wait(30)
        # One request has its answer while the batch holding both is still running.
        assert sorted(_done(jobs)) == [False, True] and not stats
        gated.release.set()
        results = [job.future.result(timeout=30)[0][0][0] for job in jobs]
    finally:
        gated.release.set()
        batcher.stop()
    assert [s.segments for s in stats] == [2]
    assert results == translate_lines(engine, tokenizer, lines[:2], cfg.decode, device="cpu")


class _CancelledJustBeforeTheSet(concurrent.futures.Future):
    """A request's future whose client goes away at the worst moment: between the batcher's last
    look at it and its set (a disconnecting client's `Batcher.cancel` runs outside the lock)."""

    def set_exception(self, exception: BaseException | None) -> None:
        self.cancel()
        super().set_exception(exception)  # InvalidStateError: it is cancelled

    def set_result(self, result: Any) -> None:
        self.cancel()
        super().set_result(result)


class _FailingEngine(_HeldEngine):
    """Holds its first search like `_HeldEngine`, then every search fails."""

    def search_ids(self, *args, **kwargs):
        self.started.set()
        assert self.release.wait(30)
        raise RuntimeError("the engine failed")


def test_a_request_cancelled_while_its_batch_fails_does_not_end_the_worker(tiny) -> None:
    """The race of issue 39, forced: a batch fails and its request is cancelled between the check and
    the set. The worker goes on: the next request is still decoded (and fails with the engine's error,
    not a timeout), and stopping with a queued request cancelled the same way raises nothing."""
    engine, tokenizer, cfg, lines = tiny
    failing = _FailingEngine(engine)
    failures: list[int] = []
    batcher = Batcher(failing, tokenizer, max_wait_ms=0, queue_size=100, on_failure=failures.append)
    try:
        job = batcher.submit(lines[:2], cfg.decode, n_best=None)
        assert failing.started.wait(30)
        job.future = _CancelledJustBeforeTheSet()  # the worker holds the job, not its future
        failing.release.set()
        nxt = batcher.submit(lines[2:4], cfg.decode, n_best=None)
        with pytest.raises(RuntimeError, match="the engine failed"):
            nxt.future.result(timeout=30)
        assert batcher._thread.is_alive()
        assert failures == [2, 2]  # each failed batch reported (the metrics count them), with its segments
    finally:
        batcher.stop()
    clock = FakeClock()  # time never moves: the job stays queued until stop
    batcher = Batcher(engine, tokenizer, max_wait_ms=1000, queue_size=100, clock=clock)
    queued = batcher.submit(lines[:2], cfg.decode, n_best=None)
    queued.future = _CancelledJustBeforeTheSet()
    batcher.stop()  # no InvalidStateError
    assert queued.future.cancelled()


def test_a_failed_worker_thread_fails_its_round_says_so_and_runs_again(tiny) -> None:
    """Supervision: a failure of the worker loop itself (here: the depth callback raising once in the
    worker thread, as it takes a round off the queue) fails
    the requests of its round at once (not after a timeout), shows as not `alive` (/health 503) with
    the reason until the loop runs again, is counted, and the next request is decoded as before."""
    engine, tokenizer, cfg, lines = tiny
    restarts: list[int] = []
    calls = 0

    def on_depth(depth: int) -> None:
        nonlocal calls
        if threading.current_thread().name == "mt-serve-model":
            calls += 1
            if calls == 1:
                raise ValueError("a bug in a callback")

    batcher = Batcher(engine, tokenizer, max_wait_ms=0, queue_size=100, on_depth=on_depth,
                      on_thread_restart=lambda: restarts.append(1), restart_delay_s=0.5)
    try:
        job = batcher.submit(lines[:2], cfg.decode, n_best=None)
        with pytest.raises(RuntimeError, match=r"the batcher's worker thread failed \(ValueError: a bug in a callback\)"):
            job.future.result(timeout=30)
        assert not batcher.alive and batcher.crashed == "ValueError: a bug in a callback" and restarts == [1]
        deadline = time.monotonic() + 10
        while not batcher.alive:
            assert time.monotonic() < deadline, "the worker thread did not run again"
            time.sleep(0.02)
        again = batcher.submit(lines[:2], cfg.decode, n_best=None)
        want = translate_lines(engine, tokenizer, lines[:2], cfg.decode, device="cpu")
        assert [hyps[0][0] for hyps in again.future.result(timeout=30)] == want
    finally:
        batcher.stop()
    assert not batcher._thread.is_alive()


class _TimedEngine(_HeldEngine):
    """Each search takes `seconds` of the fake clock; the second one is held (as `_HeldEngine`'s
    first) until `release`, so work is running while the test submits."""

    def __init__(self, engine, clock: FakeClock, seconds: float) -> None:
        super().__init__(engine)
        self.clock, self.seconds, self.calls = clock, seconds, 0

    def search_ids(self, *args, **kwargs):
        self.calls += 1
        if self.calls == 2:
            self.started.set()
            assert self.release.wait(30)
        self.clock.advance(self.seconds, settle=False)  # the worker is decoding, not waiting: no settle
        return self.engine.search_ids(*args, **kwargs)


def test_admission_refuses_what_cannot_finish_in_time_at_the_measured_rate(tiny) -> None:
    """With admit_within_s 5: a first batch of work W takes 2 s (rate W/2 per second). While a second
    batch of the same work runs, a request of 2W (work ahead W + 2W = 6 s > 5) is refused at once
    with Retry-After 1 (6 - 5 s), one of W/4 (W + W/4: 2.5 s) is admitted, and with nothing ahead
    any request is admitted."""
    engine, tokenizer, cfg, lines = tiny
    greedy = dataclasses.replace(cfg.decode, search=dataclasses.replace(cfg.decode.search, beam=1))
    clock = FakeClock()
    timed = _TimedEngine(engine, clock, seconds=2.0)
    batcher = Batcher(timed, tokenizer, max_wait_ms=0, queue_size=1000, clock=clock, admit_within_s=5.0)
    clock.started()
    try:
        four = lines[:4]
        work = sum(len(ids) for ids in batcher.encode(four, tokenizer)[0])
        batcher.submit(four, greedy, n_best=None).future.result(timeout=30)  # measured: work / 2 s
        running = batcher.submit(four, greedy, n_best=None)
        assert timed.started.wait(30)
        big = [line for line in lines[4:40] if line][:8]
        big_work = sum(len(ids) for ids in batcher.encode(big, tokenizer)[0])
        assert (work + big_work) / (work / 2.0) > 5.0, "the test's own arithmetic: the big request must not fit"
        with pytest.raises(QueueFull, match=r"would take ~\d+\.\d s at the measured .* over 5 s") as refused:
            batcher.submit(big, greedy, n_best=None)
        assert refused.value.retry_after == math.ceil((work + big_work) / (work / 2.0) - 5.0)
        small = batcher.submit(lines[:1], greedy, n_best=None)  # W/4 or so: fits
        timed.release.set()
        running.future.result(timeout=30)
        small.future.result(timeout=30)
    finally:
        batcher.stop()
    idle = Batcher(timed, tokenizer, max_wait_ms=0, queue_size=1000, clock=FakeClock(), admit_within_s=0.001)
    try:  # nothing ahead: even a request that cannot finish within 1 ms is admitted (nothing delays it)
        idle.submit(big, greedy, n_best=None)
    finally:
        idle.stop()


@pytest.mark.requires("prometheus_client")
def test_traffic_on_another_model_does_not_hold_a_lone_request(tiny) -> None:
    """Issue 45, item 7: every model's batcher read the server-wide count of open translate
    requests, so a request waiting on model A made a lone request on model B wait out max_wait.
    Each batcher now expects its own model's requests, plus those whose model is not known yet."""
    from mt.serve.metrics import Metrics, OpenRequests

    engine, tokenizer, cfg, lines = tiny
    metrics = Metrics()
    on_a, on_b = OpenRequests(metrics), OpenRequests(metrics)
    batcher, clock, stats = _batcher(engine, tokenizer, max_wait_ms=2000, open_requests=on_b.now)
    a_scope, b_scope, c_scope = {}, {}, {}
    try:
        for _ in range(3):
            metrics.translate_started()  # three requests received
        with on_a.held(a_scope), on_b.held(b_scope):  # one waits on model A, one reached B
            assert on_b.now() == 2  # B's own and the one whose model is not known yet
            metrics.translate_ended(c_scope)  # that one turned out bad (a 400): gone
            assert on_b.now() == 1 and on_a.now() == 1
            lone = clock.step(batcher.submit, [lines[0]], cfg.decode, n_best=None)
            assert lone.future.done() and clock.t == 0.0  # started at once, A's request notwithstanding
        metrics.translate_ended(a_scope)
        metrics.translate_ended(b_scope)
        assert (metrics.open_translations, metrics.routed, on_a.now(), on_b.now()) == (0, 0, 0, 0)
    finally:
        batcher.stop()


def test_glossary_segments_decode_apart_each_with_its_own_terms(tiny) -> None:
    """Two jobs queued together, one with a term in its first line: that line alone takes the
    constrained search with its own constraints (equal to `translate_lines` with the glossary); every
    other line, the other job's copy of it included, decodes as without a glossary."""
    from mt.decode.terms import term_constraints
    from mt.text.glossary import Glossary, Term

    engine, tokenizer, cfg, lines = tiny
    line = "we saw zebrafish near the river."
    terms = term_constraints(Glossary("t", (Term("zebrafish", "zebrafish", 1),)), tokenizer, engine, target_lang="de",
                             first_pass="off")  # the batcher gets the constraints as given (jobs.py runs the first pass)
    calls: list[tuple[int, bool]] = []

    class Recording:
        max_positions = engine.max_positions
        constrains = True

        def search_ids(self, src_ids, decode, **kwargs):  # noqa: ANN001, ANN003, ANN201
            calls.append((len(src_ids), kwargs.get("constraints") is not None))
            return engine.search_ids(src_ids, decode, **kwargs)

    batcher = Batcher(Recording(), tokenizer, max_wait_ms=100, queue_size=100)  # real time: only results are checked
    try:
        kept = terms.for_lines([line, lines[0]])
        a = batcher.submit([line, lines[0]], cfg.decode, n_best=None, constraints=kept, glue=terms.glue)
        b = batcher.submit([line, lines[0]], cfg.decode, n_best=None)
        got_a, got_b = (job.future.result(timeout=60) for job in (a, b))
    finally:
        batcher.stop()
    plain = translate_lines(engine, tokenizer, [line, lines[0]], cfg.decode, device="cpu")
    with_terms = translate_lines(engine, tokenizer, [line], cfg.decode, device="cpu", glossary=terms)
    assert [hyps[0][0] for hyps in got_b] == plain and got_a[1][0][0] == plain[1]
    assert got_a[0][0][0] == with_terms[0] and "zebrafish" in with_terms[0]
    assert sum(n for n, constrained in calls if constrained) == 1  # a's first line alone, however rounds fell
    assert sum(n for n, constrained in calls if not constrained) == 3
