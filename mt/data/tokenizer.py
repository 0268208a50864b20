"""Sentencepiece subword models: training (deterministic) and the `Tokenizer` the rest of mt uses.

Every model mt trains has the fixed ids PAD=0, UNK=1, BOS=2, EOS=3. A tokenizer is either joint
(one model for both languages) or separate (a source and a target model). Ids never include
BOS/EOS from `encode_*`; the batching code adds them.

Text goes through sentencepiece's normalisation rule `tokenizer.normalization` (default
`identity`: nothing is rewritten, so the model learns to write full-width ，？！ and … as the
references have them; `nmt_nfkc`, sentencepiece's own default, turns them into ASCII), and with
`tokenizer.byte_fallback` a character the training sample never showed is encoded as its UTF-8
bytes instead of <unk>, so it decodes back to itself. Together they make
`decode(encode(line)) == line` hold for target lines; with `identity` runs of spaces are kept
too (the other rules collapse them). `round_trip_failures` finds the exceptions.

Models with target tags (`data.target_tags`: a config that lists `data.pairs`) add one tag per
target language, `<2de>`, `<2fr>` (Johnson et al. 2017), to the source model as sentencepiece
*control* symbols: each is one piece with its own id (after the four specials) that encoding text
never produces, so a source line that literally contains "<2de>" is split into ordinary pieces and
is never taken for the tag, and decoding drops it. `Tokenizer.for_target(lang)` is the tokenizer
that makes the model translate into `lang`: with the tag's id before every source for a tagged
model, itself for an untagged one. Prepare, validation, evaluation, translation and serving all
go through it, whatever the model's shape.

A third shape (`vocab`, mt.data.vocab): source and target sentencepiece models over ONE shared
vocabulary that numbers their pieces (OPUS-MT / Marian's layout: `mt import hf`); such a tokenizer
is `joint` (one vocabulary, so the model may tie all three embeddings) with two models.
"""

from __future__ import annotations

import io
import math
import random
import re
import tempfile
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import sentencepiece as spm

from mt.config import TokenizerConfig
from mt.data.vocab import TARGET_TAG, VocabView, read_vocab
from mt.errors import MTError
from mt.textio import atomic_write

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
JOINT_MODEL, SRC_MODEL, TGT_MODEL = "spm.model", "spm.src.model", "spm.tgt.model"
SHARED_VOCAB = "spm.vocab"  # with SRC_MODEL and TGT_MODEL: the shared vocabulary (mt.data.vocab)
# Sentencepiece's trained model depends on its thread count (work is split per thread), so it is
# fixed rather than taken from the machine: same sample + config -> byte-identical model anywhere.
TRAIN_THREADS = 4
# sentencepiece's default: longer sentences are left out of training (still encoded)
_MAX_SENTENCE_BYTES = 4192

T = TypeVar("T")
# Characters str.splitlines() breaks a line on: never inside one translation (see decode_tgt).
_LINE_BREAKS_TO_SPACE = str.maketrans({c: " " for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})


def reservoir_sample(items: Iterable[T], k: int, seed: int) -> list[T]:
    """A uniform random sample of at most `k` items of a stream, in stream order; deterministic given `seed`.

    Memory is O(k) however long the stream (Algorithm L: few random draws per item skipped).
    """
    if k <= 0:
        return []
    rng = random.Random(seed)
    reservoir: list[tuple[int, T]] = []
    it = iter(items)
    for i, item in enumerate(it):
        reservoir.append((i, item))
        if i + 1 == k:
            break
    if len(reservoir) < k:
        return [item for _, item in reservoir]

    def log_u() -> float:  # log of a uniform draw in the open interval (0, 1)
        u = rng.random()
        while u == 0.0:
            u = rng.random()
        return math.log(u)

    w = math.exp(log_u() / k)
    next_pick = k - 1 + math.floor(log_u() / math.log1p(-w)) + 1
    for i, item in enumerate(it, start=k):
        if i == next_pick:
            reservoir[rng.randrange(k)] = (i, item)
            w *= math.exp(log_u() / k)
            next_pick = i + math.floor(log_u() / math.log1p(-w)) + 1
    reservoir.sort(key=lambda pair: pair[0])
    return [item for _, item in reservoir]


def target_tag(lang: str) -> str:
    """The tag piece that asks a multi-pair model for target language `lang`: `<2lang>`."""
    return f"<2{lang}>"


