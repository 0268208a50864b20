"""Several language pairs in one model (data.pairs): config checks, one shape for every model
(a bilingual config is one untagged pair), target tags, the temperature sampler, per-pair
validation, `--target-lang` through the real CLI and CTranslate2 parity with tags.

The corpora are the synthetic en-de and en-ru pairs of tests/support/langdata.py (no network, seconds).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from test_evaluate import run_cli

from mt.cli import main
from mt.config import PairConfig, TokenizerConfig
from mt.config_load import config_from_dict, config_to_dict, config_to_yaml, load_config
from mt.data.batching import TokenBatchSampler, pair_sample_counts
from mt.data.prepare import prepare
from mt.data.splits import load_split
from mt.data.tokenizer import EOS_ID, Tokenizer, train_sentencepiece
from mt.decode.rules import SearchSettings
from mt.errors import MTError
from mt.model.checkpoint import load_checkpoint
from tests.support.langdata import pairs as lang_pairs
from tests.support.langdata import write_text_corpus

pytestmark = pytest.mark.usefixtures("one_thread")

REPO = Path(__file__).resolve().parents[1]


def _corpus(root: Path, lang: str, n_train: int) -> Path:
    rows = lang_pairs(lang, n_train + 60, seed=1)
    return write_text_corpus(root / f"en-{lang}", "en", lang,
                             {"train": rows[:n_train], "val": rows[n_train:n_train + 30], "test": rows[n_train + 30:]})


def _yaml(tmp: Path, body: str) -> Path:
    path = tmp / "multi.yaml"
    path.write_text(body, encoding="utf-8")
    return path


MULTI_YAML = """\
name: multi
run_root: {runs}
data:
  test_splits: [test]
  pairs:
    - {{path: {de}, src_lang: en, tgt_lang: de}}
    - {{path: {ru}, src_lang: en, tgt_lang: ru}}
  pair_temperature: 2.0
tokenizer: {{vocab_size: 160, byte_fallback: false}}
model: {{d_model: 32, heads: 4, encoder_layers: 1, decoder_layers: 1, d_ff: 64, dropout: 0.0}}
train: {{max_tokens: 1500, lr: 3.0e-3, warmup: 10, max_updates: 100, valid_every: 50, valid_max_sentences: 10,
        log_every: 10, threads: 1, precision: fp32, save_every: 25, average_last: 2}}
