"""`mt train`: --init-from and --resume checked and folded into the run's config, then the
training run (mt.train.loop's work; it prepares the data first when needed). What the run starts
from (the init checkpoint, or last.pt on --resume) is read once, by `start_run`, and handed on.

`mt train --data PATH --src-lang xx --tgt-lang yy [--budget 1h] [--dry-run]`: no config to
write; mt.train.recipe_run chooses one for the corpus and the budget, writes it to
`<run>/recipe.yaml` (printed here, key by key with its reason) and the run is `mt train` of that
file; afterwards mt.train.outlook reads the learning curve and says what more would buy."""

from __future__ import annotations

from pathlib import Path

from mt.config_load import load_raw_config
from mt.errors import MTError
from mt.train.init_from import start_run
from mt.train.loop import train
from mt.train.outlook import outlook
from mt.train.recipe_run import plan_run


def train_command(config: Path | None, overrides: list[str], *, resume: bool, init_from: Path | None,
                  data: str | None = None, src_lang: str = "", tgt_lang: str = "", budget: str = "1h",
                  dry_run: bool = False, data_format: str = "") -> None:
    """`mt train CONFIG`: train the run of `config` with `--set` overrides; --init-from PATH is
    train.init_from (a new run from that checkpoint's weights), --resume continues from last.pt.
    `data` instead of `config`: the recipe for that corpus and `budget` (see the module docstring)."""
    if data is not None:
        if config is not None:
            raise MTError("give a config or --data, not both (--data writes the config it chooses)")
        if resume or init_from is not None:
            raise MTError("--data starts a new run from a corpus; to resume or fine-tune, give the run's "
                          "config: mt train runs/<name>/recipe.yaml --resume")
        planned = plan_run(data, src_lang, tgt_lang, budget=budget, overrides=overrides,
                           data_format=data_format)
        print(f"recipe: {planned.headline}")
        print("\n".join(planned.lines))
        print(f"recipe: wrote {planned.config_path}" + ("" if dry_run else "; training it now"))
        if dry_run:
            print(f"  train it with: mt train {planned.config_path}")
            return
        config, overrides = planned.config_path, []
    elif config is None:
        raise MTError("give a config (mt train CONFIG) "
                      "or a corpus (mt train --data PATH --src-lang xx --tgt-lang yy)")
    elif dry_run:
        raise MTError("--dry-run writes the config --data would train; "
                      "with a config there is nothing to write")
    raw = load_raw_config(config, overrides)
    if init_from is not None:
        if resume:
            raise MTError("--init-from starts a new run from a checkpoint's weights and --resume continues "
                          "this run from its last.pt (which remembers where it started); give one of them")
        section = raw.get("train")
        raw["train"] = {**(section if isinstance(section, dict) else {}), "init_from": str(init_from)}
    start = start_run(raw, resume=resume)
    train(start.cfg, resume=resume, start=start)
    if data is not None:
        print("\n".join(outlook(start.cfg.run_dir)))
