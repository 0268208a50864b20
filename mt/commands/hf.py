"""`mt import hf`: a transformers Marian directory in, an mt checkpoint out (mt.deploy.hf_import's work;
transformers is the optional `hf` extra)."""

from __future__ import annotations

from pathlib import Path

from mt.errors import MTError


def hf_command(model_dir: Path, output: Path, *, src_lang: str | None, tgt_lang: str | None) -> None:
    """`mt import hf DIR -o model.pt`: write the checkpoint and say what it holds."""
    if output.suffix != ".pt":
        raise MTError(f"--output '{output}': an mt checkpoint file ends in .pt")
    from mt.deploy.hf_import import import_marian

    info = import_marian(model_dir, output, src_lang=src_lang, tgt_lang=tgt_lang)
    m = info["model"]
    tags = f", target tags {' '.join(info['tags'])}" if info["tags"] else ""
    print(f"imported {model_dir} to {output}: {info['src_lang']}->{info['tgt_lang']}{tags}, "
          f"{m.encoder_layers}+{m.decoder_layers} layers, d_model {m.d_model}, {m.activation}, "
          f"vocabulary {info['vocab']}, {info['parameters']:,} parameters")
