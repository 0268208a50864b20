"""The serve batcher without HTTP: segments of concurrent jobs are merged into shared batches, each
job gets exactly its own results in order (equal to `translate_lines`), cancelled jobs free
their queue slots, a full queue refuses, and jobs with other options are never mixed."""

from __future__ import annotations

import dataclasses
import sys
import threading
from pathlib import Path

import pytest

from mt.decode.translate import translate_lines, translate_nbest
from mt.deploy.loading import load_model
from mt.serve.batcher import Batcher, BatchStats, QueueFull

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        from tiny_checkpoint import synthetic_sentences, write_random_checkpoint
    finally:
        sys.path.remove(str(REPO / "scripts"))
    path = write_random_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny.pt")
    loaded = load_model([path], "cpu")
    return loaded.engine, loaded.tokenizer, loaded.config, synthetic_sentences(40, 7)


def test_concurrent_jobs_share_batches_and_get_their_own_results(tiny) -> None:
    engine, tokenizer, cfg, lines = tiny
    stats: list[BatchStats] = []
    # A long wait so all jobs are queued before the worker starts a round.
    batcher = Batcher(engine, tokenizer, max_wait_ms=1500, queue_size=1000, on_batch=stats.append)
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
        results = [job.future.result(timeout=60) for job in jobs]
    finally:
        batcher.stop()
    for request, result in zip(requests, results):
        expected = translate_lines(engine, tokenizer, request, cfg.decode, device="cpu")
        assert [hyps[0][0] for hyps in result] == expected
        assert result[-1] == [("", 0.0)]
    assert sum(s.segments for s in stats) == 40  # every non-empty line decoded exactly once
    assert max(s.segments for s in stats) > 5  # segments of several requests shared a batch


def test_nbest_and_sampling_match_the_library(tiny) -> None:
    engine, tokenizer, cfg, lines = tiny
    batcher = Batcher(engine, tokenizer, max_wait_ms=0, queue_size=1000)
    try:
        beam = dataclasses.replace(cfg.decode, beam=3, n_best=3)
        nbest = batcher.submit(lines[:6], beam, n_best=3).future.result(timeout=60)
        sampled = dataclasses.replace(cfg.decode, sampling=True, seed=5)
        drawn = batcher.submit(lines[:6], sampled, n_best=None).future.result(timeout=60)
    finally:
        batcher.stop()
    assert nbest == translate_nbest(engine, tokenizer, lines[:6], beam, device="cpu")
    assert [h[0][0] for h in drawn] == translate_lines(engine, tokenizer, lines[:6], sampled, device="cpu")


def test_cancel_frees_queue_slots_and_full_queue_refuses(tiny) -> None:
    engine, tokenizer, cfg, lines = tiny
    depths: list[int] = []
    batcher = Batcher(engine, tokenizer, max_wait_ms=60_000, queue_size=5, on_depth=depths.append)
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
    stats: list[BatchStats] = []
    batcher = Batcher(engine, tokenizer, max_wait_ms=800, queue_size=1000, on_batch=stats.append)
    try:
        greedy = batcher.submit(lines[:3], cfg.decode, n_best=None)
        beam = batcher.submit(lines[3:7], dataclasses.replace(cfg.decode, beam=2), n_best=None)
        greedy.future.result(timeout=60), beam.future.result(timeout=60)
    finally:
        batcher.stop()
    assert sorted(s.segments for s in stats) == [3, 4]


def test_a_filling_batch_waits_while_segments_keep_coming(tiny) -> None:
    """Segments arriving closer together than max_wait join one batch even when they span more
    than max_wait; a steady stream still starts a batch by GATHER_CAP x max_wait."""
    import time

    from mt.serve.batcher import GATHER_CAP

    engine, tokenizer, cfg, lines = tiny
    stats: list[BatchStats] = []
    batcher = Batcher(engine, tokenizer, max_wait_ms=300, queue_size=1000, on_batch=stats.append)
    try:
        jobs = []
        for line in lines[:6]:  # 6 segments over ~500 ms, 100 ms apart
            jobs.append(batcher.submit([line], cfg.decode, n_best=None))
            time.sleep(0.1)
        for job in jobs:
            job.future.result(timeout=60)
        _settle(stats, 6)  # requests are answered as their sentences end, the batch's stats after it
        assert [s.segments for s in stats] == [6]

        stats.clear()
        jobs = []
        started = time.monotonic()
        while time.monotonic() - started < GATHER_CAP * 0.3 + 1.0:  # a stream longer than the cap
            jobs.append(batcher.submit([lines[len(jobs) % len(lines)]], cfg.decode, n_best=None))
            time.sleep(0.05)
        for job in jobs:
            job.future.result(timeout=60)
    finally:
        batcher.stop()  # after its current batch: every batch's stats are in
    assert len(stats) >= 2 and sum(s.segments for s in stats) == len(jobs)


def _settle(stats: list[BatchStats], segments: int, timeout: float = 10.0) -> None:
    """Wait until the batches recorded in `stats` hold `segments` segments."""
    import time

    deadline = time.monotonic() + timeout
    while sum(s.segments for s in stats) < segments and time.monotonic() < deadline:
        time.sleep(0.005)


