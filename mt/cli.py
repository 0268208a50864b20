"""The `mt` command line: the Typer interface only, one subcommand per pipeline stage.

Each command declares its options here and hands them to the module of mt/commands/ named after
it (`mt translate` -> mt/commands/translate.py, `mt data fetch` -> mt/commands/fetch.py), which
checks them, makes one library call and prints what the user sees. Those modules are imported
inside the commands so `mt --help` stays fast. `mt serve`'s options are `ServeSettings`' fields
(flag, default and help declared once, in mt/serve/settings.py). Errors a user can cause raise
`MTError`; `main()` prints them as one line on stderr and exits with code 2, and prints each
`MTWarning` as one line too. Library stages report progress through `logging` (loggers under
"mt"); `main()` shows those INFO messages on stdout, as plain lines. That machinery, and
`options_of`, which declares a settings dataclass's fields as options, live in mt/cli_support.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from mt.cli_support import options_of, run_app
from mt.decode.overrides import DecodeOverrides
from mt.serve.settings import ServeSettings

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="mt: train, run and score Transformer translation models.")
data_app = typer.Typer(no_args_is_help=True, help="Fetch and clean corpora.")
app.add_typer(data_app, name="data")
import_app = typer.Typer(no_args_is_help=True,
                         help="Import a model trained elsewhere as an mt checkpoint.")
app.add_typer(import_app, name="import")

ConfigArg = typer.Argument(..., help="Experiment config (YAML), e.g. configs/multi30k_en_de.yaml.")
SetOpt = typer.Option([], "--set", help="Override a config value: section.key=value (repeatable).")
SERVE_CKPT_HELP = ("One model: a checkpoint (.pt), an ensemble of checkpoints joined by commas (a.pt,b.pt), "
                   "or an `mt export` directory. Repeat for several models (in worker processes of their "
                   "own): each request goes to the one that serves its language pair; two may not serve the "
                   "same pair.")
CKPT_HELP = ("A checkpoint file (.pt). Repeat for an ensemble: the models' probabilities are averaged at "
             "every step; they must share one tokenizer, and the first one's config and decode settings "
             "apply. translate/evaluate also take one `mt export` directory (run in CTranslate2).")


@data_app.command("fetch")
def data_fetch(
    corpus: str = typer.Argument(..., help="Corpus to fetch; supported: multi30k."),
    dest: Path = typer.Option(Path("data/multi30k"), help="Folder to write the files to."),
    mirror: Optional[Path] = typer.Option(None, help="Copy from this local folder instead of downloading "
                                                     "(default: $MT_DATA_MIRROR)."),
) -> None:
    """Download Multi30k (or copy it from a mirror) and verify line counts and checksums."""
    from mt.commands.fetch import fetch_command

    fetch_command(corpus, dest, mirror)


@data_app.command("clean")
def data_clean(
    path: str = typer.Argument(..., help="The corpus: a folder of split files (text, tsv, jsonl), a saved "
                                         "dataset, or a hub dataset name with --format hub."),
    output: Path = typer.Option(..., "--output", "-o",
                                help="Folder for the cleaned {split}.{lang} files and report."),
    src_lang: str = typer.Option("en", "--src-lang", help="Source language code."),
    tgt_lang: str = typer.Option("de", "--tgt-lang", help="Target language code."),
    data_format: str = typer.Option("text", "--format",
                                    help="text | tsv | jsonl | saved | hub (as data.format)."),
    split: str = typer.Option("train", "--split", help="The split to clean."),
    config: Optional[Path] = typer.Option(None, "--config",
                                          help="Take the settings of this config's clean: section."),
    overrides: list[str] = typer.Option([], "--set",
                                        help="Override a cleaning setting: clean.key=value (repeatable)."),
    dropped_file: bool = typer.Option(False, "--dropped-file", help="Write every dropped pair with its rule "
                                                                    "to clean_dropped.jsonl."),
    max_drop: Optional[float] = typer.Option(
        None, "--max-drop", help="Stop when more than this share would be dropped (default clean.max_drop, "
                                 "0.5)."),
    forward: Optional[Path] = typer.Option(
        None, "--forward", help="A src->tgt checkpoint: with --backward, score pairs by dual conditional "
                                "cross-entropy."),
    backward: Optional[Path] = typer.Option(
        None, "--backward", help="A tgt->src checkpoint (see --forward)."),
    keep: Optional[float] = typer.Option(None, "--keep",
                                         help="Keep this best-scoring share of the pairs the rules keep."),
    min_score: Optional[float] = typer.Option(
        None, "--min-score", help="Keep pairs scoring at least this (exp(-dual cross-entropy), in (0, 1])."),
    device: str = typer.Option("auto", help="auto | cpu | cuda | cuda:N (model scores)."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", help="Padded tokens per scoring batch."),
    workers: int = typer.Option(1, help="Processes for the rules and language ID (same output)."),
) -> None:
    """Clean a corpus: duplicates, copies, length, script, numbers, language ID (and model scores)."""
    from mt.commands.clean import clean_command

    clean_command(path, output, src_lang=src_lang, tgt_lang=tgt_lang, data_format=data_format, split=split,
                  config=config, overrides=overrides, dropped_file=dropped_file, max_drop=max_drop,
                  forward=forward, backward=backward, keep=keep, min_score=min_score, device=device,
                  max_tokens=max_tokens, workers=workers)


@app.command()
def prepare(config: Path = ConfigArg, overrides: list[str] = SetOpt,
            force: bool = typer.Option(False, help="Rebuild even if the cache is up to date.")) -> None:
    """Train the sentencepiece tokenizer and encode every split into the run directory.

    With train.init_from set (fine-tuning) the init checkpoint's tokenizer encodes the corpus instead."""
    from mt.commands.prepare import prepare_command

    prepare_command(config, overrides, force=force)


