"""`mt train`: --init-from and --resume checked and folded into the run's config, then the
training run (mt.train.loop's work; it prepares the data first when needed). What the run starts
from (the init checkpoint, or last.pt on --resume) is read once, by `start_run`, and handed on."""

from __future__ import annotations

from pathlib import Path

from mt.config_load import load_raw_config
from mt.errors import MTError
from mt.train.init_from import start_run
from mt.train.loop import train


def train_command(config: Path, overrides: list[str], *, resume: bool, init_from: Path | None) -> None:
    """`mt train CONFIG`: train the run of `config` with `--set` overrides; --init-from PATH is
    train.init_from (a new run from that checkpoint's weights), --resume continues from last.pt."""
    raw = load_raw_config(config, overrides)
    if init_from is not None:
        if resume:
            raise MTError("--init-from starts a new run from a checkpoint's weights and --resume continues this run "
                          "from its last.pt (which remembers where it started); give one of them")
        section = raw.get("train")
        raw["train"] = {**(section if isinstance(section, dict) else {}), "init_from": str(init_from)}
    start = start_run(raw, resume=resume)
    train(start.cfg, resume=resume, start=start)