def test_a_shared_round_starts_as_soon_as_its_requests_are_back(tiny) -> None:
    """After a round shared by 3 requests, the next round starts when 3 requests are queued again,
    without waiting out max_wait (here 2 s) for a 4th."""
    import time

    engine, tokenizer, cfg, lines = tiny
    stats: list[BatchStats] = []
    batcher = Batcher(engine, tokenizer, max_wait_ms=2000, queue_size=1000, on_batch=stats.append)
    try:
        first = [batcher.submit([line], cfg.decode, n_best=None) for line in lines[:3]]
        for job in first:
            job.future.result(timeout=60)
        started = time.monotonic()
        second = [batcher.submit([line], cfg.decode, n_best=None) for line in lines[3:6]]
        for job in second:
            job.future.result(timeout=60)
        assert time.monotonic() - started < 1.5
    finally:
        batcher.stop()
    assert [s.segments for s in stats] == [3, 3]


class _SlowEngine:
    """An engine whose every search takes at least `seconds` more: rounds long enough to queue during."""

    def __init__(self, engine, seconds: float) -> None:
        self.engine, self.seconds = engine, seconds
        self.max_positions = engine.max_positions

    def search_ids(self, *args, **kwargs):
        import time

        time.sleep(self.seconds)
        return self.engine.search_ids(*args, **kwargs)


def test_requests_queued_during_a_round_are_awaited_with_its_own(tiny) -> None:
    """3 requests share a round; 2 more queue while it runs. The next round waits for all 5 (the 3
    come back), without waiting out max_wait (here 2 s): one batch of 5, not 3 and then 2."""
    import time

    engine, tokenizer, cfg, lines = tiny
    stats: list[BatchStats] = []
    batcher = Batcher(_SlowEngine(engine, 0.5), tokenizer, max_wait_ms=2000, queue_size=1000,
                      on_batch=stats.append)
    try:
        first = [batcher.submit([line], cfg.decode, n_best=None) for line in lines[:3]]
        while not stats and batcher.depth:  # the round has taken the 3 and is decoding
            time.sleep(0.01)
        waiting = [batcher.submit([line], cfg.decode, n_best=None) for line in lines[3:5]]
        for job in first:
            job.future.result(timeout=60)
        started = time.monotonic()
        back = [batcher.submit([line], cfg.decode, n_best=None) for line in lines[5:8]]
        for job in waiting + back:
            job.future.result(timeout=60)
        assert time.monotonic() - started < 1.5
    finally:
        batcher.stop()
    assert [s.segments for s in stats] == [3, 5]


def test_a_lone_request_starts_at_once_but_waits_for_one_on_its_way(tiny) -> None:
    """With one translate request open on the server and its segments queued, the round starts
    without waiting out max_wait (here 2 s); with a second request open (received, not yet
    queued) it waits for it, and both share one batch."""
    import time

    engine, tokenizer, cfg, lines = tiny
    stats: list[BatchStats] = []
    open_requests = [1]
    batcher = Batcher(engine, tokenizer, max_wait_ms=2000, queue_size=1000, on_batch=stats.append,
                      open_requests=lambda: open_requests[0])
    try:
        started = time.monotonic()
        batcher.submit([lines[0]], cfg.decode, n_best=None).future.result(timeout=60)
        assert time.monotonic() - started < 1.0

        open_requests[0] = 2
        started = time.monotonic()
        first = batcher.submit([lines[1]], cfg.decode, n_best=None)
        time.sleep(0.3)  # the second request is still being read
        second = batcher.submit([lines[2]], cfg.decode, n_best=None)
        first.future.result(timeout=60)
        second.future.result(timeout=60)
    finally:
        batcher.stop()
    assert [s.segments for s in stats] == [1, 2]


class _GatedEngine:
    """Hands the first source's result over as a search does when that sentence ends, then holds
    the batch until released: a batch whose longer sentences are still decoding."""

    def __init__(self, engine) -> None:
        self.engine, self.max_positions = engine, engine.max_positions
        self.handed, self.release = threading.Event(), threading.Event()

    def search_ids(self, src_ids, decode, *, n_best, sentence_ids, on_result=None):
        found = self.engine.search_ids(src_ids, decode, n_best=n_best, sentence_ids=sentence_ids)
        on_result(0, found[0])
        self.handed.set()
        assert self.release.wait(30)
        return found


def test_a_request_is_answered_when_its_sentences_end_not_its_batch(tiny) -> None:
    engine, tokenizer, cfg, lines = tiny
    gated = _GatedEngine(engine)
    stats: list[BatchStats] = []
    batcher = Batcher(gated, tokenizer, max_wait_ms=300, queue_size=1000, on_batch=stats.append)
    try:
        jobs = [batcher.submit([line], cfg.decode, n_best=None) for line in lines[:2]]
        assert gated.handed.wait(30)
        # One request has its answer while the batch holding both is still running.
        assert sorted(job.future.done() for job in jobs) == [False, True] and not stats
        gated.release.set()
        results = [job.future.result(timeout=30)[0][0][0] for job in jobs]
    finally:
        gated.release.set()
        batcher.stop()
    assert [s.segments for s in stats] == [2]
    assert results == translate_lines(engine, tokenizer, lines[:2], cfg.decode, device="cpu")
