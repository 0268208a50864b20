"""Ensembles: one member equals the model, two copies equal the model, the mixture's maths by
hand, n-best scores equal the ensemble's forced-decoding scores, and loading checks."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mt.config import Config, ModelConfig
from mt.data.batching import collate_source
from mt.data.tokenizer import BOS_ID, Tokenizer
from mt.decode.beam import beam_search
from mt.decode.forced import force_decode_score
from mt.decode.rules import Sampling, SearchSettings
from mt.decode.sampling import sample_search
from mt.decode.search import greedy_search
from mt.deploy.loading import load_model
from mt.errors import MTError
from mt.model.ensemble import Ensemble, EnsembleCache, check_compatible, max_positions
from mt.model.transformer import Transformer

pytestmark = pytest.mark.usefixtures("one_thread")

V = 24


def make(seed: int, d_model: int = 32, max_positions: int = 64) -> Transformer:
    torch.manual_seed(seed)
    cfg = ModelConfig(d_model=d_model, heads=2, encoder_layers=2, decoder_layers=2, d_ff=2 * d_model, dropout=0.0,
                      max_positions=max_positions)
    return Transformer(cfg, V, V, joint_vocab=True).eval()


def batch(lengths=(5, 1, 8, 3, 6), seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    seqs = [torch.randint(4, V, (n,), generator=g).tolist() for n in lengths]
    src, mask = collate_source(seqs)
    return seqs, src, mask


def decode_all(model, src, mask, *, k=3):
    """Greedy, beam n-best and samples of one model on one batch."""
    with torch.inference_mode():
        greedy = greedy_search(model, src, mask, SearchSettings(max_len_a=1.0, max_len_b=4, forbid_unk=True))
        beams = beam_search(model, src, mask,
                            SearchSettings(beam=k, alpha=0.6, length_penalty="gnmt", max_len_a=1.0,
                                           max_len_b=4, n_best=k, forbid_unk=True))
        samples = sample_search(model, src, mask,
                                SearchSettings(n_best=3, alpha=0.6, length_penalty="gnmt", max_len_a=1.0,
                                               max_len_b=4, forbid_unk=True,
                                               sampling=Sampling(temperature=1.0, top_k=0, top_p=0.9,
                                                                 seed=3)))
    return greedy, beams, samples


def test_ensemble_of_one_is_the_model():
    model = make(0)
    _, src, mask = batch()
    greedy, beams, samples = decode_all(model, src, mask)
    e_greedy, e_beams, e_samples = decode_all(Ensemble([model]), src, mask)
    assert e_greedy == greedy
    assert e_beams == beams  # Hypothesis equality: tokens and exactly the same scores
    assert e_samples == samples


def test_ensemble_of_two_copies_is_the_model():
    model = make(1)
    _, src, mask = batch(seed=1)
    greedy, beams, samples = decode_all(model, src, mask)
    e_greedy, e_beams, e_samples = decode_all(Ensemble([model, make(1)]), src, mask)
    assert e_greedy == greedy
    for ours, theirs in ((e_beams, beams), (e_samples, samples)):
        assert [[h.tokens for h in hs] for hs in ours] == [[h.tokens for h in hs] for hs in theirs]
        assert [h.log_prob for hs in ours for h in hs] == pytest.approx([h.log_prob for hs in theirs for h in hs],
                                                                        abs=1e-4)


def test_ensemble_step_is_the_log_of_the_mean_probability():
    a, b = make(2), make(3, d_model=16)  # members of different widths
    ens = Ensemble([a, b])
    _, src, mask = batch((4, 2))
    tokens = torch.full((2, 1), BOS_ID)
    with torch.inference_mode():
        memory = ens.encode(src, mask)
        assert memory.shape == (2, src.size(1), 32 + 16)
        lp, cache = ens.decode_step(tokens, memory, mask, None)
        lp_a, _ = a.decode_step(tokens, a.encode(src, mask), mask, None)
        lp_b, _ = b.decode_step(tokens, b.encode(src, mask), mask, None)
    expected = torch.log((lp_a.exp() + lp_b.exp()) / 2)
    torch.testing.assert_close(lp, expected)
    assert lp.exp().sum(dim=1).tolist() == pytest.approx([1.0, 1.0], abs=1e-5)  # a normalised distribution
    assert isinstance(cache, EnsembleCache) and len(cache.caches) == 2
    moved = cache.reorder(torch.tensor([1, 1, 0]))
    assert all(c.self_k[0].size(0) == 3 for c in moved.caches)
    assert all(c.self_k[0].size(0) == 2 for c in cache.reorder_beams(torch.tensor([1, 0])).caches)
    # forward gives the same mixture for the full sequence (first position = this step)
    with torch.inference_mode():
        full = ens(src, mask, tokens)
    torch.testing.assert_close(full[:, 0], expected)
    assert max_positions(ens) == 64 and max_positions(Ensemble([a, make(4, max_positions=32)])) == 32
    assert max_positions(a) == 64


def test_ensemble_nbest_scores_equal_its_forced_decoding():
    ens = Ensemble([make(5), make(6), make(7, d_model=16)])
    seqs, src, mask = batch((6, 2, 9, 4), seed=2)
    with torch.inference_mode():
        hyps = beam_search(ens, src, mask,
                           SearchSettings(beam=4, alpha=0.6, length_penalty="gnmt", max_len_a=1.0,
                                          max_len_b=3, n_best=4, forbid_unk=True))
        samples = sample_search(ens, src, mask,
                                SearchSettings(n_best=4, alpha=0.6, length_penalty="gnmt", max_len_a=1.0,
                                               max_len_b=3, forbid_unk=True,
                                               sampling=Sampling(temperature=1.0, top_k=0, top_p=1.0,
                                                                 seed=1)))
        for i, seq in enumerate(seqs):
            s, m = collate_source([seq])
            for found in (hyps[i], samples[i]):
                forced = force_decode_score(ens, s.expand(4, -1), m.expand(4, -1), [h.tokens for h in found])
                assert [h.log_prob for h in found] == pytest.approx(forced.tolist(), abs=1e-4)
            alone = beam_search(ens, s, m,
                                SearchSettings(beam=4, alpha=0.6, length_penalty="gnmt", max_len_a=1.0,
                                               max_len_b=3, n_best=4, forbid_unk=True))[0]
            assert [h.tokens for h in alone] == [h.tokens for h in hyps[i]]  # batch-invariant too
        # and the ensemble's scores are not simply one member's
        member = force_decode_score(make(5), src, mask, [h[0].tokens for h in hyps])
        mixed = force_decode_score(ens, src, mask, [h[0].tokens for h in hyps])
    assert (member - mixed).abs().max() > 1e-2


def test_ensemble_modes_follow_members():
    ens = Ensemble([make(0), make(1)])
    ens.train()
    assert all(m.training for m in ens.members)
    ens.eval()
    assert not any(m.training for m in ens.members)
    with pytest.raises(ValueError):
        Ensemble([])


class _FakeTokenizer:
    def __init__(self, models: dict[str, bytes]) -> None:
        self.models = models

    def model_bytes(self) -> dict[str, bytes]:
        return self.models


def test_check_compatible_names_both_files():
    same = [_FakeTokenizer({"src": b"x"}), _FakeTokenizer({"src": b"x"})]
    en_de = [("en", "de")]
    check_compatible([Path("a.pt"), Path("b.pt")], same, [en_de, en_de])  # no error
    with pytest.raises(MTError, match=r"a\.pt and c\.pt"):
        check_compatible([Path("a.pt"), Path("b.pt"), Path("c.pt")], [*same, _FakeTokenizer({"src": b"y"})], [en_de] * 3)
    with pytest.raises(MTError, match=r"a\.pt and b\.pt"):
        check_compatible([Path("a.pt"), Path("b.pt")], [same[0], _FakeTokenizer({"src": b"x", "tgt": b"x"})], [en_de] * 2)


def test_check_compatible_refuses_members_of_other_language_pairs():
    """de->en and en->de checkpoints can share one joint sentencepiece model; mixed, they write
    garbage ("A a a a ..."), so the ensemble is refused naming both files and their pairs."""
    same = [_FakeTokenizer({"src": b"x"})] * 3
    with pytest.raises(MTError, match=r"^ensemble: a\.pt translates en->de but b\.pt translates de->en; "):
        check_compatible([Path("a.pt"), Path("b.pt")], same[:2], [[("en", "de")], [("de", "en")]])
    with pytest.raises(MTError, match=r"a\.pt translates en->de, en->fr but c\.pt translates en->de"):
        check_compatible([Path("a.pt"), Path("b.pt"), Path("c.pt")], same,
                         [[("en", "de"), ("en", "fr")]] * 2 + [[("en", "de")]])


def test_load_model_of_several_checkpoints_is_their_ensemble(tmp_path: Path, tiny_run: Config):
    from mt.model.checkpoint import inference_state, save_checkpoint

    tok = Tokenizer.from_files(tiny_run.run_dir)
    paths = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        model = Transformer(tiny_run.model, tok.src_vocab_size, tok.tgt_vocab_size, joint_vocab=tok.joint)
        paths.append(tmp_path / f"m{seed}.pt")
        save_checkpoint(paths[-1], inference_state(tiny_run, tok, model, update=seed))
    single = load_model(paths[:1], "cpu").engine.model
    assert isinstance(single, Transformer)
    loaded = load_model(paths, "cpu")
    ens, ens_tok, cfg = loaded.engine.model, loaded.tokenizer, loaded.config
    assert isinstance(ens, Ensemble) and len(ens.members) == 2 and not ens.training
    assert cfg == tiny_run and ens_tok.model_bytes() == tok.model_bytes()
    # a checkpoint with another tokenizer (separate source/target models) cannot join
    split_tok = Tokenizer.from_bytes(tok.model_bytes()["src"], tok.model_bytes()["src"])
    torch.manual_seed(3)
    other = Transformer(tiny_run.model, split_tok.src_vocab_size, split_tok.tgt_vocab_size, joint_vocab=False)
    save_checkpoint(tmp_path / "other.pt", inference_state(tiny_run, split_tok, other, update=3))
    with pytest.raises(MTError, match=r"m1\.pt and .*other\.pt"):
        load_model([paths[0], tmp_path / "other.pt"], "cpu")
    with pytest.raises(MTError):
        load_model([], "cpu")


@pytest.mark.parametrize("command", ["translate", "score", "evaluate"])
def test_every_command_refuses_an_ensemble_of_opposite_directions(command: str, tmp_path: Path, tiny_run: Config):
    """An en->de and a de->en checkpoint sharing one joint tokenizer, through the real CLI: one
    line naming both, exit 2, nothing written."""
    import dataclasses
    import subprocess
    import sys

    from mt.model.checkpoint import inference_state, save_checkpoint

    tok = Tokenizer.from_files(tiny_run.run_dir)
    de_en = dataclasses.replace(tiny_run, data=dataclasses.replace(tiny_run.data, src_lang="de", tgt_lang="en"))
    paths = []
    for seed, cfg in ((1, tiny_run), (2, de_en)):
        torch.manual_seed(seed)
        model = Transformer(cfg.model, tok.src_vocab_size, tok.tgt_vocab_size, joint_vocab=tok.joint)
        paths.append(tmp_path / f"{cfg.data.src_lang}_{cfg.data.tgt_lang}.pt")
        save_checkpoint(paths[-1], inference_state(cfg, tok, model, update=seed))
    (tmp_path / "in.txt").write_text("a dog runs .\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    args = {"translate": ["-i", tmp_path / "in.txt", "-o", out],
            "score": ["--src", tmp_path / "in.txt", "--tgt", tmp_path / "in.txt", "-o", out],
            "evaluate": ["--src", tmp_path / "in.txt", "--ref", tmp_path / "in.txt", "--out-dir", tmp_path / "eval"]}[command]
    proc = subprocess.run([sys.executable, "-m", "mt", command, "-c", paths[0], "-c", paths[1], *map(str, args)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"mt: error: ensemble: {paths[0]} translates en->de but {paths[1]} translates de->en")
    assert not out.exists() and not (tmp_path / "eval").exists()
