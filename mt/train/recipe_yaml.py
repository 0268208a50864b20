"""The recipe written out: the chosen config as YAML, each key with its reason as a trailing
comment (an ordinary config that `mt train CONFIG` reproduces), and the summary lines
`mt train --data` prints.
"""

from __future__ import annotations

from typing import Any

import yaml


def _scalar(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=1000).strip().removesuffix("...").strip()


def recipe_yaml(config: dict[str, Any], reasons: dict[str, str], headline: str) -> str:
    """The config as YAML, each key with its reason as a trailing comment (what `load_config` reads)."""
    lines = ["# Chosen by `mt train --data` (mt/train/recipe.py): " + headline,
             "# An ordinary config: `mt train THIS_FILE` trains the same run; edit any key."]
    for key, value in config.items():
        if not isinstance(value, dict):
            lines.append(f"{key}: {_scalar(value)}")
    for section, keys in config.items():
        if not isinstance(keys, dict):
            continue
        lines.append(f"{section}:")
        for key, value in keys.items():
            reason = reasons.get(f"{section}.{key}")
            lines.append(f"  {key}: {_scalar(value)}" + (f"  # {reason}" if reason else ""))
    return "\n".join(lines) + "\n"


def summary_lines(config: dict[str, Any], reasons: dict[str, str]) -> list[str]:
    """'section.key = value  (reason)' for every chosen key: what `mt train --data` prints."""
    return [f"  {section}.{key} = {_scalar(value)}  ({reasons[f'{section}.{key}']})"
            for section, keys in config.items() if isinstance(keys, dict)
            for key, value in keys.items() if f"{section}.{key}" in reasons]
