"""Translated files waiting to be downloaded (POST /translate_file, GET /download_file/<name>).

Held in memory, not on disk: nothing to clean after a crash, no path a name could escape through.
A file is kept `KEEP_S` (30 minutes, as LibreTranslate removes its translated files), and the
store holds at most `MAX_FILES` files and `MAX_BYTES` bytes, the oldest dropped first. A file's
name is `<32 hex>.<the download name>`: the random part (128 bits, `secrets`) is what makes it
unguessable; the rest, made safe (`safe_name`: letters, digits, `._-`), is what the browser saves
it as, as LibreTranslate's `<uuid>.<name>`.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

KEEP_S = 1800.0
MAX_FILES = 200
MAX_BYTES = 256 << 20
NAME = re.compile(r"^[0-9a-f]{32}\.[A-Za-z0-9][A-Za-z0-9._-]{0,119}$")


@dataclass(frozen=True)
class StoredFile:
    data: bytes
    media_type: str
    download_name: str
    expires: float


def safe_name(name: str) -> str:
    """A file name reduced to letters, digits and `._-` (any folder part dropped), at most 120 characters."""
    base = re.split(r"[\\/]", name)[-1]
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", base).lstrip("._-")
    return (cleaned or "file")[-120:].lstrip("._-") or "file"


class FileStore:
    """Translated files by name, bounded in count, bytes and time (see the module docstring)."""

    def __init__(self, keep_s: float = KEEP_S, max_files: int = MAX_FILES, max_bytes: int = MAX_BYTES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.keep_s, self.max_files, self.max_bytes, self.clock = keep_s, max_files, max_bytes, clock
        self.files: OrderedDict[str, StoredFile] = OrderedDict()
        self.lock = threading.Lock()

    def put(self, data: bytes, media_type: str, download_name: str) -> str:
        """Keep `data`; its name for GET /download_file/<name>."""
        name = f"{secrets.token_hex(16)}.{safe_name(download_name)}"
        with self.lock:
            self._expire()
            self.files[name] = StoredFile(data, media_type, name.split(".", 1)[1], self.clock() + self.keep_s)
            while len(self.files) > 1 and len(self.files) > self.max_files or \
                    len(self.files) > 1 and sum(len(f.data) for f in self.files.values()) > self.max_bytes:
                self.files.popitem(last=False)
        return name

    def get(self, name: str) -> StoredFile | None:
        """The file stored under `name`, None when there is none (never was, expired or dropped)."""
        with self.lock:
            self._expire()
            return self.files.get(name)

    def _expire(self) -> None:
        now = self.clock()
        for name in [name for name, stored in self.files.items() if stored.expires <= now]:
            del self.files[name]