def width_rules() -> str:
    """The `cjk_width` normalisation as sentencepiece's rule TSV (hex code points, tab, hex code
    points): full-width ASCII letters and digits to ASCII, half-width katakana (and its voiced
    pairs, ｶﾞ -> ガ) and half-width CJK punctuation to their full-width forms; nothing else changes
    (full-width ，！？ stay as Chinese and Japanese write them)."""
    def hexes(text: str) -> str:
        return " ".join(f"{ord(c):X}" for c in text)

    singles = [chr(c) for c in (*range(0xFF10, 0xFF1A), *range(0xFF21, 0xFF3B), *range(0xFF41, 0xFF5B),
                                *range(0xFF61, 0xFF9E))]
    rules = [(c, unicodedata.normalize("NFKC", c)) for c in singles]
    rules += [(base + mark, unicodedata.normalize("NFKC", base + mark))
              for base in singles if "\uff66" <= base for mark in "\uff9e\uff9f"
              if len(unicodedata.normalize("NFKC", base + mark)) == 1]
    return "".join(f"{hexes(a)}\t{hexes(b)}\n" for a, b in rules if a != b)


def _width_rule_file(cfg: TokenizerConfig, folder: str) -> str:
    """The rule file of `cjk_width` written into `folder`, "" for sentencepiece's named rules."""
    if cfg.normalization != "cjk_width":
        return ""
    path = Path(folder) / "cjk_width.tsv"
    path.write_text(width_rules(), encoding="utf-8")
    return str(path)


def _train_one(sentences: Sequence[str], cfg: TokenizerConfig, what: str, tags: Sequence[str] = (),
               key: str = "tokenizer.vocab_size") -> bytes:
    """Train one sentencepiece model on `sentences` (with `tags` as control symbols); returns the
    serialized model. `key`: the config key that set `cfg.vocab_size` (named in errors)."""
    if not sentences:
        raise MTError(f"tokenizer ({what}): no training sentences")
    writer = io.BytesIO()
    try:
        with tempfile.TemporaryDirectory(prefix="mt-spm-") as folder:
            _train_spm(sentences, cfg, writer, tags, _width_rule_file(cfg, folder))
    except RuntimeError as e:
        msg = str(e)
        small = re.search(r"Vocabulary size is smaller than required_chars\. (\d+) vs (\d+)", msg)
        if small:
            fallback = (" (the sample's characters plus 256 byte pieces for tokenizer.byte_fallback; "
                        "or --set tokenizer.byte_fallback=false)" if cfg.byte_fallback else "")
            raise MTError(f"{key}: {small.group(1)} is too small for this corpus ({what} sample); "
                          f"use at least {small.group(2)}{fallback}") from None
        m = re.search(r"Vocabulary size too high \((\d+)\).*?<= (\d+)", msg)
        if m:
            raise MTError(f"{key}: {m.group(1)} is too large for this corpus ({what} sample of "
                          f"{len(sentences)} sentences); use at most {m.group(2)}, e.g. --set {key}="
                          f"{int(m.group(2)) // 1000 * 1000 or m.group(2)}") from None
        first = msg.strip().splitlines()[0] if msg.strip() else type(e).__name__
        raise MTError(f"tokenizer ({what}): sentencepiece training failed: {first}") from None
    return writer.getvalue()


def _train_spm(sentences: Sequence[str], cfg: TokenizerConfig, writer: io.BytesIO, tags: Sequence[str],
               rule_file: str) -> None:
    """sentencepiece's trainer on `sentences`, the model written to `writer` (`rule_file`: a
    normalisation rule TSV, which replaces the named rule; "" = the named rule)."""
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=writer,
        model_type=cfg.type, vocab_size=cfg.vocab_size, character_coverage=cfg.character_coverage,
        pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
        pad_piece="<pad>", unk_piece="<unk>", bos_piece="<s>", eos_piece="</s>",
        normalization_rule_name="identity" if rule_file else cfg.normalization,
        byte_fallback=cfg.byte_fallback,
        # identity means text as written: runs of spaces too (the other rules collapse them).
        remove_extra_whitespaces=cfg.normalization not in ("identity", "cjk_width"),
        # The sample is already drawn (seeded) by the caller: no second sampling or shuffling.
        input_sentence_size=0, shuffle_input_sentence=False,
        num_threads=TRAIN_THREADS, max_sentence_length=_MAX_SENTENCE_BYTES, minloglevel=2,
        # Each option only when set: an option given is stored in the model, and models trained with
        # the defaults stay byte-identical to earlier ones.
        **({"control_symbols": list(tags)} if tags else {}),
        **({"normalization_rule_tsv": rule_file} if rule_file else {}),
        **({} if cfg.hard_vocab_limit else {"hard_vocab_limit": False}),
    )


