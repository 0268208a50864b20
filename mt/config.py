"""Typed experiment configuration: nested frozen dataclasses loaded from YAML.

A config file has the sections `data`, `tokenizer`, `model`, `train`, `decode` and `clean`, plus a
top-level `name` (the run directory is `<run_root>/<name>`). This module is the schema, with the
few answers every stage reads off it (`DataConfig.pair_into`: the pair a command translates into a
target language; `split_label`): `mt.config_load` reads YAML and `--set` overrides into it,
`mt.config_checks` says which values each key accepts. A field's comment (trailing it, or on `#:`
lines right above it when long) is its meaning in docs/reference/configuration.md
(scripts/tools/config_reference.py).

One shape for every model: after loading, `DataConfig.pairs` is never empty. A bilingual config is
one untagged pair made of the `data` section's own keys (`DataConfig.__post_init__`, also after
`dataclasses.replace`); a config that lists `data.pairs` has `data.target_tags` and every source
starts with its target's tag `<2lang>`. `config_to_dict` writes an untagged model's pair as
`pairs: []`, so older checkpoints still load (tests/test_old_files.py).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

# The values a choice key accepts. The loader reads them from the field annotations, so each
# alias is the one list of its choices (e.g. `typing.get_args(LengthPenalty)` in mt.decode.search).
DataFormat = Literal["text", "tsv", "jsonl", "hub", "saved"]
TokenizerType = Literal["unigram", "bpe"]
Activation = Literal["relu", "gelu", "swish"]  # swish = SiLU (Marian's default)
# Sinusoidal position layout: interleaved sin/cos (Vaswani et al.), or sin in the first half and cos
# in the second (Marian / OPUS-MT, fairseq, tensor2tensor).
PositionLayout = Literal["interleaved", "halves"]
Norm = Literal["post", "pre"]
Optimizer = Literal["adam", "adamw"]
Schedule = Literal["inverse_sqrt", "noam", "linear_decay", "constant"]
Precision = Literal["auto", "fp32", "bf16", "fp16"]
Switch = Literal["auto", "on", "off"]  # YAML true/false read as on/off
LengthPenalty = Literal["gnmt", "average", "none"]
# sentencepiece's normalisation rules (normalization_rule_name); `identity` leaves text as written.
Normalization = Literal["identity", "cjk_width", "nmt_nfkc", "nfkc", "nmt_nfkc_cf", "nfkc_cf"]
DecodePrecision = Literal["fp32", "bf16"]
TsvColumns = Literal["src-tgt", "tgt-src"]  # the order of a TSV line's two columns
# The rules of the cleaning stage (mt/data/clean.py), in the order they run.
CleanRule = Literal["no_text", "length", "copy", "script", "numbers", "duplicate", "near_duplicate", "langid"]
# The spans a person's text keeps verbatim through translation (mt/text/protect.py).
ProtectKind = Literal["placeholders", "urls", "emails", "handles", "hashtags", "numbers", "code"]


@dataclass(frozen=True)
class PairConfig:
    """One language pair of a model: its corpus, languages and split names. A bilingual config's
    one pair is its `data` section's own keys; `data.pairs` lists several (the loader fills the keys
    a listed pair leaves out from its `data` section, so each is concrete here)."""

    path: str = ""  # required: the pair's folder (text/tsv/jsonl) or saved dataset
    src_lang: str = ""  # required
    #: required: with data.target_tags, its tag <2tgt_lang> is prepended to every source of the pair
    tgt_lang: str = ""
    format: DataFormat = "text"
    hub_name: str = ""
    hub_config: str = ""
    train_split: str = "train"
    valid_split: str = "val"
    test_splits: tuple[str, ...] = ("test_2016_flickr", "test_2017_flickr", "test_2017_mscoco")
    columns: TsvColumns = "src-tgt"

    @property
    def name(self) -> str:
        """`en-de`: how reports and the prepared files of a model of several pairs name this one."""
        return f"{self.src_lang}-{self.tgt_lang}"


@dataclass(frozen=True)
class DataConfig:
    """Where the parallel text comes from and how the training split is cleaned."""

    format: DataFormat = "text"  # text: {split}.{lang}[.gz] in `path`; tsv: {split}.tsv; jsonl: {split}.jsonl
    #: folder holding the split files (text/tsv/jsonl), a saved HF dataset (saved), or one corpus file (x.tsv,
    #: x.jsonl, x.en + x.de): val and test are held out of it into the run (mt/data/holdout.py)
    path: str = "data/multi30k"
    hub_name: str = ""  # format=hub: dataset name on the Hugging Face hub, e.g. "wmt14"
    hub_config: str = ""  # format=hub: dataset config, e.g. "de-en"
    #: format=tsv: tgt-src when each line holds target<TAB>source (a corpus read in its other direction)
    columns: TsvColumns = "src-tgt"
    src_lang: str = "en"
    tgt_lang: str = "de"
    train_split: str = "train"
    valid_split: str = "val"
    test_splits: tuple[str, ...] = ("test_2016_flickr", "test_2017_flickr", "test_2017_mscoco")
    train_limit: int = 0  # keep only the first N training pairs (0 = all); for quick runs and tests
    max_len: int = 250  # cleaning: drop training pairs with more subword pieces than this on either side
    max_len_ratio: float = 9.0  # cleaning: drop training pairs whose length ratio (in pieces) exceeds this
    # Several language pairs in one model (Johnson et al. 2017, target tags <2de>); empty = the one pair
    # above.
    #: list of {path, src_lang, tgt_lang}, each optionally with its own format and split names (default: this
    #: section's); see "Several language pairs in one model"
    pairs: tuple[PairConfig, ...] = ()
    #: put the tag <2tgt_lang> before every source; default: true when data.pairs lists the pairs, false for
    #: the one pair above
    target_tags: bool = False
    # Synthetic pairs (mt backtranslate / mt distill output folders; mt/data/synthetic.py), mixed with the
    # real ones.
    #: folders of synthetic pairs (train.{src_lang} + train.{tgt_lang}); empty = none
    synthetic: tuple[str, ...] = ()
    #: put the control piece <BT> before every synthetic source (tagged back-translation)
    synthetic_tag: bool = True
    #: synthetic examples per real one in each epoch (real side upsampled); 0 = each pair once
    synthetic_ratio: float = 0.0
    #: multi-pair sampling temperature (Arivazhagan et al. 2019): pair i's share of an epoch ∝ n_i^(1/T); 1 =
    #: by size, larger = flatter
    pair_temperature: float = 1.0

    def __post_init__(self) -> None:
        # One shape for every model: a list of pairs. Without tags (a bilingual config) the one pair
        # is always this section's own keys, also after dataclasses.replace() of one of them.
        if not (self.target_tags and self.pairs):
            own = PairConfig(path=self.path, src_lang=self.src_lang, tgt_lang=self.tgt_lang,
                             format=self.format, hub_name=self.hub_name, hub_config=self.hub_config,
                             columns=self.columns, train_split=self.train_split,
                             valid_split=self.valid_split, test_splits=self.test_splits)
            object.__setattr__(self, "pairs", (own,))

    @property
    def target_langs(self) -> tuple[str, ...]:
        """The languages the model translates into, in the order of `pairs` (one tag each with
        target_tags)."""
        return tuple(dict.fromkeys(p.tgt_lang for p in self.pairs))

    def pairs_into(self, target_lang: str | None) -> tuple[PairConfig, ...]:
        """The pairs that translate into `target_lang` (every pair when None), in the order of
        `pairs`; () when none does (the caller's error: the tokenizer's `for_target` names the
        languages the model knows)."""
        return tuple(p for p in self.pairs if target_lang is None or p.tgt_lang == target_lang)

    def pair_into(self, target_lang: str | None) -> PairConfig:
        """The first pair into `target_lang`, else (None, or a language no pair translates into)
        the first pair: the one whose source language a command reads."""
        return next(iter(self.pairs_into(target_lang)), self.pairs[0])

    def split_label(self, pair: PairConfig, split: str, sep: str = ".") -> str:
        """How prepared files (`sep` '.') and reports (`sep` '/') name `split` of `pair`: by the split
        alone when the model has one pair (`val`), else after its pair (`en-de.val`, `en-de/val`)."""
        return split if len(self.pairs) == 1 else f"{pair.name}{sep}{split}"


@dataclass(frozen=True)
class TokenizerConfig:
    """Sentencepiece training. Ids are fixed: pad=0, unk=1, bos=2, eos=3."""

    type: TokenizerType = "unigram"
    vocab_size: int = 8000  # pieces of the joint model, or of the target model when joint is false
    joint: bool = True  # one model for both languages (enables three-way weight tying)
    #: share of the sample's characters that get a piece each (sentencepiece: 0.9995 for Chinese and Japanese)
    character_coverage: float = 1.0
    src_vocab_size: int = 0  # joint false: pieces of the source model (0 = vocab_size)
    src_character_coverage: float = 0.0  # joint false: the source model's coverage (0 = character_coverage)
    #: false: vocab_size is the most pieces, and a sample too small for it gets fewer instead of an error
    hard_vocab_limit: bool = True
    #: sentence pairs sampled (seeded) from the training split to train sentencepiece (~1 GiB RAM per 300k)
    sample_size: int = 300_000
    workers: int = 1  # processes used to encode the corpus
    #: identity keeps text as written (full-width ，？！ and … too); cjk_width: full-width letters/digits to
    #: ASCII, half-width katakana to full-width, CJK punctuation kept
    normalization: Normalization = "identity"
    #: unseen characters become UTF-8 byte pieces, not <unk> (uses 256 vocab entries)
    byte_fallback: bool = True
    # Subword regularisation of the training split (mt/data/resegment.py): every epoch a sampled segmentation.
    #: 0 = off; unigram: sentencepiece's sampling smoothing α (Kudo 2018; smaller = more varied); bpe: the
    #: BPE-dropout rate (Provilkov et al. 2020)
    sampling_alpha: float = 0.0
    #: unigram: sample from the n best segmentations (-1 = all of them, the lattice); bpe ignores it
    sampling_nbest: int = -1


@dataclass(frozen=True)
class ModelConfig:
    """Transformer encoder-decoder dimensions and options (Vaswani et al. 2017)."""

    d_model: int = 256
    heads: int = 4
    encoder_layers: int = 3
    decoder_layers: int = 3
    d_ff: int = 1024
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation: Activation = "relu"
    norm: Norm = "post"  # post: the paper; pre: with a final LayerNorm
    tie_embeddings: bool = True  # decoder embedding = output projection; plus source embedding when joint
    max_positions: int = 1024
    #: sinusoidal layout: interleaved (the paper) or halves (Marian / OPUS-MT)
    positions: PositionLayout = "interleaved"
    scale_embedding: bool = True  # multiply token embeddings by sqrt(d_model) before adding positions
    #: a fixed (V,) bias added to tied output logits (Marian's final_logits_bias; not trained)
    final_logits_bias: bool = False


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation, schedule, stopping, validation and checkpointing."""

    seed: int = 1
    max_tokens: int = 4096  # per batch: padded (source + target) tokens, per rank
    max_sentences: int = 512  # per batch, per rank
    #: round batch widths up to a multiple of this (few shapes: bf16 on CPU compiles kernels per shape); 0 =
    #: auto: 4 for bf16 on CPU, else 1
    pad_multiple: int = 0
    accumulate: int = 1  # batches per update (gradient accumulation)
    optimizer: Optimizer = "adamw"
    lr: float = 1e-3  # peak learning rate (schedule=inverse_sqrt); scale factor for schedule=noam
    schedule: Schedule = "inverse_sqrt"
    #: updates of linear warmup, or a share of the run's updates: "5%" (mt/train/horizon.py)
    warmup: int | str = 4000
    #: with a limit (updates/epochs/time): anneal lr linearly to 0 over this last fraction
    cooldown: float = 0.2
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    weight_decay: float = 0.0
    clip_norm: float = 1.0  # 0 disables clipping
    label_smoothing: float = 0.1
    max_epochs: int = 0  # 0 = no limit
    max_updates: int = 0  # 0 = no limit
    time_budget: str = ""  # wall-clock training budget, e.g. "20m", "1h30m", "90s"; "" = none
    valid_every: int | str = 0  # validate every N updates, or every "25%" of the run (0 = only at epoch ends)
    #: also validate at every epoch end (false: only every valid_every and when training ends; small corpora
    #: end an epoch every few updates)
    valid_epoch_end: bool = True
    valid_bleu: bool = True  # decode the validation set and compute BLEU/chrF at validation
    valid_beam: int = 1  # 1 = greedy
    valid_max_sentences: int = 0  # decode only the first N validation sentences for BLEU (0 = all)
    #: > 0: skip a validation while validations have taken this share of the session (e.g. 0.05); the closing
    #: one always runs
    valid_max_share: float = 0.0
    #: after training: choose decode.search.alpha by beam BLEU on val (up to 1,500 lines) and store it in the
    #: checkpoint (mt/train/decode_fit.py)
    fit_alpha: bool = False
    #: after training (and the alpha fit): calibrate the sentence confidence on val against sentence chrF,
    #: stored in the checkpoint (mt/train/confidence_fit.py)
    fit_confidence: bool = False
    patience: int = 0  # early stopping: validations without a BLEU gain (0 = off)
    keep_checkpoints: int = 5  # periodic checkpoints kept (besides last and best)
    #: periodic checkpoint every N updates, or every "10%" of the run (0 = at validations only)
    save_every: int | str = 0
    log_every: int = 100  # plain log line every N updates
    #: auto: bf16 where native and faster (checked at start), else fp32; bf16: autocast; fp16: autocast + grad
    #: scaler, CUDA
    precision: Precision = "auto"
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    threads: int = 0  # torch intra-op threads on CPU (0 = torch default)
    max_bad_losses: int = 10  # NaN/inf losses skipped before training stops
    #: after training, average the last N periodic checkpoints into `averaged.pt` (0 = off)
    average_last: int = 0
    #: > 0: validate and save an exponential moving average of the weights (e.g. 0.999; 0 = off)
    ema_decay: float = 0.0
    #: fine-tune: start from this checkpoint's weights and tokenizer (mt/train/init_from.py); "" = off
    init_from: str = ""
    #: torch.compile the forward pass (one graph per batch shape); auto: on for CUDA (mt/train/compiled.py)
    compile: Switch = "auto"
    #: K: at most this many batch shapes (B, S, T) per epoch (a grid of widths and rows); 0 = auto: 32 when
    #: compiled, else none
    max_shapes: int = 0
    #: replay the compiled step as CUDA graphs (compile mode reduce-overhead); needs CUDA, compile, bounded
    #: shapes, one process
    cuda_graphs: bool = False
    #: processes collating batches ahead of the step (DataLoader); -1 = auto: 1 on CUDA, 0 (in the loop)
    #: elsewhere
    data_workers: int = -1