decode: {{beam: 1, max_len_a: 1.2, max_len_b: 5}}
"""


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize("override,message", [
    ("data.pairs=[{path: x, src_lang: en}]", "'data.pairs[0].tgt_lang': required"),
    ("data.pairs=[{path: x, src_lang: en, tgt_lang: de}, {src_lang: en, tgt_lang: fr}]", "'data.pairs[1].path': required"),
    ("data.pairs=[{path: x, src_lang: en, tgt_lang: de, fromat: tsv}]", "'data.pairs[0].fromat' (did you mean 'format'?)"),
    ("data.pairs=[{path: x, src_lang: en, tgt_lang: de, format: csv}]", "'data.pairs[0].format': expected one of"),
    ("data.pairs=[{path: x, src_lang: en, tgt_lang: de, test_splits: 3}]", "'data.pairs[0].test_splits': expected"),
    ("data.pairs=[{path: x, src_lang: en, tgt_lang: d/e}]", "'data.pairs[0].tgt_lang': 'd/e' is not a language code"),
    ("data.pairs=[{path: x, src_lang: en, tgt_lang: en}]", "'data.pairs[0].tgt_lang': same as src_lang"),
    ("data.pairs=[{path: x, src_lang: en, tgt_lang: de}, {path: y, src_lang: en, tgt_lang: de}]",
     "'data.pairs[1]': pair en-de repeats data.pairs[0]"),
    ("data.pairs=[[x, en, de]]", "'data.pairs[0]': expected a mapping"),
    ("data.pairs=en-de", "'data.pairs': expected a list of mappings"),
    ("data.pair_temperature=0", "'data.pair_temperature': must be positive"),
])
def test_config_errors_name_the_pair_key(tmp_path: Path, override: str, message: str) -> None:
    path = _yaml(tmp_path, "name: m\n")
    with pytest.raises(MTError) as e:
        load_config(path, [override])
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_pairs_inherit_format_and_splits_from_the_data_section(tmp_path: Path) -> None:
    path = _yaml(tmp_path, "name: m\ndata:\n  format: tsv\n  valid_split: dev\n  test_splits: [t1]\n  pairs:\n"
                           "    - {path: a, src_lang: en, tgt_lang: de}\n"
                           "    - {path: b, src_lang: en, tgt_lang: fr, format: text, test_splits: [t2, t3]}\n")
    a, b = load_config(path).data.pairs
    assert (a.format, a.valid_split, a.test_splits, a.train_split) == ("tsv", "dev", ("t1",), "train")
    assert (b.format, b.valid_split, b.test_splits) == ("text", "dev", ("t2", "t3"))


def test_a_bilingual_config_is_one_untagged_pair() -> None:
    cfg = load_config(REPO / "configs" / "multi30k_en_de.yaml")
    d = cfg.data
    assert d.pairs == (PairConfig(path=d.path, src_lang="en", tgt_lang="de", format=d.format, train_split="train",
                                  valid_split="val", test_splits=d.test_splits),)
    assert not d.target_tags and d.target_langs == ("de",) and d.pairs[0].name == "en-de"
    assert d.split_label(d.pairs[0], "val") == "val" and d.split_label(d.pairs[0], "val", "/") == "val"
    shipped = load_config(REPO / "configs" / "multi30k_en_defr.yaml").data
    assert [(p.src_lang, p.tgt_lang) for p in shipped.pairs] == [("en", "de"), ("en", "fr")]
    assert shipped.target_tags and shipped.target_langs == ("de", "fr")
    assert shipped.split_label(shipped.pairs[1], "val") == "en-fr.val"
    assert shipped.split_label(shipped.pairs[1], "val", "/") == "en-fr/val"


def test_the_one_pair_follows_the_data_keys_and_is_written_once(tmp_path: Path) -> None:
    """An untagged model's pair is the data section's own keys, also after dataclasses.replace and
    a round trip through a stored config, which writes it once (`pairs: []`, as before the pairs
    were one shape), so `--set data.path=...` on a stored config.yaml still moves it."""
    import dataclasses

    cfg = load_config(REPO / "configs" / "tiny.yaml")
    moved = dataclasses.replace(cfg.data, path="elsewhere")
    assert moved.pairs[0].path == "elsewhere" and moved.pairs[0].tgt_lang == "de"
    stored = config_to_dict(cfg)
    assert stored["data"]["pairs"] == [] and stored["data"]["target_tags"] is False
    assert config_from_dict(stored) == cfg
    path = tmp_path / "config.yaml"
    path.write_text(config_to_yaml(cfg), encoding="utf-8")
    assert load_config(path, ["data.path=other"]).data.pairs[0].path == "other"


@pytest.mark.parametrize("overrides,tagged,pairs", [
    ([], False, [("en", "de")]),
    (["data.target_tags=true"], True, [("en", "de")]),  # one pair with its tag, from the data keys
    (["data.pairs=[{path: x, src_lang: en, tgt_lang: fr}]"], True, [("en", "fr")]),  # one listed pair: tagged
    (["data.pairs=[{path: x, src_lang: en, tgt_lang: fr}, {path: y, src_lang: de, tgt_lang: fr}]"], True,
     [("en", "fr"), ("de", "fr")]),
])
def test_whether_a_model_has_tags_survives_a_stored_config(overrides: list[str], tagged: bool,
                                                           pairs: list[tuple[str, str]]) -> None:
    cfg = load_config(REPO / "configs" / "tiny.yaml", overrides)
    assert cfg.data.target_tags is tagged and [(p.src_lang, p.tgt_lang) for p in cfg.data.pairs] == pairs
    again = config_from_dict(config_to_dict(cfg))
    assert again == cfg and again.data.target_tags is tagged


def test_a_stored_config_of_before_target_tags_reads_as_it_was_meant() -> None:
    """Checkpoints and config.yaml files written before data.target_tags existed: `pairs: []` is
    one untagged pair, a list of pairs is tagged."""
    raw = config_to_dict(load_config(REPO / "configs" / "tiny.yaml"))
    del raw["data"]["target_tags"]
    assert not config_from_dict(raw).data.target_tags
    raw["data"]["pairs"] = [{"path": "x", "src_lang": "en", "tgt_lang": "fr"}]
    assert config_from_dict(raw).data.target_tags
    with pytest.raises(MTError, match=r"^config key 'data.target_tags': a model of data.pairs has target tags; "):
        config_from_dict({**raw, "data": {**raw["data"], "target_tags": False}})


# --------------------------------------------------------------------------- tags


@pytest.fixture(scope="module")
def tagged() -> Tokenizer:
    rows = lang_pairs("de", 300) + lang_pairs("ru", 300)
    return train_sentencepiece([s for s, _ in rows], [t for _, t in rows],
                               TokenizerConfig(vocab_size=150, byte_fallback=False), ["de", "ru"])


def test_tag_is_one_piece_prepended_as_an_id_and_never_read_from_text(tagged: Tokenizer) -> None:
    tags = tagged.target_tags()
    assert tags == {"de": 4, "ru": 5}  # control pieces right after pad/unk/bos/eos
    plain = tagged.encode_src(["he reads a book <2de>"])[0]
    assert tags["de"] not in plain and tags["ru"] not in plain  # the literal text is ordinary pieces
    de = tagged.for_target("de")
    assert de.encode_src(["he reads a book <2de>"]) == [[4, *plain]]
    assert tagged.for_target("ru").encode_src(["", "x"])[0] == [5]
    assert de.src_pieces("he")[0] == "<2de>"
    assert de.encode_tgt(["er liest"]) == tagged.encode_tgt(["er liest"])  # targets carry no tag
    assert de.decode_tgt([[4, *tagged.encode_tgt(["er liest"])[0], EOS_ID]]) == ["er liest"]  # decoding drops it
    with pytest.raises(MTError, match=r"^target language fr: the model does not translate into 'fr'; it knows de, ru$"):
        tagged.for_target("fr")
    with pytest.raises(MTError, match=r"^--target-lang: required: this model translates into de, ru$"):
        tagged.for_target(None, flag="--target-lang")
    assert tagged.targets == ("de", "ru") and tagged.for_target("de").targets == ("de", "ru")
    # the tag survives pickling (worker processes of prepare)
    import pickle

    assert pickle.loads(pickle.dumps(de)).encode_src(["he"]) == de.encode_src(["he"])


def test_bilingual_tokenizer_is_unchanged_by_the_tag_support() -> None:
    rows = lang_pairs("de", 300)
    src, tgt = [s for s, _ in rows], [t for _, t in rows]
    cfg = TokenizerConfig(vocab_size=100, byte_fallback=False)
    a, b = train_sentencepiece(src, tgt, cfg), train_sentencepiece(src, tgt, cfg, [])
    c = train_sentencepiece(src, tgt, cfg, ["de"], tags=False)  # knows its language, has no tag
    assert a.model_bytes() == b.model_bytes() == c.model_bytes() and a.target_tags() == c.target_tags() == {}
    # for_target of a model without tags: the tokenizer itself, for its language or none given
    assert c.targets == ("de",) and c.for_target("de") is c and c.for_target(None) is c
    assert c.for_target("de").encode_src(src[:3]) == a.encode_src(src[:3])
    with pytest.raises(MTError, match=r"^--target-lang fr: the model does not translate into 'fr'; it knows de$"):
        c.for_target("fr", flag="--target-lang")
    assert a.targets == () and a.for_target("de") is a  # not told its language: it has nothing to add
    import pickle

    assert pickle.loads(pickle.dumps(c)).targets == ("de",)  # what a server's worker sends back
    with pytest.raises(MTError, match="train.init_from: fine-tuning a multi-pair config"):
        prepare(load_config(REPO / "configs" / "multi30k_en_defr.yaml"), tokenizer=a)


# --------------------------------------------------------------------------- sampler


def test_pair_sample_counts_follow_the_temperature() -> None:
    assert pair_sample_counts([300, 100], 1.0) == [300, 100]  # T = 1: proportional to size
    # T = 2: weights sqrt(300) = 17.3205 and sqrt(100) = 10 -> shares of 400: 253.59 and 146.41
    assert pair_sample_counts([300, 100], 2.0) == [254, 146]
    # T = 5: 300^0.2 = 3.1291, 100^0.2 = 2.5119 -> 221.89 and 178.11
    assert pair_sample_counts([300, 100], 5.0) == [222, 178]
    assert pair_sample_counts([300, 100], 1e9) == [200, 200]  # T -> infinity: equal shares
    assert pair_sample_counts([1000, 10, 1], 1e9) == [337, 337, 337]


def test_sampler_mixes_pairs_in_the_temperature_proportions() -> None:
    rng = np.random.default_rng(0)
    sizes = [300, 100]
    src, tgt = rng.integers(1, 20, 400), rng.integers(1, 20, 400)
    sampler = TokenBatchSampler(src, tgt, max_tokens=200, max_sentences=64, seed=3, pair_sizes=sizes, temperature=2.0)
    for epoch in (0, 1):
        batches = sampler.epoch_batches(epoch)
        drawn = np.concatenate(batches)
        assert [(drawn < 300).sum(), (drawn >= 300).sum()] == [254, 146]
        counts = np.bincount(drawn, minlength=400)
        assert set(counts[:300]) <= {0, 1} and set(counts[300:]) <= {1, 2}  # down- and upsampled evenly
        assert any((b < 300).any() and (b >= 300).any() for b in batches)  # batches mix the pairs
        again = TokenBatchSampler(src, tgt, max_tokens=200, max_sentences=64, seed=3, pair_sizes=sizes,
                                  temperature=2.0).epoch_batches(epoch)
        assert all(np.array_equal(x, y) for x, y in zip(batches, again))  # a pure function of (seed, epoch)
    assert not np.array_equal(np.concatenate(sampler.epoch_batches(0)), np.concatenate(sampler.epoch_batches(1)))
    with pytest.raises(MTError, match="do not add up"):
        TokenBatchSampler(src, tgt, max_tokens=200, max_sentences=64, seed=3, pair_sizes=[300, 99])


def test_sampler_of_one_pair_draws_what_a_bilingual_one_always_did() -> None:
    """A bilingual run's manifest lists its one pair: its batches are those of no pair_sizes at all."""
    rng = np.random.default_rng(1)
    src, tgt = rng.integers(1, 20, 400), rng.integers(1, 20, 400)
    plain = TokenBatchSampler(src, tgt, max_tokens=200, max_sentences=64, seed=3)
    one = TokenBatchSampler(src, tgt, max_tokens=200, max_sentences=64, seed=3, pair_sizes=[400], temperature=5.0)
    for epoch in (0, 1):
        assert all(np.array_equal(x, y) for x, y in zip(plain.epoch_batches(epoch), one.epoch_batches(epoch), strict=True))


