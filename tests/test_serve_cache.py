"""The translation cache (`mt.serve.cache`): LRU by segments, keys that change with every option
that changes the output, partial hits merged in order with the warnings kept (in-process, with a
counting fake batcher), and a real `mt serve` whose repeated request is answered without a batch."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
import test_serve
from test_serve import httpx, metric, server

from mt.config import DecodeConfig, SearchConfig
from mt.errors import MTError
from mt.serve.batcher import Batcher
from mt.serve.batchjob import Job
from mt.serve.cache import Cached, TranslationCache
from mt.serve.metrics import Metrics
from mt.serve.settings import ServeSettings

tiny = test_serve.tiny  # the module-scoped tiny random checkpoint (and its synthetic lines)


def test_lru_evicts_the_least_recently_used_and_counts() -> None:
    counts = []
    cache = TranslationCache(2, lambda *c: counts.append(c))
    a, b, c = (("m", "a"), Cached([("A", -1.0)], False)), (("m", "b"), Cached([("B", -2.0)], True)), \
        (("m", "c"), Cached([("C", -3.0)], False))
    cache.store(*a)
    cache.store(*b)
    assert cache.lookup([a[0], None, ("m", "x")]) == [a[1], None, None]  # a is now the most recent
    assert (cache.hits, cache.misses) == (1, 1) and counts[-1] == (1, 1, 2)  # a None key is neither
    cache.store(*c)  # evicts b, the least recently used, not a (stored first but used since)
    assert cache.lookup([b[0], a[0], c[0]]) == [None, a[1], c[1]] and len(cache) == 2
    assert (cache.hits, cache.misses) == (3, 2)


def test_size_zero_stores_nothing() -> None:
    cache = TranslationCache(0)
    cache.store(("m", "a"), Cached([("A", 0.0)], False))
    assert cache.lookup([("m", "a")]) == [None] and len(cache) == 0 and cache.misses == 1
    with pytest.raises(MTError, match="--cache-size: must be 0"):
        ServeSettings(cache_size=-1)
    assert ServeSettings().cache_size == 10_000


# ---------------------------------------------------------------- in-process: translate_texts


class FakeBatcher:
    """Answers each line with its upper case; a line over 10 characters is 'cut' (as the real
    batcher's `cut_warning` words it, for a model of max_positions 11). Counts what it is sent."""

    engine = SimpleNamespace(max_positions=11)
    cut_warning = Batcher.cut_warning

    def __init__(self) -> None:
        self.sent: list[list[str]] = []

    def submit(self, lines, decode, *, n_best, tokenizer, constraints=None, glue=()) -> Job:
        assert constraints is None and glue == ()  # these tests send no glossary
        self.sent.append(list(lines))
        cut = [len(line) > 10 for line in lines]
        job = Job([], decode, n_best, self.cut_warning(sum(cut), len(lines)), cut=cut)
        job.future.set_result([[(line.upper() + tokenizer.tag, -float(len(line)))] for line in lines])
        return job


class NeverGone:
    scope: dict = {}

    async def receive(self) -> dict:
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}


def fake_model(size: int) -> SimpleNamespace:
    from mt.serve.metrics import OpenRequests  # needs prometheus_client: imported where the tests require it

    return SimpleNamespace(identity=SimpleNamespace(id="sha"), batcher=FakeBatcher(), cache=TranslationCache(size),
                           open=OpenRequests(Metrics()))


BEAM2 = DecodeConfig(search=SearchConfig(beam=2))


def translate(model, texts, decode=BEAM2, n_best=None, tag=""):
    from mt.serve.jobs import translate_texts  # needs fastapi: imported in the tests that require it

    tokenizer = SimpleNamespace(src_prefix=[len(tag)] if tag else [], tag=tag)
    # Lines as segments (`segment=False`): this stand-in tokenizer cannot count pieces for the segmenter.
    return asyncio.run(translate_texts(NeverGone(), model, ServeSettings(), texts, decode, n_best, tokenizer, "en",
                                       segment=False))


