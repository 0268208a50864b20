"""Glossaries (mt.text.glossary): reading, every refusal in one line naming file:line, and how terms
are found (word boundaries, case, inflection, overlaps); their check against a model
(mt.decode.terms) and term success (mt.eval.terms)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mt.data.tokenizer import UNK_ID
from mt.decode.terms import TermConstraints, term_constraints
from mt.decode.wanted import Wanted
from mt.errors import MTError
from mt.eval.terms import term_success
from mt.text.glossary import Glossary, Term, occurs, parse_glossary, read_glossary, suffixes_for


def glossary(text: str, language: str = "en") -> Glossary:
    return parse_glossary(text.encode("utf-8"), "terms.tsv", suffixes=suffixes_for(language))


def found(g: Glossary, sentence: str) -> list[str]:
    return [t.source for t in g.match(sentence)]


def test_reads_pairs_and_lone_terms_with_bom_crlf_blank_lines_and_spaces() -> None:
    g = parse_glossary(b"\xef\xbb\xbfcat\tKatze\r\n\n  New York \r\nhouse \t Haus\ncat\tKatze\n", "t.tsv")
    assert g.terms == (Term("cat", "Katze", 1), Term("New York", "New York", 3), Term("house", "Haus", 4))


@pytest.mark.parametrize("text, line, problem", [
    ("cat\tKatze\n\tHaus\n", 2, "empty source term"),
    ("cat\t\n", 1, "empty target term"),
    ("cat\tKatze\tchat\n", 1, "grammar tag 'chat'"),  # a third column is the grammar (issue 72)
    ("cat\tKatze\tf\tchat\n", 1, "4 tab-separated columns"),
    ("cat\tKatze\ndog\tHund\ncat\tMieze\n", 3, "'cat' -> 'Mieze', but line 1 says 'Katze'"),
    ("a\tb\nc\td\ne\tf\ng\th\n", 4, "more than 3 terms"),
    ("cat\tKatze\nd\xc3g\tHund\n", 2, "not UTF-8"),
])
def test_a_bad_glossary_is_refused_whole_in_one_line_naming_file_and_line(text: str, line: int, problem: str) -> None:
    data = text.encode("utf-8") if "\xc3" not in text else text.encode("latin-1")
    with pytest.raises(MTError) as e:
        parse_glossary(data, "terms.tsv", max_terms=3)
    message = str(e.value)
    assert message.startswith(f"glossary terms.tsv:{line}: ") and problem in message and "\n" not in message


def test_unreadable_files_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(MTError, match=r"^glossary .*missing.tsv: cannot read \(No such file"):
        read_glossary(tmp_path / "missing.tsv")
    with pytest.raises(MTError, match="is a folder"):
        read_glossary(tmp_path)
    (tmp_path / "ok.tsv").write_text("cat\tKatze\n", encoding="utf-8")
    assert read_glossary(tmp_path / "ok.tsv").terms == (Term("cat", "Katze", 1),)


def test_terms_match_whole_words_only() -> None:
    g = glossary("cat\tKatze\nNew York\n")
    assert found(g, "the cat sat") == ["cat"]
    assert found(g, "a scattered catalogue, a bobcat") == []
    assert found(g, "the house-cat (cat) in New York.") == ["cat", "New York"]
    assert found(g, "New Yorkers") == []  # "ers" is no English inflection


def test_case_lower_case_terms_also_match_capitalised_at_the_sentence_start_only() -> None:
    g = glossary("house\tHaus\nApple\tApfel\n")
    assert found(g, "House prices rose") == ["house"]
    assert found(g, "\u201cHouse prices,\u201d he said") == ["house"]  # punctuation may come first
    assert found(g, "the House voted") == []  # not at the start: a name, not the term
    assert found(g, "an apple a day") == []  # a term with capitals matches as written
    assert found(g, "Apple shares") == ["Apple"]


def test_inflection_simple_suffixes_of_the_source_language_only() -> None:
    en = glossary("cat\tKatze\nox\tOchse\nred car\trotes Auto\n")
    assert found(en, "two cats and a cat's toy") == ["cat"]
    assert found(en, "red cars") == ["red car"]
    assert found(en, "oxes") == []  # a stem under MIN_STEM letters takes no suffix
    assert found(glossary("cat\tKatze\n", "xx"), "two cats") == []  # no suffixes for an unknown language
    assert found(glossary("Hund\tdog\n", "de"), "des Hundes") == ["Hund"]


def test_overlapping_terms_leftmost_longest_each_term_once() -> None:
    g = glossary("red\trot\nred car\trotes Auto\ncar\tAuto\n")
    assert found(g, "a red car and a car and a red car") == ["red car", "car"]


def test_occurs_is_the_exact_target_form_at_word_boundaries() -> None:
    assert occurs("Haus", "Das Haus ist alt.") and not occurs("Haus", "Das Hausboot") and not occurs("Haus", "Häuser")
    assert occurs("katze", "Katze und Hund") and not occurs("Katze", "katze")


class Pieces:
    """Tokenizer double: one piece per character (a-z -> 4..29), anything else <unk>."""

    src_prefix: list[int] = []

    def encode_tgt(self, lines: list[str]) -> list[list[int]]:
        return [[4 + ord(c) - ord("a") if "a" <= c <= "z" else UNK_ID for c in line] for line in lines]

    encode_src = encode_tgt
    tgt_vocab_size = 34

    def tgt_pieces(self, ids: list[int]) -> list[str]:
        return [["<pad>", "<unk>", "<s>", "</s>"][i] if i < 4 else "\u2581a" if i == 30 else "," if i == 31
                else chr(ord("a") + i - 4) for i in ids]


class Able:
    constrains, max_positions = True, 8


def test_term_constraints_refuse_terms_the_model_cannot_read_or_write() -> None:
    ok = term_constraints(glossary("cat\tdog\nhorse\n"), Pieces(), Able())
    assert ok.pieces == {"dog": [7, 18, 10], "horse": [11, 18, 21, 22, 8]}
    dog, horse = (7, 18, 10), (11, 18, 21, 22, 8)  # each term one constraint of one form
    assert ok.for_lines(["a cat and a horse", "none", "Cats"]) == [Wanted(((dog,), (horse,))), Wanted(()),
                                                                   Wanted(((dog,),))]
    with pytest.raises(MTError, match=r"^glossary terms.tsv:2: target term 'abcdefgh' is 8 pieces; the model writes "
                                      r"at most 7 \(model.max_positions=8\)$"):
        term_constraints(glossary("cat\tdog\nhorse\tabcdefgh\n"), Pieces(), Able())
    with pytest.raises(MTError, match=r"^glossary terms.tsv:1: source term 'abcdefghi' is 9 pieces"):
        term_constraints(glossary("abcdefghi\tx\n"), Pieces(), Able())
    with pytest.raises(MTError, match=r"^glossary terms.tsv:1: target term 'Dog' has characters the model's "
                                      r"vocabulary lacks"):
        term_constraints(glossary("cat\tDog\n"), Pieces(), Able())


def test_pieces_continuing_a_word_may_not_follow_a_term_in_a_language_written_with_spaces() -> None:
    # letters without '\u2581': not '\u2581a' (30), ',' (31), '|' or '}' (32, 33), nor the control pieces
    assert term_constraints(glossary("cat\tdog\n"), Pieces(), Able(), target_lang="de").glue == tuple(range(4, 30))
    assert term_constraints(glossary("cat\tdog\n"), Pieces(), Able(), target_lang="ja").glue == ()


def test_an_engine_that_cannot_constrain_refuses_the_glossary_in_one_line() -> None:
    from mt.deploy.ct2 import CT2Translator

    ct2 = object.__new__(CT2Translator)  # its refusal needs no model: it comes before any search
    ct2.model_dir, ct2.max_positions = Path("exports/en-de"), 64
    expected = (r"^--glossary: 'exports/en-de' is a CTranslate2 export, whose search cannot be constrained to a "
                r"glossary's terms; translate with the \.pt checkpoint it was exported from$")
    with pytest.raises(MTError, match=expected):
        term_constraints(glossary("cat\tdog\n"), Pieces(), ct2)
    with pytest.raises(MTError, match=expected):  # and never drops constraints handed to it directly
        ct2.search_ids([[5, 6]], None, n_best=None, constraints=[[[7]]])  # type: ignore[arg-type]

    class Plain:
        max_positions = 64

    with pytest.raises(MTError, match=r"^--glossary: this model \(Plain\) cannot constrain its search"):
        term_constraints(glossary("cat\tdog\n"), Pieces(), Plain())  # type: ignore[arg-type]


def test_term_success_counts_each_term_once_per_sentence_where_its_source_matched() -> None:
    g = glossary("cat\tKatze\nhouse\tHaus\n")
    sources = ["The cat and the cat.", "House and cat.", "Nothing here.", "A house."]
    hyps = ["Die Katze und die Katze.", "Haus und Hund.", "Katze.", "Ein Hausboot."]
    result = term_success(sources, hyps, g)
    assert (result.terms, result.kept, result.sentences) == (4, 2, 3)
    assert result.rate == 50.0 and result.to_dict()["rate"] == 50.0
    assert TermConstraints(g, {}).terms_of(sources)[1] == [g.terms[1], g.terms[0]]
