"""Load, validate and clean parallel text, streamed.

A corpus is one language pair's `PairConfig` (a `DataConfig` has the same keys, for its own pair).
Formats (`format`):
  text   `{path}/{split}.{src_lang}` and `.{tgt_lang}`, plain or `.gz`; line i translates line i
  tsv    `{path}/{split}.tsv` (or `.tsv.gz`): `source<TAB>target` per line (`target<TAB>source` with
         `columns: tgt-src`, so one file serves both directions)
  jsonl  `{path}/{split}.jsonl` (or `.jsonl.gz`): `{"src": .., "tgt": ..}` or `{"translation": {lang: ..}}`
  hub    Hugging Face hub dataset `hub_name`/`hub_config`, streamed, `{"translation": {lang: ..}}` rows
  saved  a `DatasetDict` written by `save_to_disk` at `path`, either row layout

The text formats are read with plain Python so that errors can name the file and line: invalid
UTF-8, a bad TSV/JSON line, source and target files whose line counts differ. Lines are split on
b"\\n" only (not on U+2028, \\x0b, \\r alone ... as `str.splitlines` would), and nothing is
normalised here except removing the line terminator (and a byte-order mark at the start of a
file); `clean_pairs` strips whitespace.

A corpus can also be what a user has in one piece (`single_file`): `path` naming one TSV or JSONL
file, one of two plain-text files `corpus.en` / `corpus.de` (or their common stem `corpus`). Such
a corpus is one split, the training split; `mt.data.holdout` holds validation and test sets out
of it for `mt train` and `mt prepare`, and `mt data clean` reads it whole.

This module owns the parsing of the text formats: `iter_tsv` and `iter_jsonl` read one file, for
other readers of such files too (`mt.data.synthetic`'s monolingual side of a parallel file).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mt.config import DataConfig, PairConfig
from mt.config_checks import check_data_format
from mt.errors import MTError
from mt.textio import iter_lines

Corpus = PairConfig | DataConfig  # what names a corpus: path, format, hub_name/hub_config, src_lang, tgt_lang
DROP_REASONS = ("empty", "too_long", "ratio", "over_max_positions")
_HF_BATCH = 1000  # rows converted from Arrow per step when iterating a HF dataset


@dataclass(frozen=True)
class CleanLimits:
    """Cleaning thresholds for training pairs; a value <= 0 disables that check.

    Lengths are in the unit the caller measures: subword pieces when prepare cleans the encoded
    training split, characters for the tokenizer's training sample (no tokenizer exists yet).
    max_len: most units on either side; max_len_ratio: largest length ratio between the sides;
    max_positions: the model's limit, which the source + EOS and BOS + target must fit.
    """

    max_len: int
    max_len_ratio: float
    max_positions: int = 0

    @classmethod
    def from_config(cls, data: DataConfig, max_positions: int = 0) -> CleanLimits:
        return cls(data.max_len, data.max_len_ratio, max_positions)


@dataclass
class CleanReport:
    """Counts of training pairs kept and dropped per reason (`DROP_REASONS`)."""

    kept: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: {r: 0 for r in DROP_REASONS})

    @property
    def total(self) -> int:
        return self.kept + sum(self.dropped.values())

    def record(self, reason: str | None) -> None:
        """Count one pair: kept when `reason` is None, else dropped for `reason`."""
        if reason is None:
            self.kept += 1
        else:
            self.dropped[reason] = self.dropped.get(reason, 0) + 1

    def dropped_fraction(self) -> float:
        return sum(self.dropped.values()) / self.total if self.total else 0.0

    def add(self, other: CleanReport) -> None:
        """Add the counts of `other` (e.g. a chunk cleaned in a worker process) to this report."""
        self.kept += other.kept
        for reason, n in other.dropped.items():
            self.dropped[reason] = self.dropped.get(reason, 0) + n

    def to_dict(self) -> dict[str, Any]:
        return {"read": self.total, "kept": self.kept, "dropped": dict(self.dropped)}

    def summary(self) -> str:
        """e.g. 'kept 28990 of 29000 (dropped: empty 2, too_long 8, ratio 0)'."""
        drops = ", ".join(f"{r} {n}" for r, n in self.dropped.items())
        return f"kept {self.kept} of {self.total} (dropped: {drops})"


# --------------------------------------------------------------------------- one file, the whole corpus


@dataclass(frozen=True)
class SingleFile:
    """A corpus in one file (tsv, jsonl) or one pair of plain-text files (text, [source, target])."""

    format: str
    files: tuple[Path, ...]


def _strip_gz(path: Path) -> str:
    return path.name[:-3] if path.name.endswith(".gz") else path.name


def single_file(data: Corpus) -> SingleFile | None:
    """The corpus file(s) when `data.path` names one file (or the stem of `stem.{src}`/`stem.{tgt}`),
    None for a folder (or a path that does not exist: reading it says what is missing).

    The format comes from the name: `.tsv`, `.jsonl`/`.json`, `.{src_lang}`/`.{tgt_lang}` (the
    other language's file beside it); any other name is read as `data.format` when that is tsv
    or jsonl."""
    if data.format in ("hub", "saved") or not data.path:
        return None
    path = Path(data.path)
    if path.is_dir():
        return None
    if not path.is_file():  # a stem: corpus -> corpus.en + corpus.de
        found = [_existing(path.with_name(f"{path.name}.{lang}")) for lang in (data.src_lang, data.tgt_lang)]
        if all(found):
            return SingleFile("text", (found[0], found[1]))  # type: ignore[arg-type]
        return None
    name = _strip_gz(path)
    suffix = name.rsplit(".", 1)[-1] if "." in name else ""
    named_otherwise = suffix in ("jsonl", "json", data.src_lang, data.tgt_lang)
    if suffix == "tsv" or (not named_otherwise and data.format == "tsv"):
        return SingleFile("tsv", (path,))
    if suffix in ("jsonl", "json") or data.format == "jsonl":
        return SingleFile("jsonl", (path,))
    if suffix in (data.src_lang, data.tgt_lang):
        stem = name[: -len(suffix) - 1]
        other_lang = data.tgt_lang if suffix == data.src_lang else data.src_lang
        other = _existing(path.with_name(f"{stem}.{other_lang}"))
        if other is None:
            raise MTError(f"{path}: found no {other_lang} side beside it ({stem}.{other_lang}); "
                          f"a corpus of plain-text files needs one file per language, "
                          f"line i of one translating line i of the other")
        return SingleFile("text", (path, other) if suffix == data.src_lang else (other, path))
    raise MTError(f"{path}: cannot tell the format of one file from its name: name it .tsv "
                  f"(source<TAB>target), .jsonl, or .{data.src_lang} + .{data.tgt_lang} "
                  f"(one plain-text file per language), or give the format "
                  f"(--format / data.format: tsv or jsonl)")


def folder_format(path: str | Path, src_lang: str, tgt_lang: str, train_split: str = "train") -> str:
    """The format of a folder of split files, from its training split's files (text, tsv or jsonl);
    MTError naming what was looked for when none is there."""
    root = Path(path)
    for fmt, names in (("text", [f"{train_split}.{src_lang}"]), ("tsv", [f"{train_split}.tsv"]),
                       ("jsonl", [f"{train_split}.jsonl"])):
        if all(_existing(root / n) for n in names):
            return fmt
    raise MTError(f"{root}: no training split found ({train_split}.{src_lang} + {train_split}.{tgt_lang}, "
                  f"{train_split}.tsv or {train_split}.jsonl)")


def _single_split(data: Corpus, split: str, single: SingleFile) -> list[Path]:
    if split != data.train_split:
        raise MTError(f"split '{split}': {data.path} is one corpus file, "
                      f"read as the '{data.train_split}' split "
                      f"(mt train and mt prepare hold validation and test sets out of it)")
    return list(single.files)


# --------------------------------------------------------------------------- files of a split


def _existing(base: Path) -> Path | None:
    """`base` or `base.gz`, whichever exists (plain first)."""
    for p in (base, base.with_name(base.name + ".gz")):
        if p.is_file():
            return p
    return None


def _text_files(data: Corpus, split: str) -> list[Path]:
    single = single_file(data)
    if single is not None:
        return _single_split(data, split, single)
    root = Path(data.path)
    if data.format == "text":
        bases = [root / f"{split}.{data.src_lang}", root / f"{split}.{data.tgt_lang}"]
    elif data.format in ("tsv", "jsonl"):
        bases = [root / f"{split}.{data.format}"]
    else:  # hub and saved have no split files here; anything else is no format (a DataConfig built in code)
        check_data_format(data.format)
        raise MTError(f"data.format '{data.format}': has no split files")
    files = []
    for base in bases:
        found = _existing(base)
        if found is None:
            raise MTError(f"split '{split}': missing file {base} (or {base.name}.gz)")
        files.append(found)
    return files


def split_files(data: Corpus, split: str) -> list[Path]:
    """The local files a split is read from (all files of a saved dataset; [] for hub). MTError if missing."""
    if data.format == "hub":
        return []
    if data.format == "saved":
        root = Path(data.path)
        if not root.is_dir():
            raise MTError(f"saved dataset '{root}' does not exist")
        return sorted(p for p in root.rglob("*") if p.is_file())
    return _text_files(data, split)


def split_available(data: Corpus, split: str) -> bool:
    """Whether a split exists at all (any of its files, or the split name in a saved/hub dataset).

    A split with only some of its files present counts as available, so that reading it reports
    the missing file instead of skipping it silently.
    """
    single = single_file(data)
    if single is not None:
        return split == data.train_split
    root = Path(data.path)
    if data.format == "text":
        return any(_existing(root / f"{split}.{lang}") for lang in (data.src_lang, data.tgt_lang))
    if data.format in ("tsv", "jsonl"):
        return _existing(root / f"{split}.{data.format}") is not None
    if data.format == "saved":
        return root.is_dir() and split in _load_saved(root)
    check_data_format(data.format)
    try:  # hub: ask for the split names; if that fails, let loading report the problem
        import datasets

        return split in datasets.get_dataset_split_names(data.hub_name, data.hub_config or None)
    except Exception:  # noqa: BLE001 - any hub/network failure means "unknown", not "absent"
        return True


# --------------------------------------------------------------------------- line readers


def _iter_text(src: Path, tgt: Path) -> Iterator[tuple[str, str]]:
    src_it, tgt_it = iter_lines(src), iter_lines(tgt)
    n = 0
    for s in src_it:
        t = next(tgt_it, None)
        if t is None:
            extra = sum(1 for _ in src_it)
            raise MTError(f"line counts differ: {src} has {n + 1 + extra} lines, {tgt} has {n}")
        n += 1
        yield s, t
    rest = sum(1 for _ in tgt_it)
    if rest:
        raise MTError(f"line counts differ: {src} has {n} lines, {tgt} has {n + rest}")


def iter_tsv(path: Path) -> Iterator[tuple[str, str]]:
    """The (source, target) pairs of one TSV file (plain or .gz); MTError naming the file and line."""
    for number, line in enumerate(iter_lines(path), start=1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise MTError(f"{path}: line {number}: expected 2 tab-separated fields (source, target), "
                          f"got {len(fields)}")
        yield fields[0], fields[1]


def _checked_text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise MTError(f"{where}: expected a string, got {type(value).__name__}")
    try:  # JSON escapes can produce lone surrogates, which no tokenizer can encode
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise MTError(f"{where}: text contains a lone surrogate (invalid Unicode)") from None
    return value


def _pair_from_row(row: Any, data: Corpus, where: str) -> tuple[str, str]:
    """(source, target) from a {"src", "tgt"} or {"translation": {lang: text}} record."""
    if not isinstance(row, dict):
        raise MTError(f"{where}: expected an object, got {type(row).__name__}")
    if "translation" in row:
        tr = row["translation"]
        if not isinstance(tr, dict) or data.src_lang not in tr or data.tgt_lang not in tr:
            keys = sorted(tr) if isinstance(tr, dict) else type(tr).__name__
            raise MTError(f"{where}: 'translation' lacks '{data.src_lang}' or '{data.tgt_lang}' (has {keys})")
        return _checked_text(tr[data.src_lang], where), _checked_text(tr[data.tgt_lang], where)
    if "src" in row and "tgt" in row:
        return _checked_text(row["src"], where), _checked_text(row["tgt"], where)
    raise MTError(f"{where}: expected keys 'src' and 'tgt' or 'translation', got {sorted(row)}")


def iter_jsonl(path: Path, data: Corpus) -> Iterator[tuple[str, str]]:
    """The (source, target) pairs of one JSONL file (plain or .gz) in `data`'s languages; MTError
    naming the file and line."""
    for number, line in enumerate(iter_lines(path), start=1):
        if not line.strip():  # blank lines (e.g. a trailing one) are not records
            continue
        where = f"{path}: line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise MTError(f"{where}: invalid JSON ({e.msg} at column {e.colno})") from None
        except RecursionError:  # json recurses per nesting level: "[[[[...]]]]" can exhaust the stack
            raise MTError(f"{where}: invalid JSON (nested too deeply)") from None
        yield _pair_from_row(row, data, where)


# --------------------------------------------------------------------------- Hugging Face datasets


def _load_saved(root: Path) -> Any:
    import datasets

    try:
        ds = datasets.load_from_disk(str(root))
    except (FileNotFoundError, ValueError, OSError) as e:
        first = str(e).splitlines()[0] if str(e) else e
        raise MTError(f"saved dataset '{root}': cannot load ({first})") from None
    if not isinstance(ds, datasets.DatasetDict):
        raise MTError(f"saved dataset '{root}': expected a DatasetDict with splits, "
                      f"got a single {type(ds).__name__}")
    return ds


def _iter_rows(ds: Any, data: Corpus, where: str) -> Iterator[tuple[str, str]]:
    """Pairs from a HF Dataset / IterableDataset, converted from Arrow in batches (much faster than
    per row)."""
    number = 0
    for batch in ds.iter(batch_size=_HF_BATCH):
        columns = list(batch)
        size = len(batch[columns[0]]) if columns else 0
        for i in range(size):
            number += 1
            yield _pair_from_row({c: batch[c][i] for c in columns}, data, f"{where}: row {number}")


def _iter_saved(data: Corpus, split: str) -> Iterator[tuple[str, str]]:
    root = Path(data.path)
    if not root.is_dir():
        raise MTError(f"saved dataset '{root}' does not exist")
    dsd = _load_saved(root)
    if split not in dsd:
        raise MTError(f"saved dataset '{root}': no split '{split}' (has {', '.join(dsd)})")
    yield from _iter_rows(dsd[split], data, f"{root}[{split}]")


def _iter_hub(data: Corpus, split: str) -> Iterator[tuple[str, str]]:
    import datasets

    if not data.hub_name:
        raise MTError("data.hub_name: must name a Hugging Face dataset when data.format is 'hub'")
    name = f"{data.hub_name}" + (f"/{data.hub_config}" if data.hub_config else "")
    try:
        ds = datasets.load_dataset(data.hub_name, data.hub_config or None, split=split, streaming=True)
    except Exception as e:  # noqa: BLE001 - network, auth and unknown-split failures all end here
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise MTError(f"hub dataset '{name}' split '{split}': cannot load ({first})") from None
    yield from _iter_rows(ds, data, f"hub dataset '{name}'[{split}]")


# --------------------------------------------------------------------------- public API


def iter_split(data: Corpus, split: str) -> Iterator[tuple[str, str]]:
    """(source, target) raw pairs of one split, streamed in corpus order, line terminators removed.

    Raises MTError for a missing file or split, line counts that differ (naming both files and
    counts; raised when the shorter file ends), invalid UTF-8 (file and line), an unknown format.
    """
    if data.format == "hub":
        return _iter_hub(data, split)
    if data.format == "saved":
        return _iter_saved(data, split)
    files = _text_files(data, split)  # checked now, not at the first next(), so a missing file fails early
    single = single_file(data)
    fmt = single.format if single is not None else data.format
    if fmt == "text":
        return _iter_text(files[0], files[1])
    if fmt == "tsv":
        pairs = iter_tsv(files[0])
        return ((src, tgt) for tgt, src in pairs) if data.columns == "tgt-src" else pairs
    return iter_jsonl(files[0], data)


def read_split(data: Corpus, split: str) -> tuple[list[str], list[str]]:
    """Raw source and target lines of one split, in order (no cleaning). Same errors as `iter_split`."""
    src: list[str] = []
    tgt: list[str] = []
    for s, t in iter_split(data, split):
        src.append(s)
        tgt.append(t)
    return src, tgt


def drop_reason(src_len: int, tgt_len: int, limits: CleanLimits) -> str | None:
    """Why a pair of these lengths is dropped ('empty', 'too_long', 'ratio', 'over_max_positions'),
    or None to keep it. A limit <= 0 disables that check; the first reason that applies wins."""
    if not src_len or not tgt_len:
        return "empty"
    longer, shorter = max(src_len, tgt_len), min(src_len, tgt_len)
    if limits.max_len > 0 and longer > limits.max_len:
        return "too_long"
    if limits.max_len_ratio > 0 and longer > limits.max_len_ratio * shorter:
        return "ratio"
    if limits.max_positions > 0 and longer + 1 > limits.max_positions:  # + EOS (source) / BOS (target)
        return "over_max_positions"
    return None


def clean_pairs(pairs: Iterable[tuple[str, str]], limits: CleanLimits, report: CleanReport,
                length: Callable[[str], int] = len) -> Iterator[tuple[str, str]]:
    """Strip both sides and drop empty, too long and badly proportioned pairs, counting each in
    `report`. `length` measures a side (default: characters)."""
    for src, tgt in pairs:
        src, tgt = src.strip(), tgt.strip()
        reason = drop_reason(length(src) if src else 0, length(tgt) if tgt else 0, limits)
        report.record(reason)
        if reason is None:
            yield src, tgt
