"""Constrained beam search (mt.decode.constrained) and its routing in translation: outputs contain
every constraint (random constraints, every beam, greedy included), a batch equals its sentences
one by one, scores are the model's own, ensembles work, and sentences without terms go through
the unconstrained search unchanged."""

from __future__ import annotations

import random

import pytest
import torch

from mt.config import DecodeConfig, ModelConfig, SearchConfig
from mt.data.batching import collate_source
from mt.data.tokenizer import EOS_ID, UNK_ID
from mt.decode import engine as engine_module
from mt.decode.beam import beam_search
from mt.decode.constrained import allocate, constrained_beam_search
from mt.decode.engine import NativeEngine, search_batch
from mt.decode.forced import force_decode_score
from mt.decode.rules import SearchSettings
from mt.decode.terms import TermConstraints
from mt.decode.translate import translate_lines, translate_texts
from mt.model.ensemble import Ensemble
from mt.model.transformer import Transformer
from mt.text.glossary import parse_glossary
from mt.text.segment import segmenter_for

pytestmark = pytest.mark.usefixtures("one_thread")
V = 40


def make(seed: int) -> Transformer:
    torch.manual_seed(seed)
    cfg = ModelConfig(d_model=32, heads=2, encoder_layers=1, decoder_layers=1, d_ff=64, dropout=0.0, max_positions=64)
    return Transformer(cfg, V, V, joint_vocab=True).eval()


@pytest.fixture(scope="module")
def model() -> Transformer:
    return make(0)


def contains(seq: list[int], part: list[int]) -> bool:
    return any(seq[i:i + len(part)] == part for i in range(len(seq) - len(part) + 1))


def random_case(rng: random.Random, n: int) -> tuple[list[list[int]], list[list[list[int]]]]:
    """n sources and up to 3 constraints of 1-3 tokens each (shared first tokens and repeats happen)."""
    sources = [[rng.randint(4, V - 1) for _ in range(rng.randint(1, 9))] for _ in range(n)]
    constraints = [[[rng.randint(4, V - 1) for _ in range(rng.randint(1, 3))] for _ in range(rng.randint(1, 3))]
                   for _ in range(n)]
    return sources, constraints


def search(model, sources, constraints, *, beam: int = 4, n_best: int = 1, max_len_b: int = 12,
           max_len_limit: int | None = None):
    src, mask = collate_source(sources)
    with torch.inference_mode():
        return constrained_beam_search(model, src, mask, constraints,
                                       SearchSettings(beam=beam, alpha=0.6, length_penalty="gnmt",
                                                      max_len_a=1.0, max_len_b=max_len_b, n_best=n_best,
                                                      forbid_unk=True, max_len_limit=max_len_limit))


@pytest.mark.parametrize("beam", [1, 2, 5])
def test_every_output_contains_every_constraint_and_a_batch_equals_its_sentences_alone(model, beam):
    rng = random.Random(beam)
    for _ in range(6):
        sources, constraints = random_case(rng, 5)
        batched = search(model, sources, constraints, beam=beam)
        for source, cons, hyps in zip(sources, constraints, batched):
            assert all(contains(hyps[0].tokens, c) for c in cons), (hyps[0].tokens, cons)
            assert UNK_ID not in hyps[0].tokens
            assert search(model, [source], [cons], beam=beam)[0][0].tokens == hyps[0].tokens


class EagerEos:
    """A model that would rather end at once: EOS gets +5 at every step (not renormalised)."""

    def __init__(self, model: Transformer) -> None:
        self.model = model

    def encode(self, src, src_mask):
        return self.model.encode(src, src_mask)

    def start_cache(self, memory, src_mask, group=1):
        return self.model.start_cache(memory, src_mask, group)

    def decode_step(self, tokens, memory, src_mask, cache):
        log_probs, cache = self.model.decode_step(tokens, memory, src_mask, cache)
        log_probs[:, EOS_ID] += 5.0
        return log_probs, cache


