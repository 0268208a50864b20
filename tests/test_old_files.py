"""Files an older mt wrote (tests/data/pairs_v2, made at commit 47f86fc, before a bilingual model
became one untagged pair): its prepared caches are rebuilt with a one-line notice, byte for byte
the same, and its checkpoints load, keep their shape and translate as they did.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from mt.config import Config, DecodeConfig
from mt.config_load import config_from_dict, config_to_dict
from mt.data.prepare import prepare
from mt.data.splits import load_split, prepared_pairs
from mt.decode.translate import translate_lines
from mt.errors import MTError
from mt.model.checkpoint import load_checkpoint, load_for_inference
from tests.data.pairs_v2.make_fixtures import LINES, corpus, raw_config

FIXTURES = Path(__file__).resolve().parent / "data" / "pairs_v2"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text(encoding="utf-8"))["translations"]


def unguarded(cfg: Config) -> DecodeConfig:
    """The checkpoint's decode settings without the loop guard (issue 62), which is on for old
    checkpoints too: the recorded translations of these random models loop, as they did then."""
    return replace(cfg.decode, search=replace(cfg.decode.search, no_repeat_ngram_size=0))

pytestmark = pytest.mark.usefixtures("one_thread")


def _cache_files(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.suffix in (".ids", ".offsets", ".model")}


@pytest.mark.parametrize("name", ["bilingual", "multi"])
def test_an_old_cache_is_rebuilt_with_a_notice_and_the_same_bytes(name: str, tmp_path: Path,
                                                                   reports: Callable[[], str]) -> None:
    for lang in ("de", "ru"):
        corpus(tmp_path, lang)
    cfg = config_from_dict(raw_config(name, tmp_path, tmp_path / "runs"))
    old = FIXTURES / name
    shutil.copytree(old, cfg.run_dir)
    assert json.loads((cfg.run_dir / "data" / "manifest.json").read_text())["cache_version"] == 2
    prepare(cfg)
    notices = [line for line in reports().splitlines() if "older mt" in line]
    assert notices == [f"prepare: {cfg.run_dir / 'data'} was prepared by an older mt (cache version 2, now 3); "
                       f"preparing it again"]
    assert _cache_files(cfg.run_dir) == _cache_files(old)  # same names, same bytes
    prepare(cfg)
    assert "is up to date" in reports()
    pairs = prepared_pairs(cfg.run_dir)
    assert [p["train_sentences"] for p in pairs] == ([120] if name == "bilingual" else [120, 60])
    assert sum(p["train_sentences"] for p in pairs) == len(load_split(cfg.run_dir, cfg.data.train_split))


def test_an_old_bilingual_checkpoint_is_one_untagged_pair() -> None:
    state = load_checkpoint(FIXTURES / "bilingual.pt")
    assert state["config"]["data"]["pairs"] == [] and "target_tags" not in state["config"]["data"]
    model, tokenizer, cfg = load_for_inference(FIXTURES / "bilingual.pt", "cpu")
    assert not cfg.data.target_tags and [(p.src_lang, p.tgt_lang) for p in cfg.data.pairs] == [("en", "de")]
    flat = state["config"]["decode"]  # written before decode had sections: its keys land in them
    assert "search" not in flat and (cfg.decode.search.beam, cfg.decode.search.max_len_b) == (flat["beam"], flat["max_len_b"])
    assert tokenizer.targets == ("de",) and tokenizer.target_tags() == {}
    assert config_from_dict(config_to_dict(cfg)) == cfg
    decode = unguarded(cfg)
    got = translate_lines(model, tokenizer.for_target(None), LINES, decode, device="cpu")
    assert got == EXPECTED["bilingual"]["None"]
    assert translate_lines(model, tokenizer.for_target("de"), LINES, decode, device="cpu") == got
    with pytest.raises(MTError, match=r"^target language fr: the model does not translate into 'fr'; it knows de$"):
        tokenizer.for_target("fr")


def test_an_old_multi_pair_checkpoint_keeps_its_tags() -> None:
    model, tokenizer, cfg = load_for_inference(FIXTURES / "multi.pt", "cpu")
    assert cfg.data.target_tags and cfg.data.target_langs == ("de", "ru")
    assert config_from_dict(config_to_dict(cfg)) == cfg
    for lang in ("de", "ru"):
        assert translate_lines(model, tokenizer.for_target(lang), LINES, unguarded(cfg), device="cpu") == \
            EXPECTED["multi"][lang]


def test_old_checkpoints_through_the_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture) -> None:
    from test_multipair import run_cli

    src = tmp_path / "in.en"
    src.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    off = ("--no-repeat-ngram", "0", "--no-ending")  # as recorded: before the loop guard and the final-mark rule
    for args, want in [((), EXPECTED["bilingual"]["None"]), (("--target-lang", "de"), EXPECTED["bilingual"]["None"])]:
        code, out, err = run_cli(monkeypatch, capsys, "translate", "-c", FIXTURES / "bilingual.pt", "-i", src, *off, *args)
        assert code == 0 and out.splitlines() == want, err
    code, out, err = run_cli(monkeypatch, capsys, "translate", "-c", FIXTURES / "bilingual.pt", "-i", src,
                             "--target-lang", "fr")
    assert code == 2 and "--target-lang fr: the model does not translate into 'fr'; it knows de" in err
    code, out, err = run_cli(monkeypatch, capsys, "translate", "-c", FIXTURES / "multi.pt", "-i", src, *off,
                             "--target-lang", "ru")
    assert code == 0 and out.splitlines() == EXPECTED["multi"]["ru"], err
    code, out, err = run_cli(monkeypatch, capsys, "translate", "-c", FIXTURES / "multi.pt", "-i", src)
    assert code == 2 and "--target-lang: required: this model translates into de, ru" in err
