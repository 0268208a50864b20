"""API keys with names and limits, per-address limits, and the token buckets behind them.

The keys file (`--api-keys FILE`) is either today's plain format (one key per line, '#' comments;
the keys are then named key-1, key-2, ... in file order and unlimited) or, when its first line
that is not blank or a comment is `keys:`, YAML:

    keys:
      - name: weblate          # optional (default key-N); in the access log and metrics, never the key
        key: "s3cret-1"
        requests_per_minute: 60      # optional: unlimited when absent
        characters_per_day: 500000   # optional
      - key: "s3cret-2"
      - name: ops
        key: "s3cret-3"
        admin: true                  # optional: may POST /v1/admin/reload

A server without keys may limit each client address instead (`--address-requests-per-minute`,
`--address-characters-per-day`); behind a proxy, `--trusted-proxy ADDR` (repeatable; an address
or a network) makes the right-most address in X-Forwarded-For that is not a trusted proxy the
client. Limits are token buckets: a bucket of N requests per minute holds N and refills N/60 a
second, one of C characters per day holds C and refills C/86400 a second. A request over a limit
is a 429 naming it, with Retry-After: the seconds until the bucket holds enough.
"""

from __future__ import annotations

import hmac
import ipaddress
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mt.errors import MTError

MINUTE, DAY = 60.0, 86400.0
_FIELDS = ("name", "key", "requests_per_minute", "characters_per_day", "admin")


@dataclass(frozen=True)
class ApiKey:
    """One key: its name (logged, a metrics label), the key itself (never shown) and its limits (None:
    none)."""

    name: str
    key: str
    requests_per_minute: int | None = None
    characters_per_day: int | None = None
    admin: bool = False  # may call the admin routes (POST /v1/admin/reload)

    def __repr__(self) -> str:
        return (f"ApiKey(name={self.name!r}, requests_per_minute={self.requests_per_minute}, "
                f"characters_per_day={self.characters_per_day}, admin={self.admin})")


@dataclass(frozen=True)
class KeyRing:
    """The server's keys (empty: no key needed)."""

    keys: tuple[ApiKey, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.keys)

    def __repr__(self) -> str:
        return f"KeyRing({', '.join(k.name for k in self.keys)})"

    def match(self, given: str) -> ApiKey | None:
        """The key `given` is, or None; constant time: every key is compared, no early exit."""
        found = None
        raw = given.encode("utf-8", "replace")
        for key in self.keys:
            if hmac.compare_digest(raw, key.key.encode("utf-8")):
                found = key
        return found


def read_keys_file(path: Path) -> KeyRing:
    """The keys in `path` (plain or YAML, see the module docstring); a one-line MTError naming the
    file and line otherwise. Errors never show a key."""
    if not path.is_file():
        raise MTError(f"--api-keys {path}: file not found")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise MTError(f"--api-keys {path}: not UTF-8 text") from None
    meaningful = [line for line in text.splitlines() if line.split("#", 1)[0].strip()]
    if meaningful and meaningful[0].split("#", 1)[0].strip() == "keys:":
        return _yaml_keys(path, text)
    return _plain_keys(path, text)


def _plain_keys(path: Path, text: str) -> KeyRing:
    keys: dict[str, ApiKey] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        key = line.split("#", 1)[0].strip()
        if not key:
            continue
        if any(c.isspace() for c in key):
            raise MTError(f"--api-keys {path}: line {number}: a key may not contain spaces")
        keys.setdefault(key, ApiKey(f"key-{len(keys) + 1}", key))
    if not keys:
        raise MTError(f"--api-keys {path}: no keys in the file (one key per line, '#' comments, or YAML: "
                      "see `mt serve --help`)")
    return KeyRing(tuple(keys.values()))


def _yaml_keys(path: Path, text: str) -> KeyRing:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(e, "problem", None) or "not valid YAML"
        raise MTError(f"--api-keys {path}: {where}{problem}") from None
    if (not isinstance(data, dict) or set(data) != {"keys"} or not isinstance(data["keys"], list)
            or not data["keys"]):
        raise MTError(f"--api-keys {path}: line 1: expected `keys:` and a list of entries (name, key, "
                      "requests_per_minute, characters_per_day, admin)")
    entries = next(value for name, value in root.value if name.value == "keys").value
    keys: list[ApiKey] = []
    for index, (entry, node) in enumerate(zip(data["keys"], entries), start=1):
        keys.append(_entry(path, node.start_mark.line + 1, index, entry))
    for what in ("name", "key"):
        seen: set[str] = set()
        for key, node in zip(keys, entries):
            value = getattr(key, what)
            if value in seen:
                shown = f" {value!r}" if what == "name" else ""
                raise MTError(f"--api-keys {path}: line {node.start_mark.line + 1}: "
                              f"{what}{shown} given twice")
            seen.add(value)
    return KeyRing(tuple(keys))