@app.command()
def train(
    config: Optional[Path] = typer.Argument(
        None, help="Experiment config (YAML), e.g. configs/multi30k_en_de.yaml; or leave it out and give "
                   "--data."),
    overrides: list[str] = SetOpt,
    resume: bool = typer.Option(False, help="Continue exactly from runs/<name>/checkpoints/last.pt."),
    init_from: Optional[Path] = typer.Option(
        None, "--init-from",
        help="Fine-tune: start a NEW run from this checkpoint's weights and tokenizer (optimizer, schedule, "
             "update count and best score start fresh); same as --set train.init_from=PATH."),
    data: Optional[str] = typer.Option(
        None, "--data", help="No config: a corpus (one .tsv/.jsonl file, corpus.xx + corpus.yy, or a folder "
                             "of splits); mt chooses the config for it and --budget and writes it to the "
                             "run."),
    src_lang: str = typer.Option("", "--src-lang", help="With --data: the source language code."),
    tgt_lang: str = typer.Option("", "--tgt-lang", help="With --data: the target language code."),
    budget: str = typer.Option("1h", help="With --data: the training time, e.g. 30m, 2h."),
    data_format: str = typer.Option(
        "", "--format", help="With --data: tsv | jsonl | text (default: from the names)."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="With --data: write the chosen config, do not train."),
) -> None:
    """Train a model (preparing the data first when needed). Works under torchrun for DDP.

    `mt train --data corpus.tsv --src-lang en --tgt-lang de --budget 1h`: no config to write."""
    from mt.commands.train import train_command

    train_command(config, overrides, resume=resume, init_from=init_from, data=data, src_lang=src_lang,
                  tgt_lang=tgt_lang, budget=budget, dry_run=dry_run, data_format=data_format)


GlossaryOpt = typer.Option(None, "--glossary",
                           help="Terms to keep: TSV lines 'source<TAB>target' or 'source' (CSV, TBX too); "
                                "a third column gives the target forms' gender and number ('f|pl').")