# --------------------------------------------------------------------------- through the CLI


def train_multi_run(tmp: Path) -> tuple[Path, Path]:
    """(config path, run dir) of a multi-pair model trained 100 updates on en-de (300) + en-ru (100)
    in `tmp`: conftest's session fixture `multi_run`, shared by this file and test_serve_pairs.py."""
    config = _yaml(tmp, MULTI_YAML.format(runs=tmp / "runs", de=_corpus(tmp, "de", 300), ru=_corpus(tmp, "ru", 100)))
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(sys, "argv", ["mt", "train", str(config)])
        main()
    except SystemExit as e:
        assert not e.code, e.code
    finally:
        mp.undo()
    return config, tmp / "runs" / "multi"


def test_prepared_sources_start_with_their_pair_tag(multi_run: tuple[Path, Path]) -> None:
    _, run = multi_run
    manifest = json.loads((run / "data" / "manifest.json").read_text())
    assert [(p["name"], p["train_sentences"], p["tag"]) for p in manifest["pairs"]] == [("en-de", 300, 4),
                                                                                         ("en-ru", 100, 5)]
    train = load_split(run, "train")
    assert len(train) == 400
    assert {int(train.src[i][0]) for i in range(300)} == {4} and {int(train.src[i][0]) for i in range(300, 400)} == {5}
    assert all(4 not in train.src[i][1:] and 5 not in train.src[i][1:] for i in range(400))
    tok = Tokenizer.from_files(run)
    de_val = load_split(run, "en-de.val")
    first = (run.parent.parent / "en-de" / "val.en").read_text().splitlines()[0]
    assert de_val.src[0].tolist() == tok.for_target("de").encode_src([first])[0]
    assert int(load_split(run, "en-ru.test").src[0][0]) == 5