@pytest.mark.requires("fastapi")
def test_partial_hits_go_to_the_batcher_alone_and_merge_in_order_with_their_warnings() -> None:
    model = fake_model(100)
    long = "a very long line"
    first = translate(model, ["one\ntwo", long])
    assert first == ([[("ONE\nTWO", -3.0)], [("A VERY LONG LINE", -16.0)]],
                     ["1 of 3 source lines longer than 10 pieces are truncated (model.max_positions=11, EOS included)"])
    assert translate(model, ["one\ntwo", long]) == first and len(model.batcher.sent) == 1  # all hits: nothing sent
    mixed = translate(model, ["two", "three", long, "", "one"])  # the empty line is not worth a lookup
    assert model.batcher.sent[1] == ["three"]
    assert mixed == ([[("TWO", -3.0)], [("THREE", -5.0)], [("A VERY LONG LINE", -16.0)], [("", -0.0)],
                      [("ONE", -3.0)]],  # the empty line is no segment: 4 counted
                     ["1 of 4 source lines longer than 10 pieces are truncated (model.max_positions=11, EOS included)"])
    assert (model.cache.hits, model.cache.misses) == (6, 4)


@pytest.mark.requires("fastapi")
def test_every_option_that_changes_the_output_misses() -> None:
    model = fake_model(100)
    translate(model, ["one"])
    for decode, n_best, tag in [(DecodeConfig(search=SearchConfig(beam=3)), None, ""), (DecodeConfig(search=SearchConfig(beam=2, alpha=1.0)), None, ""),
                                (DecodeConfig(search=SearchConfig(beam=2, n_best=2)), 2, ""), (DecodeConfig(search=SearchConfig(beam=2)), None, "<2fr>")]:
        translate(model, ["one"], decode, n_best, tag)
    assert len(model.batcher.sent) == 5 and model.cache.hits == 0
    translate(model, ["one"], DecodeConfig(search=SearchConfig(beam=2)), None, "<2fr>")
    assert len(model.batcher.sent) == 5 and model.cache.hits == 1
    sampling = DecodeConfig(search=SearchConfig(beam=1, sampling=True))  # seeded by the line's index: never cached
    translate(model, ["one"], sampling)
    translate(model, ["one"], sampling)
    assert len(model.batcher.sent) == 7 and len(model.cache) == 5


@pytest.mark.requires("fastapi")
def test_cache_size_zero_never_hits() -> None:
    model = fake_model(0)
    for _ in range(3):
        assert translate(model, ["one", "two"])[0] == [[("ONE", -3.0)], [("TWO", -3.0)]]
    assert len(model.batcher.sent) == 3 and model.cache.hits == 0 and model.cache.misses == 6


# ---------------------------------------------------------------- a real server


@pytest.mark.requires("httpx", "fastapi", "uvicorn", "fastapi_offline")
def test_a_repeated_request_is_answered_from_the_cache_without_a_batch(tiny) -> None:
    ckpt, lines = tiny
    long = " ".join(lines[:80])  # more than the tiny model's 255 pieces: cut, with a warning, when not segmented
    # no loop retry: each miss is one batch (a looping output would take a second)
    with server(ckpt, "--beam", "2", "--max-alternatives", "2", "--threads", "1", "--no-loop-retry") as (url, _):
        def post(route: str, body: dict) -> httpx.Response:
            reply = httpx.post(url + route, json=body, timeout=120)
            assert reply.status_code == 200, reply.text
            return reply

        def counts() -> tuple[float, ...]:
            return tuple(metric(url, name) for name in ("mt_cache_hits_total", "mt_cache_misses_total",
                                                        "mt_batch_segments_count", "mt_segments_translated_total"))

        body = {"segments": [lines[1], lines[2], long], "beam": 1, "segment": False}  # lines whole: cut
        start = counts()
        first = post("/v1/translate", body)
        assert first.json()["warnings"] and "truncated" in first.json()["warnings"][0]
        after_first = counts()
        assert after_first[:2] == (start[0], start[1] + 3) and after_first[2] > start[2]
        second = post("/v1/translate", body)
        assert second.content == first.content  # byte-identical, warning included
        assert counts() == (after_first[0] + 3, after_first[1], after_first[2], after_first[3])  # no new batch
        assert cached_segments(url) >= 3
        # another beam, n_best, alternatives: misses (each its own batch)
        for route, changed in [("/v1/translate", {"segments": [lines[1]], "beam": 2}),
                               ("/v1/translate", {"segments": [lines[1]], "beam": 2, "n_best": 2}),
                               ("/translate", {"q": lines[1], "source": "en", "target": "de", "alternatives": 2})]:
            before = counts()
            post(route, changed)
            assert counts()[:3] == (before[0], before[1] + 1, before[2] + 1), changed
        before = counts()  # alternatives 1 decodes as n_best 2 at beam 2 does: the same entry, from another route
        alternative = post("/translate", {"q": lines[1], "source": "en", "target": "de", "alternatives": 1}).json()
        assert counts()[:3] == (before[0] + 1, before[1], before[2])
        n_best = post("/v1/translate", {"segments": [lines[1]], "beam": 2, "n_best": 2}).json()["translations"][0]
        assert alternative["alternatives"] == [n_best["n_best"][1]["text"]]
        before = counts()
        lt = post("/translate", {"q": [lines[1], lines[2]], "source": "en", "target": "de"})  # beam 2 = the server's
        assert lt.json()["translatedText"][0] == post("/v1/translate", {"segments": [lines[1]]}).json()[
            "translations"][0]["text"]
        assert counts()[:3] == (before[0] + 2, before[1] + 1, before[2] + 1)  # lines[1] at beam 2 cached above
        html = {"q": f"<p>{lines[5]}</p><ul><li>{lines[6]}</li></ul>", "source": "en", "target": "de", "format": "html"}
        first_html = post("/translate", html)
        before = counts()  # each block is a segment: all cached now
        assert post("/translate", html).content == first_html.content and counts()[:3] == (before[0] + 2, *before[1:3])


