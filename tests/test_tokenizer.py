"""mt.data.tokenizer: deterministic training, fixed special ids, round trips, joint and separate models."""

from __future__ import annotations

import itertools
import pickle
import unicodedata
from pathlib import Path

import pytest

from mt.config import Config, DataConfig, TokenizerConfig
from mt.data.corpus import iter_split, read_split
from mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, reservoir_sample, train_sentencepiece
from mt.errors import MTError


@pytest.fixture(scope="module")
def train_sample(multi30k_dir: Path) -> tuple[list[str], list[str]]:
    pairs = list(itertools.islice(iter_split(DataConfig(path=str(multi30k_dir)), "train"), 1500))
    return [s for s, _ in pairs], [t for _, t in pairs]


def test_training_is_byte_identical(train_sample: tuple[list[str], list[str]]) -> None:
    cfg = TokenizerConfig(vocab_size=600)
    a = train_sentencepiece(*train_sample, cfg).model_bytes()
    b = train_sentencepiece(*train_sample, cfg).model_bytes()
    assert a == b and set(a) == {"src"}
    c = train_sentencepiece(train_sample[0], train_sample[1][:1000], cfg).model_bytes()
    assert c != a  # the check can fail: different input gives a different model
    shuffled = train_sentencepiece(train_sample[0][::-1], train_sample[1][::-1], cfg).model_bytes()
    assert shuffled == a  # sentencepiece counts sentences as a multiset: order does not matter


def test_special_ids(tiny_run: Config) -> None:
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    tok = Tokenizer.from_files(tiny_run.run_dir)
    assert tok.joint and tok.src_vocab_size == tok.tgt_vocab_size == 1000
    assert tok.tgt_pieces([PAD_ID, UNK_ID, BOS_ID, EOS_ID]) == ["<pad>", "<unk>", "<s>", "</s>"]
    ids = tok.encode_src(["A man rides a bike.", ""])
    assert ids[1] == [] and all(i >= 4 for i in ids[0])  # no BOS/EOS/PAD added, nothing unknown here
    # A character never seen in training is its UTF-8 bytes (tokenizer.byte_fallback), not <unk>.
    unseen = tok.encode_src(["\u4e2d"])[0]
    assert tok.tgt_pieces(unseen) == ["\u2581", "<0xE4>", "<0xB8>", "<0xAD>"] and tok.decode_tgt([unseen]) == ["\u4e2d"]


def test_decode_stops_at_eos_and_ignores_pad_bos(tiny_run: Config) -> None:
    tok = Tokenizer.from_files(tiny_run.run_dir)
    ids = tok.encode_tgt(["Ein Hund läuft."])[0]
    assert tok.decode_tgt([[BOS_ID, *ids, EOS_ID, *ids, PAD_ID], [BOS_ID, *ids, PAD_ID, PAD_ID], [EOS_ID, *ids]]) == \
        ["Ein Hund läuft.", "Ein Hund läuft.", ""]
    assert "".join(tok.tgt_pieces(ids)).replace("▁", " ").strip() == "Ein Hund läuft."
    assert tok.src_pieces("a dog")[0].startswith("▁")


def test_round_trip_on_multi30k_val(tiny_run: Config) -> None:
    """decode(encode(x)) == x on all 2,028 val sentences, with this 2,000-pair model.

    The default normalisation is `identity`: the one no-break space of the German side (U+00A0, in
    '120\u00a0cm') survives too. sentencepiece's own default, nmt_nfkc, turned it into a space.
    """
    tok = Tokenizer.from_files(tiny_run.run_dir)
    src, tgt = read_split(tiny_run.data, "val")
    lines = src + tgt
    decoded = tok.decode_tgt(tok.encode_src(lines))
    assert len(lines) == 2028 and decoded == lines
    assert tok.round_trip_failures(lines) == []
    assert any("\u00a0" in line for line in tgt)


