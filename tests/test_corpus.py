"""mt.data.corpus: every format, cleaning counts, and the one-line messages for bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from mt.config import DataConfig
from mt.data.corpus import (
    CleanLimits,
    CleanReport,
    clean_pairs,
    drop_reason,
    iter_split,
    read_split,
    split_available,
    split_files,
)
from mt.errors import MTError

SRC = ["A dog runs.", "Zwei\u2028Hunde  ", "caf\u00e9 \u00fcber", "tab\tinside"]
TGT = ["Ein Hund rennt.", "x\x00y", "\u00fcber caf\u00e9", "nul\x00 und \u00df"]


def _text(tmp_path: Path, src: list[str], tgt: list[str], split: str = "train", gz: bool = False) -> DataConfig:
    for lang, lines in (("en", src), ("de", tgt)):
        raw = "".join(line + "\n" for line in lines).encode("utf-8")
        path = tmp_path / f"{split}.{lang}{'.gz' if gz else ''}"
        path.write_bytes(gzip.compress(raw) if gz else raw)
    return DataConfig(format="text", path=str(tmp_path))


@pytest.mark.parametrize("gz", [False, True])
def test_text_format_keeps_odd_unicode_on_one_line(tmp_path: Path, gz: bool) -> None:
    # Tabs inside a text-format line and \x00 are not separators; U+2028 is not a line break.
    data = _text(tmp_path, SRC, TGT, gz=gz)
    assert read_split(data, "train") == (SRC, TGT)
    assert list(iter_split(data, "train")) == list(zip(SRC, TGT))
    assert split_files(data, "train") == [tmp_path / f"train.en{'.gz' if gz else ''}",
                                          tmp_path / f"train.de{'.gz' if gz else ''}"]


def test_crlf_and_missing_final_newline(tmp_path: Path) -> None:
    (tmp_path / "train.en").write_bytes(b"one\r\ntwo\r\nthree")
    (tmp_path / "train.de").write_bytes(b"eins\ntwo\rzwei\ndrei\n")
    src, tgt = read_split(DataConfig(path=str(tmp_path)), "train")
    assert src == ["one", "two", "three"]
    assert tgt == ["eins", "two\rzwei", "drei"]  # a lone \r is text, not a line break


def test_tsv_format(tmp_path: Path) -> None:
    (tmp_path / "train.tsv").write_text("a b\tx y\n\t\nc\td\n", encoding="utf-8")
    data = DataConfig(format="tsv", path=str(tmp_path))
    assert read_split(data, "train") == (["a b", "", "c"], ["x y", "", "d"])
    (tmp_path / "val.tsv").write_text("a\tb\nc\td\te\n", encoding="utf-8")
    with pytest.raises(MTError) as e:
        read_split(data, "val")
    assert str(e.value) == f"{tmp_path / 'val.tsv'}: line 2: expected 2 tab-separated fields (source, target), got 3"


def test_jsonl_both_layouts(tmp_path: Path) -> None:
    rows = [{"src": "hello", "tgt": "hallo"}, {"translation": {"en": "cat", "de": "Katze", "fr": "chat"}}]
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    data = DataConfig(format="jsonl", path=str(tmp_path))
    assert read_split(data, "train") == (["hello", "cat"], ["hallo", "Katze"])


@pytest.mark.parametrize("line,problem", [
    ('{"src": "a"}', "expected keys 'src' and 'tgt' or 'translation'"),
    ('{"translation": {"en": "a", "fr": "b"}}', "'translation' lacks 'en' or 'de'"),
    ('{"src": 1, "tgt": "b"}', "expected a string, got int"),
    ('{"src": "a\\ud800", "tgt": "b"}', "lone surrogate"),
    ('{"src": "a", ', "invalid JSON"),
])
def test_jsonl_bad_lines_name_file_and_line(tmp_path: Path, line: str, problem: str) -> None:
    (tmp_path / "train.jsonl").write_text('{"src": "ok", "tgt": "ok"}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(MTError) as e:
        read_split(DataConfig(format="jsonl", path=str(tmp_path)), "train")
    assert str(e.value).startswith(f"{tmp_path / 'train.jsonl'}: line 2: ")
    assert problem in str(e.value) and "\n" not in str(e.value)


def _rows() -> list[dict]:
    return [{"translation": {"en": f"sentence {i}", "de": f"Satz {i}"}} for i in range(2500)]


def test_saved_hf_dataset(tmp_path: Path) -> None:
    import datasets

    datasets.DatasetDict({
        "train": datasets.Dataset.from_list(_rows()),
        "val": datasets.Dataset.from_list([{"src": "a", "tgt": "b"}]),
    }).save_to_disk(str(tmp_path / "ds"))
    data = DataConfig(format="saved", path=str(tmp_path / "ds"))
    src, tgt = read_split(data, "train")
    assert len(src) == 2500 and src[2499] == "sentence 2499" and tgt[1234] == "Satz 1234"
    assert read_split(data, "val") == (["a"], ["b"])
    assert split_available(data, "val") and not split_available(data, "test")
    with pytest.raises(MTError, match=r"no split 'test' \(has train, val\)"):
        read_split(data, "test")
    with pytest.raises(MTError, match="saved dataset .* does not exist"):
        read_split(DataConfig(format="saved", path=str(tmp_path / "nope")), "train")


def test_hub_streaming_via_monkeypatched_load_dataset(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    calls = []

    def fake_load_dataset(name, config, *, split, streaming):
        calls.append((name, config, split, streaming))
        if split != "train":
            raise ValueError(f'Unknown split "{split}". Should be one of [\'train\'].')
        return datasets.Dataset.from_list(_rows()[:1200]).to_iterable_dataset()

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    data = DataConfig(format="hub", hub_name="wmt14", hub_config="de-en")
    src, tgt = read_split(data, "train")
    assert calls == [("wmt14", "de-en", "train", True)]
    assert len(src) == 1200 and (src[7], tgt[7]) == ("sentence 7", "Satz 7")
    with pytest.raises(MTError) as e:
        read_split(data, "val")
    assert str(e.value).startswith("hub dataset 'wmt14/de-en' split 'val': cannot load (Unknown split")
    with pytest.raises(MTError, match="data.hub_name: must name"):
        read_split(DataConfig(format="hub"), "train")


def test_missing_file(tmp_path: Path) -> None:
    (tmp_path / "train.en").write_text("a\n", encoding="utf-8")
    data = DataConfig(path=str(tmp_path))
    with pytest.raises(MTError) as e:
        iter_split(data, "train")
    assert str(e.value) == f"split 'train': missing file {tmp_path / 'train.de'} (or train.de.gz)"
    assert split_available(data, "train") and not split_available(data, "val")


@pytest.mark.parametrize("n_src,n_tgt", [(5, 3), (3, 5)])
def test_mismatched_counts_name_both_files(tmp_path: Path, n_src: int, n_tgt: int) -> None:
    data = _text(tmp_path, [f"s{i}" for i in range(n_src)], [f"t{i}" for i in range(n_tgt)], split="val", gz=True)
    with pytest.raises(MTError) as e:
        read_split(data, "val")
    assert str(e.value) == (f"line counts differ: {tmp_path / 'val.en.gz'} has {n_src} lines, "
                            f"{tmp_path / 'val.de.gz'} has {n_tgt}")


@pytest.mark.parametrize("gz", [False, True])
def test_invalid_utf8_names_file_and_line(tmp_path: Path, gz: bool) -> None:
    _text(tmp_path, ["a", "b", "c"], ["x", "y", "z"])
    raw = b"x\ny\n\xff\xfez\n"
    name = "train.de.gz" if gz else "train.de"
    (tmp_path / "train.de").unlink()
    (tmp_path / name).write_bytes(gzip.compress(raw) if gz else raw)
    with pytest.raises(MTError) as e:
        read_split(DataConfig(path=str(tmp_path)), "train")
    assert str(e.value) == f"{tmp_path / name}: line 3: invalid UTF-8 (invalid start byte at byte 0)"


def test_encoded_surrogate_is_invalid_utf8(tmp_path: Path) -> None:
    _text(tmp_path, ["a"], ["x"])
    (tmp_path / "train.en").write_bytes(b"a\xed\xa0\x80b\n")  # UTF-8 of a lone surrogate
    with pytest.raises(MTError, match=r"train.en: line 1: invalid UTF-8"):
        read_split(DataConfig(path=str(tmp_path)), "train")


def test_unknown_format(tmp_path: Path) -> None:
    with pytest.raises(MTError) as e:
        read_split(DataConfig(format="csv", path=str(tmp_path)), "train")
    assert str(e.value) == "data.format 'csv': unknown format; expected text, tsv, jsonl, hub or saved"


def test_clean_pairs_counts_each_reason() -> None:
    pairs = [
        ("a b", "x y"),  # kept
        ("   ", "x"),  # empty (after strip)
        ("a", ""),  # empty
        (" a b c ", "x"),  # ratio: 3 > 2 * 1
        ("a " * 6, "x " * 6),  # too_long: 6 > 5 words (checked before ratio)
        ("a b c d", "x y"),  # kept: 4 == 2 * 2 is not over the ratio
        ("\u3000a\t", " y\n"),  # kept, stripped of unicode whitespace too
    ]
    report = CleanReport()
    words = lambda text: len(text.split())  # noqa: E731 - the unit is the caller's (prepare: pieces)
    kept = list(clean_pairs(pairs, CleanLimits(max_len=5, max_len_ratio=2.0), report, length=words))
    assert kept == [("a b", "x y"), ("a b c d", "x y"), ("a", "y")]
    assert report.kept == 3 and report.dropped == {"empty": 2, "too_long": 1, "ratio": 1, "over_max_positions": 0}
    assert report.total == len(pairs)
    assert report.to_dict() == {"read": 7, "kept": 3,
                                "dropped": {"empty": 2, "too_long": 1, "ratio": 1, "over_max_positions": 0}}


def test_clean_pairs_counts_characters_by_default() -> None:
    """Without a tokenizer (the sentencepiece sample) the unit is characters: an unsegmented Chinese
    sentence is not one 'word' beside nine English ones."""
    report = CleanReport()
    pair = ("The teacher drinks tea in the park every single day.", "老师每天都在公园喝茶。")
    assert list(clean_pairs([pair], CleanLimits(max_len=100, max_len_ratio=9.0), report)) == [pair]
    assert len(pair[0].split()) > 9 * len(pair[1].split())  # what the old word count dropped as 'ratio'


def test_drop_reason_on_lengths() -> None:
    limits = CleanLimits(max_len=10, max_len_ratio=3.0, max_positions=8)
    assert drop_reason(0, 3, limits) == "empty"
    assert drop_reason(11, 10, limits) == "too_long"
    assert drop_reason(2, 7, limits) == "ratio"
    assert drop_reason(8, 7, limits) == "over_max_positions"  # 8 pieces + EOS do not fit in 8 positions
    assert drop_reason(7, 7, limits) is None
    assert drop_reason(5000, 1, CleanLimits(0, 0, 0)) is None


def test_clean_limits_disabled_with_zero() -> None:
    report = CleanReport()
    kept = list(clean_pairs([("a " * 300, "x")], CleanLimits(max_len=0, max_len_ratio=0), report))
    assert len(kept) == 1 and report.kept == 1


def test_multi30k_val_read(multi30k_dir: Path) -> None:
    data = DataConfig(path=str(multi30k_dir))
    src, tgt = read_split(data, "val")
    assert len(src) == len(tgt) == 1014
    assert src[0] == "A group of men are loading cotton onto a truck"
    assert tgt[0] == "Eine Gruppe von Männern lädt Baumwolle auf einen Lastwagen"
