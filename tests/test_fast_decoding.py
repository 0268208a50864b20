"""The fast decoding pieces: chunked argmax/top-k equal torch's, and the preallocated decoder
cache gives full-decoding results past its first growth and when decoded from twice."""

from __future__ import annotations

import pytest
import torch

import mt.device
from conftest import require
from mt.config import ModelConfig, SearchConfig
from mt.decode.search import argmax_rows, topk_candidates
from mt.device import cpu_isa
from mt.model import decoder_cache
from mt.model.decoder_cache import INITIAL_CAPACITY, PACKED_ROWS
from mt.model.layers import attend_one
from mt.model.transformer import Transformer

pytestmark = pytest.mark.usefixtures("one_thread")


def plain_topk(scores: torch.Tensor, log_probs: torch.Tensor, k: int):
    n, beam = scores.shape
    vocab = log_probs.size(1)
    values, flat = (scores.reshape(n * beam, 1) + log_probs).view(n, beam * vocab).topk(k, dim=1)
    return values, flat // vocab, flat % vocab


@pytest.mark.parametrize("vocab", [5, 63, 64, 65, 200, 1000])
@pytest.mark.parametrize("beam", [1, 3, 5])
def test_topk_candidates_equal_plain_topk(vocab: int, beam: int) -> None:
    g = torch.Generator().manual_seed(vocab * 10 + beam)
    n = 7
    log_probs = torch.randn(n * beam, vocab, generator=g).log_softmax(-1)
    log_probs[:, 0] = float("-inf")  # banned tokens
    log_probs[3, 1:] = float("-inf")  # a forced-EOS row
    scores = torch.randn(n, beam, generator=g)
    scores[:2, 1:] = float("-inf")  # first step: one live hypothesis
    k = min(2 * beam, beam * vocab)
    want, got = plain_topk(scores, log_probs, k), topk_candidates(scores, log_probs, k)
    assert torch.equal(want[0], got[0])
    finite = torch.isfinite(want[0])  # which -inf candidate fills a slot is arbitrary
    assert torch.equal(want[1][finite], got[1][finite]) and torch.equal(want[2][finite], got[2][finite])


@pytest.mark.parametrize("vocab", [1, 7, 64, 130, 8000])
def test_argmax_rows_equals_argmax_first_on_ties(vocab: int) -> None:
    x = torch.randn(9, vocab, generator=torch.Generator().manual_seed(vocab))
    x[1] = 0.0  # all tied: the first index
    x[2] = float("-inf")
    x[2, vocab - 1] = 1.0
    x[3, vocab // 2:] = 5.0  # ties straddling chunks
    assert torch.equal(argmax_rows(x), x.argmax(dim=1))


def test_attend_one_equals_sdpa() -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(3, 2, 1, 8, generator=g), torch.randn(3, 2, 5, 8, generator=g), torch.randn(3, 2, 5, 8, generator=g)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.bool)[:, None, None, :]
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(attend_one(q, k, v, mask), want, atol=1e-6, rtol=0)


def _model(tie: bool = True) -> Transformer:
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=16, heads=2, encoder_layers=1, decoder_layers=2, d_ff=32, dropout=0.0,
                      max_positions=64, tie_embeddings=tie)
    model = Transformer(cfg, 30, 30, joint_vocab=True).eval()
    if model.out_proj is not None:  # an untied output layer has a bias: make it matter
        torch.nn.init.normal_(model.out_proj.bias)
    return model


@torch.no_grad()
def test_cache_grows_and_copies_on_write() -> None:
    model = _model()
    src = torch.randint(4, 30, (3, 6), generator=torch.Generator().manual_seed(1))
    src_mask = torch.ones_like(src, dtype=torch.bool)
    tgt = torch.randint(4, 30, (3, 2 * INITIAL_CAPACITY + 3), generator=torch.Generator().manual_seed(2))
    memory = model.encode(src, src_mask)
    full = model.decode(tgt, memory, src_mask).log_softmax(-1)  # (B, T, V)
    cache, steps = None, []
    for t in range(tgt.size(1)):  # past two growths of the buffers
        log_probs, cache = model.decode_step(tgt[:, t:t + 1], memory, src_mask, cache)
        steps.append(log_probs)
        if t == 4:
            branch = cache
    assert cache.length == tgt.size(1) and cache.k_bufs[0].size(0) >= tgt.size(1)
    torch.testing.assert_close(torch.stack(steps, 1), full, atol=1e-5, rtol=0)
    # decoding again from an earlier cache (its buffers now hold later positions) copies first
    other = torch.full((3, 1), 7)
    got, _ = model.decode_step(other, memory, src_mask, branch)
    want = model.decode(torch.cat([tgt[:, :5], other], 1), memory, src_mask).log_softmax(-1)[:, -1]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    # ... and the main line is unaffected
    again, _ = model.decode_step(tgt[:, -1:], memory, src_mask, cache.reorder(torch.arange(3)))
    want = model.decode(torch.cat([tgt, tgt[:, -1:]], 1), memory, src_mask).log_softmax(-1)[:, -1]
    torch.testing.assert_close(again, want, atol=1e-5, rtol=0)


