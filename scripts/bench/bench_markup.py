"""How often inline markup lands on the right word: placed by position vs by the model's own
cross-attention alignment (mt.decode.align), per decoder layer and row choice.

Cases are made where the right answer is clear: a test sentence with exactly one word of a
hand-made English->German list (man -> Mann, bike -> Fahrrad, red -> rot...) gets that word
wrapped in <b>; the sentence is translated once; when the translation has exactly one word
starting with the German stem, the case counts, and placement is right when the bold span holds
that word ("exact": holds nothing else, punctuation aside).

    python scripts/bench/bench_markup.py -c runs/multi30k_en_de/checkpoints/best.pt --split test_2016_flickr
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

from mt.decode.align import align_words
from mt.decode.translate import translate_lines
from mt.deploy.loading import load_model
from mt.text.html import HtmlFragment
from mt.textio import read_lines

# English word -> German stems its translation starts with (case-insensitive); hand-made from
# Multi30k's frequent, unambiguous words.
EN_DE = {
    "man": ("mann",), "woman": ("frau",), "dog": ("hund",), "girl": ("mädchen",), "boy": ("junge", "jungen"),
    "child": ("kind",), "water": ("wasser",), "street": ("straße",), "ball": ("ball",), "bike": ("fahrrad",),
    "bicycle": ("fahrrad",), "car": ("auto",), "hat": ("hut", "mütze"), "red": ("rot",), "blue": ("blau",),
    "black": ("schwarz",), "white": ("weiß",), "green": ("grün",), "yellow": ("gelb",), "beach": ("strand",),
    "snow": ("schnee",), "guitar": ("gitarre",), "horse": ("pferd",), "table": ("tisch",),
    "building": ("gebäude",), "dress": ("kleid",), "camera": ("kamera",), "stage": ("bühne",), "bench": ("bank",),
    "field": ("feld",), "city": ("stadt",), "hair": ("haar",), "jacket": ("jacke",), "mountain": ("berg",),
    "tree": ("baum",), "window": ("fenster",), "boat": ("boot",), "two": ("zwei",), "three": ("drei",),
    "men": ("männer",), "women": ("frauen",), "people": ("menschen", "leute"), "baby": ("baby",),
    "sand": ("sand",), "grass": ("gras", "rasen"), "restaurant": ("restaurant",), "microphone": ("mikrofon",),
}
WORD = re.compile(r"[\w'-]+")


def _strip(word: str) -> str:
    return word.strip(".,;:!?\"'()").lower()


def make_cases(sources: list[str], translations: list[str]) -> list[tuple[str, str, str]]:
    """(markup with one <b> word, the plain translation, the expected German word)."""
    cases = []
    for source, translation in zip(sources, translations):
        words = source.split()
        hits = [i for i, w in enumerate(words) if _strip(w) in EN_DE]
        for i in hits:
            if sum(_strip(w) == _strip(words[i]) for w in words) != 1:
                continue
            stems = EN_DE[_strip(words[i])]
            found = [w for w in translation.split() if _strip(w).startswith(stems)]
            if len(found) != 1:
                continue
            lead, core, trail = re.match(r"^(\W*)(.*?)(\W*)$", words[i]).groups()
            marked = " ".join(words[:i] + [f"{lead}<b>{core}</b>{trail}"] + words[i + 1:])
            cases.append((f"<p>{marked}</p>", translation, _strip(found[0])))
            break
    return cases


def judge(rendered: str, expected: str) -> tuple[bool, bool]:
    span = re.search(r"<b>(.*?)</b>", rendered)
    words = [_strip(w) for w in (span.group(1).split() if span else [])]
    words = [w for w in words if w]
    return expected in words, words == [expected]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-c", "--checkpoint", type=Path, required=True)
    ap.add_argument("--mirror", type=Path, default=Path("data/multi30k"))
    ap.add_argument("--split", default="test_2016_flickr")
    ap.add_argument("--beam", type=int, default=5)
    args = ap.parse_args()
    loaded = load_model([args.checkpoint], "cpu")
    model = loaded.engine.model
    sources = read_lines(args.mirror / f"{args.split}.en.gz")
    decode = dataclasses.replace(loaded.config.decode, search=dataclasses.replace(loaded.config.decode.search, beam=args.beam))
    translations = translate_lines(loaded.engine, loaded.tokenizer, sources, decode, device="cpu")
    cases = make_cases(sources, translations)
    fragments = [HtmlFragment(markup) for markup, _, _ in cases]
    blocks = [fragment.blocks[0] for fragment in fragments]
    rows = [("by position (no alignment)", [f.render([t]) for f, (_, t, _) in zip(fragments, cases)])]
    layers = len(getattr(model, "members", [model])[0].decoder)
    for from_top in range(0, layers + 1):
        for shift in (False, True):
            found = align_words(model, loaded.tokenizer, blocks, [t for _, t, _ in cases],
                                layer_from_top=from_top, shift=shift)
            which = f"layer {layers - from_top + 1} of {layers}" if from_top else f"mean of the {layers} layers"
            name = f"alignment: {which}, {'shifted row' if shift else 'predicting row'}"
            rows.append((name, [f.render([t], {0: a}) for f, (_, t, _), a in zip(fragments, cases, found)]))
    print(f"{len(cases)} cases from {args.split} ({args.checkpoint}, beam {args.beam})\n")
    print("| placement | bold on the right word | exactly that word |\n| --- | ---: | ---: |")
    for name, rendered in rows:
        judged = [judge(r, expected) for r, (_, _, expected) in zip(rendered, cases)]
        right = sum(j[0] for j in judged) / len(judged)
        exact = sum(j[1] for j in judged) / len(judged)
        print(f"| {name} | {right:.1%} | {exact:.1%} |")


if __name__ == "__main__":
    main()