@app.command()
@options_of(DecodeOverrides)
def translate(
    checkpoint: list[Path] = typer.Option(..., "--checkpoint", "-c", help=CKPT_HELP),
    input: str = typer.Option(
        "-", "--input", "-i", help="Source text (each line split into sentences); '-' = stdin."),
    output: str = typer.Option("-", "--output", "-o", help="Where to write translations; '-' = stdout."),
    device: str = typer.Option("auto", help="auto | cpu | cuda | cuda:N."),
    target_lang: Optional[str] = typer.Option(
        None, "--target-lang", help="The language to translate into, for a model of several pairs "
                                    "(required when it has several target languages)."),
    format: Optional[str] = typer.Option(
        None, "--format", help="Translate the input as a document: txt (paragraphs), html, srt, vtt, docx, "
                               "odt, pptx, odp, epub, md, po, xliff; default: the input's extension (.txt: a "
                               "line a segment)."),
    segment: bool = typer.Option(True, "--segment/--no-segment", help="Split each line into sentences and "
                                 "translate them one by one (default; whitespace kept); --no-segment "
                                 "translates each line as one segment (pre-split corpora, evaluation)."),
    glossary: Optional[Path] = GlossaryOpt,
    scores: bool = typer.Option(
        False, "--scores", help="Write 'confidence<TAB>translation', confidence in [0, 1]."),
    prefix: Optional[Path] = typer.Option(
        None, "--prefix", help="Target prefixes, one a line of input: each output starts with its line "
                               "exactly as typed and continues it (a word cut short is completed)."),
    alternatives: int = typer.Option(
        0, "--alternatives", min=0,
        help="With --prefix: the K most probable next words after each prefix, each continued to a whole "
             "translation: 'i ||| text ||| probability'."),
    **knobs: Any,
) -> None:
    """Translate raw text: same number of lines out as in, in the same order; or a document.

    Each line is split into sentences (the spaces between them kept); --no-segment takes each line as one
    sentence. Beam search by default; --sampling draws instead. Several -c checkpoints make an ensemble. A
    document (.srt .vtt .html .docx .odt .pptx .odp .epub .md .po .xlf, or --format) keeps its layout.
    """
    from mt.commands.translate import translate_command

    translate_command(checkpoint, input, output, DecodeOverrides.from_flags(**knobs), device=device,
                      target_lang=target_lang, format=format, segment=segment, glossary=glossary,
                      scores=scores, prefix=prefix, alternatives=alternatives)


@app.command()
@options_of(DecodeOverrides, only=("beam", "temperature", "top_k", "top_p", "seed", "max_tokens"), help={
    "beam": "Beam search with this beam instead of sampling.",
    "seed": "Sampling seed: line i's draws depend on (seed, i) only (default 0)."})
def backtranslate(
    model: list[Path] = typer.Option(
        ..., "--model", "-c", help="The reverse model (target -> source); repeat for an ensemble."),
    mono: Path = typer.Option(
        ..., help="Target-language text, one sentence a line (.gz, or a .tsv/.jsonl's target side)."),
    output: Path = typer.Option(
        ..., "--output", "-o", help="Folder for the synthetic corpus (train.SRC, train.TGT, manifest)."),
    chunk_lines: int = typer.Option(
        10_000, "--chunk-lines", help="Lines translated and committed at a time."),
    device: str = typer.Option("auto", help="auto | cpu | cuda | cuda:N."),
    target_lang: Optional[str] = typer.Option(
        None, "--target-lang", help="For a reverse model of several pairs."),
    mono_lang: Optional[str] = typer.Option(
        None, "--mono-lang", help="Language of --mono (default: the model's source)."),
    **knobs: Any,
) -> None:
    """Back-translate monolingual text into synthetic pairs (sampled by default), resumably: run it again
    to continue."""
    from mt.commands.backtranslate import backtranslate_command

    backtranslate_command(model, mono, output, DecodeOverrides(**knobs), chunk_lines=chunk_lines,
                          device=device, target_lang=target_lang, mono_lang=mono_lang)


@app.command()
@options_of(DecodeOverrides, only=("beam", "n_best", "max_tokens"), help={
    "beam": "The teacher's beam (default: its decode.search.beam).",
    "n_best": "With --select-bleu: hypotheses to choose from."})
def distill(
    config: Path = ConfigArg, overrides: list[str] = SetOpt,
    teacher: list[Path] = typer.Option(
        ..., "--teacher", "-t", help="Teacher checkpoint; repeat for an ensemble."),
    select_bleu: bool = typer.Option(
        False, "--select-bleu", help="Keep the n-best hypothesis closest to the reference."),
    chunk_lines: int = typer.Option(
        10_000, "--chunk-lines", help="Lines translated and committed at a time."),
    device: str = typer.Option(
        "auto", help="auto | cpu | cuda | cuda:N (translation; training follows the config)."),
    **knobs: Any,
) -> None:
    """Train the student CONFIG on the teacher's translations of its training sources (resumable: run it
    again)."""
    from mt.commands.distill import distill_command

    distill_command(teacher, config, overrides, DecodeOverrides(**knobs), select_bleu=select_bleu,
                    chunk_lines=chunk_lines, device=device)


