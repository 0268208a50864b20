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

Bounded by segments (`--cache-size`, 0 = off), least recently used out first. Memory: at most
`size` entries, each a source line (at most --char-limit characters) and its n_best (at most
--max-alternatives + 1) outputs, so about size x (source + n_best x output) characters: with the
default 10,000 entries and sentences of ~200 characters, a few MB. A lock makes every operation
atomic, though the server only calls it from the event loop.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from mt.serve.batcher import Hyps

Key = tuple[Hashable, ...]


@dataclass(frozen=True)
class Cached:
    """One segment's answer: its hypotheses and whether its line was cut at the model's limit."""

    hyps: Hyps
    cut: bool


class TranslationCache:
    """LRU of `Cached` by key, at most `size` entries (0: stores nothing, every lookup misses).
    `on_count(hits, misses, entries)` is called after each `lookup` (the server's metrics)."""

    def __init__(self, size: int, on_count: Callable[[int, int, int], None] | None = None) -> None:
        if size < 0:
            raise ValueError(f"cache size must be 0 or more, got {size}")
        self.size = size
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
        if key is None or not self.size:
            return
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
            entries = len(self._entries)
        self._on_count(0, 0, entries)