def _entry(path: Path, line: int, index: int, entry: Any) -> ApiKey:
    where = f"--api-keys {path}: line {line}"
    if not isinstance(entry, dict):
        raise MTError(f"{where}: expected an entry with key "
                      "(and name, requests_per_minute, characters_per_day, admin)")
    unknown = sorted(str(k) for k in set(entry) - set(_FIELDS))
    if unknown:
        raise MTError(f"{where}: unknown field {', '.join(unknown)}; an entry takes {', '.join(_FIELDS)}")
    key = entry.get("key")
    if not isinstance(key, str) or not key or any(c.isspace() for c in key):
        raise MTError(f"{where}: key: expected a string without spaces")
    name = entry.get("name", f"key-{index}")
    if not isinstance(name, str) or not name.strip() or any(c.isspace() or c in '"\\' for c in name):
        raise MTError(f"{where}: name: expected a word (no spaces or quotes)")
    limits = []
    for field in ("requests_per_minute", "characters_per_day"):
        value = entry.get(field)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise MTError(f"{where}: {field}: expected a whole number of at least 1, got {value!r}")
        limits.append(value)
    admin = entry.get("admin", False)
    if not isinstance(admin, bool):
        raise MTError(f"{where}: admin: expected true or false, got {admin!r}")
    return ApiKey(name, key, *limits, admin=admin)


class Limited(Exception):
    """Over a limit: which (a message naming it) and the seconds until it allows the request."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.message, self.retry_after = message, retry_after


class Limiter:
    """Token buckets by (who, what), on an injectable clock (seconds, monotonic). Thread-safe.

    Bounded in memory and in the cost of a request, whoever the clients are: at most `max_buckets`
    are held, in least-recently-used order. Each `take` first forgets up to `PRUNE_STEP` of the
    least recently used buckets that are full again (a full bucket is as good as none), then, at the
    bound, the least recently used bucket even if it is not full (that client starts afresh: the price
    of a bound, paid by whoever has been quiet longest). So a request costs O(1), never a scan."""

    MAX_BUCKETS = 100_000  # ~20 MB at most; clients are addresses (IPv6 by /64) or key names
    PRUNE_STEP = 4  # full buckets forgotten per take at most: more than a take adds, so they never pile up

    def __init__(self, clock: Callable[[], float] = time.monotonic, max_buckets: int = MAX_BUCKETS) -> None:
        self.clock = clock
        self.max_buckets = max_buckets
        # (who, what) -> (tokens, at, full again at); least recently used first
        self._buckets: OrderedDict[tuple[str, str], tuple[float, float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, who: str, wants: Iterable[tuple[str, int | None, float, float]]) -> None:
        """Take from each bucket `(what, capacity, per_seconds, amount)` of `who` (capacity None: no
        limit), all or none: `Limited` for the first bucket without enough."""
        with self._lock:
            now, taken = self.clock(), []
            for what, capacity, per, amount in wants:
                if capacity is None:
                    continue
                rate = capacity / per
                tokens, at, _ = self._buckets.get((who, what), (float(capacity), now, now))
                tokens = min(float(capacity), tokens + (now - at) * rate)
                if amount > tokens:
                    wait = (min(amount, capacity) - tokens) / rate
                    raise Limited(_message(who, what, capacity, amount), math.ceil(wait) if amount <= capacity
                                  else math.ceil(per))
                left = tokens - amount
                taken.append(((who, what), left, now + (capacity - left) / rate))
            for bucket, left, full_at in taken:
                self._buckets[bucket] = (left, now, full_at)
                self._buckets.move_to_end(bucket)
            if taken:
                self._prune(now)

    def _prune(self, now: float) -> None:
        """Forget a few full buckets, then the least recently used ones beyond the bound (under the lock)."""
        for _ in range(self.PRUNE_STEP):
            oldest = next(iter(self._buckets.items()), None)
            if oldest is None or oldest[1][2] > now:
                break
            del self._buckets[oldest[0]]
        while len(self._buckets) > self.max_buckets:
            self._buckets.popitem(last=False)


def _message(who: str, what: str, capacity: int, amount: float) -> str:
    if what == "characters_per_day" and amount > capacity:
        return f"{who}: this request's {amount:g} characters exceed the limit of {capacity} characters a day"
    unit = ("request" if capacity == 1 else "requests") + " a minute" if what == "requests_per_minute" \
        else "characters a day"
    return f"{who}: over the limit of {capacity} {unit} ({what})"


def client_address(peer: str | None, forwarded: str | None, trusted: tuple[str, ...]) -> str:
    """The client's address: the peer's, or when the peer is a trusted proxy, the right-most address
    in X-Forwarded-For that is not one (all trusted: the left-most). Untrusted peers' headers are ignored."""
    if peer is None:
        return "unknown"
    if not trusted or not forwarded or not _trusted(peer, trusted):
        return peer
    hops = [hop.strip() for hop in forwarded.split(",") if hop.strip()]
    for hop in reversed(hops):
        if not _trusted(hop, trusted):
            return hop
    return hops[0] if hops else peer


def client_key(address: str) -> str:
    """The rate-limit key of a client address: an IPv6 address by its /64 (one subscriber's
    network: a client given a /64 could otherwise mint a bucket per address), an IPv4-mapped IPv6
    address as the IPv4 one, anything else as given."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return address


def _trusted(address: str, trusted: tuple[str, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in ipaddress.ip_network(net, strict=False) for net in trusted)


def check_proxy(value: str) -> None:
    """An MTError unless `value` is an IP address or network (--trusted-proxy)."""
    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise MTError(f"--trusted-proxy {value!r}: expected an IP address or network "
                      "(10.0.0.1, 10.0.0.0/8)") from None