@app.command()
@options_of(DecodeOverrides, only=("beam", "alpha", "precision", "no_repeat_ngram", "repetition_penalty"))
def evaluate(
    checkpoint: list[Path] = typer.Option([], "--checkpoint", "-c", help=CKPT_HELP),
    split: list[str] = typer.Option([], help="A split of the checkpoint's corpus (repeatable)."),
    src: Optional[Path] = typer.Option(None, help="Source file to translate (with --ref)."),
    ref: Optional[Path] = typer.Option(None, help="Reference translations."),
    hyp: list[Path] = typer.Option(
        [], help="Score these hypotheses against --ref (no model needed); repeat to compare systems with "
                 "sacreBLEU's paired bootstrap (the first is the baseline)."),
    compare: list[str] = typer.Option(
        [], "--compare", help="Another model to compare with -c on the same sets (paired bootstrap; "
                              "repeatable; an ensemble as a.pt,b.pt). Repeated -c stays one ensemble."),
    out_dir: Optional[Path] = typer.Option(
        None, "--out-dir", help="Where hypotheses and reports go (default: <run>/eval)."),
    samples: int = typer.Option(0, help="Print this many sample translations beside their references."),
    device: str = typer.Option("auto", help="auto | cpu | cuda | cuda:N."),
    tokenize: Optional[str] = typer.Option(
        None, help="sacreBLEU tokenizer for BLEU (13a, intl, zh, ja-mecab, ko-mecab, char, flores200, ...); "
        "default: decode.bleu_tokenize, else by the target language."),
    target_lang: Optional[str] = typer.Option(
        None, "--target-lang", help="A model of several pairs: score only the pairs into this language "
        "(required with --src/--ref when it has several target languages)."),
    glossary: Optional[Path] = GlossaryOpt,
    **knobs: Any,
) -> None:
    """Score with sacreBLEU (BLEU, chrF, TER + signatures) and write a JSON report; --glossary adds term
    success."""
    from mt.commands.evaluate import evaluate_command

    evaluate_command(checkpoint, splits=split, src=src, ref=ref, hyp=hyp, out_dir=out_dir,
                     overrides=DecodeOverrides(**knobs), samples=samples, device=device, tokenize=tokenize,
                     target_lang=target_lang, compare=compare, glossary=glossary)


@app.command()
def export(
    checkpoint: Path = typer.Argument(..., help="The checkpoint (.pt) to export."),
    format: str = typer.Option(
        ..., "--format", help="Export format: ctranslate2 | hf (a transformers directory)."),
    output: Path = typer.Option(..., "--output", "-o", help="The model directory to write."),
    quantization: str = typer.Option("none", help="Weights: none (float32) | int8 | int8_float32 | int16."),
    force: bool = typer.Option(False, help="Replace a non-empty output directory."),
    int8_range: str = typer.Option(
        "reduced", "--int8-range", help="int8 weights in [-63, 63] (reduced: exact on AVX2 CPUs too) or "
                                         "[-127, 127] (full: finer, for CPUs with VNNI only)."),
    check: bool = typer.Option(
        True, help="With --quantization: translate the validation set with the quantised and the float32 "
                   "model and write both BLEUs (and the CPU) into mt_export.json and MODEL_CARD.md."),
) -> None:
    """Export a checkpoint for deployment (CTranslate2: `mt translate/evaluate -c DIR` run it too) or as a
    transformers directory (--format hf: from_pretrained, pipeline("translation"))."""
    from mt.commands.export import export_command

    export_command(checkpoint, format=format, output=output, quantization=quantization, force=force,
                   int8_range=int8_range, check=check)


