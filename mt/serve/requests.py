"""Reading and checking request bodies: JSON or form data in, plain values or an `ApiError` out.

Every problem is an `ApiError(status, one-line message)` that the app renders as
`{"error": message}`: 400 for missing, empty or ill-typed fields and text that is not valid
UTF-8 (the message names the byte, as `mt translate` does for a file) and for more than
--char-limit characters (LibreTranslate's status and words), 413 for a body or a request over
the server's other limits, 403 for keys.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl

from mt.config import DecodeConfig
from mt.decode.overrides import REQUEST_FIELDS, DecodeOverrides, apply_overrides
from mt.errors import MTError
from mt.serve.limits import ApiKey
from mt.serve.settings import ServeSettings


class ApiError(Exception):
    """A request the server refuses: HTTP `status` and a one-line `message` (plus headers, e.g.
    Retry-After)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def _utf8(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ApiError(400, f"{what}: invalid UTF-8 ({e.reason} at byte {e.start})") from None


def parse_fields(raw: bytes, content_type: str, max_fields: int = 1000) -> dict[str, Any]:
    """The request's fields: a JSON object, or urlencoded form data (a repeated field becomes a list;
    more than `max_fields` fields is a 413 before they are split). Multipart bodies are read by the
    caller (Starlette's form parser) and not passed here."""
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind in ("application/x-www-form-urlencoded",):
        text = _utf8(raw, "body")
        if text.count("&") + text.count(";") >= max_fields:  # parse_qsl's own count, before any work
            raise ApiError(413, f"body: more than {max_fields} form fields")
        try:
            pairs = parse_qsl(text, keep_blank_values=True, encoding="utf-8", errors="strict")
        except UnicodeDecodeError as e:
            raise ApiError(400, f"body: invalid UTF-8 in a form field ({e.reason})") from None
        return form_fields(pairs)
    if kind not in ("application/json", "", "text/plain"):
        raise ApiError(400, f"Content-Type {kind!r}: expected application/json or form data")
    if not raw.strip():
        raise ApiError(400, "body: empty; expected a JSON object")
    try:
        data = json.loads(_utf8(raw, "body"))
    except json.JSONDecodeError as e:
        raise ApiError(400, f"body: invalid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    # json recurses per nesting level: "[[[[...]]]]" within the size limit exhausts the stack
    except RecursionError:
        raise ApiError(400, "body: invalid JSON (nested too deeply)") from None
    except ValueError as e:  # an integer of more than 4,300 digits: int()'s limit (no JSONDecodeError)
        raise ApiError(400, f"body: invalid JSON ({str(e).split(':', 1)[0]})") from None
    if not isinstance(data, dict):
        raise ApiError(400, f"body: expected a JSON object, got {type(data).__name__}")
    return data


def form_fields(pairs: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """Form data's (name, value) pairs as fields, a repeated name as a list of its values (how a
    form sends `q` as a list). A value that is not text (a multipart file upload) is a 400."""
    fields: dict[str, Any] = {}
    for key, value in pairs:
        if not isinstance(value, str):
            raise ApiError(400, f"{key}: expected a text field, got a file upload")
        if isinstance(fields.get(key), list):
            fields[key].append(value)  # in place: a copy per value made n repeats cost n squared
        else:
            fields[key] = [fields[key], value] if key in fields else value
    return fields


def check_text(value: str, what: str) -> str:
    """`value` if it can be written as UTF-8 (JSON may carry lone surrogates such as \\ud800)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ApiError(400, f"{what}: invalid UTF-8 ({e.reason} at character {e.start})") from None
    return value


def get_str(fields: dict[str, Any], name: str, *, required: bool = True, default: str = "") -> str:
    value = fields.get(name)
    if value is None:
        if required:
            raise ApiError(400, f"{name}: missing")
        return default
    if not isinstance(value, str):
        raise ApiError(400, f"{name}: expected a string, got {type(value).__name__}")
    if required and not value.strip():
        raise ApiError(400, f"{name}: empty")
    return check_text(value, name)


def get_int(
    fields: dict[str, Any], name: str, *, low: int | None = None, high: int | None = None
) -> int | None:
    """An optional integer field in [low, high] (a form sends it as text; None: no bound)."""
    value = fields.get(name)
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ApiError(400, f"{name}: expected an integer, got {fields[name]!r}") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"{name}: expected an integer, got {type(value).__name__}")
    if low is not None and value < low:
        raise ApiError(400, f"{name}: must be at least {low}, got {value}")
    if high is not None and value > high:
        raise ApiError(400, f"{name}: at most {high} on this server, got {value}")
    return value


def get_float(fields: dict[str, Any], name: str) -> float | None:
    value = fields.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ApiError(400, f"{name}: expected a finite number, got {value!r}")
    return float(value)


def get_texts(fields: dict[str, Any], name: str) -> tuple[list[str], bool]:
    """(texts, was_a_list): a string or a non-empty list of strings."""
    value = fields.get(name)
    if value is None:
        raise ApiError(400, f"{name}: missing")
    if isinstance(value, str):
        if not value.strip():
            raise ApiError(400, f"{name}: empty")
        return [check_text(value, name)], False
    if not isinstance(value, list) or not value:
        raise ApiError(400, f"{name}: expected a string or a non-empty list of strings")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise ApiError(400, f"{name}[{i}]: expected a string, got {type(item).__name__}")
        check_text(item, f"{name}[{i}]")
    return list(value), True


def get_segments(fields: dict[str, Any]) -> list[str]:
    """/v1's `segments`: a non-empty list of strings (an empty string comes back empty)."""
    value = fields.get("segments")
    if value is not None and (not isinstance(value, list) or not value):
        raise ApiError(400, "segments: expected a non-empty list of strings")
    return get_texts(fields, "segments")[0]


def get_bool(fields: dict[str, Any], name: str, default: bool) -> bool:
    """A JSON true/false field (400 otherwise), `default` when absent."""
    value = fields.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ApiError(400, f"{name}: expected true or false, got {value!r}")
    return value


def check_known(fields: dict[str, Any], schema: dict[str, Any], route: str) -> None:
    """A 400 naming the fields `schema` does not have: a misspelt option ("n_bets") must not be
    silently ignored. (LibreTranslate's /translate ignores unknown fields, so only /v1 checks.)"""
    unknown = sorted(set(fields) - set(schema["properties"]))
    if unknown:
        plural = "s" if len(unknown) > 1 else ""
        raise ApiError(400, f"{', '.join(unknown)}: unknown field{plural} for {route}; "
                            f"it takes {', '.join(sorted(schema['properties']))}")


def check_request(texts: list[str], settings: ServeSettings) -> None:
    """Before anything parses, detects or queues the texts: 413 for more texts than --max-segments
    (every text is one segment at least), then --char-limit (`check_chars`): the work a request may
    cause is bounded by these limits, not by the body size."""
    if len(texts) > settings.max_segments:
        raise ApiError(413, f"request: {len(texts)} segments (texts), the limit is {settings.max_segments} "
                            f"(--max-segments)")
    check_chars(texts, settings)


def check_chars(texts: list[str], settings: ServeSettings) -> None:
    """--char-limit, before any work on the texts: a 400 worded as LibreTranslate's (`abort(400,
    "Invalid request: request (N) exceeds text limit (M)")`, N the code points of all texts, markup
    included), so its clients show the message they know."""
    chars = sum(len(t) for t in texts)
    if chars > settings.char_limit:
        raise ApiError(400, f"Invalid request: request ({chars}) exceeds text limit ({settings.char_limit})")


def check_size(texts: list[str], settings: ServeSettings) -> list[list[str]]:
    """Each text's lines (split on '\\n'), after the character (400, `check_chars`) and segment
    (413) limits."""
    check_chars(texts, settings)
    lines = [t.split("\n") for t in texts]
    count = sum(len(x) for x in lines)
    if count > settings.max_segments:
        raise ApiError(413, f"request: {count} segments (lines), the limit is {settings.max_segments}")
    return lines


def check_key(given: str | None, settings: ServeSettings) -> ApiKey | None:
    """403 unless keys are off (None) or `given` is one of them (that key; constant-time, the key is
    never echoed)."""
    if not settings.keys_required:
        return None
    if not given:
        raise ApiError(403, "api_key: missing; this server needs a key (api_key field or X-API-Key header)")
    found = settings.api_keys.match(given)
    if found is None:
        raise ApiError(403, "api_key: not valid")
    return found


def v1_decode(fields: dict[str, Any], base: DecodeConfig, settings: ServeSettings,
              max_beam: int, *, samples: bool) -> tuple[DecodeConfig, int | None]:
    """(decode settings, n_best or None) for a /v1 request: its fields applied to the server's
    default `base` by `mt translate`'s rules and messages (`apply_overrides`), within the server's
    bounds (beam at most `max_beam`, n_best at most max_alternatives + 1); `samples`: whether the
    model can sample (an exported CTranslate2 model cannot: 400)."""
    sampling = fields.get("sampling")
    if sampling is not None and not isinstance(sampling, bool):
        raise ApiError(400, f"sampling: expected true or false, got {sampling!r}")
    overrides = DecodeOverrides(
        beam=get_int(fields, "beam", high=max_beam),
        n_best=get_int(fields, "n_best", high=settings.max_alternatives + 1),
        alpha=get_float(fields, "alpha"), sampling=sampling, seed=get_int(fields, "seed"),
        top_k=get_int(fields, "top_k"), temperature=get_float(fields, "temperature"),
        top_p=get_float(fields, "top_p"))
    if not samples and (sampling or sampling is None and base.search.sampling):
        raise ApiError(400, "sampling: this server runs an `mt export` (CTranslate2) model, which searches "
                            "(greedy/beam) only; serve the .pt checkpoint to sample")
    try:
        return apply_overrides(base, overrides, REQUEST_FIELDS), overrides.n_best
    except MTError as e:
        raise ApiError(400, str(e)) from None


# Request bodies as /docs shows them (the routes read bodies themselves: JSON or form data, with
# the errors above instead of FastAPI's 422 format).
_TEXTS = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
LT_SCHEMA = {"type": "object", "required": ["q", "source", "target"], "properties": {
    "q": _TEXTS, "source": {"type": "string", "example": "en"}, "target": {"type": "string", "example": "de"},
    "format": {"type": "string", "enum": ["text", "html"]}, "alternatives": {"type": "integer", "minimum": 0},
    "api_key": {"type": "string"}}}
V1_SCHEMA = {"type": "object", "required": ["segments"], "properties": {
    "segments": {"type": "array", "items": {"type": "string"}}, "beam": {"type": "integer", "minimum": 1},
    "alpha": {"type": "number"}, "n_best": {"type": "integer", "minimum": 1}, "sampling": {"type": "boolean"},
    "seed": {"type": "integer"}, "temperature": {"type": "number"}, "top_k": {"type": "integer"},
    "top_p": {"type": "number"}, "source": {"type": "string"}, "target": {"type": "string"},
    "segment": {"type": "boolean", "default": True,
                "description": "split each segment's lines into sentences "
                               "(false: each line is one sentence)"},
    "glossary": {"type": "array",
                 "description": "terms to keep, replacing the server's glossary for the pair "
                                "([]: none); target left out = keep the source term as it is",
                 "items": {"type": "object", "required": ["source"], "additionalProperties": False,
                           "properties": {"source": {"type": "string"}, "target": {"type": "string"}}}},
    "api_key": {"type": "string"}},
    "additionalProperties": False}  # check_known: an unknown field is a 400


COMPLETE_SCHEMA = {"type": "object", "required": ["q"], "properties": {
    "q": {"type": "string", "description": "the source text", "example": "A man rides a bike."},
    "prefix": {"type": "string", "default": "",
               "description": "what the translator has typed of the translation so far: the answer starts "
                              "with it exactly as typed, a word cut short completed by string ('': the "
                              "plain translation)", "example": "Ein Mann f"},
    "alternatives": {"type": "integer", "minimum": 0, "default": 0,
                     "description": "how many words to offer for the position after the prefix, each "
                                    "continued to a whole translation (at most --max-alternatives)"},
    "beam": {"type": "integer", "minimum": 1,
             "description": "the search's beam (default: the server's; 1, greedy, answers a keystroke "
                            "fastest)"},
    "source": {"type": "string"}, "target": {"type": "string"}, "api_key": {"type": "string"}},
    "additionalProperties": False}
COMPLETE_ANSWER = {"type": "object", "properties": {
    "translation": {"type": "string"}, "confidence": {"type": "number", "nullable": True},
    "alternatives": {"type": "array", "items": {"type": "object", "properties": {
        "text": {"type": "string"}, "probability": {"type": "number"}}}}}}


def get_prefix(fields: dict[str, Any]) -> str:
    """/v1/complete's `prefix`: a string, kept exactly as typed (spaces too; absent: '')."""
    value = fields.get("prefix", "")
    if not isinstance(value, str):
        raise ApiError(400, f"prefix: expected a string, got {type(value).__name__}")
    if "\n" in value or "\r" in value:
        raise ApiError(400, "prefix: one line of the translation is continued; it holds a line break")
    return check_text(value, "prefix")


def body_doc(schema: dict[str, Any], form: bool, answer: dict[str, Any] | None = None) -> dict[str, Any]:
    """`openapi_extra` for a route whose body is `schema` as JSON (and form data when `form`), and
    whose 200 answer is `answer` (when given)."""
    content = {"application/json": {"schema": schema}}
    if form:
        content["application/x-www-form-urlencoded"] = {"schema": schema}
    doc: dict[str, Any] = {"requestBody": {"required": True, "content": content}}
    if answer is not None:
        doc["responses"] = {"200": {"description": "Successful Response",
                                    "content": {"application/json": {"schema": answer}}}}
    return doc
