"""Protected spans and case styles around a model's search (`mt.text.protect` over a model): the
segments of a person's text prepared for the model with its source tokenizer, and the model's
translations rendered back with its own word alignment (`mt.decode.align`). What `translate_texts`,
`translate_texts_nbest` and the server's routes share; evaluation on test sets does not use it.

Only the segments that need it are aligned (spans between words, or a shouted word), in one forced
pass per call; a segment where nothing applies keeps its translation byte for byte. Whether a word
after an opening span keeps its capital is the target vocabulary's answer (`truecaser`), asked
only for such a word: no model call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mt.config import DecodeConfig
from mt.data.tokenizer import Tokenizer
from mt.text.case import Count
from mt.text.protect import Aligner, Prepared, prepare, render_all


def piece_counter(tokenizer: Tokenizer) -> Count:
    """Pieces per word by the model's source tokenizer (a multi-pair model's target tag not counted)."""
    skip = len(getattr(tokenizer, "src_prefix", ()))
    return lambda words: [len(ids) - skip for ids in tokenizer.encode_src(words)]


def truecaser(tokenizer: Tokenizer) -> Callable[[str], bool]:
    """Whether the target language writes a capitalised word ("Mädchen", "Blonde") capitalised
    mid-sentence: the model's target pieces spell it in fewer pieces than with its first letter
    in lower case, ties keeping the capital. A vocabulary holds the casings its corpus wrote most,
    so German nouns keep theirs and "blonde" loses it, with no rule per language."""
    def keeps(word: str) -> bool:
        at = next((i for i, c in enumerate(word) if c.isalpha()), 0)
        capital, lower = tokenizer.encode_tgt([word, word[:at] + word[at:at + 1].lower() + word[at + 1:]])
        return len(capital) <= len(lower)
    return keeps


def prepare_segments(segments: Sequence[str], tokenizer: Tokenizer, decode: DecodeConfig) -> list[Prepared]:
    """Each segment made ready for the model by `decode.text` (its protect, case and ending rules)
    (`Prepared.text` is what it translates; the segment itself where nothing applies)."""
    count = piece_counter(tokenizer)
    text = decode.text
    return [prepare(segment, text.protect, text.case, count, text.ending) for segment in segments]


def render_nbest(prepared: Sequence[Prepared], found: Sequence[list[tuple[str, float]]],
                 align: Aligner | None, *, truecase: Callable[[str], bool] | None = None,
                 ) -> list[list[tuple[str, float]]]:
    """Every alternative of every segment rendered (`render_all` with `truecase`, one alignment
    call), scores kept."""
    flat = [(p, text) for p, hyps in zip(prepared, found) for text, _ in hyps]
    texts = iter(render_all([p for p, _ in flat], [t for _, t in flat], align, truecase=truecase))
    return [[(next(texts), score) for _, score in hyps] for hyps in found]
