"""The server's limits: one frozen dataclass, checked once at start-up with one-line errors.

API keys are held here as a frozenset of strings and never rendered: `__repr__` hides them so a
logged or printed settings object cannot leak one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from mt.errors import MTError


@dataclass(frozen=True)
class ServeSettings:
    """What `mt serve` allows a client. Sizes are per request unless named otherwise.

    max_beam:        the largest beam a /v1 request may ask for; also the default beam
                     (None = the checkpoint's decode.beam, which is then also the maximum)
    max_batch_tokens: source tokens x beam per decoding batch (None = the checkpoint's decode.max_tokens);
                     1 switches batching off (every segment is decoded alone)
    max_wait_ms:     how long a filling batch waits for the next segment (in all at most
                     batcher.GATHER_CAP x this)
    timeout_s:       a request waiting longer than this for its translations gets 503, one whose body
                     has not all arrived after this long 408; a connection whose next request head
                     has not all arrived this long after it opened (or its last answer) is closed
    char_limit:      characters per request (all segments together), else 413
    max_segments:    segments (lines) per request, else 413
    max_alternatives: LibreTranslate `alternatives` / /v1 n_best - 1 at most, else 400
    queue_size:      segments waiting for the model at most (all requests), else 429
    max_body_bytes:  request body size at most, else 413
    threads:         CPU threads the model uses (torch intra-op, CTranslate2 intra_threads); 0 = torch's
                     default. On a shared, oversubscribed CPU, small batches with more threads than
                     free cores stall in thread barriers: 1 is then much faster (see README, Serve).
    """

    host: str = "127.0.0.1"
    port: int = 8000
    max_beam: int | None = None
    max_batch_tokens: int | None = None
    max_wait_ms: float = 5.0
    timeout_s: float = 30.0
    char_limit: int = 10_000
    max_segments: int = 256
    max_alternatives: int = 5
    queue_size: int = 4096
    max_body_bytes: int = 1 << 20
    cors_origins: tuple[str, ...] = ()
    api_keys: frozenset[str] = field(default=frozenset(), repr=False)
    device: str = "auto"
    threads: int = 0

    def __post_init__(self) -> None:
        positive = (("--port", self.port), ("--char-limit", self.char_limit), ("--max-segments", self.max_segments),
                    ("--queue-size", self.queue_size), ("max_body_bytes", self.max_body_bytes))
        for flag, value in positive:
            if value < 1:
                raise MTError(f"{flag}: must be at least 1, got {value}")
        if self.port > 65535:
            raise MTError(f"--port: must be at most 65535, got {self.port}")
        for flag, opt in (("--beam", self.max_beam), ("--max-batch-tokens", self.max_batch_tokens)):
            if opt is not None and opt < 1:
                raise MTError(f"{flag}: must be at least 1, got {opt}")
        if self.max_alternatives < 0:
            raise MTError(f"--max-alternatives: must be 0 or more, got {self.max_alternatives}")
        if self.threads < 0:
            raise MTError(f"--threads: must be 0 (default) or more, got {self.threads}")
        if not self.max_wait_ms >= 0:
            raise MTError(f"--max-wait-ms: must be 0 or more, got {self.max_wait_ms}")
        if not self.timeout_s > 0:
            raise MTError(f"--timeout: must be positive, got {self.timeout_s}")
        for origin in self.cors_origins:
            if origin != "*" and not origin.startswith(("http://", "https://")):
                raise MTError(f"--cors-origin {origin!r}: expected an origin such as https://example.org, or *")

    @property
    def keys_required(self) -> bool:
        return bool(self.api_keys)

    def with_keys(self, keys: frozenset[str]) -> ServeSettings:
        return dataclasses.replace(self, api_keys=keys)


def read_api_keys(path: Path) -> frozenset[str]:
    """The keys in `path`: one per line, blank lines and '#' comments skipped. Errors never show a key."""
    if not path.is_file():
        raise MTError(f"--api-keys {path}: file not found")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise MTError(f"--api-keys {path}: not UTF-8 text") from None
    keys = set()
    for number, line in enumerate(text.splitlines(), start=1):
        key = line.split("#", 1)[0].strip()
        if not key:
            continue
        if any(c.isspace() for c in key):
            raise MTError(f"--api-keys {path}: line {number}: a key may not contain spaces")
        keys.add(key)
    if not keys:
        raise MTError(f"--api-keys {path}: no keys in the file (one key per line, '#' comments)")
    return frozenset(keys)