def test_nmt_nfkc_maps_the_no_break_space(train_sample: tuple[list[str], list[str]]) -> None:
    tok = train_sentencepiece(*train_sample, TokenizerConfig(vocab_size=600, normalization="nmt_nfkc"))
    line = "ca. 120\u00a0cm"
    assert tok.round_trip_failures([line]) == [0]
    assert tok.decode_tgt(tok.encode_tgt([line])) == [unicodedata.normalize("NFKC", line)]


def test_separate_models(train_sample: tuple[list[str], list[str]]) -> None:
    tok = train_sentencepiece(*train_sample, TokenizerConfig(vocab_size=500, joint=False, type="bpe"))
    assert not tok.joint and set(tok.model_bytes()) == {"src", "tgt"}
    assert tok.src_vocab_size == tok.tgt_vocab_size == 500
    assert tok.model_bytes()["src"] != tok.model_bytes()["tgt"]
    again = pickle.loads(pickle.dumps(tok))  # what worker processes receive
    line = "Ein Mann fährt Fahrrad."
    assert again.encode_tgt([line]) == tok.encode_tgt([line]) != tok.encode_src([line])
    assert again.decode_tgt(again.encode_tgt([line])) == [line]


def test_from_bytes_and_files_round_trip(tiny_run: Config, tmp_path: Path) -> None:
    tok = Tokenizer.from_files(tiny_run.run_dir)
    again = Tokenizer.from_bytes(tok.model_bytes()["src"])
    assert again.model_bytes() == tok.model_bytes()
    again.save(tmp_path)
    assert (tmp_path / "spm.model").read_bytes() == tok.model_bytes()["src"]
    with pytest.raises(MTError, match="no tokenizer model"):
        Tokenizer.from_files(tmp_path / "missing")
    with pytest.raises(MTError, match="not a sentencepiece model"):
        Tokenizer.from_bytes(b"garbage")


def test_vocab_too_large_is_a_friendly_error(train_sample: tuple[list[str], list[str]]) -> None:
    with pytest.raises(MTError) as e:
        train_sentencepiece(train_sample[0][:50], train_sample[1][:50], TokenizerConfig(vocab_size=8000))
    msg = str(e.value)
    assert msg.startswith("tokenizer.vocab_size: 8000 is too large for this corpus (joint sample of 100 sentences); use at most ")
    assert "--set tokenizer.vocab_size=" in msg and "\n" not in msg


def test_reservoir_sample_is_seeded_uniform_and_ordered() -> None:
    assert reservoir_sample(range(5), 10, seed=1) == [0, 1, 2, 3, 4]
    a = reservoir_sample(iter(range(10_000)), 100, seed=3)
    assert a == reservoir_sample(range(10_000), 100, seed=3) != reservoir_sample(range(10_000), 100, seed=4)
    assert len(set(a)) == 100 and a == sorted(a)
    # Uniform: each of 20 items is picked in ~5 of 20 seeds' samples of size 5 (binomial, loose bounds).
    counts = [0] * 20
    for seed in range(400):
        for x in reservoir_sample(range(20), 5, seed):
            counts[x] += 1
    assert all(60 <= c <= 140 for c in counts), counts


def test_nul_bytes_do_not_crash_training_or_encoding(train_sample: tuple[list[str], list[str]]) -> None:
    src, tgt = list(train_sample[0][:500]), list(train_sample[1][:500])
    src[3], tgt[5] = "a\x00b nul \x00", "\x00"
    tok = train_sentencepiece(src, tgt, TokenizerConfig(vocab_size=300, type="bpe", byte_fallback=False))
    ids = tok.encode_src(["a\x00b"])[0]
    assert UNK_ID in ids and tok.decode_tgt([ids]) == ["a \u2047 b"]  # NUL is <unk>, decoded as ' ⁇ '
    tok = train_sentencepiece(src, tgt, TokenizerConfig(vocab_size=400, type="bpe"))  # byte fallback (default)
    ids = tok.encode_src(["a\x00b"])[0]
    assert UNK_ID not in ids and tok.decode_tgt([ids]) == ["a\x00b"]


# --------------------------------------------------------------------------- other scripts (issue 11)