def train_sentencepiece(src_sample: Sequence[str], tgt_sample: Sequence[str], cfg: TokenizerConfig,
                        target_langs: Sequence[str] = (), *, tags: bool = True,
                        extra_symbols: Sequence[str] = ()) -> Tokenizer:
    """Train a joint model on both samples (cfg.joint) or one model per side. Deterministic.

    The samples are the (already drawn, bounded) training sentences; the same samples and config
    give byte-identical models. `target_langs`: the languages the model translates into; with
    `tags` their tags `<2lang>` become control symbols of the source model (the joint one when
    joint), without them the tokenizer only knows them (`for_target`). `extra_symbols`: more
    control pieces of the source model (the synthetic-data tag `<BT>`, mt.data.synthetic).
    """
    symbols = [target_tag(lang) for lang in target_langs] if tags else []
    symbols += list(extra_symbols)
    if cfg.joint:
        return Tokenizer.from_bytes(_train_one([*src_sample, *tgt_sample], cfg, "joint", symbols), None,
                                    targets=target_langs)
    src_cfg = replace(cfg, vocab_size=cfg.src_vocab_size or cfg.vocab_size,
                      character_coverage=cfg.src_character_coverage or cfg.character_coverage)
    src_key = "tokenizer.src_vocab_size" if cfg.src_vocab_size else "tokenizer.vocab_size"
    return Tokenizer.from_bytes(_train_one(src_sample, src_cfg, "source", symbols, src_key),
                                _train_one(tgt_sample, cfg, "target"), targets=target_langs)


def _load_proto(model: bytes, what: str, check_ids: bool = True) -> spm.SentencePieceProcessor:
    sp = spm.SentencePieceProcessor()
    try:
        sp.LoadFromSerializedProto(model)
    except (RuntimeError, OSError, TypeError) as e:
        first = str(e).splitlines()[0] if str(e) else e
        raise MTError(f"{what}: not a sentencepiece model ({first})") from None
    ids = (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id())
    if check_ids and ids != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
        raise MTError(f"{what}: special ids (pad, unk, bos, eos) are {ids}, "
                      f"mt needs {(PAD_ID, UNK_ID, BOS_ID, EOS_ID)}")
    return sp