@dataclass(frozen=True)
class SearchConfig:
    """How an output is searched for (`decode.search`): the beam, its scoring and limits, the loop
    guard, and sampling instead of a search (mt/decode/rules.py `search_settings` makes one
    search's settings of it)."""

    beam: int = 5  # 1 = greedy
    length_penalty: LengthPenalty = "gnmt"  # gnmt: ((5+|y|)/6)^alpha; average: |y|^alpha; none: 1
    alpha: float = 0.6
    max_len_a: float = 1.5  # maximum output length = a * |src| + b
    max_len_b: int = 10
    n_best: int = 1  # hypotheses per sentence (samples, with sampling)
    forbid_unk: bool = True  # never emit <unk>
    #: loop guard: no n-gram of target pieces twice in an output (0 = off; mt/decode/repeats.py)
    no_repeat_ngram_size: int = 3
    #: loop guard: a piece already in the output has its log-prob times this (1 = off)
    repetition_penalty: float = 1.0
    sampling: bool = False  # draw translations at random instead of searching (back-translation)
    temperature: float = 1.0  # sampling: divides the log-probs (< 1 sharper, > 1 flatter); > 0
    top_k: int = 0  # sampling: draw from the k most probable tokens only (0 = all)
    top_p: float = 1.0  # sampling: nucleus, the fewest best tokens holding this probability; in (0, 1]
    seed: int = 0  # sampling: same seed and input, same output