def _lang_tokenizer(lang: str, **cfg: object) -> tuple[Tokenizer, list[str]]:
    """A joint en+`lang` tokenizer trained on 300 synthetic pairs (vocab 360); returns it and 200 held-out target lines."""
    from tests.support.langdata import pairs

    train = pairs(lang, 300)
    tok = train_sentencepiece([s for s, _ in train], [t for _, t in train], TokenizerConfig(vocab_size=360, **cfg))
    return tok, [t for _, t in pairs(lang, 200, seed=1)]


@pytest.mark.parametrize("lang", ["zh", "ja", "ko", "ru", "ar", "de"])
def test_target_text_survives_the_default_tokenizer(lang: str) -> None:
    """decode(encode(line)) == line on held-out lines with the language's own punctuation
    (，？！：（）… in Chinese and Japanese, «» „“ ، ؟ ...) and on characters the tokenizer never saw."""
    from tests.support.langdata import RARE

    tok, held_out = _lang_tokenizer(lang)
    lines = [*held_out, RARE[lang], "（全角）：，？！…「」『』、。１２３"]
    assert tok.round_trip_failures(lines) == []
    assert UNK_ID not in tok.encode_tgt([RARE[lang]])[0]  # unseen characters become bytes, not <unk>


@pytest.mark.parametrize("lang", ["zh", "ja"])
def test_nfkc_rules_rewrite_cjk_punctuation(lang: str) -> None:
    """Why `identity` is the default: sentencepiece's nmt_nfkc/nfkc turn ，？！（） into ASCII and … into ..."""
    for rule in ("nmt_nfkc", "nfkc"):
        tok, held_out = _lang_tokenizer(lang, normalization=rule)
        failures = tok.round_trip_failures(held_out)
        assert len(failures) > len(held_out) // 2
        back = tok.decode_tgt(tok.encode_tgt(["注意：（）…！"]))[0]
        assert back == "注意:()...!"


def test_runs_of_spaces_survive_identity_only() -> None:
    """`identity` keeps text as written, runs of spaces included; nmt_nfkc collapses them."""
    lines = ["Die Katze  isst.", "Die Katze isst.", "Die\tKatze", "Die   Katze"]
    tok, _ = _lang_tokenizer("de")
    assert tok.round_trip_failures(lines) == []
    tok, _ = _lang_tokenizer("de", normalization="nmt_nfkc")
    assert tok.round_trip_failures(lines) == [0, 2, 3]


def test_vocab_too_small_for_byte_fallback_is_a_friendly_error() -> None:
    from tests.support.langdata import pairs

    train = pairs("zh", 50)
    with pytest.raises(MTError, match=r"tokenizer.vocab_size: 100 is too small .* use at least \d+ .*byte_fallback=false"):
        train_sentencepiece([s for s, _ in train], [t for _, t in train], TokenizerConfig(vocab_size=100))
    tok = train_sentencepiece([s for s, _ in train], [t for _, t in train],
                              TokenizerConfig(vocab_size=100, byte_fallback=False))
    assert UNK_ID in tok.encode_tgt(["龘"])[0]


def test_decoded_translations_never_contain_line_breaks(tmp_path):
    """With byte fallback a model can emit the byte pieces of '\\n' or '\\r': decode_tgt turns every
    character str.splitlines() breaks on into a space, so one translation stays one line."""
    lines = [f"line {i} with words and more words" for i in range(200)]
    cfg = TokenizerConfig(vocab_size=300, byte_fallback=True)
    tok = train_sentencepiece(lines, lines, cfg)
    byte = {c: tok._tgt.piece_to_id(f"<0x{ord(c):02X}>") for c in "\n\r\x0b\x0c"}
    assert all(i != UNK_ID for i in byte.values())
    a = tok.encode_tgt(["a"])[0]
    out = tok.decode_tgt([a + [byte["\n"]] + a + [byte["\r"], byte["\x0b"], byte["\x0c"]] + a])
    # "▁a" decodes to " a" after the first piece: "a" "\\n" " a" "\\r\\x0b\\x0c" " a"
    assert out == ["a  a    a"] and len(out[0].splitlines()) == 1
