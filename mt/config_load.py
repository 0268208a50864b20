"""Reading and writing configs: YAML files and `--set section.key=value` overrides into a checked
`mt.config.Config`, and back to plain dicts and YAML.

Every key is checked: an unknown key is an error naming the key and its closest valid spelling,
and a value of the wrong type is an error naming the key, the expected type and the value given.
`--set` overrides go through the same checks, then `mt.config_checks.check_values`.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from pathlib import Path
from typing import Any, Literal

import yaml

from mt.config import Config, DataConfig, DecodeConfig, SearchConfig, TextConfig
from mt.config_checks import check_values, short_repr
from mt.errors import MTError
from mt.textio import atomic_write


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _closest(key: str, valid: list[str]) -> str:
    match = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    return f" (did you mean '{match[0]}'?)" if match else f" (valid keys: {', '.join(valid)})"


def _is_text(tp: Any) -> bool:
    """Whether a field holds text: `str`, or a `Literal` of strings (a choice key)."""
    if tp is str:
        return True
    return typing.get_origin(tp) is Literal and all(isinstance(a, str) for a in typing.get_args(tp))


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Check `value` against the annotation `tp`, converting only where lossless (int -> float,
    list -> tuple).

    A `Literal[...]` of strings is a choice key: the value must be a string and one of its choices.
    """
    origin = typing.get_origin(tp)
    if origin is Literal:
        choices = typing.get_args(tp)
        if isinstance(value, bool) and set(choices) >= {"on", "off"}:  # a switch written as true/false
            value = "on" if value else "off"
        if not isinstance(value, str):
            raise MTError(f"config key '{where}': expected str, got {short_repr(value)}")
        if value not in choices:
            raise MTError(f"config key '{where}': expected one of {', '.join(choices)}, "
                          f"got {short_repr(value)}")
        return value
    bad = MTError(f"config key '{where}': expected {_type_name(tp)}, got {short_repr(value)}")
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise bad
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise bad
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads '1e-4' (no dot) as a string
            try:
                return float(value)
            except ValueError:
                raise bad from None
        raise bad
    if tp is str:
        if isinstance(value, str):
            return value
        raise bad
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, (list, tuple)):
            raise bad
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(v, args[0], where) for v in value)
        if len(value) != len(args):
            raise bad
        return tuple(_coerce(v, a, where) for v, a in zip(value, args))
    if origin in (typing.Union, types.UnionType):
        if set(typing.get_args(tp)) == {int, str}:  # updates or a share of the run: 400 or "5%"
            if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
                return value
        raise bad  # no optional fields: every key has a concrete default
    raise bad


# Keys an item of a list of sections (data.pairs) takes from its parent section when it leaves them out.
_INHERITED = ("format", "hub_name", "hub_config", "columns", "train_split", "valid_split", "test_splits")


def _section_list_item(tp: Any) -> Any:
    """The section class of a `tuple[SomeSection, ...]` field (e.g. data.pairs), else None."""
    args = typing.get_args(tp) if typing.get_origin(tp) is tuple else ()
    return args[0] if len(args) == 2 and args[1] is Ellipsis and dataclasses.is_dataclass(args[0]) else None


def _build_list(item_cls: type, value: Any, where: str, parent_cls: type,
                parent_raw: dict[str, Any]) -> tuple:
    """A list of mappings -> a tuple of `item_cls`, each item named `where[i]` in errors; keys of
    `_INHERITED` an item leaves out come from the parent section (its value, else its default)."""
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)):
        raise MTError(f"config key '{where}': expected a list of mappings, got {short_repr(value)}")
    parent_fields = {f.name: f for f in dataclasses.fields(parent_cls)}
    item_fields = {f.name for f in dataclasses.fields(item_cls)}
    inherited: dict[str, Any] = {}
    for key in _INHERITED:
        if key in item_fields and key in parent_fields:
            f = parent_fields[key]
            if f.default is not dataclasses.MISSING:
                default = f.default
            else:
                default = f.default_factory()  # type: ignore[misc]
            inherited[key] = parent_raw.get(key, default)
    return tuple(_build(item_cls, {**inherited, **item} if isinstance(item, dict) else item, f"{where}[{i}]")
                 for i, item in enumerate(value))