class Tokenizer:
    """Source and target sentencepiece models (the same object when joint) with mt's fixed special ids."""

    def __init__(self, src_model: bytes, tgt_model: bytes | None, src_prefix: Sequence[int] = (),
                 targets: Sequence[str] = (), vocab: bytes | None = None) -> None:
        self._src_bytes, self._tgt_bytes, self._vocab_bytes = src_model, tgt_model, vocab
        own = vocab is None  # sentencepiece's own ids (mt's fixed specials) or a shared vocabulary's
        self._src = _load_proto(src_model, "source tokenizer model" if tgt_model else "tokenizer model", own)
        self._tgt = self._src if tgt_model is None else _load_proto(tgt_model, "target tokenizer model", own)
        if vocab is not None:
            if tgt_model is None:
                raise MTError("tokenizer: a shared vocabulary needs a source and a target model")
            pieces = read_vocab(vocab)
            self._src = VocabView(self._src, pieces)  # type: ignore[assignment]
            self._tgt = VocabView(self._tgt, pieces)  # type: ignore[assignment]
        self._prefix = [int(i) for i in src_prefix]  # ids put before every encoded source: a target tag
        self._targets = tuple(targets)  # the languages the model translates into, as its config says
        self._tags: dict[str, int] | None = None
        self._target = ""  # set by for_target

    def target_tags(self) -> dict[str, int]:
        """{target language: its tag's id} for the `<2lang>` control pieces of the source model
        ({} for a bilingual model)."""
        if self._tags is None:
            found = {}
            for i in range(self._src.get_piece_size()):
                m = TARGET_TAG.fullmatch(self._src.id_to_piece(i)) if self._src.is_control(i) else None
                if m:
                    found[m.group(1)] = i
            self._tags = found
        return self._tags

    @property
    def targets(self) -> tuple[str, ...]:
        """The languages the model translates into: its tags' with target tags, else those it was
        built with (`targets=`: a loader passes its config's `data.target_langs`); () when unknown."""
        return tuple(self.target_tags()) or self._targets

    def for_target(self, lang: str | None = None, *, flag: str = "target language") -> Tokenizer:
        """The tokenizer that makes the model translate into `lang`: this one with the tag's id before
        every encoded source for a model with target tags, this one itself for a model without.
        `lang` may be left out when the model has one target language. MTError (`flag` naming the
        option it came from) when it has several and `lang` is missing, or `lang` is not one of them
        (a tokenizer without tags that was not told its language takes any: it has nothing to add)."""
        tags, targets = self.target_tags(), self.targets
        if lang is None:
            if len(targets) > 1:
                raise MTError(f"{flag}: required: this model translates into {', '.join(targets)}")
            lang = targets[0] if targets else None
        if lang is not None and targets and lang not in targets:
            raise MTError(f"{flag} {lang}: the model does not translate into '{lang}'; "
                          f"it knows {', '.join(targets)}")
        prefix = [tags[lang]] if lang in tags else []
        if prefix == self._prefix:
            return self
        out = Tokenizer(self._src_bytes, self._tgt_bytes, prefix, self._targets, self._vocab_bytes)
        out._tags = tags
        out._target = lang or ""
        return out

    @property
    def target(self) -> str:
        """The language this tokenizer makes the model translate into: the one `for_target` was given,
        else the model's only target language ("" when unknown)."""
        return self._target or (self._targets[0] if len(self._targets) == 1 else "")

    def control_id(self, piece: str) -> int | None:
        """The id of control piece `piece` of the source model (e.g. the synthetic-data tag), None if
        absent."""
        i = self._src.piece_to_id(piece)
        return i if i != UNK_ID and self._src.is_control(i) else None

    def with_prefix(self, prefix: Sequence[int]) -> Tokenizer:
        """The same models with `prefix` (ids) before every encoded source, e.g. a target tag and the
        synthetic-data tag (mt.data.synthetic)."""
        out = Tokenizer(self._src_bytes, self._tgt_bytes, prefix, self._targets, self._vocab_bytes)
        out._tags = self._tags
        return out

    def with_targets(self, targets: Sequence[str]) -> Tokenizer:
        """The same models told that the model translates into `targets` (a tokenizer reused for
        fine-tuning into another language); no target tag in front."""
        return Tokenizer(self._src_bytes, self._tgt_bytes, (), targets, self._vocab_bytes)

    @property
    def src_prefix(self) -> list[int]:
        """The ids `encode_src` puts before every source (a target tag), [] when none."""
        return list(self._prefix)

    @classmethod
    def from_bytes(cls, src_model: bytes, tgt_model: bytes | None = None, *, targets: Sequence[str] = (),
                   vocab: bytes | None = None) -> Tokenizer:
        """A tokenizer from serialized models; `tgt_model=None` means joint. `targets`: the
        languages the model translates into (its config's `data.target_langs`); `vocab`: a shared
        vocabulary over the two models (`mt.data.vocab.vocab_bytes`)."""
        return cls(src_model, tgt_model, (), targets, vocab)

    @classmethod
    def from_files(cls, run_dir: Path, *, targets: Sequence[str] = ()) -> Tokenizer:
        """Load `spm.model` (joint) or `spm.src.model` + `spm.tgt.model` from a run directory
        (`targets` as in `from_bytes`)."""
        run_dir = Path(run_dir)
        joint, src, tgt, vocab = (run_dir / name
                                  for name in (JOINT_MODEL, SRC_MODEL, TGT_MODEL, SHARED_VOCAB))
        if vocab.is_file() and src.is_file() and tgt.is_file():
            return cls(src.read_bytes(), tgt.read_bytes(), (), targets, vocab.read_bytes())
        if joint.is_file():
            return cls(joint.read_bytes(), None, (), targets)
        if src.is_file() and tgt.is_file():
            return cls(src.read_bytes(), tgt.read_bytes(), (), targets)
        raise MTError(f"{run_dir}: no tokenizer model ({JOINT_MODEL}, or {SRC_MODEL} and {TGT_MODEL}); "
                      f"run `mt prepare` first")

    def save(self, run_dir: Path) -> list[Path]:
        """Write the model file(s) into `run_dir`, each atomically; returns the paths written."""
        files = ({JOINT_MODEL: self._src_bytes} if self._tgt_bytes is None
                 else {SRC_MODEL: self._src_bytes, TGT_MODEL: self._tgt_bytes})
        if self._vocab_bytes is not None:
            files[SHARED_VOCAB] = self._vocab_bytes
        written = []
        for name, data in files.items():
            path = Path(run_dir) / name
            with atomic_write(path) as f:
                f.write(data)  # type: ignore[arg-type]
            written.append(path)
        return written

    def model_bytes(self) -> dict[str, bytes]:
        """{"src": model} when joint, else {"src": ..., "tgt": ...}, plus "vocab" when the two
        share one (for checkpoints)."""
        out = {"src": self._src_bytes}
        if self._tgt_bytes is not None:
            out["tgt"] = self._tgt_bytes
        if self._vocab_bytes is not None:
            out["vocab"] = self._vocab_bytes
        return out

    def __getstate__(self) -> dict[str, Any]:  # picklable (worker processes) via the model bytes
        return {"src": self._src_bytes, "tgt": self._tgt_bytes, "prefix": self._prefix,
                "targets": self._targets, "vocab": self._vocab_bytes, "target": self._target}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["src"], state["tgt"], state.get("prefix", ()), state.get("targets", ()), state.get("vocab"))
        self._target = state.get("target", "")

    @property
    def joint(self) -> bool:
        """One vocabulary for both sides: one sentencepiece model, or two over a shared vocabulary."""
        return self._tgt_bytes is None or self._vocab_bytes is not None

    @property
    def src_vocab_size(self) -> int:
        return self._src.get_piece_size()

    @property
    def tgt_vocab_size(self) -> int:
        return self._tgt.get_piece_size()

    def encode_src(self, lines: list[str], *, threads: int = -1) -> list[list[int]]:
        """Source lines -> piece ids (no BOS/EOS), after `src_prefix` (a target tag) when set.
        `threads`: sentencepiece's C++ threads (-1 = its default)."""
        ids = self._src.encode(lines, out_type=int, num_threads=threads)
        return [self._prefix + seq for seq in ids] if self._prefix else ids

    def encode_tgt(self, lines: list[str], *, threads: int = -1) -> list[list[int]]:
        """Target lines -> piece ids (no BOS/EOS)."""
        return self._tgt.encode(lines, out_type=int, num_threads=threads)

    def sample_encode(self, side: str, lines: list[str], *, alpha: float, nbest: int,
                      seed: int) -> list[list[int]]:
        """`lines` -> one sampled segmentation each (subword regularisation), no prefix, no BOS/EOS.

        `side` is "src" or "tgt". Unigram models sample from the `nbest` best segmentations (-1: the
        whole lattice) with smoothing `alpha` (Kudo 2018); BPE models drop each merge with
        probability `alpha` (BPE-dropout). Deterministic given `seed`: sentencepiece's generator is
        reseeded and runs in this one thread (its multi-threaded sampling is not reproducible).
        """
        spm.set_random_generator_seed(seed)
        model = self._src if side == "src" else self._tgt
        return model.encode(lines, out_type=int, enable_sampling=True, alpha=alpha, nbest_size=nbest,
                            num_threads=1)

    def decode_pieces(self, side: str, ids: list[list[int]]) -> list[str]:
        """Piece ids of `side` ("src" or "tgt") -> the text they spell, control pieces (tags) dropped."""
        return (self._src if side == "src" else self._tgt).decode(ids)

    def decode_tgt(self, ids: list[list[int]]) -> list[str]:
        """Target ids -> detokenised text, one line each; each sequence is cut at its first EOS,
        PAD and BOS are ignored.

        With byte fallback a model can emit the byte pieces of a line break (`<0x0A>`, ...): those
        characters (everything `str.splitlines` breaks on) become spaces, so a translation is
        always exactly one line and outputs keep lining up with inputs.
        """
        cleaned = []
        for seq in ids:
            # Search output is a list of ints already holding none of the three: list methods
            # (C loops) find that out, no Python loop over tokens (docs/performance.md).
            if not isinstance(seq, list) or (seq and not isinstance(seq[0], int)):
                seq = seq.tolist() if hasattr(seq, "tolist") else [int(i) for i in seq]
            if EOS_ID in seq:
                seq = seq[:seq.index(EOS_ID)]
            if PAD_ID in seq or BOS_ID in seq:
                seq = [i for i in seq if i != PAD_ID and i != BOS_ID]
            cleaned.append(seq)
        return [text.translate(_LINE_BREAKS_TO_SPACE) for text in self._tgt.decode(cleaned)]

    def round_trip_failures(self, lines: Sequence[str],
                            ids: Sequence[Sequence[int]] | None = None) -> list[int]:
        """Indices of target `lines` for which decode(encode(line)) != line (`ids`: their encoding, if
        known)."""
        if ids is None:
            ids = self.encode_tgt(list(lines))
        decoded = self._tgt.decode([list(seq) for seq in ids])
        return [i for i, (line, back) in enumerate(zip(lines, decoded)) if line != back]

    def src_pieces(self, line: str) -> list[str]:
        """The source pieces of one line (labels for attention plots), the tag first when set."""
        return [self._src.id_to_piece(i) for i in self._prefix] + self._src.encode(line, out_type=str)

    def tgt_pieces(self, ids: list[int]) -> list[str]:
        """The target pieces of an id sequence."""
        return [self._tgt.id_to_piece(int(i)) for i in ids]
