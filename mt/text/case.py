"""Case robustness: ALL CAPS and Title Case lines translated through their sentence-case form, and
one shouted word in a normal sentence kept shouted. Pure functions over a sentence's words; the
model's source tokenizer comes in as `count(words) -> pieces per word` (mt/text sits below the
tokenizer), and `mt.text.protect.Prepared` applies them to a segment and its translation.

- **Style.** `case_style(words)`: "upper" when every cased letter is upper case (at least two
  words with letters, or one of four letters or more: "OK" and "USB" alone stay as they are);
  "title" when at least three words start upper case, they are two thirds of the words with
  letters or more, and every other such word is short (three letters or fewer: "in", "the",
  "of"), so a sentence with a few names ("John and Mary visit New York.") is not a title.
- **Sentence case** (`sentence_case`): each word of an upper or title line becomes the casing of
  it that the model's tokenizer spells in the fewest pieces (lower case on a tie; upper case only
  ever for an ALL CAPS line), the first word capitalised. A model's vocabulary holds the casings
  its corpus used, so a name ("York", German nouns) keeps its capital, a common word loses it:
  a truecaser that needs nothing but the model.
- **Shouting** (`shouted`): in a line that is neither, a word of three letters or more in capitals
  whose lower-case form the model spells in at most half the pieces of its capitals: an ordinary
  word typed loud ("REALLY": 3 pieces against 6 in the demo model's vocabulary, "NOT" 1 against 3).
  An acronym's lower case is no word the model knows either, so it costs about as many pieces
  ("NASA" 4, "nasa" 3; "USB" 3, "usb" 3) and is not touched; nor is a word of two letters ("US", "IT").
- **Back** (`restyle`): the translation of an upper line in upper case, of a title line with each
  word's first letter upper; a shouted word's translation (the target words the alignment links
  to it) in upper case.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

Style = Literal["upper", "title", "none"]
Count = Callable[[list[str]], list[int]]  # pieces per word, by the model's source tokenizer
SHORT = 3  # letters: a lower-case word this short may stand in a title ("in", "the", "of")


def _letters(word: str) -> int:
    return sum(c.isalpha() for c in word)


def _cased(word: str) -> bool:
    return any(c.isupper() or c.islower() for c in word)


def _is_upper(word: str) -> bool:
    return _cased(word) and not any(c.islower() for c in word)


def _starts_upper(word: str) -> bool:
    first = next((c for c in word if c.isalpha()), "")
    return first.isupper()


def case_style(words: Sequence[str]) -> Style:
    """The case style of a sentence's words (module docstring): "upper", "title" or "none"."""
    lettered = [w for w in words if _cased(w)]
    letters = "".join(c for w in words for c in w if c.isalpha())
    if not lettered or 2 * sum(c.isupper() or c.islower() for c in letters) < len(letters):
        return "none"  # mostly a script without case (ＡＢＣの本を読みました。 is not shouting)
    if all(_is_upper(w) for w in lettered):
        big = [w for w in lettered if _letters(w) >= 2]
        return "upper" if len(big) >= 2 or any(_letters(w) >= 4 for w in lettered) else "none"
    capital = [w for w in lettered if _starts_upper(w)]
    rest_short = all(_starts_upper(w) or _letters(w) <= SHORT for w in lettered)
    if len(capital) >= 3 and 3 * len(capital) >= 2 * len(lettered) and rest_short:
        return "title"
    return "none"


def _capitalise(word: str) -> str:
    """The first letter upper case, the rest lower: "dogs" -> "Dogs", "NEW" -> "New"."""
    lower = word.lower()
    at = next((i for i, c in enumerate(lower) if c.isalpha()), None)
    return lower if at is None else lower[:at] + lower[at].upper() + lower[at + 1:]


def sentence_case(words: Sequence[str], style: Style, count: Count) -> list[str]:
    """`words` of an upper or title line in the casing the model spells best (module docstring);
    words of a "none" line unchanged. One `count` call for all candidates."""
    if style == "none":
        return list(words)
    options = []
    for word in words:
        if not _cased(word) or (style == "title" and not _starts_upper(word) and not _is_upper(word)):
            options.append([word])  # nothing to decide: no letters, or a title's lower-case short word
        elif style == "title" and _is_upper(word) and _letters(word) >= 2:
            options.append([word])  # an acronym in a title ("Buy A New USB Stick") stays
        else:
            lower, capital = word.lower(), _capitalise(word)
            extra = [word] if style == "upper" and word not in (lower, capital) else []
            options.append([lower, capital] + extra)
    flat = [option for choice in options for option in choice]
    pieces = iter(count(flat) if flat else [])
    out = []
    for choice in options:
        sizes = [next(pieces) for _ in choice]
        out.append(choice[sizes.index(min(sizes))])  # the first of the fewest: lower case on a tie
    first = next((i for i, w in enumerate(out) if _cased(w)), None)
    if first is not None and not _starts_upper(out[first]):
        out[first] = _capitalise(out[first]) if out[first] == out[first].lower() else out[first]
    return out


def shouted(words: Sequence[str], count: Count) -> list[int]:
    """Indices of the shouted words of a normal line (module docstring)."""
    loud = [i for i, w in enumerate(words) if _is_upper(w) and _letters(w) >= 3]
    if not loud:
        return []
    cores = [words[i].strip(".,;:!?\"'()") for i in loud]
    sizes = count([c.lower() for c in cores] + cores)
    return [i for k, i in enumerate(loud) if 2 * sizes[k] <= sizes[len(loud) + k]]


def restyle(words: Sequence[str], style: Style) -> list[str]:
    """A translation's words given a line's style back: all upper, or each word's first letter upper."""
    if style == "upper":
        return [w.upper() for w in words]
    if style == "title":
        out = []
        for w in words:
            at = next((i for i, c in enumerate(w) if c.isalpha()), None)
            out.append(w if at is None else w[:at] + w[at].upper() + w[at + 1:])
        return out
    return list(words)