# The decode section's keys before it was split by concern (configs and checkpoints of e168eae and
# earlier): the section and name each moved to. Such a flat key still loads, and `--set decode.beam=4`
# still sets decode.search.beam.
MOVED_DECODE_KEYS: dict[str, tuple[str, str]] = {
    **{f.name: ("search", f.name) for f in dataclasses.fields(SearchConfig)},
    **{f.name: ("text", f.name) for f in dataclasses.fields(TextConfig)},
    "confidence": ("calibration", "weights"), "confidence_min_pieces": ("calibration", "min_pieces"),
    "confidence_min_distinct": ("calibration", "min_distinct"),
    "max_tokens": ("resources", "max_tokens"), "precision": ("resources", "precision"),
}


def moved_decode_keys(raw: Any, where: str = "decode") -> Any:
    """A decode section with its flat keys moved into their sections (`MOVED_DECODE_KEYS`); a key
    given both ways is an error naming both. Anything but a mapping is left for `_build` to refuse."""
    if not isinstance(raw, dict) or not any(key in MOVED_DECODE_KEYS for key in raw):
        return raw
    out = {key: (dict(value) if isinstance(value, dict) else value) for key, value in raw.items()
           if key not in MOVED_DECODE_KEYS}
    for key, value in raw.items():
        if key not in MOVED_DECODE_KEYS:
            continue
        section, name = MOVED_DECODE_KEYS[key]
        node = out.setdefault(section, {})
        if not isinstance(node, dict):
            raise MTError(f"config section '{where}.{section}': expected a mapping, got {short_repr(node)}")
        if name in node:
            raise MTError(f"config key '{where}.{key}': moved to {where}.{section}.{name}, which is given "
                          f"too; keep one")
        node[name] = value
    return out


def _build(cls: type, raw: Any, prefix: str) -> Any:
    if not isinstance(raw, dict):
        raise MTError(f"config section '{prefix or 'top level'}': expected a mapping, got {short_repr(raw)}")
    if cls is DecodeConfig:
        raw = moved_decode_keys(raw, prefix)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    # Lists of sections last: a bad inherited key is reported under its own name first.
    def is_list_of_sections(kv: tuple[Any, Any]) -> bool:
        return kv[0] in fields and _section_list_item(hints[kv[0]]) is not None

    for key, value in sorted(raw.items(), key=is_list_of_sections):
        where = f"{prefix}.{key}" if prefix else str(key)
        if key not in fields:
            raise MTError(f"unknown config key {short_repr(where)}{_closest(str(key), list(fields))}")
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            kwargs[key] = _build(tp, value if value is not None else {}, where)
            continue
        item_cls = _section_list_item(tp)
        if item_cls is not None:
            kwargs[key] = _build_list(item_cls, value, where, cls, raw)
            continue
        kwargs[key] = _coerce(value, tp, where)
    if cls is DataConfig:
        _resolve_target_tags(kwargs, prefix)
    return cls(**kwargs)


def _resolve_target_tags(kwargs: dict[str, Any], where: str) -> None:
    """`data.target_tags` left out: true when `data.pairs` lists the pairs (a config or checkpoint of
    before the key existed means that too), else false. An untagged model is the one pair of the
    data section's own keys (`DataConfig` builds it), so a list of pairs without tags is an error."""
    listed = bool(kwargs.get("pairs"))
    kwargs.setdefault("target_tags", listed)
    if listed and not kwargs["target_tags"]:
        raise MTError(f"config key '{where}.target_tags': a model of data.pairs has target tags; "
                      f"for one pair without a tag, leave data.pairs out and set data.path, "
                      f"data.src_lang and data.tgt_lang")