def cached_segments(url: str) -> float:
    """mt_cache_segments summed over the models (the gauge is labelled by model id)."""
    text = httpx.get(url + "/metrics", timeout=10).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("mt_cache_segments{"))


@pytest.mark.requires("prometheus_client")
def test_each_models_cache_has_its_own_gauge() -> None:
    """Issue 45, item 7: every model's cache set the one mt_cache_segments gauge, so it showed
    whichever model was asked last."""
    metrics = Metrics()
    a, b = TranslationCache(10, metrics.cache_reporter("aaa")), TranslationCache(10, metrics.cache_reporter("bbb"))
    for i in range(3):
        a.store(("aaa", str(i)), Cached([("x", 0.0)], False))
    b.store(("bbb", "0"), Cached([("y", 0.0)], False))
    a.lookup([("aaa", "0")])
    text = metrics.render().decode()
    assert 'mt_cache_segments{model="aaa"} 3.0' in text and 'mt_cache_segments{model="bbb"} 1.0' in text


class FakeChooser:
    """The worker's choice stage as a stand-in (`Chooser.choose_ids`): each source's last candidate
    wins. Counts the sources it is asked about, call by call."""

    max_positions = 11

    def __init__(self) -> None:
        self.asked: list[int] = []

    def choose_ids(self, src_ids, choices, decode, *, n_best) -> list:
        self.asked.append(len(src_ids))
        return [[(list(offered[-1]), -1.0)] for offered in choices]


@pytest.mark.requires("fastapi")
def test_a_choice_runs_in_the_worker_once_then_comes_from_the_cache_under_its_candidates() -> None:
    from mt.decode.steps import Choose
    from mt.serve.jobs import _choose

    model = fake_model(100)
    model.engine = FakeChooser()
    tokenizer = SimpleNamespace(src_prefix=[],
                                encode_src=lambda lines: [[ord(c) for c in line] for line in lines],
                                decode_tgt=lambda seqs: ["".join(map(chr, seq)) for seq in seqs])
    offered = ((ord("a"),), (ord("b"),))

    def choose(lines: list[str], choices: list) -> list[str]:
        found = asyncio.run(_choose(model, tokenizer, Choose(lines, choices, BEAM2, None)))
        return [answer.hyps[0][0] for answer in found]

    assert choose(["one", "two"], [offered, ((ord("c"),),)]) == ["b", "c"] and model.engine.asked == [2]
    assert choose(["one", "three"], [offered, ((ord("d"),),)]) == ["b", "d"]
    assert model.engine.asked == [2, 1]  # the line chosen before: from the cache
    assert choose(["one"], [offered[:1]]) == ["a"]
    assert model.engine.asked == [2, 1, 1]  # the same line with other candidates: chosen again
