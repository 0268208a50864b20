"""The decoding speed-ups keep results: batch tokenisation and translation equal the line-by-line
path, detokenisation without a per-token loop cuts and filters as before, small searches run on
one thread and leave torch's count as it was, and the decoder cache's per-search state (source
key mask, transposed output projection) follows the rows."""

from __future__ import annotations

import gzip
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mt.config import DecodeConfig, ModelConfig, SearchConfig, TokenizerConfig
from mt.data.batching import collate_source
from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer, train_sentencepiece
from mt.decode import engine as engine_module
from mt.decode.engine import NativeEngine
from mt.decode.translate import translate_lines
from mt.errors import MTWarning
from mt.model.decoder_cache import DecoderCache
from mt.model.transformer import Transformer

pytestmark = pytest.mark.usefixtures("one_thread")

ODD_LINES = [
    "A man in a blue shirt is standing on a ladder.",
    "",
    "   ",
    "Two dogs run through the snow while a child in a red coat watches them from the porch steps.",  # cut
    "Ünïcödé: naïve café, 中文, 🙂 and e\u0301 (combining accent), zero\u200bwidth",
    "tabs\tand  double  spaces ",
    "\u00a0no-break space and NUL-free control \x07 bell",
    "A girl.",
]


@pytest.fixture(scope="module")
def tokenizer(multi30k_dir: Path) -> Tokenizer:
    lines = {lang: gzip.open(multi30k_dir / f"train.{lang}.gz", "rt", encoding="utf-8").read().splitlines()[:1500]
             for lang in ("en", "de")}
    cfg = TokenizerConfig(vocab_size=400, joint=True, byte_fallback=True)
    return train_sentencepiece(lines["en"], lines["de"], cfg)


@pytest.fixture(scope="module")
def model(tokenizer: Tokenizer) -> Transformer:
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, heads=2, encoder_layers=1, decoder_layers=2, d_ff=64, dropout=0.0, max_positions=32)
    return Transformer(cfg, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, joint_vocab=True).eval()


def old_decode_tgt(tokenizer: Tokenizer, ids: list) -> list[str]:
    """The per-token loop decode_tgt had before: cut at the first EOS, drop PAD and BOS."""
    cleaned = []
    for seq in ids:
        out = []
        for i in seq:
            i = int(i)
            if i == EOS_ID:
                break
            if i not in (PAD_ID, BOS_ID):
                out.append(i)
        cleaned.append(out)
    return tokenizer.decode_tgt(cleaned)


def test_batch_encoding_and_decoding_equal_the_per_line_path(tokenizer: Tokenizer) -> None:
    batch = tokenizer.encode_src(ODD_LINES)
    assert batch == [tokenizer.encode_src([line])[0] for line in ODD_LINES]
    assert batch == [tokenizer.encode_src([line], threads=1)[0] for line in ODD_LINES]
    assert tokenizer.decode_tgt(batch) == [tokenizer.decode_tgt([ids])[0] for ids in batch]
    assert tokenizer.decode_tgt(batch)[4] == ODD_LINES[4]  # byte fallback: odd unicode comes back as it was


def test_decode_tgt_cuts_at_eos_drops_pad_and_bos_and_takes_arrays(tokenizer: Tokenizer) -> None:
    g = np.random.default_rng(0)
    seqs = [g.integers(0, 40, size=n).tolist() for n in (0, 1, 5, 12, 30) for _ in range(20)]
    seqs += [[BOS_ID, 50, PAD_ID, 60, EOS_ID, 70], [EOS_ID], [PAD_ID, PAD_ID], [70, 80, EOS_ID, EOS_ID]]
    assert tokenizer.decode_tgt(seqs) == old_decode_tgt(tokenizer, seqs)
    arrays = [np.array(s, dtype=np.int64) for s in seqs]
    tensors = [torch.tensor(s, dtype=torch.long) for s in seqs]
    scalars = [[np.int64(i) for i in s] for s in seqs]
    assert tokenizer.decode_tgt(arrays) == tokenizer.decode_tgt(tensors) == tokenizer.decode_tgt(scalars) == \
        tokenizer.decode_tgt(seqs)


@pytest.mark.parametrize("beam", [1, 3])
def test_translating_a_batch_equals_translating_each_line_alone(model: Transformer, tokenizer: Tokenizer,
                                                                beam: int) -> None:
    decode = DecodeConfig(search=SearchConfig(beam=beam, max_len_a=1.0, max_len_b=3))
    cut = sum(len(ids) > 31 for ids in tokenizer.encode_src([line.strip() for line in ODD_LINES]))
    assert 0 < cut < 6  # of the 6 non-empty lines some are cut to max_positions - 1 = 31 pieces, some not
    with pytest.warns(MTWarning, match=f"{cut} of 8 source lines longer than 31 pieces are truncated"):
        together = translate_lines(model, tokenizer, ODD_LINES, decode, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MTWarning)
        alone = [translate_lines(model, tokenizer, [line], decode, device="cpu")[0] for line in ODD_LINES]
    assert together == alone
    assert together[1] == together[2] == "" and all(together[i] for i in (0, 3, 4, 5, 6, 7))


