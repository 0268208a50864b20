"""The model worker process (`mt.serve.worker.ModelProcess`): the same results as the engine run
in-process, each handed over as it arrives, and so are its choices (the path's choice stage); the
model's provenance sent to the server (so it never reads a checkpoint); a one-line error for a
model that cannot load; a child that survives signals meant for the server, is replaced when it
dies, and stops on close."""

from __future__ import annotations

import dataclasses
import os
import pickle
import signal
import time
from pathlib import Path

import pytest

from mt.deploy.card import model_card_for
from mt.deploy.loading import load_model
from mt.errors import MTError
from mt.model.checkpoint import load_checkpoint, save_checkpoint
from mt.serve.worker import ModelProcess, _load
from mt.textio import sha256_file


@pytest.fixture(scope="module")
def checkpoint(random_ckpt: Path) -> Path:
    return random_ckpt


@pytest.fixture(scope="module")
def worker(checkpoint: Path):
    process = ModelProcess([checkpoint], "cpu", threads=1)
    yield process
    process.close()


def test_results_equal_the_in_process_engine_and_arrive_one_by_one(checkpoint, worker) -> None:
    loaded = load_model([checkpoint], "cpu")
    engine, tokenizer, cfg = loaded.engine, loaded.tokenizer, loaded.config
    assert worker.max_positions == engine.max_positions and worker.loaded.cfg == cfg and worker.loaded.samples
    assert worker.loaded.update == load_checkpoint(checkpoint).get("update", 0)
    assert worker.loaded.provenance == loaded.provenance  # sent over the pipe as it was made
    src = worker.loaded.tokenizer.encode_src(["a b c", "d", "e f g h i j", "k l"])
    assert src == tokenizer.encode_src(["a b c", "d", "e f g h i j", "k l"])
    for n_best in (None, 2):
        decode = cfg.decode if n_best is None else dataclasses.replace(cfg.decode, search=dataclasses.replace(cfg.decode.search, beam=3))
        handed: dict[int, list] = {}
        found = worker.search_ids(src, decode, n_best=n_best, sentence_ids=[0, 1, 2, 3],
                                  on_result=handed.__setitem__)
        expected = engine.search_ids(src, decode, n_best=n_best, sentence_ids=[0, 1, 2, 3])
        assert [[tokens for tokens, _ in r] for r in found] == [[tokens for tokens, _ in r] for r in expected]
        assert sorted(handed) == [0, 1, 2, 3]
        assert [[tokens for tokens, _ in handed[i]] for i in range(4)] == [[t for t, _ in r] for r in found]
        if n_best is not None:
            assert found == expected  # scores too


def test_the_choice_stage_runs_in_the_worker_as_in_process(checkpoint, worker) -> None:
    loaded = load_model([checkpoint], "cpu")
    src = loaded.tokenizer.encode_src(["a b c", "d e"])
    choices = [((9, 10, 11), (9, 12), (13, 9, 10)), ((14,),)]
    for n_best in (None, 2):
        found = worker.choose_ids(src, choices, loaded.config.decode, n_best=n_best)
        in_process = loaded.engine.choose_ids(src, choices, loaded.config.decode,  # type: ignore
                                              n_best=n_best)
        assert found == in_process
        assert [len(r) for r in found] == [n_best or 1, 1]
    with pytest.raises(MTError, match="model worker"):
        worker.choose_ids(src, [(), ()], loaded.config.decode, n_best=None)  # nothing to choose from


def test_the_worker_reports_what_identifies_the_model(checkpoint, tmp_path) -> None:
    """What the child sends (`_load` is what it runs) names the files, their sha256s, the update,
    where the model was fine-tuned from and its card's data, and survives pickling."""
    state = load_checkpoint(checkpoint)
    state["update"] = 1234
    state["init_from"] = {"path": "/runs/base/checkpoints/best.pt", "sha256": "ab" * 32, "update": 77}
    path = tmp_path / "at_1234.pt"
    save_checkpoint(path, state)
    _, model = _load([path, checkpoint], "cpu", 1)  # an ensemble: the first one's update and card
    model = pickle.loads(pickle.dumps(model))
    provenance = model.provenance
    assert model.update == provenance.update == 1234
    assert provenance.files == (path, checkpoint)
    assert provenance.sha256s == (sha256_file(path), sha256_file(checkpoint)) and len(provenance.model_id) == 64
    assert provenance.init_from == (state["init_from"], None)
    assert provenance.card_source.card() == model_card_for(path)


