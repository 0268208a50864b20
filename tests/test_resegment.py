"""Subword regularisation (tokenizer.sampling_alpha): per-epoch sampled segmentations of the training split."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from mt.config import Config
from mt.config_checks import check_values
from mt.data.resegment import Resegmenter, SamplingSettings
from mt.data.splits import EncodedSplit, TokenArray, load_split
from mt.data.tokenizer import Tokenizer, train_sentencepiece
from mt.errors import MTError
from tests.conftest import train_stopped_at


def _settings(**changes: object) -> SamplingSettings:
    return dataclasses.replace(SamplingSettings(alpha=0.1, nbest=-1, max_len=1000, seed=1), **changes)


def _texts(tokenizer: Tokenizer, split: EncodedSplit) -> tuple[list[str], list[str]]:
    return (tokenizer.decode_pieces("src", split.src.to_lists()), tokenizer.decode_pieces("tgt", split.tgt.to_lists()))


def test_token_array_from_sequences_round_trips() -> None:
    seqs = [[5, 6, 7], [], [9], [10, 11]]
    array = TokenArray.from_sequences(seqs)
    assert len(array) == 4 and array.lengths().tolist() == [3, 0, 1, 2]
    assert [array[i].tolist() for i in range(4)] == seqs == array.to_lists()
    assert TokenArray.from_sequences([]).to_lists() == []


def test_epochs_resegment_the_same_text_deterministically(tiny_run: Config) -> None:
    """Each epoch: other pieces, the same text; the same epoch twice (a resume): the same ids."""
    split, tokenizer = load_split(tiny_run.run_dir, "train"), Tokenizer.from_files(tiny_run.run_dir)
    reseg = Resegmenter(split, tokenizer, _settings())
    e0, e1 = reseg.epoch(0), reseg.epoch(1)
    again = Resegmenter(split, tokenizer, _settings()).epoch(0)  # a fresh process resuming epoch 0
    assert e0.split.src.to_lists() == again.split.src.to_lists()
    assert e0.split.tgt.to_lists() == again.split.tgt.to_lists()
    assert e0.split.src.to_lists() != e1.split.src.to_lists()
    assert e0.split.tgt.to_lists() != split.tgt.to_lists()
    assert len(e0.split) == len(split)
    assert _texts(tokenizer, e0.split) == _texts(tokenizer, split) == _texts(tokenizer, e1.split)
    # sampling from the whole lattice at alpha 0.1 favours short pieces: more tokens than Viterbi
    assert e0.tokens_ratio > 1.1
    assert reseg.epoch(1) is e1  # asked twice in a row: computed once
    other_seed = Resegmenter(split, tokenizer, _settings(seed=2)).epoch(0)
    assert other_seed.split.tgt.to_lists() != e0.split.tgt.to_lists()


def test_larger_alpha_stays_nearer_the_best_segmentation(tiny_run: Config) -> None:
    split, tokenizer = load_split(tiny_run.run_dir, "train"), Tokenizer.from_files(tiny_run.run_dir)
    ratios = [Resegmenter(split, tokenizer, _settings(alpha=a)).epoch(0).tokens_ratio for a in (0.1, 0.5, 2.0)]
    assert ratios[0] > ratios[1] > ratios[2] >= 1.0


def test_sequences_over_the_limit_keep_their_cached_ids(tiny_run: Config) -> None:
    split, tokenizer = load_split(tiny_run.run_dir, "train"), Tokenizer.from_files(tiny_run.run_dir)
    limit = int(np.median(split.tgt.lengths()))
    epoch = Resegmenter(split, tokenizer, _settings(max_len=limit)).epoch(0)
    for array, cached in ((epoch.split.src, split.src), (epoch.split.tgt, split.tgt)):
        lengths, cached_lengths = array.lengths(), cached.lengths()
        over = lengths > limit
        assert np.array_equal(lengths[over], cached_lengths[over])  # only cached sequences are that long
        assert all(array[i].tolist() == cached[i].tolist() for i in np.flatnonzero(over))
    assert epoch.kept >= int((split.tgt.lengths() > limit).sum())


def test_unknown_pieces_and_tags_survive(tmp_path: Path) -> None:
    """A sequence with <unk> cannot be recovered from its text: it keeps its ids; a target tag in
    front of a source stays in front, the rest is resampled."""
    words = ["house", "garden", "river", "mountain", "street", "window", "bicycle", "kitchen"]
    lines = [" ".join(words[(i + j) % 8] for j in range(1 + i % 5)) for i in range(200)]
    tok_cfg = dataclasses.replace(Config().tokenizer, vocab_size=35, byte_fallback=False)
    tokenizer = train_sentencepiece(lines, lines, tok_cfg, target_langs=["de", "fr"])
    tag = tokenizer.target_tags()["fr"]
    src = [[tag] + ids for ids in tokenizer.encode_src(lines[:50])] + tokenizer.encode_src(["house Ω garden"])
    tgt = tokenizer.encode_tgt(lines[:50] + ["house Ω garden"])
    assert 1 in src[-1] and 1 in tgt[-1]  # <unk>
    split = EncodedSplit(TokenArray.from_sequences(src), TokenArray.from_sequences(tgt))
    reseg = Resegmenter(split, tokenizer, _settings(alpha=0.05))
    assert reseg.invertible_fraction() == pytest.approx(100 / 102)
    epoch = reseg.epoch(3)
    out_src, out_tgt = epoch.split.src.to_lists(), epoch.split.tgt.to_lists()
    assert out_src[-1] == src[-1] and out_tgt[-1] == tgt[-1]
    assert all(seq[0] == tag and tag not in seq[1:] for seq in out_src[:50])
    assert out_src[:50] != src[:50]
    assert tokenizer.decode_pieces("src", out_src) == tokenizer.decode_pieces("src", src)


def test_bpe_dropout(tiny_run: Config) -> None:
    lines = load_split(tiny_run.run_dir, "train")
    tokenizer = Tokenizer.from_files(tiny_run.run_dir)
    text = tokenizer.decode_pieces("tgt", lines.tgt.to_lists()[:500])
    bpe = train_sentencepiece(text, text, dataclasses.replace(tiny_run.tokenizer, type="bpe", vocab_size=400))
    canonical = bpe.encode_tgt(text)
    split = EncodedSplit(TokenArray.from_sequences(bpe.encode_src(text)), TokenArray.from_sequences(canonical))
    epoch = Resegmenter(split, bpe, _settings(alpha=0.1)).epoch(0)
    assert epoch.split.tgt.to_lists() != canonical and epoch.tokens_ratio > 1.0
    assert bpe.decode_pieces("tgt", epoch.split.tgt.to_lists()) == bpe.decode_pieces("tgt", canonical)


@pytest.mark.parametrize("changes,message", [
    ({"sampling_alpha": -0.1}, "tokenizer.sampling_alpha"),
    ({"type": "bpe", "sampling_alpha": 1.0}, "BPE-dropout rate"),
    ({"sampling_nbest": 1}, "tokenizer.sampling_nbest"),
    ({"sampling_nbest": -2}, "tokenizer.sampling_nbest"),
])
def test_bad_sampling_settings_are_one_line(changes: dict, message: str) -> None:
    cfg = Config()
    with pytest.raises(MTError, match=message):
        check_values(dataclasses.replace(cfg, tokenizer=dataclasses.replace(cfg.tokenizer, **changes)))


def test_training_with_sampling_resumes_exactly_across_epochs(tmp_path: Path, tiny_run: Config,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture) -> None:
    """Straight through 2 epochs + 4 updates == SIGTERM in epoch 2, --resume: the resumed session
    re-derives epoch 2's segmentation and batches exactly."""
    import torch
    from test_train import copy_run

    from mt.model.checkpoint import load_checkpoint
    from mt.train.distributed import DistInfo
    from mt.train.epochs import TrainingData
    from mt.train.loop import train

    probe = dataclasses.replace(tiny_run, tokenizer=dataclasses.replace(tiny_run.tokenizer, sampling_alpha=0.2),
                                train=dataclasses.replace(tiny_run.train, pad_multiple=1))  # fp32: auto -> 1
    per_epoch = len(TrainingData(probe, tiny_run.run_dir, load_split(tiny_run.run_dir, "train"),
        Tokenizer.from_files(tiny_run.run_dir), DistInfo(), lambda _: None).epoch(0).batches)
    total, stop_at = 2 * per_epoch + 4, per_epoch + 3
    opts = {"max_updates": total, "valid_every": 0, "valid_bleu": False, "keep_checkpoints": 0, "log_every": 1000,
            "threads": 1}

    def run(name: str) -> Config:
        cfg = copy_run(tiny_run, tmp_path / name, **opts)
        return dataclasses.replace(cfg, tokenizer=dataclasses.replace(cfg.tokenizer, sampling_alpha=0.2))

    straight = run("a")
    train(straight)
    text = capsys.readouterr().out
    assert "subword regularisation: unigram sampling, alpha 0.2" in text and "epoch 2: sampled segmentation" in text
    interrupted = run("b")
    train_stopped_at(interrupted, stop_at, monkeypatch)
    train(interrupted, resume=True)
    a, b = (load_checkpoint(c.run_dir / "checkpoints" / "last.pt") for c in (straight, interrupted))
    assert a["update"] == b["update"] == total
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
