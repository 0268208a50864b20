"""The model and tokenizer options OPUS-MT needs, as options of their own: the `halves` position
layout (Marian's: sines, then cosines), swish, `scale_embedding: false`, a fixed `final_logits_bias`,
and two sentencepiece models over one shared vocabulary (mt.data.vocab)."""

from __future__ import annotations

import math
import pickle
from pathlib import Path

import pytest
import torch

from mt.config import ModelConfig
from mt.data.tokenizer import Tokenizer
from mt.data.vocab import SPECIALS, read_vocab, vocab_bytes
from mt.errors import MTError
from mt.model.layers import FeedForward
from mt.model.transformer import Transformer, sinusoidal_positions
from tests.support.hfdirs import LINES, train_spm


def test_halves_layout_by_hand() -> None:
    pe = sinusoidal_positions(7, 6, "halves")
    for k in range(7):
        for i in range(3):
            angle = k / 10000 ** (2 * i / 6)
            assert pe[k, i] == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[k, 3 + i] == pytest.approx(math.cos(angle), abs=1e-6)
    inter = sinusoidal_positions(7, 6)
    assert torch.equal(inter[:, 0::2], pe[:, :3]) and torch.equal(inter[:, 1::2], pe[:, 3:])


def test_swish_unscaled_embeddings_and_fixed_logit_bias() -> None:
    ff = FeedForward(4, 8, "swish")
    x = torch.randn(2, 3, 4)
    assert torch.allclose(ff(x), ff.down(torch.nn.functional.silu(ff.up(x))))
    cfg = ModelConfig(d_model=8, heads=2, encoder_layers=1, decoder_layers=1, d_ff=16, dropout=0.0,
                      scale_embedding=False, final_logits_bias=True, max_positions=16)
    model = Transformer(cfg, 20, 20, joint_vocab=True).eval()
    assert model.embed_scale == 1.0 and "final_logits_bias" in model.state_dict()
    assert "final_logits_bias" not in dict(model.named_parameters())  # fixed: fine-tuning leaves it
    src, mask, tgt = torch.tensor([[5, 6, 3]]), torch.ones(1, 3, dtype=torch.bool), torch.tensor([[2, 7]])
    before = model(src, mask, tgt)
    model.final_logits_bias[9] = 4.0
    after = model(src, mask, tgt)
    assert torch.allclose(after - before, torch.nn.functional.one_hot(torch.tensor(9), 20) * 4.0, atol=1e-5)
    log_probs, _ = model.decode_step(tgt[:, :1], model.encode(src, mask), mask, None)
    assert torch.allclose(log_probs, after[:, 0].log_softmax(-1), atol=1e-5)  # the search path adds it too


@pytest.fixture(scope="module")
def shared() -> Tokenizer:
    src, tgt = train_spm([s for s, _ in LINES], 60), train_spm([t for _, t in LINES], 80)
    pieces = list(SPECIALS) + ["<2de>"]
    import sentencepiece as spm

    for model in (src, tgt):
        sp = spm.SentencePieceProcessor()
        sp.LoadFromSerializedProto(model)
        pieces += [p for p in (sp.id_to_piece(i) for i in range(sp.get_piece_size())) if p not in pieces
                   and not sp.is_control(sp.piece_to_id(p)) and not sp.is_unknown(sp.piece_to_id(p))]
    pieces.remove("▁Ka")  # a target piece the vocabulary lacks: <unk>
    return Tokenizer.from_bytes(src, tgt, targets=("de",), vocab=vocab_bytes(pieces))


def test_shared_vocabulary_tokenizer(shared: Tokenizer, tmp_path: Path) -> None:
    assert shared.joint and shared.src_vocab_size == shared.tgt_vocab_size
    ids = shared.encode_tgt(["die Katze isst einen Apfel."])[0]
    assert 1 in ids and all(0 <= i < shared.tgt_vocab_size for i in ids)  # ▁Katze -> <unk>
    assert shared.decode_tgt([shared.encode_tgt(["er isst einen Apfel."])[0] + [3, 9]]) == ["er isst einen Apfel."]
    assert shared.target_tags() == {"de": 4} and shared.for_target("de").src_prefix == [4]
    assert shared.decode_pieces("src", [[4, *shared.encode_src(["the cat"])[0]]]) == ["the cat"]  # tags dropped
    assert shared.decode_tgt(shared.encode_src(["the teacher"])) == ["the teacher"]  # source pieces: no "▁" left
    shared.save(tmp_path)
    for again in (Tokenizer.from_files(tmp_path), pickle.loads(pickle.dumps(shared)),
                  Tokenizer.from_bytes(**{"src_model": shared.model_bytes()["src"]}, tgt_model=shared.model_bytes()["tgt"],
                                       vocab=shared.model_bytes()["vocab"])):
        assert again.model_bytes() == shared.model_bytes()
        assert again.encode_src(["He eats an apple."]) == shared.encode_src(["He eats an apple."])


def test_shared_vocabulary_needs_mt_specials() -> None:
    with pytest.raises(MTError, match="ids 0..3 must be <pad>, <unk>, <s>, </s>"):
        read_vocab(vocab_bytes(["</s>", "<unk>", "<pad>", "<s>", "a"]))
    with pytest.raises(MTError, match="not a JSON list"):
        read_vocab(b"{")