def test_signals_for_the_server_leave_the_worker_alone(worker, checkpoint) -> None:
    pid = worker._proc.pid
    os.kill(pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole process group
    os.kill(pid, signal.SIGTERM)
    cfg = worker.loaded.cfg
    assert worker.search_ids([[5, 6]], cfg.decode, n_best=None, sentence_ids=[0])
    assert worker._proc.pid == pid and worker._proc.is_alive()


def test_a_dead_worker_is_replaced_by_the_next_search(checkpoint) -> None:
    process = ModelProcess([checkpoint], "cpu", threads=1)
    try:
        cfg = process.loaded.cfg
        before = process.search_ids([[5, 6, 7]], cfg.decode, n_best=None, sentence_ids=[0])
        old = process._proc
        os.kill(old.pid, signal.SIGKILL)
        old.join(10)
        after = process.search_ids([[5, 6, 7]], cfg.decode, n_best=None, sentence_ids=[0])
        assert after[0][0][0] == before[0][0][0]
        assert process._proc is not old and process._proc.is_alive()
    finally:
        process.close()
    assert not process._proc.is_alive()


def test_a_model_that_cannot_load_is_one_line_naming_it(tmp_path) -> None:
    bad = tmp_path / "broken.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(MTError) as info:
        ModelProcess([bad], "cpu")
    assert "broken.pt" in str(info.value) and "\n" not in str(info.value)


@pytest.mark.requires("ctranslate2")
def test_an_export_directory_runs_in_the_worker_as_in_process(checkpoint, tmp_path) -> None:
    """`mt export`'s CTranslate2 directory (what `mt serve -c DIR` runs) loads in the child too."""
    from mt.deploy.export import export_ctranslate2

    out = export_ctranslate2(checkpoint, tmp_path / "ct2")
    loaded = load_model([out], "cpu")
    engine, tokenizer, cfg = loaded.engine, loaded.tokenizer, loaded.config
    process = ModelProcess([out], "cpu", threads=1)
    try:
        assert process.loaded.update == engine.info["update"] and process.max_positions == engine.max_positions
        assert process.loaded.provenance == loaded.provenance
        assert not process.loaded.samples  # CTranslate2 searches only: /v1 refuses sampling up front (400)
        src = tokenizer.encode_src(["a b c", "d e"])
        for beam in (1, 3):
            decode = dataclasses.replace(cfg.decode, search=dataclasses.replace(cfg.decode.search, beam=beam))
            got = process.search_ids(src, decode, n_best=beam, sentence_ids=[0, 1])
            assert got == engine.search_ids(src, decode, n_best=beam, sentence_ids=[0, 1])
        with pytest.raises(MTError, match="n_best"):  # a failing search is one line, and the worker goes on
            process.search_ids(src, dataclasses.replace(cfg.decode, search=dataclasses.replace(cfg.decode.search, beam=1)), n_best=2, sentence_ids=[0, 1])
        assert process.search_ids(src, cfg.decode, n_best=None, sentence_ids=[0, 1])
    finally:
        process.close()


def test_the_watcher_keeps_trying_after_a_failed_restart(checkpoint, tmp_path, monkeypatch, caplog) -> None:
    """Issue 45, item 4: a restart that failed (the checkpoint briefly missing while it is being
    replaced, say) used to close the whole ModelProcess, so the watcher stopped though it logged
    "trying again in 10 s", and /health said "a new one is starting" until a request came."""
    monkeypatch.setattr("mt.serve.worker.RETRY_AFTER_FAILURE_S", 0.2)
    served = tmp_path / "served.pt"
    served.write_bytes(checkpoint.read_bytes())
    process = ModelProcess([served], "cpu", threads=1)
    try:
        away = served.rename(tmp_path / "away.pt")
        os.kill(process._proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while "restarting the model worker failed" not in caplog.text:
            assert time.monotonic() < deadline, "the watcher did not try to restart the worker"
            time.sleep(0.1)
        away.rename(served)  # the file is back: the watcher's next try loads it, with no request
        while process.exited() is not None:
            assert time.monotonic() < deadline, "the watcher gave up after one failed restart"
            time.sleep(0.1)
        assert process._proc.is_alive() and process.refused is None
    finally:
        process.close()
