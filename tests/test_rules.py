"""The one search core (mt/decode/rules.py): `search_settings`, the one way from a DecodeConfig to a
search's settings; `apply_rules`, every rule of a step, checked rule by rule on hand-made log-probs;
and CTranslate2's options made from the same settings."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from mt.config import SearchConfig
from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from mt.decode.rules import (
    CONSTRAINED_BEAM,
    Sampling,
    SearchSettings,
    TermStep,
    apply_rules,
    max_output_lengths,
    search_settings,
)

NEG_INF = float("-inf")
V = 10  # PAD UNK BOS EOS and tokens 4..9

def test_every_search_field_reaches_the_settings():
    """decode.search is the search's section whole: each of its keys is a SearchSettings or Sampling
    field (the other sections, text policy, calibration and resources, are not a search's)."""
    searched = {f.name for f in dataclasses.fields(SearchSettings)} | {f.name for f in dataclasses.fields(Sampling)}
    fields = {f.name for f in dataclasses.fields(SearchConfig)}
    assert fields - {"sampling"} <= searched, "a new SearchConfig field: map it in search_settings"


def test_search_settings_maps_a_search_config_whole():
    search = SearchConfig(beam=3, length_penalty="average", alpha=1.2, max_len_a=2.0, max_len_b=7, n_best=3,
                          forbid_unk=False, no_repeat_ngram_size=2, repetition_penalty=1.5, temperature=0.5,
                          top_k=9, top_p=0.8, seed=11)
    settings = search_settings(search, n_best=2, max_len_limit=63)
    assert settings == SearchSettings(beam=3, n_best=2, length_penalty="average", alpha=1.2, max_len_a=2.0,
                                      max_len_b=7, max_len_limit=63, forbid_unk=False, no_repeat_ngram_size=2,
                                      repetition_penalty=1.5, sampling=None)
    drawn = search_settings(dataclasses.replace(search, sampling=True), n_best=5)
    assert drawn.sampling == Sampling(temperature=0.5, top_k=9, top_p=0.8, seed=11) and drawn.n_best == 5
    assert search_settings(dataclasses.replace(search, beam=1), constrained=True).beam == CONSTRAINED_BEAM
    assert search_settings(dataclasses.replace(search, beam=6), constrained=True).beam == 6
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.beam = 4  # type: ignore[misc]


@pytest.mark.parametrize("bad", [dict(beam=0), dict(n_best=0), dict(beam=2, n_best=3), dict(length_penalty="wu")])
def test_settings_are_checked_when_made(bad):
    with pytest.raises(ValueError):
        SearchSettings(**bad)
    assert SearchSettings(beam=1, n_best=4, sampling=Sampling()).n_best == 4  # samples are not bounded by a beam


@pytest.mark.parametrize("bad", [dict(temperature=0.0), dict(top_k=-1), dict(top_p=0.0), dict(top_p=1.2)])
def test_sampling_is_checked_when_made(bad):
    with pytest.raises(ValueError):
        Sampling(**bad)


def test_max_output_lengths_prefix_room_and_limit():
    settings = SearchSettings(max_len_a=1.5, max_len_b=2, max_len_limit=9)
    lengths = torch.tensor([3, 1, 0])
    assert max_output_lengths(lengths, dataclasses.replace(settings, max_len_limit=None)).tolist() == [6, 3, 2]
    assert max_output_lengths(lengths, settings, at_least=torch.tensor([0, 5, 0]),
                              room=torch.tensor([4, 1, 0])).tolist() == [9, 6, 2]
    assert max_output_lengths(lengths, SearchSettings(max_len_a=0.0, max_len_b=-3)).tolist() == [0, 0, 0]


def log_probs(rows: int = 2) -> torch.Tensor:
    return torch.log_softmax(torch.arange(rows * V, dtype=torch.float32).view(rows, V) / 7.0, dim=-1)


def rules(lp: torch.Tensor, settings: SearchSettings, *, at_max=(False, False), history=((4, 5, 4), (6, 6, 7)),
          terms: TermStep | None = None) -> torch.Tensor:
    return apply_rules(lp.clone(), settings, at_max=torch.tensor(at_max),
                       history=lambda: torch.tensor(history, dtype=torch.long), terms=terms)


def test_banned_tokens_and_the_length_limit():
    lp = log_probs()
    out = rules(lp, SearchSettings(forbid_unk=True), at_max=(False, True))
    assert out[:, [PAD_ID, BOS_ID, UNK_ID]].eq(NEG_INF).all()
    assert torch.equal(out[0, 3:], lp[0, 3:])  # nothing renormalised
    assert out[1].tolist() == [NEG_INF] * EOS_ID + [lp[1, EOS_ID].item()] + [NEG_INF] * (V - EOS_ID - 1)
    assert out[0, UNK_ID] == NEG_INF and rules(lp, SearchSettings(forbid_unk=False))[0, UNK_ID] == lp[0, UNK_ID]


def test_the_loop_guard_reads_the_history_only_when_on():
    lp = log_probs()

    def no_history() -> torch.Tensor:
        raise AssertionError("read with the guard off")

    apply_rules(lp.clone(), SearchSettings(), at_max=torch.tensor([False, False]), history=no_history)
    out = rules(lp, SearchSettings(no_repeat_ngram_size=2))
    assert out[0, 5] == NEG_INF and out[1, 7] != NEG_INF  # row 0 ends "4": "4 5" was seen; row 1 ends "7"
    penalised = rules(lp, SearchSettings(repetition_penalty=2.0))
    assert penalised[0, 4] == 2.0 * lp[0, 4] and penalised[1, 4] == lp[1, 4]


def test_term_rules_in_their_order():
    lp = log_probs()
    guard = SearchSettings(no_repeat_ngram_size=1)  # bans every piece a row already holds
    place_tokens = torch.zeros(2, V, dtype=torch.bool)
    place_tokens[0, 4] = True  # row 0 must write piece 4 of a placed term (which it already holds)
    glue = torch.zeros(2, V, dtype=torch.bool)
    glue[1, 8] = True
    avoid = torch.zeros(2, V, dtype=torch.bool)
    avoid[1, 5] = True
    terms = TermStep(all_met=torch.tensor([False, True]), place_rows=torch.tensor([True, False]),
                     place_tokens=place_tokens, glue=glue, avoid=avoid, prefix=None)
    out = rules(lp, guard, terms=terms)
    assert out[0, 4] == lp[0, 4]  # 4: the placed term's piece is not barred by the guard ...
    assert out[0].isfinite().sum() == 1  # 8: ... and the only piece row 0 may write
    assert out[1, EOS_ID] == lp[1, EOS_ID]  # 5: row 1 holds every term: it may end ...
    assert out[0, EOS_ID] == NEG_INF  # ... row 0 may not
    assert out[1, 8] == NEG_INF and out[1, 5] == NEG_INF and out[1, 6] == NEG_INF  # 6 glue, 7 avoid, 3 the guard
    assert out[1, 4] == lp[1, 4] and out[1, 9] == lp[1, 9]  # the others keep the model's log-probs
    ended = rules(lp, guard, at_max=(True, True), terms=dataclasses.replace(terms, place_rows=None,
                                                                              place_tokens=None))
    assert ended[0, EOS_ID] == lp[0, EOS_ID]  # at the maximum length every row ends, terms or not


def test_a_forced_prefix_keeps_the_model_s_own_log_prob():
    lp = log_probs()
    terms = TermStep(all_met=torch.tensor([True, True]), place_rows=None, place_tokens=None, glue=None, avoid=None,
                     prefix=torch.tensor([4, -1]))
    out = rules(lp, SearchSettings(repetition_penalty=3.0), terms=terms)
    assert out[0, 4] == lp[0, 4] and out[0].isfinite().sum() == 1  # not the penalised value: the model's own
    assert out[1, 6] == 3.0 * lp[1, 6] and out[1, 4] == lp[1, 4]  # row 1 has no prefix: the usual rules
    assert math.isfinite(out[1, 5])
    barred = rules(lp, SearchSettings(no_repeat_ngram_size=1), terms=terms)
    assert barred[0, 4] == lp[0, 4]  # the guard would have barred it


def test_ct2_options_come_from_the_same_settings():
    from mt.deploy.ct2 import _NO_PENALTY, ct2_options

    beam = SearchSettings(beam=4, n_best=2, length_penalty="average", alpha=1.0, forbid_unk=False,
                          no_repeat_ngram_size=3, repetition_penalty=1.2)
    options = ct2_options(beam)
    assert (options["beam_size"], options["num_hypotheses"], options["length_penalty"]) == (4, 2, 1.0)
    assert (options["disable_unk"], options["no_repeat_ngram_size"], options["repetition_penalty"]) == (False, 3, 1.2)
    assert ct2_options(dataclasses.replace(beam, length_penalty="gnmt"))["num_hypotheses"] == 4  # re-ranked by mt
    assert ct2_options(dataclasses.replace(beam, beam=1, n_best=1))["length_penalty"] == _NO_PENALTY
