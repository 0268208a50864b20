"""`mt export`: flag checks and what it prints (the work is mt.deploy.export's and, for a
quantised export, mt.deploy.quantcheck's; both need the optional ctranslate2 extra). The
checkpoint is read once, for the export and for the float32 reference the check converts."""

from __future__ import annotations

from pathlib import Path

from mt.errors import MTError


def export_command(checkpoint: Path, *, format: str, output: Path, quantization: str, force: bool,
                   int8_range: str = "reduced", check: bool = True) -> None:
    """`mt export`: write `checkpoint` as a CTranslate2 model directory and say where; a quantised
    one (unless `check` is off) is then measured against float32 on the validation set."""
    if format not in ("ctranslate2", "hf"):
        raise MTError(f"--format: unknown format {format!r}; expected ctranslate2 or hf")
    if not checkpoint.is_file():
        raise MTError(f"checkpoint '{checkpoint}': file not found")
    if format == "hf":
        if quantization != "none":
            raise MTError("--quantization: --format hf writes float32 weights "
                          "(quantise when loading in transformers)")
        from mt.deploy.hf_export import export_hf  # transformers is an optional extra

        out = export_hf(checkpoint, output, force=force)
        print(f"exported {checkpoint} to {out} "
              f"(transformers MarianMTModel: from_pretrained, pipeline('translation'))")
        return
    from mt.deploy.export import check_export, export_ctranslate2  # ctranslate2 is an optional extra
    from mt.model.checkpoint import read_checkpoint

    check_export(output, quantization=quantization, force=force, int8_range=int8_range)  # before the read
    source = read_checkpoint(checkpoint)
    out = export_ctranslate2(source, output, quantization=quantization, force=force, int8_range=int8_range)
    print(f"exported {checkpoint} to {out} (CTranslate2, quantization {quantization})")
    if quantization != "none" and check:
        from mt.deploy.quantcheck import check_quantization, describe

        print(f"checking {quantization} against float32 on the validation set (--no-check skips this)...",
              flush=True)
        print(describe(check_quantization(out, source)))
