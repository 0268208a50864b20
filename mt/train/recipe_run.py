"""`mt train --data PATH`: from a corpus and a budget to the run's config, with no YAML to write.

`plan_run` finds the corpus's format (one file, two plain-text files, or a folder of splits),
holds validation and test sets out of a one-file corpus (`mt.data.holdout`, seeded, into the
run), surveys the training pairs once (`mt.data.survey`), measures the machine and asks the rule
(`mt.train.recipe.choose`). `--set` overrides win over the rule and are marked so. The result
is written to `<run>/recipe.yaml`, an ordinary config that `mt train` reads back: the run that
follows is `mt train <run>/recipe.yaml`, nothing else.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mt.config import PairConfig
from mt.config_checks import parse_duration
from mt.config_load import apply_overrides, config_from_dict
from mt.data import corpus
from mt.data.clean_rules import scripts_of
from mt.data.holdout import TEST, VALID, resolve_single_files
from mt.data.survey import survey
from mt.errors import MTError
from mt.textio import atomic_write
from mt.train.recipe import Machine, choose, measure_machine
from mt.train.recipe_yaml import recipe_yaml, summary_lines

RECIPE_FILE = "recipe.yaml"
VALID_NAMES = ("val", "valid", "dev", "validation")


@dataclass(frozen=True)
class PlannedRun:
    """The written config and what to print about it."""

    config_path: Path
    headline: str
    lines: list[str]


def _folder_splits(path: str, fmt: str, src_lang: str, tgt_lang: str) -> dict[str, Any]:
    """valid_split and test_splits of a folder of split files, found by name."""
    probe = PairConfig(path=path, src_lang=src_lang, tgt_lang=tgt_lang, format=fmt)  # type: ignore[arg-type]
    valid = next((v for v in VALID_NAMES if corpus.split_available(probe, v)), None)
    if valid is None:
        raise MTError(f"{path}: no validation split ({', '.join(VALID_NAMES)}); add one, "
                      f"or give one corpus file and mt holds validation and test sets out of it")
    names = sorted({p.name.split(".")[0] for p in Path(path).iterdir() if p.name.startswith("test")})
    tests = [t for t in names if corpus.split_available(probe, t)]
    return {"valid_split": valid, "test_splits": tests}


def data_section(path: str, src_lang: str, tgt_lang: str, data_format: str = "") -> dict[str, Any]:
    """The `data` section for the corpus at `path`: its format found from the file names."""
    if not src_lang or not tgt_lang:
        raise MTError("--src-lang and --tgt-lang: say which language each side of the corpus is")
    if src_lang == tgt_lang:
        raise MTError(f"--src-lang and --tgt-lang: both are '{src_lang}'; a corpus pairs two languages")
    base = {"path": path, "src_lang": src_lang, "tgt_lang": tgt_lang}
    probe = PairConfig(path=path, src_lang=src_lang, tgt_lang=tgt_lang,  # type: ignore[arg-type]
                              format=data_format or "text")
    single = corpus.single_file(probe)
    if single is not None:
        return {"format": single.format, **base, "valid_split": VALID, "test_splits": [TEST]}
    if not Path(path).is_dir():
        raise MTError(f"--data {path}: no such file or folder (nor {path}.{src_lang} + {path}.{tgt_lang})")
    fmt = data_format or corpus.folder_format(path, src_lang, tgt_lang)
    return {"format": fmt, **base, **_folder_splits(path, fmt, src_lang, tgt_lang)}


def _default_name(path: str, src_lang: str, tgt_lang: str) -> str:
    stem = Path(path).name.split(".")[0] or "corpus"
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in stem)
    return f"{safe}_{src_lang}_{tgt_lang}"


def _reversed_columns(pair: PairConfig) -> str:
    """Why a TSV corpus is read target<TAB>source ("" when it is not): its first column is written in
    the target language's script and its second in the source's (one folder of en<TAB>ja files
    trained as ja->en)."""
    single = corpus.single_file(pair)
    if (single.format if single is not None else pair.format) != "tsv" or pair.columns != "src-tgt":
        return ""
    src_scripts, tgt_scripts = scripts_of(pair.src_lang), scripts_of(pair.tgt_lang)
    if not src_scripts or not tgt_scripts or set(src_scripts) & set(tgt_scripts):
        return ""
    first = survey(itertools.islice(corpus.clean_pairs(corpus.iter_split(pair, pair.train_split),
                                                       corpus.CleanLimits(0, 0), corpus.CleanReport()), 2000))
    if first.src_script in tgt_scripts and first.tgt_script in src_scripts:
        return (f"the first column is written in {first.src_script}, the second in {first.tgt_script}: "
                f"each line holds {pair.tgt_lang}<TAB>{pair.src_lang}, "
                f"read as {pair.src_lang} -> {pair.tgt_lang}")
    return ""


def plan_run(path: str, src_lang: str, tgt_lang: str, *, budget: str, overrides: list[str],
             data_format: str = "", machine: Machine | None = None) -> PlannedRun:
    """Choose the config for the corpus at `path` and `budget`, write it to `<run>/recipe.yaml`."""
    budget_s = parse_duration(budget) if budget.strip() else -1.0
    if budget_s <= 0:
        raise MTError(f"--budget: must be a duration above 0 like '30m' or '2h', got {budget!r}")
    base: dict[str, Any] = {"name": _default_name(path, src_lang, tgt_lang),
                            "data": data_section(path, src_lang, tgt_lang, data_format)}
    cfg = config_from_dict(apply_overrides(base, overrides))
    if (cfg.run_dir / "checkpoints").is_dir() and any((cfg.run_dir / "checkpoints").iterdir()):
        raise MTError(f"{cfg.run_dir} already holds a training run; give another name (--set name=...), "
                      f"or continue it with mt train {cfg.run_dir / RECIPE_FILE} --resume")
    swapped = _reversed_columns(cfg.data.pairs[0])
    if swapped and not any(text.split("=", 1)[0].strip() == "data.columns" for text in overrides):
        base["data"]["columns"] = "tgt-src"
        cfg = config_from_dict(apply_overrides(base, overrides))
    cfg = resolve_single_files(cfg)  # the split, seeded, in the run
    pair = cfg.data.pairs[0]
    pairs = corpus.clean_pairs(corpus.iter_split(pair, pair.train_split), corpus.CleanLimits(0, 0),
                               corpus.CleanReport())
    found = survey(itertools.islice(pairs, cfg.data.train_limit) if cfg.data.train_limit > 0 else pairs)
    recipe = choose(found, budget_s, machine or measure_machine(cfg.train.threads, cfg.train.precision))
    chosen = {"name": base["name"], "data": {**base["data"], **recipe.config.get("data", {})},
              **{section: keys for section, keys in recipe.config.items() if section != "data"}}
    final = apply_overrides(chosen, overrides)
    reasons = dict(recipe.reasons)
    if base["data"].get("columns") == "tgt-src":
        reasons["data.columns"] = swapped
    for text in overrides:
        key = text.split("=", 1)[0].strip()
        reasons[key] = "set by --set"
        section, _, name = key.partition(".")
        if name and name not in chosen.get(section, {}):  # keep the key's place: after the chosen ones
            final[section] = {**{k: v for k, v in final[section].items() if k != name},
                              name: final[section][name]}
    config_from_dict(final)  # every key and value checked before anything is written
    out = cfg.run_dir / RECIPE_FILE
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(out) as f:
        f.write(recipe_yaml(final, reasons, recipe.headline).encode("utf-8"))
    return PlannedRun(out, recipe.headline, summary_lines(final, reasons))