def test_small_searches_run_on_one_thread_and_restore_the_count(model: Transformer,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    real = engine_module.search_best  # n_best None: the one output with its score

    def spy(*args, **kwargs):  # the thread count the search itself runs with
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(engine_module, "search_best", spy)
    torch.set_num_threads(2)
    try:
        native = NativeEngine(model, "cpu")
        greedy, beam5 = DecodeConfig(search=SearchConfig(beam=1, max_len_b=2)), DecodeConfig(search=SearchConfig(beam=5, max_len_b=2))
        native.search_ids([[5, 6, 7]], greedy, n_best=None, sentence_ids=[0])  # 1 row
        native.search_ids([[5, 6, 7]], beam5, n_best=None, sentence_ids=[0])  # 5 rows
        native.search_ids([[5, 6], [7]], beam5, n_best=None, sentence_ids=[0, 1])  # 10 rows: torch's count
        NativeEngine(model, "cpu", small_rows=0).search_ids([[5]], greedy, n_best=None, sentence_ids=[0])
        assert seen == [1, 1, 2, 2] and torch.get_num_threads() == 2

        def fail(*args, **kwargs):
            raise RuntimeError("boom")

        monkeypatch.setattr(engine_module, "search_best", fail)
        with pytest.raises(RuntimeError, match="boom"):
            native.search_ids([[5]], greedy, n_best=None, sentence_ids=[0])
        assert torch.get_num_threads() == 2  # restored on errors too
    finally:
        torch.set_num_threads(1)


def test_cache_skips_the_mask_without_padding_and_keeps_it_through_reorders(model: Transformer) -> None:
    unpadded, unpadded_mask = collate_source([[5, 6, 7], [8, 9, 10]])
    padded, padded_mask = collate_source([[5, 6, 7], [8]])
    with torch.inference_mode():
        _, cache = model.decode_step(torch.full((2, 1), BOS_ID), model.encode(unpadded, unpadded_mask),
                                     unpadded_mask, None)
        assert cache.key_mask is None
        log_probs, cache = model.decode_step(torch.full((2, 1), BOS_ID), model.encode(padded, padded_mask),
                                             padded_mask, None)
        assert torch.equal(cache.key_mask, padded_mask[:, None, None, :])
        assert torch.equal(cache.output_t, model.tgt_embed.weight.t()) and cache.output_t.is_contiguous()
        flipped = cache.reorder(torch.tensor([1, 0]))
        assert torch.equal(flipped.key_mask, padded_mask.flip(0)[:, None, None, :])
        assert cache.reorder_beams(torch.tensor([0, 0])).key_mask is cache.key_mask
        # The transposed projection gives F.linear's logits (up to the kernel's rounding).
        h = torch.randn(3, model.d_model)
        assert torch.allclose(h @ cache.output_t, F.linear(h, model.tgt_embed.weight), atol=1e-5)
        # The padded row decodes as it does alone (the mask is in force).
        alone, _ = model.decode_step(torch.full((1, 1), BOS_ID), model.encode(padded[1:, :2], padded_mask[1:, :2]),
                                     padded_mask[1:, :2], None)
        assert torch.allclose(log_probs[1:], alone, atol=1e-5)


def test_an_untied_output_projection_keeps_its_bias(tokenizer: Tokenizer) -> None:
    torch.manual_seed(1)
    cfg = ModelConfig(d_model=32, heads=2, encoder_layers=1, decoder_layers=1, d_ff=64, dropout=0.0,
                      tie_embeddings=False)
    untied = Transformer(cfg, 50, 60, joint_vocab=False).eval()
    with torch.no_grad():
        untied.out_proj.bias.normal_()
    src, mask = collate_source([[5, 6, 7, 8]])
    tgt = torch.tensor([[BOS_ID, 9, 10]])
    with torch.inference_mode():
        memory = untied.encode(src, mask)
        full = untied.decode(tgt, memory, mask).log_softmax(dim=-1)  # (1, 3, V)
        cache: DecoderCache | None = None
        for t in range(3):
            step, cache = untied.decode_step(tgt[:, t:t + 1], memory, mask, cache)
            assert torch.allclose(step, full[:, t], atol=1e-5)
