"""What `mt translate`, `mt evaluate` and `mt score` share: the `-o` path; the model `-c` names
with the tokenizer for `--target-lang`; the `--glossary` checked against it. (The decode settings'
overrides are `mt.decode.overrides`.)"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mt.config import DecodeConfig
from mt.data.tokenizer import Tokenizer
from mt.decode.terms import TermConstraints, term_constraints
from mt.deploy.loading import LoadedModel, load_model
from mt.errors import MTError
from mt.text.glossary import Glossary, read_glossary


def output_path(output: str) -> Path | None:
    """The file `-o` names (None for '-', stdout); a folder is a one-line error."""
    out_path = None if output == "-" else Path(output)
    if out_path is not None and out_path.is_dir():
        raise MTError(f"output '{output}': is a folder")
    return out_path


def load_for_target(
    checkpoints: Sequence[Path], device: str, target_lang: str | None
) -> tuple[LoadedModel, Tokenizer]:
    """The model `-c` names and its tokenizer for `--target-lang` (a tagged model's tag in front)."""
    loaded = load_model(checkpoints, device)
    return loaded, loaded.tokenizer.for_target(target_lang, flag="--target-lang")


def read_glossary_flag(path: Path | None) -> Glossary | None:
    """--glossary read and checked as a file (one-line MTErrors naming file:line), before any model
    loads; None without the flag."""
    return None if path is None else read_glossary(path)


def glossary_for_model(glossary: Glossary | None, loaded: LoadedModel, tokenizer: Tokenizer,
                       pair: tuple[str, str], decode: DecodeConfig) -> TermConstraints | None:
    """The --glossary checked against the model (`term_constraints`) translating `pair` (source,
    target language), its terms found with the source's lemmas and suffixes (`Glossary.for_pair`);
    None without one."""
    if glossary is None:
        return None
    if decode.search.sampling:
        raise MTError("--glossary: terms are kept by beam search; --sampling draws translations freely")
    return term_constraints(glossary.for_pair(*pair), tokenizer,
                            loaded.engine, target_lang=pair[1])
