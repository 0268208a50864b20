"""The loop retry (`decode.loop_retry`, `mt.decode.repeats.retry_decode`): an output that still loops
past the loop guard is searched again with no target piece twice and kept where it repeats less, in
`translate_texts*` and the server, never in `translate_lines` (what `mt evaluate` and the exports run).

An engine that loops on purpose (`LoopEngine`) makes the rule exact; the tiny random Transformer
(which loops on everything) checks it against the plain and the strict search."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest

from mt.config import DecodeConfig, SearchConfig, TextConfig
from mt.decode.repeats import RETRY_NGRAM, repetition_excess, retry_decode, retry_wins, to_retry
from mt.decode.terms import TermConstraints
from mt.decode.translate import (
    search_lines,
    translate_lines,
    translate_texts,
    translate_texts_nbest,
    translate_texts_scored,
)
from mt.deploy.loading import load_model
from mt.model.checkpoint import load_for_inference
from mt.text.glossary import parse_glossary
from mt.text.segment import segmenter_for
from tests.test_evaluate import ckpt, small_data, val_lines  # noqa: F401  (fixtures: a random model, val lines)

pytestmark = pytest.mark.usefixtures("one_thread")


class LoopEngine:
    """Copies what it reads, except: a sentence holding 'gà' loops ('gà' four more times) unless the
    search bans every repeated piece; one holding 'dà' loops either way, worse under the ban. Logs
    each call as (sources, no_repeat_ngram_size, sentence ids)."""

    max_positions = 256

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.calls = tokenizer, []

    def search_ids(self, src_ids, decode, *, n_best, sentence_ids, on_result=None, constraints=None, glue=()):
        texts = self.tokenizer.decode_pieces("src", [list(ids) for ids in src_ids])
        self.calls.append((texts, decode.search.no_repeat_ngram_size, list(sentence_ids)))
        strict = decode.search.no_repeat_ngram_size == RETRY_NGRAM
        out = []
        for text in texts:
            if "dà" in text.split():
                text += " dà" * (5 if strict else 3)
            elif "gà" in text.split() and not strict:
                text += " gà" * 4
            out.append(text)
        return [[(ids, -1.0)] * (n_best or 1) for ids in self.tokenizer.encode_tgt(out)]


TEXTS = ["éa bé", "éa gà", "bé dà", "gà bé. éa bé"]  # the 4th: two sentences, the second's loop-free


def test_the_retry_settings_and_which_outputs_are_retried():
    decode = DecodeConfig(search=SearchConfig(no_repeat_ngram_size=3))
    assert retry_decode(decode) == dataclasses.replace(decode, search=dataclasses.replace(decode.search, no_repeat_ngram_size=RETRY_NGRAM))
    assert retry_decode(DecodeConfig(search=SearchConfig(no_repeat_ngram_size=0, repetition_penalty=1.2))).search.no_repeat_ngram_size == 1
    assert retry_decode(dataclasses.replace(decode, text=dataclasses.replace(decode.text, loop_retry=False))) is None  # switched off
    assert retry_decode(DecodeConfig(search=SearchConfig(no_repeat_ngram_size=0))) is None  # the guard off: the plain search wanted
    assert retry_decode(dataclasses.replace(decode, search=dataclasses.replace(decode.search, sampling=True))) is None
    assert retry_decode(DecodeConfig(search=SearchConfig(no_repeat_ngram_size=RETRY_NGRAM))) is None  # already the strictest
    sources = ["I", "a man and a dog", "ha ha ha", "Yes"]
    outputs = ["I I Ichchch I I", "ein Mann und ein Hund", "ha ha ha ha ha", "Jaaaaaa"]
    assert [repetition_excess(s, o) > 0 for s, o in zip(sources, outputs)] == [True, False, True, True]
    assert to_retry(decode, sources, outputs) == (retry_decode(decode), [0, 2, 3])
    assert to_retry(decode, sources, outputs, lambda i: i == 2)[1] == [0, 3]
    assert to_retry(DecodeConfig(search=SearchConfig(no_repeat_ngram_size=0)), sources, outputs) == (None, [])
    assert retry_wins("I", "I I Ichchch I I", "Ich") and not retry_wins("I", "I I I I", "I I I I")  # a tie keeps the first


def test_translate_texts_searches_a_looping_sentence_again_and_keeps_the_one_that_repeats_less(random_ckpt: Path):
    tok = load_model([random_ckpt], "cpu").tokenizer
    seg, decode = segmenter_for("en"), DecodeConfig(search=SearchConfig(beam=1, no_repeat_ngram_size=3), text=TextConfig(ending=False))
    engine = LoopEngine(tok)
    out = translate_texts(engine, tok, TEXTS, decode, device="cpu", segmenter=seg)
    assert out == ["éa bé", "éa gà", "bé dà dà dà dà", "gà bé. éa bé"]  # 'dà' loops worse when retried: kept
    (first, ngram, _), (again, strict, keys) = engine.calls
    assert ngram == 3 and strict == RETRY_NGRAM
    assert sorted(again) == ["bé dà", "gà bé.", "éa gà"]  # only what looped, once each
    assert keys == [{"éa gà": 1, "bé dà": 2, "gà bé.": 3}[text] for text in again]  # each keeps its sampling key
    assert sorted(first) == sorted(["éa bé", "éa gà", "bé dà", "gà bé.", "éa bé"])
    engine.calls.clear()
    off = dataclasses.replace(decode, text=dataclasses.replace(decode.text, loop_retry=False))
    assert translate_texts(engine, tok, TEXTS, off, device="cpu", segmenter=seg) == \
        ["éa bé", "éa gà gà gà gà gà", "bé dà dà dà dà", "gà bé. gà gà gà gà éa bé"]
    assert len(engine.calls) == 1
    # mt evaluate's translate_lines is the plain search: never retried
    assert translate_lines(engine, tok, ["éa gà"], decode, device="cpu") == ["éa gà gà gà gà gà"]


def test_scored_and_nbest_texts_keep_what_translate_texts_keeps(random_ckpt: Path):
    tok = load_model([random_ckpt], "cpu").tokenizer
    seg, decode = segmenter_for("en"), DecodeConfig(search=SearchConfig(beam=2, n_best=2, no_repeat_ngram_size=3), text=TextConfig(ending=False))
    best = translate_texts(LoopEngine(tok), tok, TEXTS, decode, device="cpu", segmenter=seg)
    scored = translate_texts_scored(LoopEngine(tok), tok, TEXTS, decode, device="cpu", segmenter=seg)
    nbest = translate_texts_nbest(LoopEngine(tok), tok, TEXTS, decode, device="cpu", segmenter=seg)
    assert [text for text, _ in scored] == best == [hyps[0][0] for hyps in nbest]
    looped = search_lines(LoopEngine(tok), tok, ["éa gà"], decode, device="cpu").scored()[0]
    assert looped.confidence(decode) <= 0.15 < scored[1][1]  # the kept retry is rated, not the loop


def test_a_sentence_holding_a_glossary_term_keeps_its_constrained_search(random_ckpt: Path):
    tok = load_model([random_ckpt], "cpu").tokenizer
    terms = TermConstraints(parse_glossary("gà\tgà\n".encode(), "t.tsv"), {"gà": tok.encode_tgt(["gà"])[0]})
    engine = LoopEngine(tok)
    out = translate_texts(engine, tok, ["éa gà", "éa bé"], DecodeConfig(search=SearchConfig(beam=2), text=TextConfig(ending=False)), device="cpu",
                          segmenter=segmenter_for("en"), glossary=terms)
    assert out == ["éa gà gà gà gà gà", "éa bé"]
    assert [ngram for _, ngram, _ in engine.calls] == [3, 3]  # the plain and the constrained batch, no retry


def test_on_a_random_model_each_sentence_is_the_plain_or_the_strict_search(ckpt: Path, small_data: Path):  # noqa: F811
    model, tok, cfg = load_for_inference(ckpt, "cpu")  # a random model with the Multi30k tokenizer: it loops
    seg = segmenter_for(cfg.data.src_lang, cfg.data.tgt_lang)
    decode = dataclasses.replace(cfg.decode, search=dataclasses.replace(cfg.decode.search, beam=2, no_repeat_ngram_size=3), text=dataclasses.replace(cfg.decode.text, ending=False, case=False, protect=()))
    lines = val_lines(small_data)
    plain = translate_lines(model, tok, lines, decode, device="cpu")
    strict = translate_lines(model, tok, lines, retry_decode(decode), device="cpu")
    out = translate_texts(model, tok, lines, decode, device="cpu", segmenter=seg)
    wins = [repetition_excess(line, p) > 0 and repetition_excess(line, t) < repetition_excess(line, p)
            for line, p, t in zip(lines, plain, strict)]
    assert out == [t if win else p for win, p, t in zip(wins, plain, strict)]
    assert any(wins) and out != plain  # the random model loops, and the retry helps some


# ---------------------------------------------------------------- the server's job


class LoopBatcher:
    """The server's batcher in front of `LoopEngine`'s rule, on text: logs what each job sends."""

    engine = SimpleNamespace(max_positions=256)

    def __init__(self) -> None:
        self.sent: list[tuple[list[str], int]] = []

    def cut_warning(self, cut: int, total: int) -> list[str]:
        return []

    def submit(self, lines, decode, *, n_best, tokenizer, constraints=None, glue=()):
        from mt.serve.batchjob import Job

        self.sent.append((list(lines), decode.search.no_repeat_ngram_size))
        strict = decode.search.no_repeat_ngram_size == RETRY_NGRAM
        out = [line + (" gà" * 4 if "gà" in line.split() and not strict else "") for line in lines]
        job = Job([], decode, n_best, [], cut=[False] * len(lines))
        job.confidence = [0.1 if o != line else 0.9 for o, line in zip(out, lines)]
        job.future.set_result([[(o, -1.0)] for o in out])
        return job


@pytest.mark.requires("fastapi")
def test_the_server_retries_in_a_second_job_and_caches_what_it_kept():
    from mt.serve.cache import TranslationCache
    from mt.serve.jobs import translate_texts_scored
    from mt.serve.metrics import Metrics, OpenRequests
    from mt.serve.settings import ServeSettings
    from tests.test_serve_cache import NeverGone

    model = SimpleNamespace(identity=SimpleNamespace(id="sha"), batcher=LoopBatcher(), cache=TranslationCache(100),
                            open=OpenRequests(Metrics()))
    tokenizer = SimpleNamespace(src_prefix=[])

    def ask(texts: list[str], decode: DecodeConfig):
        return asyncio.run(translate_texts_scored(NeverGone(), model, ServeSettings(), texts, decode, None, tokenizer,
                                                  "en", segment=False))

    decode = DecodeConfig(search=SearchConfig(no_repeat_ngram_size=3), text=TextConfig(ending=False, case=False, protect=()))
    found, _, sure = ask(["éa bé", "éa gà"], decode)
    assert [hyps[0][0] for hyps in found] == ["éa bé", "éa gà"] and sure == [0.9, 0.9]
    assert model.batcher.sent == [(["éa bé", "éa gà"], 3), (["éa gà"], RETRY_NGRAM)]
    assert ask(["éa gà"], decode)[0][0][0][0] == "éa gà" and len(model.batcher.sent) == 2  # cached as kept
    off = dataclasses.replace(decode, text=dataclasses.replace(decode.text, loop_retry=False))
    assert ask(["éa gà"], off)[0][0][0][0] == "éa gà gà gà gà gà" and model.batcher.sent[2:] == [(["éa gà"], 3)]


def test_the_loop_retry_flags():
    import typer.main

    from mt.cli import app
    from mt.decode.overrides import DecodeOverrides, apply_overrides

    assert apply_overrides(DecodeConfig(), DecodeOverrides()).text.loop_retry
    assert not apply_overrides(DecodeConfig(), DecodeOverrides(loop_retry=False)).text.loop_retry
    translate = typer.main.get_command(app).commands["translate"]  # type: ignore[attr-defined]
    assert any("--no-loop-retry" in (param.secondary_opts or []) for param in translate.params)


@pytest.mark.requires("fastapi")
def test_the_servers_loop_retry_flag():
    from mt.config import Config
    from mt.serve.model import server_decode
    from mt.serve.settings import ServeSettings

    flags = {"api_keys": None, "cors_origins": []}
    assert server_decode(ServeSettings.from_flags(**flags), Config())[0].text.loop_retry  # the checkpoint's
    assert not server_decode(ServeSettings.from_flags(**flags, loop_retry=False), Config())[0].text.loop_retry