@dataclass(frozen=True)
class TextConfig:
    """What translation does to a person's text around the search (`decode.text`; mt translate,
    mt serve and the document formats, not mt evaluate): mt/decode/pipeline.py's prepare and
    retry stages."""

    #: spans a person's text keeps verbatim
    protect: tuple[ProtectKind, ...] = typing.get_args(ProtectKind)
    case: bool = True  # ALL CAPS / Title Case lines translated in sentence case, their style given back
    ending: bool = True  # a segment without final punctuation gets none added
    loop_retry: bool = True  # an output that still loops is searched again with no target piece twice


@dataclass(frozen=True)
class CalibrationConfig:
    """Sentence confidence's calibration (`decode.calibration`), fitted on val after training and
    stored with the checkpoint (mt/decode/confidence.py, mt/train/confidence_fit.py)."""

    weights: tuple[float, ...] = ()  # the fitted (w..., b); () = the default mapping
    #: the shortest source (pieces) the calibration was fitted on: a shorter one gets at most
    #: UNCALIBRATED (0 = none)
    min_pieces: int = 0
    #: the lowest share of distinct words in a source the calibration was fitted on: a more
    #: repetitive one gets at most UNCALIBRATED (0 = none)
    min_distinct: float = 0.0


@dataclass(frozen=True)
class ResourcesConfig:
    """What decoding may use of the machine (`decode.resources`); the output does not depend on
    it, beyond the last bits of a score."""

    max_tokens: int = 8000  # source tokens per decoding batch (times the beam)
    precision: DecodePrecision = "fp32"  # bf16: a bf16 copy of the model, only on hardware with native bf16


