"""`mt prepare`: the run's config read (a fine-tuning run's resolved against its init checkpoint,
read once), then the tokenizer trained (or the init checkpoint's reused) and every split encoded
(mt.data's work)."""

from __future__ import annotations

from pathlib import Path

from mt.config_load import load_raw_config
from mt.data.prepare import prepare
from mt.train.init_from import start_run


def prepare_command(config: Path, overrides: list[str], *, force: bool) -> None:
    """`mt prepare CONFIG`: prepare the run directory of `config` with `--set` overrides."""
    start = start_run(load_raw_config(config, overrides))
    prepare(start.cfg, force=force, tokenizer=start.tokenizer)
