"""Checkpoints: atomic writes, refusing unsafe/corrupt files, round trip, averaging."""

from __future__ import annotations

import dataclasses
import os
import pickle
from pathlib import Path

import pytest
import torch

from mt.config import Config
from mt.data.tokenizer import Tokenizer
from mt.decode.rules import SearchSettings
from mt.errors import MTError
from mt.model.checkpoint import (
    FORMAT_VERSION,
    CheckpointFiles,
    average_checkpoints,
    inference_state,
    load_checkpoint,
    load_for_inference,
    save_checkpoint,
)
from mt.model.transformer import Transformer


@pytest.fixture(scope="module")
def tokenizer(tiny_run: Config) -> Tokenizer:
    return Tokenizer.from_files(tiny_run.run_dir)


def _model(cfg: Config, tok: Tokenizer, seed: int) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(cfg.model, tok.src_vocab_size, tok.tgt_vocab_size, joint_vocab=tok.joint)


def _save(path: Path, cfg: Config, tok: Tokenizer, seed: int) -> Transformer:
    model = _model(cfg, tok, seed)
    save_checkpoint(path, inference_state(cfg, tok, model, update=seed))
    return model


def test_round_trip(tmp_path: Path, tiny_run: Config, tokenizer: Tokenizer) -> None:
    path = tmp_path / "a.pt"
    model = _save(path, tiny_run, tokenizer, seed=1)
    state = load_checkpoint(path)
    assert state["format_version"] == FORMAT_VERSION and state["update"] == 1
    assert isinstance(state["tokenizer"]["src"], bytes)
    loaded, tok, cfg = load_for_inference(path, "cpu")
    assert cfg == tiny_run and not loaded.training
    assert tok.encode_src(["a dog runs"]) == tokenizer.encode_src(["a dog runs"])
    for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("fail_at", ["torch.save", "os.replace"])
def test_crash_during_save_keeps_previous(tmp_path: Path, tiny_run: Config, tokenizer: Tokenizer,
                                          monkeypatch: pytest.MonkeyPatch, fail_at: str) -> None:
    path = tmp_path / "last.pt"
    _save(path, tiny_run, tokenizer, seed=1)
    real_save = torch.save

    def torn_save(obj: object, f: object) -> None:  # writes half a checkpoint, then "crashes"
        real_save(obj, f)
        f.seek(0)  # type: ignore[attr-defined]
        f.truncate(1000)  # type: ignore[attr-defined]
        raise OSError("disk full")

    def failing_replace(src: object, dst: object) -> None:
        raise OSError("power cut")

    if fail_at == "torch.save":
        monkeypatch.setattr(torch, "save", torn_save)
    else:
        monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(MTError, match=f"{path}: cannot write .* the previous file is unchanged"):  # one line
        save_checkpoint(path, inference_state(tiny_run, tokenizer, _model(tiny_run, tokenizer, 2), update=2))
    monkeypatch.undo()
    assert load_checkpoint(path)["update"] == 1  # the previous checkpoint, intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]  # no temp file left behind


