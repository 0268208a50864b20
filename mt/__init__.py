"""mt: an end-to-end machine-translation training pipeline (sentencepiece + Transformer + sacreBLEU)."""

from __future__ import annotations

import re

__version__ = "0.1.0"

# The oldest torch mt runs on: torch.nn.utils.get_total_norm / clip_grads_with_norm_ (the
# trainer's clipping) are new in 2.6; fused CPU Adam (2.4) and torch.amp.GradScaler("cuda") (2.3)
# are older. Keep in step with `torch>=` in pyproject.toml.
TORCH_MIN = (2, 6)


def check_torch(version: str | None = None) -> None:
    """MTError "mt needs torch >= 2.6, found X" on an older torch (`version` defaults to the
    installed one); called by the CLI before any command, so the user never sees an AttributeError."""
    from mt.errors import MTError

    if version is None:
        from importlib import metadata

        try:  # the installed distribution's version: no need to import torch (slow) for `mt --help`
            version = metadata.version("torch")
        except metadata.PackageNotFoundError:
            import torch

            version = str(torch.__version__)
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None or (int(found[1]), int(found[2])) < TORCH_MIN:
        need = ".".join(map(str, TORCH_MIN))
        raise MTError(f"mt needs torch >= {need}, found {version}; install a newer torch "
                      f"(e.g. `make install` pins a tested one)")