def config_from_dict(raw: dict[str, Any]) -> Config:
    """Build and check a `Config` from a plain nested dict (YAML or a checkpoint)."""
    cfg = _build(Config, raw, "")
    check_values(cfg)
    return cfg


def config_to_dict(cfg: Config) -> dict[str, Any]:
    """A plain nested dict of builtins (tuples become lists), safe for YAML and `torch.save`; what
    `config_from_dict` reads back to an equal Config (an untagged model's one pair as `pairs: []`)."""

    def plain(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return v

    out = plain(dataclasses.asdict(cfg))
    if not cfg.data.target_tags:  # the one pair is the data section's own keys: written once, there
        out["data"]["pairs"] = []
    return out


def _parse_override(text: str) -> tuple[list[str], Any]:
    if "=" not in text:
        raise MTError(f"override {short_repr(text)}: expected section.key=value")
    key, value = text.split("=", 1)
    parts = key.strip().split(".")
    try:
        parsed = yaml.safe_load(value) if value.strip() else ""
    except (yaml.YAMLError, ValueError):  # ValueError: an int of more digits than Python converts
        parsed = value
    except RecursionError:
        raise MTError(f"override {short_repr(text)}: value nested too deeply") from None
    return parts, parsed


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `section.key=value` overrides (values parsed as YAML scalars) to a raw config dict."""
    raw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    if "decode" in raw:  # flat keys of an older config moved first, where a --set would put them
        raw["decode"] = moved_decode_keys(raw["decode"], "decode")
    for text in overrides:
        parts, value = _parse_override(text)
        if len(parts) == 2 and parts[0] == "decode" and parts[1] in MOVED_DECODE_KEYS:
            parts = ["decode", *MOVED_DECODE_KEYS[parts[1]]]
        node = raw
        for part in parts[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise MTError(f"override {short_repr(text)}: {short_repr(part)} is not a config section")
            node = child
        # Strings that YAML reads as numbers stay strings for str fields (e.g. name=123) via _coerce_str.
        node[parts[-1]] = value
    return _stringify_for_str_fields(raw)


def _stringify_for_str_fields(raw: dict[str, Any]) -> dict[str, Any]:
    """YAML turns `name=42` into an int; str fields accept such scalars as their text."""

    def walk(cls: type, node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        hints = typing.get_type_hints(cls)
        out = dict(node)
        for key, value in node.items():
            tp = hints.get(key)
            if tp is None:
                continue
            if dataclasses.is_dataclass(tp):
                out[key] = walk(tp, value)
            elif _is_text(tp) and isinstance(value, (int, float)) and not isinstance(value, bool):
                out[key] = str(value)
        return out

    return walk(Config, raw)


def load_config(path: str | Path, overrides: list[str] | None = None) -> Config:
    """Read a YAML config, apply `--set` overrides, and check every key and type."""
    return config_from_dict(load_raw_config(path, overrides))


def load_raw_config(path: str | Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """The YAML file plus `--set` overrides as a plain dict, unchecked: the keys the user wrote
    (`mt.train.init_from` needs to know which model keys were given, not defaulted)."""
    path = Path(path)
    if not path.is_file():
        raise MTError(f"config file '{path}' does not exist")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError, ValueError, RecursionError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise MTError(f"config file '{path}' is not valid YAML: {first}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise MTError(f"config file '{path}': expected a mapping at the top level")
    raw = _stringify_for_str_fields(raw)
    if "name" not in raw:
        raw["name"] = path.stem
    return apply_overrides(raw, overrides or [])


def config_to_yaml(cfg: Config) -> str:
    """The resolved config as YAML text (what `save_config` writes)."""
    return yaml.safe_dump(config_to_dict(cfg), sort_keys=False)


def save_config(cfg: Config, path: str | Path) -> None:
    """Write the resolved config as YAML, atomically (what `load_config` reads back to an equal Config)."""
    with atomic_write(Path(path)) as f:
        f.write(config_to_yaml(cfg).encode("utf-8"))
