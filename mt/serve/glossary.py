"""Glossaries on the server: the server-wide default of each language pair (`mt serve --glossary
PAIR=FILE`, or `--glossary FILE` for a server with one pair) and a /v1 request's own (its
`glossary` field), as decoding constraints (`mt.decode.terms.TermConstraints`) for the model of
the pair.

- **Defaults** are read at start-up (`mt.serve.settings.parse_glossary_flags`: a file that cannot be
  read or a bad line is one line and the server does not start) and checked against the model of
  their pair when the models load (`default_terms`: a pair no model serves, a CTranslate2 model, a
  term the model cannot write stop the server, as two models claiming one pair do). LibreTranslate's
  /translate, /translate_file and a /v1 request without a `glossary` field use them.
- **A request's glossary replaces the default** for its pair (as DeepL's `glossary_id` does):
  `"glossary": []` translates without any. It is a list of `{"source": str, "target": str}`
  objects, `target` left out to keep the source term as it is (do-not-translate). Its size is
  checked before anything is read (`request_glossary`: more than --max-glossary-terms terms, or a
  term over `MAX_TERM_CHARS` characters, is a 413); a malformed item is a 400 naming
  `glossary[i].field`; a term the model cannot write a 400 naming `glossary[i]`.
- A model that cannot constrain its search (an `mt export`, CTranslate2) answers a glossary with a
  400, never ignoring it; so does sampling (`"sampling": true` draws translations freely).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mt.decode.terms import TermConstraints, term_constraints
from mt.errors import MTError
from mt.serve.model import ServedModel
from mt.serve.requests import ApiError, check_text
from mt.text.glossary import Glossary, Term

MAX_TERM_CHARS = 256  # characters in one side of a request's term at most (else 413)
CT2_REFUSAL = ("glossary: this server runs an `mt export` (CTranslate2) model, whose search cannot keep a "
               "glossary's terms; serve the .pt checkpoint to use glossaries")
SAMPLING_REFUSAL = ("glossary: sampling draws translations freely and cannot keep a glossary's terms; search "
                    "instead (or send \"glossary\": [] to translate without the server's glossary)")


def model_terms(model: ServedModel, glossary: Glossary, source: str, target: str, *,
                request: bool = False) -> TermConstraints:
    """`glossary` checked against `model` translating `source` into `target` (served codes), its
    terms found with the source's suffixes; MTError naming `glossary[i]` (request) or `file:line`."""
    glossary = glossary.for_pair(source, target)
    where = (lambda term: f"glossary[{term.line}]") if request else None
    return term_constraints(glossary, model.tokenizer_for(target), model.engine, target_lang=target,
                            glue=model.glue_for(target), where=where)


def default_terms(models: Sequence[ServedModel],
                  glossaries: Sequence[tuple[str, Glossary]]) -> dict[tuple[str, str], TermConstraints]:
    """The `--glossary` defaults by served (source, target) pair, each checked against the model of
    its pair; one-line MTError for a pair no model serves or a glossary its model refuses."""
    owner = {pair: model for model in models for pair in model.pairs}
    names = {f"{s}-{t}".lower(): (s, t) for s, t in owner}
    terms: dict[tuple[str, str], TermConstraints] = {}
    for name, glossary in glossaries:
        if not name and len(names) != 1:
            raise MTError(f"--glossary {glossary.name}: this server translates {', '.join(names)}; "
                          f"name the pair (--glossary {next(iter(names))}={glossary.name})")
        pair = names.get(name) if name else next(iter(names.values()))
        if pair is None:
            raise MTError(f"--glossary {name}={glossary.name}: no model translates {name}; "
                          f"this server translates {', '.join(names)}")
        model = owner[pair]
        if not model.constrains:
            raise MTError(f"--glossary {glossary.name}: the {pair[0]}-{pair[1]} model is an `mt export` "
                          "(CTranslate2), whose search cannot keep a glossary's terms; "
                          "serve the .pt checkpoint")
        if model.decode.search.sampling:
            raise MTError(f"--glossary {glossary.name}: the {pair[0]}-{pair[1]} model samples "
                          "(decode.search.sampling), which cannot keep a glossary's terms")
        terms[pair] = model_terms(model, glossary, *pair)
    return terms