def test_no_hypothesis_ends_before_it_has_every_constraint(model):
    sources, constraints = random_case(random.Random(11), 6)
    eager = EagerEos(model)
    src, mask = collate_source(sources)
    with torch.inference_mode():
        assert all(h[0].tokens == [] for h in beam_search(eager, src, mask,
                                                          SearchSettings(beam=4, alpha=0.6,
                                                                         length_penalty="gnmt",
                                                                         max_len_a=1.0, max_len_b=12,
                                                                         n_best=1, forbid_unk=True)))
    for hyps, cons in zip(search(eager, sources, constraints), constraints):
        assert all(contains(hyps[0].tokens, c) for c in cons), (hyps[0].tokens, cons)


def test_glued_tokens_never_follow_a_completed_constraint(model):
    sources, constraints = random_case(random.Random(5), 6)
    glue = list(range(4, V - 6))  # only the 6 last tokens (and EOS) may come right after a term
    src, mask = collate_source(sources)
    with torch.inference_mode():
        found = constrained_beam_search(model, src, mask, constraints,
                                        SearchSettings(beam=4, alpha=0.6, length_penalty="gnmt",
                                                       max_len_a=1.0, max_len_b=12, n_best=1,
                                                       forbid_unk=True), glue=glue)
    for hyps, cons in zip(found, constraints):
        tokens = hyps[0].tokens
        assert all(contains(tokens, c) for c in cons)
        for c in cons:  # the first place each constraint is complete
            end = next(i + len(c) for i in range(len(tokens)) if tokens[i:i + len(c)] == c)
            assert end == len(tokens) or tokens[end] not in glue or any(
                tokens[end:end + len(d)] == d for d in cons), (tokens, cons)


def test_scores_are_the_models_own_and_n_best_ranks_full_hypotheses_first(model):
    sources, constraints = random_case(random.Random(7), 4)
    found = search(model, sources, constraints, beam=4, n_best=3)
    src, mask = collate_source(sources)
    for i, hyps in enumerate(found):
        assert len(hyps) == 3
        with torch.inference_mode():
            forced = force_decode_score(model, src[i:i + 1], mask[i:i + 1], [hyps[0].tokens])
        assert float(forced[0]) == pytest.approx(hyps[0].log_prob, abs=1e-4)
        assert all(contains(hyps[0].tokens, c) for c in constraints[i])


def test_the_output_may_grow_by_its_constraints_pieces(model):
    """A short sentence with long terms: 1 * 3 (EOS counted) + 4 = 7 tokens before EOS would not hold
    their 8; the limit grows by them, so both are kept."""
    long = [[5, 6, 7, 8], [9, 10, 11, 12]]
    hyp = search(model, [[4, 5]], [long], max_len_b=4)[0][0]
    assert contains(hyp.tokens, [5, 6, 7, 8]) and contains(hyp.tokens, [9, 10, 11, 12]) and len(hyp.tokens) <= 7 + 8


def test_constraints_that_cannot_fit_give_the_hypothesis_meeting_the_most(model):
    long = [[5, 6, 7, 8], [9, 10, 11, 12]]  # 8 tokens, but the model's positions allow 7 before EOS
    hyps = search(model, [[4, 5]], [long], max_len_b=4, max_len_limit=7)[0]
    assert len(hyps[0].tokens) <= 7 and contains(hyps[0].tokens, [5, 6, 7, 8]) != contains(hyps[0].tokens, [9, 10, 11, 12])


def test_allocate_goes_round_robin_over_banks_best_first_and_leaves_minus_inf_last():
    values = torch.tensor([[-1.0, -2.0, -3.0, -0.5, float("-inf"), -4.0]])
    banks = torch.tensor([[0, 0, 2, 0, 2, 1]])
    # bank 2: c2; bank 1: c5; bank 0: c3, c0, c1 (best first); then the -inf one
    assert allocate(values, banks).tolist() == [[2, 5, 3, 0, 1, 4]]


