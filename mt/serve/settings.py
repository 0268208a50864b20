"""The server's limits: one frozen dataclass, checked once at start-up with one-line errors.

Its fields with a flag are `mt serve`'s options (flag, default and help declared once, here).
API keys are held here as a `KeyRing` (`mt.serve.limits`: names, keys and their limits) and never
rendered: `__repr__` hides them so a logged or printed settings object cannot leak one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mt.config import ProtectKind
from mt.decode.overrides import SERVE_FLAGS, DecodeOverrides, check_overrides
from mt.errors import MTError
from mt.serve.limits import KeyRing, check_proxy, read_keys_file
from mt.text.glossary import Glossary, read_glossary
from mt.text.protect import parse_kinds


def _flag(default: Any, flag: str, help: str, *, shown: bool = True, **option: Any) -> Any:
    """A field `mt serve` sets with `flag`: mt/cli.py builds the Typer option from this metadata
    (`option_type`/`option_default` where the flag's value differs from the field's, see
    `from_flags`). `shown`: whether the field is in the repr."""
    return field(default=default, repr=shown, metadata={"flag": flag, "help": help, **option})


def _decode_flag(knob: str) -> Any:
    """A field `mt serve` shares with `mt translate`: flag, help and option type are
    `DecodeOverrides`' (a request's sentences follow it unless the checkpoint's setting is kept:
    None)."""
    declared = next(f for f in dataclasses.fields(DecodeOverrides) if f.name == knob)
    option = {k: v for k, v in declared.metadata.items() if k == "option_type"}
    return _flag(None, declared.metadata["flag"], declared.metadata["help"], **option)


@dataclass(frozen=True)
class ServeSettings:
    """What `mt serve` allows a client. Sizes are per request unless named otherwise.

    Each field with a flag is one `mt serve` option: its flag, default and help are declared here
    once (the CLI's options are built from them). Beyond the help text:

    max_beam:        None = the checkpoint's decode.search.beam, which is then also the maximum
    max_wait_ms:     in all a batch waits at most batcher.GATHER_CAP x this
    timeout_s:       a request waiting longer than this for its translations gets 503, one whose
                     body has not all arrived after this long 408; a connection whose next request
                     head has not all arrived this long after it opened (or its last answer) is
                     closed
    max_alternatives: LibreTranslate `alternatives` / /v1 n_best - 1 at most, else 400
    max_body_bytes:  request body size at most, else 413 (no flag: `mt serve` allows 8 x --char-limit,
                     at least 1 MiB)
    cache_size:      segments in the translation cache (`mt.serve.cache`: memory about this x (source +
                     n_best x output) characters; not sampling, not empty lines)
    threads:         torch intra-op and CTranslate2 intra_threads. On a shared, oversubscribed CPU,
                     small batches with more threads than free cores stall in thread barriers: 1 is
                     then much faster (see README, Serve).
    """

    host: str = _flag("127.0.0.1", "--host", "Address to bind (loopback unless told otherwise).")
    port: int = _flag(8000, "--port", "TCP port.")
    max_beam: int | None = _flag(
        None, "--beam",
        "Default and largest beam a request may use (default: the checkpoint's decode.search.beam).")
    max_batch_tokens: int | None = _flag(
        None, "--max-batch-tokens",
        "Source tokens x beam per decoding batch (default: decode.resources.max_tokens; 1 = no batching).")
    no_repeat_ngram: int | None = _decode_flag("no_repeat_ngram")
    repetition_penalty: float | None = _decode_flag("repetition_penalty")
    max_wait_ms: float = _flag(
        5.0, "--max-wait-ms", "How long a filling batch waits for the next segment "
                              "(in all at most 10x this).")
    api_keys: KeyRing = _flag(
        KeyRing(), "--api-keys", "File of API keys: one per line ('#' comments), or YAML (keys: - name, "
                                 "key, requests_per_minute, characters_per_day); when given, translate "
                                 "routes need one. SIGHUP re-reads it.",
        shown=False, option_type=Path | None, option_default=None)
    address_requests_per_minute: int | None = _flag(
        None, "--address-requests-per-minute", "Without keys: translate/detect requests a client address "
                                               "may make per minute (else 429).")
    address_characters_per_day: int | None = _flag(
        None, "--address-characters-per-day", "Without keys: characters a client address may send per day "
                                              "(else 429).")
    trusted_proxies: tuple[str, ...] = _flag(
        (), "--trusted-proxy", "A proxy address or network whose X-Forwarded-For names the client "
                               "(repeatable).",
        option_type=list[str], option_default=[])
    cors_origins: tuple[str, ...] = _flag(
        (), "--cors-origin", "Allow browser calls from this origin: https://example.org, "
                             "moz-extension://UUID, chrome-extension://ID, or '*' for any (repeatable).",
        option_type=list[str], option_default=[])
    timeout_s: float = _flag(
        30.0, "--timeout", "Seconds a request may wait for its translations (else 503), and for its own head "
                           "(else the connection closes) and body (else 408) to arrive.")
    drain_s: float = _flag(
        0.0, "--drain-seconds", "After SIGTERM, keep answering this long with /ready 503 (so a load balancer "
                                "stops sending), then finish requests in flight and exit.")
    char_limit: int = _flag(10_000, "--char-limit", "Characters per request at most (else 413).")
    max_segments: int = _flag(256, "--max-segments", "Segments (lines) per request at most (else 413).")
    max_alternatives: int = _flag(
        5, "--max-alternatives", "LibreTranslate alternatives at most (/v1 n_best: this + 1).")
    queue_size: int = _flag(4096, "--queue-size", "Segments waiting for the model at most (else 429).")
    max_connections: int = _flag(
        1000, "--max-connections",
        "Open connections and requests in progress at most; beyond, new requests get 503 at once.")
    cache_size: int = _flag(
        10_000, "--cache-size", "Translated segments kept to answer a repeated one without the model (least "
                                "recently used out first; 0 = no cache).")
    files: bool = _flag(
        True, "--files/--no-files", "POST /translate_file: translate documents, subtitles and localisation "
                                    "files (.txt .html .srt .vtt .docx .odt .pptx .odp .epub .md .po .xlf), "
                                    "as LibreTranslate does.")
    max_file_bytes: int = _flag(
        10 << 20, "--max-file-bytes", "A file to translate may hold this many bytes at most (else 413).")
    device: str = _flag("auto", "--device", "auto | cpu | cuda | cuda:N.")
    threads: int = _flag(
        0, "--threads", "CPU threads for the model (0 = torch's default; 1 is best on a busy, shared CPU).")
    glossaries: tuple[tuple[str, Glossary], ...] = _flag(
        (), "--glossary", "A glossary every request of a language pair keeps (mt translate's TSV): PAIR=FILE "
                          "(en-de=terms.tsv, repeatable), or FILE for a one-pair model; a /v1 request's own "
                          "glossary replaces it.", shown=False, option_type=list[str], option_default=[])
    max_glossary_terms: int = _flag(
        1000, "--max-glossary-terms", "Terms in a /v1 request's glossary at most (else 413).")
    protect: tuple[ProtectKind, ...] | None = _decode_flag("protect")
    case: bool | None = _decode_flag("case")
    ending: bool | None = _decode_flag("ending")
    loop_retry: bool | None = _decode_flag("loop_retry")
    max_body_bytes: int = 1 << 20
    keys_file: Path | None = None  # what --api-keys named: SIGHUP re-reads it

    def decode_overrides(self) -> DecodeOverrides:
        """What the server's flags change in the checkpoint's decode settings
        (`mt.serve.model.server_decode`)."""
        return DecodeOverrides(beam=self.max_beam, max_tokens=self.max_batch_tokens,
                               no_repeat_ngram=self.no_repeat_ngram,
                               repetition_penalty=self.repetition_penalty, protect=self.protect,
                               case=self.case, ending=self.ending, loop_retry=self.loop_retry)

    @classmethod
    def from_flags(cls, *, api_keys: Path | None, cors_origins: Sequence[str],
                   trusted_proxies: Sequence[str] = (), glossaries: Sequence[str] = (),
                   protect: str | None = None, **flags: Any) -> ServeSettings:
        """The settings `mt serve` runs with from its flags' values: --api-keys names a file of keys
        and --glossary glossary files (read here), --cors-origin and --trusted-proxy are repeatable,
        and the body limit follows --char-limit."""
        keys = read_keys_file(api_keys) if api_keys is not None else KeyRing()
        return cls(**flags, api_keys=keys, keys_file=api_keys, cors_origins=tuple(cors_origins),
                   glossaries=parse_glossary_flags(glossaries),
                   trusted_proxies=tuple(trusted_proxies),
                   protect=None if protect is None else parse_kinds(protect),
                   max_body_bytes=max(1 << 20, 8 * flags.get("char_limit", cls.char_limit)))

    def __post_init__(self) -> None:
        positive = (("--port", self.port), ("--char-limit", self.char_limit),
                    ("--max-segments", self.max_segments), ("--max-file-bytes", self.max_file_bytes),
                    ("--max-connections", self.max_connections),
                    ("--queue-size", self.queue_size), ("max_body_bytes", self.max_body_bytes),
                    ("--max-glossary-terms", self.max_glossary_terms))
        for flag, value in positive:
            if value < 1:
                raise MTError(f"{flag}: must be at least 1, got {value}")
        if self.port > 65535:
            raise MTError(f"--port: must be at most 65535, got {self.port}")
        check_overrides(self.decode_overrides(), SERVE_FLAGS)
        if self.max_alternatives < 0:
            raise MTError(f"--max-alternatives: must be 0 or more, got {self.max_alternatives}")
        if self.cache_size < 0:
            raise MTError(f"--cache-size: must be 0 (no cache) or more, got {self.cache_size}")
        if self.threads < 0:
            raise MTError(f"--threads: must be 0 (default) or more, got {self.threads}")
        if not self.max_wait_ms >= 0:
            raise MTError(f"--max-wait-ms: must be 0 or more, got {self.max_wait_ms}")
        if not self.drain_s >= 0:
            raise MTError(f"--drain-seconds: must be 0 or more, got {self.drain_s}")
        if not self.timeout_s > 0:
            raise MTError(f"--timeout: must be positive, got {self.timeout_s}")
        for origin in self.cors_origins:
            check_origin(origin)
        for flag, limit in (("--address-requests-per-minute", self.address_requests_per_minute),
                            ("--address-characters-per-day", self.address_characters_per_day)):
            if limit is not None and limit < 1:
                raise MTError(f"{flag}: must be at least 1, got {limit}")
            if limit is not None and self.api_keys:
                raise MTError(f"{flag}: for a server without --api-keys "
                              f"(give each key its limits in the keys file)")
        for proxy in self.trusted_proxies:
            check_proxy(proxy)

    @property
    def keys_required(self) -> bool:
        return bool(self.api_keys)

    def with_keys(self, keys: KeyRing) -> ServeSettings:
        return dataclasses.replace(self, api_keys=keys)


def check_origin(origin: str) -> None:
    """An MTError unless `origin` is "*" or an origin as a browser sends it: scheme://host[:port] of
    any scheme (a web page's https://, a browser add-on's moz-extension:// or chrome-extension://),
    without a path."""
    if origin == "*":
        return
    parts = urlsplit(origin)
    scheme_ok = parts.scheme[:1].isalpha() and all(c.isalnum() or c in "+-." for c in parts.scheme)
    if (not scheme_ok or not parts.netloc or parts.path or parts.query or parts.fragment
            or any(c.isspace() for c in origin) or not origin.startswith(f"{parts.scheme}://")):
        raise MTError(f"--cors-origin {origin!r}: expected an origin such as https://example.org or "
                      "moz-extension://UUID (scheme://host, no path), or *")


def parse_glossary_flags(values: Sequence[str]) -> tuple[tuple[str, Glossary], ...]:
    """`mt serve --glossary` values, each file read and checked (one-line MTError): (pair, glossary)
    with the pair as given, lower case ("en-de"), or "" for a bare FILE (the server's one pair). A
    value with '=' is PAIR=FILE unless it names an existing file itself."""
    found: list[tuple[str, Glossary]] = []
    for value in values:
        pair, sep, path = value.partition("=")
        if not sep or Path(value).exists():
            pair, path = "", value
        elif "-" not in pair.strip("-") or "/" in pair or not path:
            raise MTError(f"--glossary {value}: expected PAIR=FILE "
                          f"(PAIR as source-target: en-de=terms.tsv) or FILE")
        pair = pair.strip().lower()
        if any(seen == pair for seen, _ in found):
            raise MTError(f"--glossary: two glossaries for {pair or 'the served pair'}; "
                          f"one per language pair")
        found.append((pair, read_glossary(Path(path))))
    return tuple(found)