@dataclass(frozen=True)
class DecodeConfig:
    """Translation settings by concern: search, text, calibration, resources (old flat keys still load).

    For `mt translate`, `mt serve`, `mt evaluate` and validation BLEU. Configs and checkpoints
    written before the sections (e168eae and earlier) keep their flat keys (`decode.beam`,
    `decode.confidence`): the loader moves each into its section (mt.config_load
    `MOVED_DECODE_KEYS`), and `--set decode.beam=4` still sets decode.search.beam."""

    search: SearchConfig = field(default_factory=SearchConfig)
    text: TextConfig = field(default_factory=TextConfig)
    calibration: CalibrationConfig = field(default_factory=CalibrationConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    #: mt evaluate's sacreBLEU tokenizer ("" = by data.tgt_lang: zh, ja-mecab, ko-mecab, char, 13a)
    bleu_tokenize: str = ""

    def output_settings(self) -> dict[str, typing.Any]:
        """The settings that decide what decoding writes, as a plain dict (a resumable job's identity:
        mt backtranslate's, mt distill's): every section but the batch budget, without the sampling
        knobs when not sampling, and without the evaluation's tokenizer."""
        search = dataclasses.asdict(self.search)
        if not self.search.sampling:
            search = {k: v for k, v in search.items() if k not in ("temperature", "top_k", "top_p", "seed")}
        return {"search": search, "text": dataclasses.asdict(self.text),
                "calibration": dataclasses.asdict(self.calibration), "precision": self.resources.precision}


@dataclass(frozen=True)
class CleanConfig:
    """The cleaning stage `mt prepare` runs on raw training pairs before the tokenizer (and `mt data
    clean` alone); mt/data/clean.py, docs/guides/cleaning.md. Off by default: curated corpora keep
    every pair."""

    enabled: bool = False  # run the rules below on every pair's training split (train_limit first)
    rules: tuple[CleanRule, ...] = ("no_text", "length", "copy", "script", "numbers", "duplicate",
                                    "near_duplicate", "langid")
    max_words: int = 200  # length: drop pairs with more words on a side (0 = no limit)
    max_char_ratio: float = 3.0  # length: drop pairs whose character-length ratio exceeds this (0 = off) ...
    ratio_min_chars: int = 10  # ... when the longer side has at least this many characters
    #: copy: also drop near-copies sharing this share of their words (0 = exact copies only)
    max_overlap: float = 0.6
    min_script_share: float = 0.5  # script: drop a side with fewer of its letters in its language's script
    langid_threshold: float = 0.6  # langid: drop a side identified as another language with this probability
    #: stop with an error when cleaning would drop more than this share of a pair's training split (1 = never)
    max_drop: float = 0.5
    samples: int = 10  # dropped pairs kept per rule as examples in data/clean_report.json
    #: write every dropped pair with its rule to clean_dropped.<pair>.jsonl in the run directory
    dropped_file: bool = False
    seed: int = 1  # which dropped pairs become the examples


@dataclass(frozen=True)
class AugmentConfig:
    """Augmented copies of a share of the training pairs, made when `mt prepare` encodes them
    (mt/data/augment.py): each share is the probability that a pair gets that copy (0 = none)."""

    upper: float = 0.0  # both sides in UPPER CASE
    title: float = 0.0  # both sides in Title Case
    #: a placeholder ({0}, %s, a URL, ...) inserted verbatim at aligned positions on both sides
    placeholder: float = 0.0
    noise: float = 0.0  # one typo in the source, the target clean
    seed: int = 0  # which pairs get which copies

    @property
    def enabled(self) -> bool:
        return any((self.upper, self.title, self.placeholder, self.noise))


@dataclass(frozen=True)
class Config:
    """A whole experiment. `run_dir` is `<run_root>/<name>`."""

    name: str = "experiment"
    run_root: str = "runs"
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    clean: CleanConfig = field(default_factory=CleanConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)

    @property
    def run_dir(self) -> Path:
        return Path(self.run_root) / self.name