class _RunsCode:
    """Unpickling this calls os.system: a checkpoint must never do that."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("writer", ["torch.save", "pickle"])
def test_code_in_pickle_is_refused_and_not_run(tmp_path: Path, writer: str) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    payload = {"kind": "mt-checkpoint", "format_version": FORMAT_VERSION, "model": _RunsCode(marker)}
    if writer == "torch.save":
        torch.save(payload, path)
    else:
        path.write_bytes(pickle.dumps(payload))
    with pytest.raises(MTError, match="evil.pt"):
        load_checkpoint(path)
    assert not marker.exists()
    pickle.loads(pickle.dumps(_RunsCode(marker)))  # the payload does run when unpickled unsafely
    assert marker.exists()


def test_bad_files_are_user_errors(tmp_path: Path, tiny_run: Config, tokenizer: Tokenizer) -> None:
    with pytest.raises(MTError, match="not found"):
        load_checkpoint(tmp_path / "missing.pt")
    noise = tmp_path / "noise.pt"
    noise.write_bytes(os.urandom(4096))
    with pytest.raises(MTError, match="noise.pt"):
        load_checkpoint(noise)
    good = tmp_path / "good.pt"
    _save(good, tiny_run, tokenizer, seed=1)
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(MTError, match="truncated.pt"):
        load_checkpoint(truncated)
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(2)}, other)
    with pytest.raises(MTError, match="not an mt checkpoint"):
        load_checkpoint(other)
    future = tmp_path / "future.pt"
    state = load_checkpoint(good)
    state["format_version"] = FORMAT_VERSION + 1
    save_checkpoint(future, state)
    with pytest.raises(MTError, match="format version"):
        load_checkpoint(future)


def test_average_is_the_mean_and_translates_as_the_mean_model(tmp_path: Path, tiny_run: Config,
                                                               tokenizer: Tokenizer) -> None:
    """`mt average` writes every weight as the mean of the inputs' (computed here by hand), keeps the
    inputs' config and tokenizer, and the file translates exactly as a model built from those mean
    weights (the same greedy token ids), not as either input."""
    from mt.data.batching import collate_source
    from mt.decode.search import greedy_search

    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    ma, mb = _save(a, tiny_run, tokenizer, seed=1), _save(b, tiny_run, tokenizer, seed=2)
    out = tmp_path / "avg.pt"
    average_checkpoints([a, b], out)
    model, tok, cfg = load_for_inference(out, "cpu")
    assert cfg == tiny_run
    mean = {name: (value + mb.state_dict()[name]) / 2 for name, value in ma.state_dict().items()}
    for name, value in model.state_dict().items():
        assert torch.allclose(value, mean[name], atol=1e-7), name
    by_hand = Transformer(tiny_run.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size,
                          joint_vocab=tokenizer.joint)
    by_hand.load_state_dict(mean)
    sentences = ["two dogs play in the snow .", "a man rides a bike .", "people are walking down a busy street ."]
    assert tok.encode_src(sentences) == tokenizer.encode_src(sentences)
    src, src_mask = collate_source(tok.encode_src(sentences))

    def greedy(m: Transformer) -> list[list[int]]:
        return greedy_search(m.eval(), src, src_mask,
                             SearchSettings(max_len_a=1.0, max_len_b=5, forbid_unk=True))

    hyps = greedy(model)
    assert hyps == greedy(by_hand)
    assert hyps != greedy(ma) or hyps != greedy(mb)  # the mean is a model of its own


def test_an_average_says_which_updates_it_holds_and_carries_its_own_validation(
        tmp_path: Path, tiny_run: Config, tokenizer: Tokenizer) -> None:
    """The average of updates 3, 5 and 4 is 'update 5, the average of 3, 5, 4', holds no source's
    validation record, and the trainer's averaged.pt carries the record of its own validation."""
    from mt.deploy.card import checkpoint_card_source

    paths = []
    for seed in (3, 5, 4):
        paths.append(tmp_path / f"u{seed}.pt")
        model = _model(tiny_run, tokenizer, seed)
        state = inference_state(tiny_run, tokenizer, model, update=seed)
        state["valid"] = {"bleu": float(seed), "loss": 1.0}  # as best.pt holds it
        save_checkpoint(paths[-1], state)
    files = CheckpointFiles(tmp_path / "ckpts", tiny_run, tokenizer, keep=3)
    files.dir.mkdir()
    candidate, state = files.average_candidate(paths)
    assert (state["update"], state["averaged_updates"], "valid" in state) == (5, [3, 5, 4], False)
    assert load_checkpoint(candidate)["averaged_updates"] == [3, 5, 4]
    files.keep_averaged(candidate, state, {"bleu": 12.5, "loss": 2.0, "update": 5})
    assert not candidate.exists()
    kept = load_checkpoint(files.averaged)
    assert kept["valid"] == {"bleu": 12.5, "loss": 2.0, "update": 5} and kept["averaged_updates"] == [3, 5, 4]
    card = checkpoint_card_source(kept, files.averaged).card()
    assert (card["update"], card["averaged_updates"], card["validation"]["bleu"]) == (5, [3, 5, 4], 12.5)
    candidate, state = files.average_candidate(paths)
    files.keep_averaged(candidate, state, None)  # validated worse: neither file is left
    assert not candidate.exists() and not files.averaged.exists()


def test_average_refuses_different_models(tmp_path: Path, tiny_run: Config, tokenizer: Tokenizer) -> None:
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    _save(a, tiny_run, tokenizer, seed=1)
    wider = dataclasses.replace(tiny_run, model=dataclasses.replace(tiny_run.model, d_ff=256))
    _save(b, wider, tokenizer, seed=1)
    with pytest.raises(MTError, match="model.d_ff"):
        average_checkpoints([a, b], tmp_path / "avg.pt")
    assert not (tmp_path / "avg.pt").exists()