@app.command()
def score(
    checkpoint: list[Path] = typer.Option(..., "--checkpoint", "-c", help=CKPT_HELP),
    src: Path = typer.Option(..., help="Source sentences, one per line."),
    tgt: Path = typer.Option(
        ..., help="Target sentences: line i is scored as a translation of --src line i."),
    output: str = typer.Option("-", "--output", "-o", help="Where to write the scores; '-' = stdout."),
    normalize: bool = typer.Option(False, help="Add a third column: the log-probability divided by the "
                                   "config's length penalty (decode.search.length_penalty, "
                                   "decode.search.alpha), the score beam search ranks by."),
    max_tokens: Optional[int] = typer.Option(
        None, "--max-tokens", help="Padded source + target tokens per batch."),
    device: str = typer.Option("auto", help="auto | cpu | cuda | cuda:N."),
    target_lang: Optional[str] = typer.Option(
        None, "--target-lang", help="The language of --tgt, for a model of several pairs (required when it "
                                    "has several target languages)."),
) -> None:
    """Score sentence pairs under the model: per line 'log_prob<TAB>per_token' (forced decoding,
    EOS included), e.g. to filter a noisy corpus or rerank n-best lists."""
    from mt.commands.score import score_command

    score_command(checkpoint, src, tgt, output, normalize=normalize, max_tokens=max_tokens, device=device,
                  target_lang=target_lang)


@import_app.command("hf")
def import_hf(
    model_dir: Path = typer.Argument(
        ..., help="A transformers Marian directory (OPUS-MT layout: config.json, model.safetensors or "
                  "pytorch_model.bin, source.spm, target.spm, vocab.json)."),
    output: Path = typer.Option(..., "--output", "-o", help="The mt checkpoint (.pt) to write."),
    src_lang: Optional[str] = typer.Option(
        None, help="Source language (default: tokenizer_config.json's source_lang)."),
    tgt_lang: Optional[str] = typer.Option(
        None, help="Target language (default: tokenizer_config.json's target_lang)."),
) -> None:
    """Import a transformers Marian (OPUS-MT) model: translate, evaluate, serve or fine-tune it
    (--init-from)."""
    from mt.commands.hf import hf_command

    hf_command(model_dir, output, src_lang=src_lang, tgt_lang=tgt_lang)


@app.command()
def average(
    checkpoints: list[Path] = typer.Argument(..., help="Checkpoints of one run to average."),
    output: Path = typer.Option(..., "--output", "-o", help="The averaged checkpoint to write."),
) -> None:
    """Average the weights of several checkpoints into one that translates."""
    from mt.commands.average import average_command

    average_command(checkpoints, output)


@app.command()
def plot(
    run_dir: Path = typer.Argument(..., help="A run directory, e.g. runs/multi30k_en_de."),
    attention: bool = typer.Option(False, help="Also plot cross-attention for one sentence."),
    sentence: Optional[str] = typer.Option(
        None, help="Source sentence for the attention plot (default: first val line)."),
    layer: int = typer.Option(-1, help="Decoder layer whose cross-attention is plotted (-1 = last)."),
    checkpoint: Optional[Path] = typer.Option(
        None, "--checkpoint", "-c", help="Checkpoint for the attention plot (default: best.pt)."),
) -> None:
    """Write PNG plots of loss and BLEU against updates and wall time (and attention)."""
    from mt.commands.plot import plot_command

    plot_command(run_dir, attention=attention, sentence=sentence, layer=layer, checkpoint=checkpoint)


@app.command()
@options_of(ServeSettings)
def serve(checkpoint: list[str] = typer.Option(..., "--checkpoint", "-c", help=SERVE_CKPT_HELP),
          **settings: Any) -> None:
    """Serve models over HTTP: LibreTranslate-compatible /translate, /v1/translate, /metrics, /docs.

    Needs the serve extra: pip install -e ".\\[serve]" (make demo installs it). Requests go to the
    model that serves their language pair. SIGTERM finishes requests in flight, then exits; SIGHUP
    re-reads the keys file and loads the checkpoints again without dropping a request.
    """
    from mt.commands.serve import serve_command

    serve_command(checkpoint, **settings)


def main() -> None:
    """Console entry point: runs the app; user errors become one line on stderr and exit 2
    (mt/cli_support.py's `run_app`)."""
    run_app(app)
