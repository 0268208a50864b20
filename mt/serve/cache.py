"""The translation cache: a bounded LRU of segments already translated, so a client that asks for
the same text again (Mastodon asks for the same posts again and again) is answered without the model.

A key is everything that makes a segment's output what it is: the model id (its weights' sha256),
the `DecodeConfig` the batcher decodes with, n_best, the target tokenizer's prefix (a multi-pair
model's target tag) and the segment (one line, as the client sent it). A value is the segment's
hypotheses and whether the line was cut at the model's limit, so a request answered from the cache
carries the same warning as one answered by the model: its response is byte-identical.

Not cached: sampling (the batcher seeds each segment by its index inside its request, so the same
text at another index draws another sample; keying by index too would make hits rare), and empty
lines (answered without the model anyway).

Bounded by segments (`--cache-size`, 0 = off) and by characters (`CHARS_PER_ENTRY` x size: sources
and outputs together), least recently used out first. Without the character bound a client sending
unique lines at --char-limit would have filled 10,000 entries with 10,000-character lines and their
outputs (hundreds of MB); with it the default cache holds at most 10 M characters (~10-40 MB), and
entries are evicted when either bound is reached. A lock makes every operation
atomic, though the server only calls it from the event loop.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from mt.serve.batchjob import Hyps

Key = tuple[Hashable, ...]


@dataclass(frozen=True)
class Cached:
    """One segment's answer: its hypotheses, whether its line was cut at the model's limit, and its
    confidence (`mt.decode.confidence`; NaN when the engine had no score)."""

    hyps: Hyps
    cut: bool
    confidence: float = math.nan


CHARS_PER_ENTRY = 1000  # the character budget per entry on average (sources and outputs)


def _chars(key: Key, value: Cached) -> int:
    return len(str(key[-1])) + sum(len(text) for text, _ in value.hyps)  # the key's last item is the line


class TranslationCache:
    """LRU of `Cached` by key, at most `size` entries and `max_chars` characters (default
    `CHARS_PER_ENTRY` x size; 0 entries: stores nothing, every lookup misses). `on_count(hits,
    misses, entries)` is called after each `lookup` (the server's metrics)."""

    def __init__(self, size: int, on_count: Callable[[int, int, int], None] | None = None,
                 max_chars: int | None = None) -> None:
        if size < 0:
            raise ValueError(f"cache size must be 0 or more, got {size}")
        self.size = size
        self.max_chars = CHARS_PER_ENTRY * size if max_chars is None else max_chars
        self.chars = 0
        self.hits = 0
        self.misses = 0
        self._on_count = on_count or (lambda hits, misses, entries: None)
        self._entries: OrderedDict[Key, Cached] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, keys: list[Key | None]) -> list[Cached | None]:
        """Each key's entry (now the most recently used), or None for a miss; a None key (a segment
        that is not cached: empty, or sampled) is neither a hit nor a miss."""
        with self._lock:
            found = []
            for key in keys:
                entry = self._entries.get(key) if key is not None else None
                if entry is not None:
                    self._entries.move_to_end(key)
                found.append(entry)
            hits = sum(entry is not None for entry in found)
            misses = sum(key is not None for key in keys) - hits
            self.hits += hits
            self.misses += misses
            entries = len(self._entries)
        self._on_count(hits, misses, entries)
        return found

    def store(self, key: Key | None, value: Cached) -> None:
        """Keep `value` under `key` (None: not cached), dropping the least recently used beyond `size`."""
        if key is None or not self.size or _chars(key, value) > self.max_chars:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            self.chars -= _chars(key, old) if old is not None else 0
            self._entries[key] = value
            self.chars += _chars(key, value)
            while len(self._entries) > self.size or self.chars > self.max_chars:
                gone_key, gone = self._entries.popitem(last=False)
                self.chars -= _chars(gone_key, gone)
            entries = len(self._entries)
        self._on_count(0, 0, entries)