def test_validation_reports_each_pair_and_selects_on_their_mean(multi_run: tuple[Path, Path]) -> None:
    _, run = multi_run
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in records if r.get("kind") == "valid"]
    assert len(valid) >= 2
    for r in valid:
        assert set(r["pairs"]) == {"en-de", "en-ru"}
        for key in ("loss", "nll", "bleu", "chrf"):
            assert r[key] == pytest.approx(sum(p[key] for p in r["pairs"].values()) / 2)
        assert r["ppl"] == pytest.approx(math.exp(r["nll"]))
    best = load_checkpoint(run / "checkpoints" / "best.pt")
    assert best["valid"]["bleu"] == max(r["bleu"] for r in valid if "averaged" not in r.get("kind", ""))
    assert [(p["src_lang"], p["tgt_lang"], p["tag"]) for p in best["pairs"]] == [("en", "de", "<2de>"),
                                                                                 ("en", "ru", "<2ru>")]


def test_translate_needs_a_known_target_lang(multi_run: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    _, run = multi_run
    ckpt = run / "checkpoints" / "best.pt"
    src = tmp_path / "in.en"
    src.write_text("He reads a book at home.\n\nShe drinks tea.\n", encoding="utf-8")
    code, out, err = run_cli(monkeypatch, capsys, "translate", "-c", ckpt, "-i", src)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "--target-lang: required: this model translates into de, ru" in err
    code, out, err = run_cli(monkeypatch, capsys, "translate", "-c", ckpt, "-i", src, "--target-lang", "fr")
    assert code == 2 and err.count("\n") == 1
    assert "--target-lang fr: the model does not translate into 'fr'; it knows de, ru" in err
    outs = {}
    for lang in ("de", "ru"):
        code, out, err = run_cli(monkeypatch, capsys, "translate", "-c", ckpt, "-i", src, "--target-lang", lang)
        assert code == 0, err
        outs[lang] = out.splitlines()
        assert len(outs[lang]) == 3 and outs[lang][1] == ""
    assert outs["de"] != outs["ru"]  # the tag changes what the model writes


def test_evaluate_scores_each_pair(multi_run: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    _, run = multi_run
    ckpt = run / "checkpoints" / "best.pt"
    code, out, err = run_cli(monkeypatch, capsys, "evaluate", "-c", ckpt, "--split", "test", "--out-dir", tmp_path)
    assert code == 0, err
    assert "en-de/test: 30 sentences" in out and "en-ru/test: 30 sentences" in out
    assert {p.name for p in tmp_path.glob("*.json")} == {"en-de.test.best.beam1.json", "en-ru.test.best.beam1.json"}
    code, out, err = run_cli(monkeypatch, capsys, "evaluate", "-c", ckpt, "--split", "test", "--target-lang", "ru",
                             "--out-dir", tmp_path / "ru")
    assert code == 0 and "en-ru/test" in out and "en-de/test" not in out, err
    code, out, err = run_cli(monkeypatch, capsys, "evaluate", "-c", ckpt, "--split", "nope")
    assert code == 2 and err.count("\n") == 1
    assert (f"split 'nope': not found in {run.parent.parent / 'en-de'} (the config names: train, val, test); "
            f"{run.parent.parent / 'en-ru'} (the config names: train, val, test)") in err, err


@pytest.mark.requires("ctranslate2")
def test_export_parity_with_tags(multi_run: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    from mt.data.batching import collate_source
    from mt.decode.search import greedy_search
    from mt.deploy.ct2 import CT2Translator
    from mt.deploy.export import read_export_info
    from mt.model.checkpoint import load_for_inference

    _, run = multi_run
    ckpt, out_dir = run / "checkpoints" / "best.pt", tmp_path / "ct2"
    code, _, err = run_cli(monkeypatch, capsys, "export", ckpt, "--format", "ctranslate2", "-o", out_dir)
    assert code == 0, err
    info = read_export_info(out_dir)
    assert [p["tag"] for p in info["pairs"]] == ["<2de>", "<2ru>"]
    assert "`<2de>`" in (out_dir / "MODEL_CARD.md").read_text()
    model, tok, _ = load_for_inference(ckpt, "cpu")
    lines = [s for s, _ in lang_pairs("ru", 6, seed=7)]
    ct2 = CT2Translator(out_dir, threads=1)
    for lang in ("de", "ru"):
        src = tok.for_target(lang).encode_src(lines)
        assert ct2._src_pieces(src)[0][0] == f"<2{lang}>"  # CTranslate2 gets the tag as the first source token
        src_t, mask = collate_source(src)
        with torch.no_grad():
            expected = greedy_search(model, src_t, mask,
                                     SearchSettings(max_len_a=1.2, max_len_b=5, forbid_unk=True))
        got = ct2.translate_ids(src, SearchSettings(beam=1, alpha=0.0, length_penalty="none", max_len_a=1.2,
                                                    max_len_b=5, n_best=1, forbid_unk=True))
        assert [h[0][0] for h in got] == expected
    # and through the CLI: the export translates like the checkpoint, with the tag
    src_file = tmp_path / "in.en"
    src_file.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    outs = []
    for path in (ckpt, out_dir):
        code, out, err = run_cli(monkeypatch, capsys, "translate", "-c", path, "-i", src_file, "--target-lang", "ru")
        assert code == 0, err
        outs.append(out)
    assert outs[0] == outs[1]
    code, _, err = run_cli(monkeypatch, capsys, "translate", "-c", out_dir, "-i", src_file)
    assert code == 2 and "--target-lang: required" in err


def test_score_uses_the_target_tag(multi_run: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture) -> None:
    """Russian references are more probable under <2ru> than under <2de>; --target-lang is required."""
    _, run = multi_run
    ckpt, corpus = run / "checkpoints" / "best.pt", run.parent.parent / "en-ru"
    args = ["score", "-c", ckpt, "--src", corpus / "test.en", "--tgt", corpus / "test.ru"]
    code, _, err = run_cli(monkeypatch, capsys, *args)
    assert code == 2 and err.count("\n") == 1 and "--target-lang: required" in err
    per_token = {}
    for lang in ("de", "ru"):
        code, out, err = run_cli(monkeypatch, capsys, *args, "--target-lang", lang)
        assert code == 0, err
        per_token[lang] = np.mean([float(line.split("\t")[1]) for line in out.splitlines()])
    assert per_token["ru"] > per_token["de"], per_token


def test_resume_is_exact_with_pairs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """2N updates straight == N updates, SIGTERM, --resume, N more, across an epoch boundary of the
    temperature sampler (13 batches per epoch here)."""
    from mt.train.loop import train
    from tests.conftest import train_stopped_at

    n = 9
    de, ru = _corpus(tmp_path, "de", 300), _corpus(tmp_path, "ru", 100)
    overrides = [f"train.max_updates={2 * n}", "train.valid_every=0", "train.valid_bleu=false",
                 "train.keep_checkpoints=0", "train.average_last=0", "train.save_every=0"]
    configs = []
    for name in ("a", "b"):
        path = _yaml(tmp_path, MULTI_YAML.format(runs=tmp_path / name, de=de, ru=ru))
        configs.append(load_config(path, overrides))
    straight, interrupted = configs
    train(straight)
    train_stopped_at(interrupted, n, monkeypatch)
    train(interrupted, resume=True)
    a, b = (load_checkpoint(cfg.run_dir / "checkpoints" / "last.pt") for cfg in configs)
    assert b["update"] == 2 * n and a["epoch"] == b["epoch"] >= 2
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name


def test_plot_attention_of_a_multi_pair_run(multi_run: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture, tmp_path: Path) -> None:
    import shutil

    _, run = multi_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    code, out, err = run_cli(monkeypatch, capsys, "plot", copy, "--attention")
    assert code == 0, err
    assert (copy / "plots" / "attention.png").is_file() and (copy / "plots" / "curves.png").is_file()