def test_ensembles_and_greedy_search_batch_keep_constraints(model):
    sources, constraints = random_case(random.Random(3), 4)
    src, mask = collate_source(sources)
    pair = Ensemble([model, make(1)])
    with torch.inference_mode():
        alone = constrained_beam_search(Ensemble([model]), src, mask, constraints,
                                        SearchSettings(beam=4, alpha=0.6, length_penalty="gnmt",
                                                       max_len_a=1.0, max_len_b=12, n_best=1,
                                                       forbid_unk=True))
        assert alone == search(model, sources, constraints)  # an ensemble of one is the model
        for m in (pair, model):  # decode.beam 1: a small constrained beam, not greedy
            out = search_batch(m, src, mask, DecodeConfig(search=SearchConfig(beam=1, max_len_a=1.0, max_len_b=12)), constraints=constraints)
            assert all(contains(o, c) for o, cons in zip(out, constraints) for c in cons)


class Chars:
    """Tokenizer double: one piece per letter (a-z -> 4..29), outputs shown as their ids."""

    def encode_src(self, lines: list[str]) -> list[list[int]]:
        return [[4 + (ord(c) - ord("a")) % 26 for c in line if c.isalpha()] for line in lines]

    def decode_tgt(self, seqs: list[list[int]]) -> list[str]:
        return [" ".join(map(str, seq)) for seq in seqs]


class Spy(NativeEngine):
    """A NativeEngine recording whether each search it ran had constraints."""

    def __init__(self, model: Transformer) -> None:
        super().__init__(model, "cpu")
        self.calls: list[bool] = []

    def search_ids(self, *args, constraints=None, **kwargs):  # type: ignore[override]
        self.calls.append(constraints is not None)
        return super().search_ids(*args, constraints=constraints, **kwargs)


TERMS = TermConstraints(parse_glossary(b"cat\tkatze\nnew york\n", "t.tsv"), {"katze": [14, 4, 23], "new york": [9, 9]})
LINES = ["the cat sat", "no term here", "dogs run", "new york cat", "", "another plain line"]


@pytest.mark.parametrize("beam", [1, 3])
def test_translate_lines_keeps_terms_and_leaves_sentences_without_terms_unchanged(model, beam):
    decode = DecodeConfig(search=SearchConfig(beam=beam, max_len_a=1.0, max_len_b=6))
    plain = translate_lines(model, Chars(), LINES, decode, device="cpu")
    spy = Spy(model)
    kept = translate_lines(spy, Chars(), LINES, decode, device="cpu", glossary=TERMS)
    assert [kept[i] for i in (1, 2, 4, 5)] == [plain[i] for i in (1, 2, 4, 5)]  # byte-identical
    assert " 14 4 23 " in f" {kept[0]} " and " 14 4 23 " in f" {kept[3]} " and " 9 9 " in f" {kept[3]} "
    assert spy.calls.count(True) == 1  # the two lines with terms, in one constrained batch
    spy.calls.clear()
    assert translate_lines(spy, Chars(), [LINES[i] for i in (1, 2, 5)], decode, device="cpu", glossary=TERMS) == [
        plain[i] for i in (1, 2, 5)]
    assert spy.calls == [False]  # no term found: the unconstrained search alone, as without a glossary


def test_terms_inside_paragraphs_are_kept_sentence_by_sentence(model):
    decode = DecodeConfig(search=SearchConfig(beam=1, max_len_a=1.0, max_len_b=6))
    text = "No term here.  The cat sat!\nAnother line."
    out = translate_texts(model, Chars(), [text], decode, device="cpu", segmenter=segmenter_for("en"), glossary=TERMS)
    plain = translate_texts(model, Chars(), [text], decode, device="cpu", segmenter=segmenter_for("en"))
    first, second = out[0].split("\n")
    assert first.startswith(plain[0].split("  ")[0] + "  ") and " 14 4 23 " in f" {first.split('  ')[1]} "
    assert second == plain[0].split("\n")[1]


def test_sampling_with_constraints_is_refused(model):
    src, mask = collate_source([[5, 6]])
    with pytest.raises(engine_module.MTError, match="--sampling .* cannot keep a glossary's terms"):
        search_batch(model, src, mask, DecodeConfig(search=SearchConfig(sampling=True)), constraints=[[[5]]])