def request_glossary(fields: dict[str, Any], max_terms: int) -> Glossary | None:
    """A /v1 request's `glossary` field as a `Glossary` (each term's line: its index), None when
    absent. 413 for more than `max_terms` terms (counted first) or a term over `MAX_TERM_CHARS`;
    400 naming `glossary[i]` or `glossary[i].field` for a malformed one or a source given two targets."""
    value = fields.get("glossary")
    if value is None:
        return None
    if not isinstance(value, list):
        raise ApiError(400, f"glossary: expected a list of {{\"source\": ..., \"target\": ...}} objects, "
                            f"got {type(value).__name__}")
    if len(value) > max_terms:
        raise ApiError(413, f"glossary: {len(value)} terms, the limit is {max_terms} (--max-glossary-terms)")
    terms: list[Term] = []
    seen: dict[str, Term] = {}
    for i, item in enumerate(value):
        where = f"glossary[{i}]"
        if not isinstance(item, dict):
            raise ApiError(400, f"{where}: expected an object {{\"source\": ..., \"target\": ...}}, "
                                f"got {type(item).__name__}")
        unknown = sorted(set(item) - {"source", "target"})
        if unknown:
            raise ApiError(400, f"{where}.{unknown[0]}: unknown field; a term has \"source\" and \"target\" "
                                "(leave target out to keep the source term as it is)")
        source = _side(item, "source", where)
        target = _side(item, "target", where) if item.get("target") is not None else source
        if source in seen:
            if seen[source].target != target:
                raise ApiError(400, f"{where}: '{source}' -> '{target}', "
                                    f"but glossary[{seen[source].line}] says "
                                    f"'{seen[source].target}'; a source term has one target")
            continue
        seen[source] = Term(source, target, i)
        terms.append(seen[source])
    return Glossary("request", tuple(terms))


def _side(item: dict[str, Any], name: str, where: str) -> str:
    """One side of a request's term: a non-empty one-line string of at most MAX_TERM_CHARS."""
    value = item.get(name)
    if value is None:
        raise ApiError(400, f"{where}.{name}: missing")
    if not isinstance(value, str):
        raise ApiError(400, f"{where}.{name}: expected a string, got {type(value).__name__}")
    if len(value) > MAX_TERM_CHARS:
        raise ApiError(413, f"{where}.{name}: {len(value)} characters, a term has at most {MAX_TERM_CHARS}")
    value = check_text(value, f"{where}.{name}").strip()
    if not value:
        raise ApiError(400, f"{where}.{name}: empty" + (" (leave target out to keep the source term as it is)"
                                                         if name == "target" else ""))
    if "\n" in value or "\r" in value:
        raise ApiError(400, f"{where}.{name}: a line break; a term is matched inside one sentence")
    return value


def request_terms(model: ServedModel, glossary: Glossary | None, default: TermConstraints | None,
                  pair: tuple[str, str], sampling: bool) -> TermConstraints | None:
    """The terms a /v1 request keeps: its own `glossary` (which replaces the pair's `default`; an
    empty one: none), else the default; a 400 for a model or a search that cannot keep them."""
    if glossary is not None and not glossary.terms:
        return None
    if glossary is not None and not model.constrains:
        raise ApiError(400, CT2_REFUSAL)
    if sampling and (glossary is not None or default is not None):
        raise ApiError(400, SAMPLING_REFUSAL)
    if glossary is None:
        return default
    try:
        return model_terms(model, glossary, *pair, request=True)
    except MTError as e:
        raise ApiError(400, str(e)) from None
