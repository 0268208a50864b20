"""`mt translate`: flag checks, stdin/stdout handling and chunked, streamed output; documents.

The work is library code (mt.decode.translate) that returns data and prints nothing but progress
bars. Models come from `mt.deploy.loading.load_model`: one or more checkpoints (several decode
as an ensemble) or an exported directory.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch

from mt.commands.decoding import glossary_for_model, load_for_target, output_path, read_glossary_flag
from mt.config import Config, DecodeConfig
from mt.data.tokenizer import Tokenizer
from mt.decode.align import aligner_for
from mt.decode.engine import Engine
from mt.decode.overrides import DecodeOverrides, apply_overrides
from mt.decode.terms import TermConstraints
from mt.decode.translate import (
    search_lines,
    translate_lines,
    translate_path,
    translate_texts,
    translate_texts_nbest,
    translate_texts_scored,
)
from mt.errors import MTError
from mt.text.documents import document_texts, format_of, translate_document
from mt.text.html import HtmlFragment, render_fragments
from mt.text.limits import DocumentLimits
from mt.text.protect import span_links
from mt.text.segment import Segmenter, segmenter_for
from mt.textio import atomic_write, decode_line, iter_lines, iter_stream

CHUNK_LINES = 10_000  # lines `mt translate` reads, translates and writes at a time (bounded memory)


def _format_nbest(first: int, found: list[list[tuple[str, float]]], digits: int = 4) -> list[str]:
    """Moses-style n-best lines 'i ||| text ||| score' (i = 0-based input line)."""
    return [f"{first + i} ||| {text} ||| {s:.{digits}f}"
            for i, nbest in enumerate(found) for text, s in nbest]


def translate_command(
    checkpoints: Sequence[Path],
    input: str,
    output: str,
    overrides: DecodeOverrides,
    *,
    device: str,
    target_lang: str | None = None,
    format: str | None = None,
    segment: bool = True,
    glossary: Path | None = None,
    scores: bool = False,
    prefix: Path | None = None,
    alternatives: int = 0,
) -> None:
    """`mt translate`: raw text in (a file, or '-' for stdin), one translation per input line out.

    With `segment` (the default) each line is split into sentences by the source language's
    segmenter (`mt.text.segment`), sentences too long for the model broken, and the line put back
    together with its own whitespace; without it each line is one segment, as `mt evaluate` reads
    test sets. N-best output of a segmented line: the k-th alternative joins every sentence's k-th
    best, scored by their mean.

    A multi-pair model translates into `target_lang` (--target-lang; required when it has several
    target languages): its tag goes in front of every source.

    Interactive stdin (a terminal) with stdout output is translated line by line, each result
    flushed at once. Otherwise the input is streamed: CHUNK_LINES lines at a time are read,
    translated in length-sorted batches and written, so memory stays flat for any input size
    (with a progress bar per chunk on stderr for file input when stderr is a terminal). An output
    file is written to a temp file and renamed only after every line is translated, so a failure
    (e.g. invalid UTF-8 on line 1,000,001) never truncates an earlier result; on stdout the
    chunks before the failure have been written. With N-best output (--n-best, or decode.search.n_best
    > 1 in the checkpoint's config) each input line gives N lines 'i ||| text ||| score'
    (i 0-based; an empty line gives one line with score 0): the N best hypotheses, or N samples
    with --sampling. Sampled line i depends only on the seed, i and its text, so file, pipe and
    interactive input, and any chunking, give the same output.

    A document (`format`, i.e. --format, or an input named .srt, .vtt, .html, .docx, .odt, .pptx,
    .odp, .epub, .md, .po or .xlf; a .txt file stays a stream of lines unless --format txt) is read
    whole (within `DocumentLimits`), translated by `mt.text.documents.translate_document` with the
    callables of `document_translators`, and written atomically: a damaged file is an MTError, no
    output.

    `glossary` (--glossary terms.tsv, mt.text.glossary): read and checked before the model loads,
    then against it; every sentence holding a term is translated by the constrained beam search
    (mt.decode.constrained), the others as without it. An engine that cannot keep terms refuses it.
    `overrides`: the decode flags (`mt.decode.overrides`); its text policy (--protect, --[no-]case,
    --[no-]ending, --[no-]loop-retry) applies to segmented text and documents, not to --no-segment
    lines. `scores`: 'confidence<TAB>translation' lines (`mt.decode.confidence`: a line's least
    confident sentence's). `prefix`, `alternatives`: --prefix FILE, --alternatives K (`_prefix_renderer`).
    """
    src_path, out_path = input_path(input), output_path(output)
    # A document format by --format or the extension; a .txt file stays a stream of lines unless
    # --format txt.
    fmt = format_of(input if src_path is not None else "", format)
    fmt = None if fmt == "txt" and format is None else fmt
    if fmt is not None and (overrides.n_best is not None or overrides.sampling or scores):
        raise MTError(f"--n-best, --scores and --sampling write lines, not a .{fmt} document")
    _check_prefix_flags(fmt, overrides, scores, prefix, alternatives)
    data = _read_document(src_path, DocumentLimits()) if fmt is not None else b""
    if fmt is not None:  # a damaged file fails here, before the model loads
        document_texts(data, fmt, DocumentLimits())
    terms_file = read_glossary_flag(glossary)
    loaded, tokenizer = load_for_target(checkpoints, device, target_lang)
    model, cfg, dev = loaded.engine, loaded.config, loaded.device
    decode = apply_overrides(cfg.decode, overrides)
    with_scores = overrides.n_best is not None or decode.search.n_best > 1
    if scores and with_scores:
        raise MTError("--scores: n-best lines (--n-best, or decode.search.n_best > 1 in the config) carry "
                      "their own scores; use one or the other")
    pair = (source_language(cfg, target_lang), target_lang or cfg.data.target_langs[0])
    segmenter = segmenter_for(*pair)
    terms = glossary_for_model(terms_file, loaded, tokenizer, pair, decode)
    split = segmenter if segment else None
    if prefix is not None:  # a translator's typed prefixes (issue 73)
        return _continue_lines(_prefix_renderer(model, tokenizer, decode, dev, prefix,
                                                segmenter=split, terms=terms, scores=scores,
                                                with_scores=with_scores, alternatives=alternatives),
                               src_path, input, prefix, out_path)
    if fmt is not None:
        texts, html = document_translators(model, tokenizer, decode, dev, split, terms)
        scored = document_scorer(model, tokenizer, decode, dev, segmenter, terms) if segment else None
        return _write_document(out_path, translate_document(data, fmt, texts, html, DocumentLimits(),
                                                            target=pair[1], scored=scored))
    render = (_confidence_renderer(model, tokenizer, decode, dev, segmenter=split, terms=terms)
              if scores else
              _line_renderer(model, tokenizer, decode, dev, with_scores=with_scores, segmenter=split,
                             terms=terms))
    _stream(render, src_path, out_path)


def _check_prefix_flags(fmt: str | None, overrides: DecodeOverrides, scores: bool,
                        prefix: Path | None, alternatives: int) -> None:
    """--prefix and --alternatives: with lines of text, a search (--alternatives carry their own
    probabilities: no --scores with them)."""
    if prefix is None and not alternatives:
        return
    if prefix is None:
        raise MTError("--alternatives: give the prefixes they follow with --prefix FILE")
    if not prefix.is_file():
        raise MTError(f"--prefix '{prefix}': file not found")
    for bad, why in ((fmt is not None, f"a .{fmt} document"), (overrides.sampling, "--sampling"),
                     (scores and alternatives > 0, "--scores and --alternatives together")):
        if bad:
            raise MTError(f"--prefix continues lines of text by a search; not with {why}")


def _prefix_renderer(model: Engine, tokenizer: Tokenizer, decode: DecodeConfig, dev: torch.device | str,
                     prefix: Path, *, segmenter: Segmenter | None, with_scores: bool,
                     alternatives: int, terms: TermConstraints | None = None, scores: bool = False,
                     ) -> Callable[[int, list[str], bool], list[str]]:
    """The render(first line index, lines, progress) of --prefix FILE: each line continuing its
    prefix exactly as typed (the one path's continue stage: `mt.decode.typed`; the line's sentences
    after the prefix's reach translated plainly;
    an empty prefix the plain translation), its n-best (`with_scores`), with `scores`
    'confidence<TAB>translation' lines, or with `alternatives` K the
    K most probable next words after it, each continued to a whole translation, as
    'i ||| text ||| probability' lines."""
    prefixes = list(iter_lines(prefix))
    n_best = decode.search.n_best if with_scores else None

    def render(first: int, lines: list[str], progress: bool) -> list[str]:
        done = translate_path(model, tokenizer, lines, decode, device=dev, segmenter=segmenter, n_best=n_best,
                              progress=progress, first_id=first, prefixes=prefixes[first:first + len(lines)],
                              alternatives=alternatives, glossary=terms, rate=scores)
        if scores:  # 'confidence<TAB>translation', as --scores without a prefix
            return [f"{confidence:.3f}\t{text}" for text, confidence in zip(done.best(), done.confidences())]
        if alternatives:
            return _format_nbest(first, done.alternatives(), digits=6)
        return _format_nbest(first, done.nbest()) if n_best is not None else done.best()

    return render


def _continue_lines(render: Callable[[int, list[str], bool], list[str]], src_path: Path | None, input: str,
                    prefix: Path, out_path: Path | None) -> None:
    """--prefix: the input read whole, its line count checked against the prefixes', rendered, and
    written to stdout or atomically to `out_path`."""
    read = iter_lines(src_path) if src_path is not None else iter_stream(sys.stdin.buffer, "<stdin>")
    lines = list(read)
    count = sum(1 for _ in iter_lines(prefix))
    if count != len(lines):
        raise MTError(f"--prefix '{prefix}': {count} lines for the {len(lines)} lines of input "
                      f"'{input}'; give one prefix (maybe empty) a line")
    data = "".join(line + "\n" for line in render(0, lines, False))
    if out_path is None:
        sys.stdout.write(data)
        sys.stdout.flush()
        return
    with atomic_write(out_path) as f:
        f.write(data.encode("utf-8"))


def input_path(input: str) -> Path | None:
    """The file `-i` names (None for '-', stdin); a folder or a missing file is a one-line error."""
    src_path = None if input == "-" else Path(input)
    if src_path is not None and src_path.is_dir():  # a pipe, /dev/stdin or <(zcat f.gz) is input too
        raise MTError(f"input '{input}': is a folder")
    if src_path is not None and not src_path.exists():
        raise MTError(f"input '{input}': file not found")
    return src_path


def _line_renderer(model: Engine, tokenizer: Tokenizer, decode: DecodeConfig, dev: torch.device | str,
                   *, with_scores: bool, segmenter: Segmenter | None, terms: TermConstraints | None,
                   ) -> Callable[[int, list[str], bool], list[str]]:
    """`_stream`'s render(first line index, lines, progress): translations, or n-best lines with
    scores; texts split by `segmenter` (None: each line one segment), keeping `terms`."""

    def render(first: int, lines: list[str], progress: bool) -> list[str]:
        if with_scores and segmenter is not None:
            found = translate_texts_nbest(model, tokenizer, lines, decode, device=dev, progress=progress,
                                          first_id=first, segmenter=segmenter, glossary=terms)
            return _format_nbest(first, found)
        if with_scores:
            found = search_lines(model, tokenizer, lines, decode, n_best=decode.search.n_best, device=dev,
                                 progress=progress, first_id=first, glossary=terms).nbest()
            return _format_nbest(first, found)
        if segmenter is not None:
            return translate_texts(model, tokenizer, lines, decode, device=dev, progress=progress,
                                   first_id=first, segmenter=segmenter, glossary=terms)
        return translate_lines(model, tokenizer, lines, decode, device=dev, progress=progress,
                               first_id=first, glossary=terms)

    return render


def _confidence_renderer(model: Engine, tokenizer: Tokenizer, decode: DecodeConfig,
                         dev: torch.device | str, *, segmenter: Segmenter | None,
                         terms: TermConstraints | None,
                         ) -> Callable[[int, list[str], bool], list[str]]:
    """`_stream`'s render for --scores: 'confidence<TAB>translation' per line."""

    def render(first: int, lines: list[str], progress: bool) -> list[str]:
        if segmenter is not None:
            found = translate_texts_scored(model, tokenizer, lines, decode, device=dev, progress=progress,
                                           first_id=first, segmenter=segmenter, glossary=terms)
        else:
            found = [(s.output, s.confidence(decode)) for s in search_lines(
                model, tokenizer, lines, decode, device=dev, progress=progress, first_id=first,
                glossary=terms).scored()]
        return [f"{confidence:.3f}\t{text}" for text, confidence in found]

    return render


def _stream(render: Callable[[int, list[str], bool], list[str]], src_path: Path | None,
            out_path: Path | None) -> None:
    """Lines in, `render(first line index, lines, progress)` out: line by line from a terminal,
    else CHUNK_LINES at a time, to stdout or atomically to `out_path`."""
    if src_path is None and out_path is None and sys.stdin.isatty():
        stream = sys.stdin.buffer
        for number, raw in enumerate(iter(stream.readline, b""), start=1):
            for text in render(number - 1, [decode_line(raw, "<stdin>", number)], False):
                sys.stdout.write(text + "\n")
            sys.stdout.flush()
        return
    lines = iter_lines(src_path) if src_path is not None else iter_stream(sys.stdin.buffer, "<stdin>")
    progress = src_path is not None and sys.stderr.isatty()
    if out_path is None:
        for first, chunk in _chunks(lines, CHUNK_LINES):
            sys.stdout.writelines(text + "\n" for text in render(first, chunk, progress))
            sys.stdout.flush()
        return
    with atomic_write(out_path) as f:
        for first, chunk in _chunks(lines, CHUNK_LINES):
            f.write("".join(text + "\n" for text in render(first, chunk, progress)).encode("utf-8"))


def source_language(cfg: Config, target_lang: str | None) -> str:
    """The source language whose sentence rules segment the input: the first pair's into
    `target_lang` (a multi-pair model's), else the first pair's."""
    return cfg.data.pair_into(target_lang).src_lang


def _chunks(lines: Iterator[str], size: int) -> Iterator[tuple[int, list[str]]]:
    """(index of the first line, up to `size` lines) until `lines` runs out."""
    first = 0
    while chunk := list(itertools.islice(lines, size)):
        yield first, chunk
        first += len(chunk)


def _write_document(path: Path | None, data: bytes) -> None:
    """A translated document to `path` atomically, or to stdout when `path` is None."""
    if path is None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    with atomic_write(path) as f:
        f.write(data)


def _read_document(path: Path | None, limits: DocumentLimits) -> bytes:
    """A document's bytes (stdin when `path` is None), refused past `limits.max_bytes` before it is
    all read."""
    with path.open("rb") if path is not None else sys.stdin.buffer as f:
        data = f.read(limits.max_bytes + 1)
    if len(data) > limits.max_bytes:
        raise MTError(f"input '{path or '-'}': over {limits.max_bytes} bytes; documents of at most "
                      f"{limits.max_bytes} bytes are translated")
    return data


def document_scorer(engine: Engine, tokenizer: Tokenizer, decode: DecodeConfig, device: torch.device | str,
                    segmenter: Segmenter, terms: TermConstraints | None = None,
                    ) -> Callable[[list[str]], list[tuple[str, float]]]:
    """Plain texts translated with their confidences (`translate_texts_scored`: the same path and
    outputs as `document_translators`' plain texts), for a .po's or XLIFF's low-confidence notes."""

    def scored(texts: list[str]) -> list[tuple[str, float]]:
        return translate_texts_scored(engine, tokenizer, texts, decode, device=device, segmenter=segmenter,
                                      glossary=terms)

    return scored


def document_translators(engine: Engine, tokenizer: Tokenizer, decode: DecodeConfig,
                         device: torch.device | str, segmenter: Segmenter | None,
                         terms: TermConstraints | None = None,
                         ) -> tuple[Callable[[list[str]], list[str]], Callable[[list[str]], list[str]]]:
    """The two translate callables a document needs (`mt.text.documents`), over this model: plain
    texts (split into sentences by `segmenter`, their whitespace kept; with None each line one
    segment) and HTML fragments (their blocks through the same, inline markup placed by the
    model's alignment: mt.decode.align), keeping `terms` (a glossary's). The one place the command
    builds them."""

    def translate_plain(texts: list[str]) -> list[str]:
        if segmenter is not None:
            return translate_texts(engine, tokenizer, texts, decode, device=device, segmenter=segmenter,
                                   glossary=terms)
        lines = [text.split("\n") for text in texts]
        found = iter(translate_lines(engine, tokenizer, [line for group in lines for line in group], decode,
                                     device=device, glossary=terms))
        return ["\n".join(next(found) for _ in group) for group in lines]

    def translate_html(fragments: list[str]) -> list[str]:
        parsed = [HtmlFragment(markup) for markup in fragments]
        translations = translate_plain([block for fragment in parsed for block in fragment.blocks])
        links = span_links(aligner_for(engine, tokenizer), decode.text.protect)
        return render_fragments(parsed, translations, links)

    return translate_plain, translate_html
