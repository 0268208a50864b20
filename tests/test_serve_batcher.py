"""The serve batcher without HTTP: segments of concurrent jobs are merged into shared batches, each
job gets exactly its own results in order (equal to `translate_lines`), cancelled jobs free
their queue slots, a full queue refuses, and jobs with other options are never mixed."""

from __future__ import annotations

import dataclasses
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from mt.decode.translate import translate_lines, translate_nbest  # noqa: E402
from mt.deploy.engines import load_engine  # noqa: E402
from mt.serve.batcher import Batcher, BatchStats, QueueFull  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        from tiny_checkpoint import synthetic_sentences, write_random_checkpoint
    finally:
        sys.path.remove(str(REPO / "scripts"))
    path = write_random_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny.pt")
    engine, tokenizer, cfg, dev = load_engine([path], "cpu")
    return engine, tokenizer, cfg, synthetic_sentences(40, 7)


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
