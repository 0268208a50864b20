"""`mt export` and `mt serve`: flag checks and what they print (the work is mt.deploy.export's
and mt.serve's, both behind optional extras)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mt.errors import MTError

# --------------------------------------------------------------------------- mt export


def export_command(checkpoint: Path, *, format: str, output: Path, quantization: str, force: bool,
                   int8_range: str = "reduced", check: bool = True) -> None:
    """`mt export`: write `checkpoint` as a CTranslate2 model directory and say where; a quantised
    one (unless `check` is off) is then measured against float32 on the validation set."""
    if format != "ctranslate2":
        raise MTError(f"--format: unknown format {format!r}; expected ctranslate2")
    if not checkpoint.is_file():
        raise MTError(f"checkpoint '{checkpoint}': file not found")
    from mt.deploy.export import export_ctranslate2  # ctranslate2 is an optional extra

    out = export_ctranslate2(checkpoint, output, quantization=quantization, force=force, int8_range=int8_range)
    print(f"exported {checkpoint} to {out} (CTranslate2, quantization {quantization})")
    if quantization != "none" and check:
        from mt.deploy.quantcheck import check_quantization, describe

        print(f"checking {quantization} against float32 on the validation set (--no-check skips this)...", flush=True)
        print(describe(check_quantization(out, checkpoint)))


# --------------------------------------------------------------------------- mt serve

SERVE_EXTRA_HINT = 'pip install -e ".[serve]"'


def serve_command(
    checkpoints: Sequence[Path],
    *,
    host: str,
    port: int,
    beam: int | None,
    max_batch_tokens: int | None,
    max_wait_ms: float,
    api_keys: Path | None,
    cors_origins: Sequence[str],
    timeout: float,
    char_limit: int,
    max_segments: int,
    max_alternatives: int,
    queue_size: int,
    device: str,
    threads: int = 0,
) -> None:
    """`mt serve`: check the flags and the model paths, then run the HTTP server until SIGTERM."""
    for path in checkpoints:
        if not Path(path).exists():
            raise MTError(f"-c {path}: not found")
    try:
        import fastapi  # noqa: F401
        import multipart  # noqa: F401 - python-multipart, for form data
        import prometheus_client  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise MTError(f"mt serve: needs the serve extra ({e.name} is not installed); run: {SERVE_EXTRA_HINT}") from None
    from mt.serve.server import run_server
    from mt.serve.settings import ServeSettings, read_api_keys

    keys = read_api_keys(api_keys) if api_keys is not None else frozenset()
    settings = ServeSettings(host=host, port=port, max_beam=beam, max_batch_tokens=max_batch_tokens,
                             max_wait_ms=max_wait_ms, timeout_s=timeout, char_limit=char_limit,
                             max_segments=max_segments, max_alternatives=max_alternatives, queue_size=queue_size,
                             max_body_bytes=max(1 << 20, 8 * char_limit), cors_origins=tuple(cors_origins),
                             api_keys=keys, device=device, threads=threads)
    run_server(settings, checkpoints)