@pytest.mark.requires("onednn packed linear")
@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied-with-bias"])
def test_packed_output_weight_gives_the_plain_logits(monkeypatch: pytest.MonkeyPatch, tie: bool) -> None:
    """Where the CPU prefers oneDNN (forced here), a search of PACKED_ROWS rows or more projects
    through the packed weight, with the plain product's log-probs, also after rows leave; fewer
    rows, or gradients on, keep the plain product."""
    monkeypatch.setattr(decoder_cache, "prefers_onednn_linear", lambda weight: True)
    model, rows = _model(tie), PACKED_ROWS + 1
    src = torch.randint(4, 30, (rows, 5), generator=torch.Generator().manual_seed(5))
    src_mask = torch.ones_like(src, dtype=torch.bool)
    tgt = torch.randint(4, 30, (rows, 4), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        full = model.decode(tgt, memory, src_mask).log_softmax(-1)  # (B, T, V)
        cache = model.start_cache(memory, src_mask)
        assert cache.output_packed is not None and cache.output_t is None
        for t in range(3):
            log_probs, cache = model.decode_step(tgt[:, t:t + 1], memory, src_mask, cache)
            torch.testing.assert_close(log_probs, full[:, t], atol=1e-5, rtol=0)
        keep = torch.tensor([0, 2])  # down to 2 rows: the packed weight serves any row count
        log_probs, _ = model.decode_step(tgt[keep, 3:4], memory, src_mask, cache.reorder(keep))
        torch.testing.assert_close(log_probs, full[keep, 3], atol=1e-5, rtol=0)
        assert model.start_cache(memory[:PACKED_ROWS - 1], src_mask[:PACKED_ROWS - 1]).output_packed is None
    assert model.start_cache(memory, src_mask).output_packed is None  # gradients on: no packing


# The first CPU of /proc/cpuinfo on the machine kinds mt runs on, and what a float32 search of
# PACKED_ROWS rows must do there, written out by hand: the output weight packed for oneDNN on
# non-Intel CPUs (MKL's vendor-picked kernels are slow there), the plain product on Intel, with or
# without AMX; the plain product too where torch lacks the oneDNN ops (the fallback). And the int8
# ISA `cpu_isa` names for the benchmarks and the export's check.
CPUS = [  # id, vendor_id, flags (the relevant ones), torch has the oneDNN ops, packed, cpu_isa
    ("zen3", "AuthenticAMD", "sse4_2 avx fma avx2 bmi2 sha_ni vaes", True, True, "AVX2"),
    ("zen4", "AuthenticAMD", "avx2 avx512f avx512bw avx512vl avx512_bf16 avx512_vnni", True, True, "AVX-512 VNNI"),
    ("intel-amx", "GenuineIntel", "avx2 avx512f avx512bw avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8", True,
     False, "AVX-512 VNNI"),
    ("intel-avx512", "GenuineIntel", "avx2 avx512f avx512bw avx512vl", True, False, "AVX-512"),
    ("intel-avx2", "GenuineIntel", "avx fma avx2", True, False, "AVX2"),
    ("zen4-torch-without-onednn", "AuthenticAMD", "avx2 avx512f avx512_bf16 avx512_vnni", False, False,
     "AVX-512 VNNI"),
]


@pytest.mark.parametrize("vendor, flags, has_op, packed, isa", [c[1:] for c in CPUS], ids=[c[0] for c in CPUS])
def test_search_routes_the_output_product_by_cpu(monkeypatch: pytest.MonkeyPatch, vendor: str, flags: str,
                                                  has_op: bool, packed: bool, isa: str) -> None:
    """On each kind of CPU (its /proc/cpuinfo faked, so every row runs on any machine) a search of
    PACKED_ROWS rows takes the route of the table above, and either route gives the plain log-probs."""
    if has_op:
        require("onednn packed linear")
    else:
        monkeypatch.setattr(mt.device, "onednn_linear_available", lambda: False)
    monkeypatch.setattr(mt.device, "_cpuinfo_fields", lambda: {"vendor_id": vendor, "flags": flags})
    for var in ("CT2_FORCE_CPU_ISA", "ONEDNN_MAX_CPU_ISA"):
        monkeypatch.delenv(var, raising=False)
    assert cpu_isa() == isa
    model = _model(tie=False)
    src = torch.randint(4, 30, (PACKED_ROWS, 5), generator=torch.Generator().manual_seed(7))
    src_mask = torch.ones_like(src, dtype=torch.bool)
    tgt = torch.randint(4, 30, (PACKED_ROWS, 2), generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        full = model.decode(tgt, memory, src_mask).log_softmax(-1)
        cache = model.start_cache(memory, src_mask)
        assert (cache.output_packed is not None, cache.output_t is not None) == (packed, not packed)
        for t in range(2):
            log_probs, cache = model.decode_step(tgt[:, t:t + 1], memory, src_mask, cache)
            torch.testing.assert_close(log_probs, full[:, t], atol=1e-5, rtol=0)


@torch.no_grad()
def test_grouped_cross_attention_equals_one_entry_per_row() -> None:
    """A cache with one cross-attention entry per sentence, shared by its K rows (`group`), decodes
    what the per-row cache decodes, through beam reorders and a sentence leaving."""
    model, k = _model(), 3
    src = torch.randint(4, 30, (2, 6), generator=torch.Generator().manual_seed(3))
    src_mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])  # padding masked per sentence
    memory = model.encode(src, src_mask)
    rows = torch.arange(2).repeat_interleave(k)  # (6,) sentence-major beam rows
    grouped = model.start_cache(memory, src_mask, group=k)
    per_row: object = None
    assert grouped.cross_k[0].size(0) == 2 and grouped.key_mask.size(0) == 2
    tokens = torch.randint(4, 30, (6, 1), generator=torch.Generator().manual_seed(4))
    beams = torch.tensor([1, 0, 0, 5, 3, 4])  # rows move among their own sentence's beams
    for step in range(4):
        got, grouped = model.decode_step(tokens, memory, src_mask, grouped)
        want, per_row = model.decode_step(tokens, memory[rows], src_mask[rows], per_row)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
        grouped, per_row = grouped.reorder_beams(beams), per_row.reorder_beams(beams)
        tokens = (tokens + step + 1) % 26 + 4
    keep = torch.tensor([5, 3, 4])  # sentence 0 leaves: the cross entries follow index[::k] // k
    grouped, per_row = grouped.reorder(keep), per_row.reorder(keep)
    assert grouped.cross_k[0].size(0) == 1 and torch.equal(grouped.cross_k[0][0], per_row.cross_k[0][0])
    got, _ = model.decode_step(tokens[:3], memory, src_mask, grouped)
    want, _ = model.decode_step(tokens[:3], memory[rows], src_mask[rows], per_row)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_bf16_precision_is_opt_in_and_needs_native_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    import mt.decode.engine as engines
    from mt.config import DecodeConfig
    from mt.decode.overrides import DecodeOverrides, apply_overrides
    from mt.errors import MTError

    model = _model()
    decode = apply_overrides(DecodeConfig(search=SearchConfig(beam=2, max_len_b=5)), DecodeOverrides())
    assert decode.resources.precision == "fp32"
    with pytest.raises(MTError, match="--precision"):
        apply_overrides(decode, DecodeOverrides(precision="fp16"))
    bf16 = apply_overrides(decode, DecodeOverrides(precision="bf16"))
    src = [[5, 6, 7], [8, 9]]
    monkeypatch.setattr(engines, "bf16_feature", lambda device: "AMX")  # run the bf16 branch on any CPU
    engine = engines.NativeEngine(model, "cpu")
    out = engine.search_ids(src, bf16, n_best=None, sentence_ids=[0, 1])
    assert len(out) == 2 and all(isinstance(t, int) for hyps in out for t in hyps[0][0])
    assert next(model.parameters()).dtype == torch.float32  # the caller's model is left as it was
    monkeypatch.setattr(engines, "bf16_feature", lambda device: None)
    with pytest.raises(MTError, match="native bf16"):
        engines.NativeEngine(model, "cpu").search_ids(src, bf16, n_best=None, sentence_ids=[0, 1])
