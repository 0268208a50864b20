"""Fetch the Multi30k corpus (task 1, raw: English, German and French, three-way parallel) and verify it.

Files are downloaded from the multi30k/dataset GitHub repository, or copied from a local mirror
folder (the `mirror` argument, else `$MT_DATA_MIRROR`) on machines without internet. Every file
is checked against a hard-coded SHA256 and line count before it is renamed into place, so `dest`
only ever holds complete, verified files; files already there and verified are left alone.
"""

from __future__ import annotations

import gzip
import logging
import os
import shutil
import tempfile
import urllib.error
import urllib.request
import zlib
from pathlib import Path

from mt.errors import MTError
from mt.textio import sha256_file

log = logging.getLogger(__name__)  # stage reports; the CLI shows them, a server may not

BASE_URL = "https://github.com/multi30k/dataset/raw/master/data/task1/raw/"
LANGS = ("en", "de", "fr")
LINES = {"train": 29000, "val": 1014, "test_2016_flickr": 1000, "test_2017_flickr": 1000,
         "test_2017_mscoco": 461}
SHA256 = {
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2017_flickr.de.gz": "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
    "test_2017_flickr.en.gz": "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
    "test_2017_mscoco.de.gz": "799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338",
    "test_2017_mscoco.en.gz": "aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    "test_2017_flickr.fr.gz": "3ba671ceb2299f3304ffafefea7a833d08632fbaf0ba18546f8a2ec2391af496",
    "test_2017_mscoco.fr.gz": "754f3072ba9f124569ba5258b32730fc1d214bbf8e0c6dfb2b74401676220db0",
    "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
}
_TIMEOUT_S = 60


def multi30k_files() -> list[tuple[str, int]]:
    """(file name, expected line count) of every Multi30k file, e.g. ('train.en.gz', 29000)."""
    return [(f"{split}.{lang}.gz", n) for split, n in LINES.items() for lang in LANGS]


def _count_lines(path: Path) -> int:
    try:
        with gzip.open(path, "rb") as f:
            return sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 20), b""))
    except (OSError, EOFError, zlib.error) as e:
        raise MTError(f"{path}: not a readable gzip file ({e})") from None


def _check(path: Path, name: str, lines: int, origin: str) -> None:
    """Raise MTError unless `path` (a fetched copy of `name` from `origin`) has the known checksum and
    line count."""
    digest = sha256_file(path)
    if digest != SHA256[name]:
        raise MTError(f"{origin}: SHA256 mismatch for {name} "
                      f"(expected {SHA256[name][:16]}..., got {digest[:16]}...); "
                      "the file is corrupt or not the Multi30k release")
    n = _count_lines(path)
    if n != lines:
        raise MTError(f"{origin}: {name} has {n} lines, expected {lines}")


def _is_verified(path: Path, name: str, lines: int) -> bool:
    if not path.is_file():
        return False
    try:
        _check(path, name, lines, str(path))
    except MTError:
        return False
    return True


def _download(url: str, out: Path) -> None:
    try:
        with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as response, out.open("wb") as f:
            shutil.copyfileobj(response, f, 1 << 20)
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        reason = getattr(e, "reason", e)
        raise MTError(f"{url}: download failed ({reason}); offline? set MT_DATA_MIRROR or pass --mirror "
                      "to a folder holding the Multi30k .gz files") from None


def fetch_multi30k(dest: Path, mirror: Path | None) -> None:
    """Store the 10 Multi30k `{split}.{lang}.gz` files in `dest`, verified by SHA256 and line count.

    `mirror` (else `$MT_DATA_MIRROR`, when set and non-empty) is a local folder to copy from;
    without one the files are downloaded. Files already in `dest` that verify are not fetched again.
    """
    dest = Path(dest)
    if mirror is None and os.environ.get("MT_DATA_MIRROR", "").strip():
        mirror = Path(os.environ["MT_DATA_MIRROR"].strip())
    if mirror is not None and not Path(mirror).is_dir():
        raise MTError(f"mirror folder '{mirror}' does not exist")
    dest.mkdir(parents=True, exist_ok=True)
    for name, lines in multi30k_files():
        target = dest / name
        if _is_verified(target, name, lines):
            log.info(f"  {name}: present, verified")
            continue
        fd, tmp_name = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=dest)
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            if mirror is not None:
                origin = str(Path(mirror) / name)
                if not Path(origin).is_file():
                    raise MTError(f"mirror file '{origin}' does not exist")
                shutil.copyfile(origin, tmp)
            else:
                origin = BASE_URL + name
                _download(origin, tmp)
            _check(tmp, name, lines, origin)
            tmp.replace(target)  # atomic: dest never holds a half-written or unverified file
        finally:
            tmp.unlink(missing_ok=True)
        source = "copied from " + str(mirror) if mirror else "downloaded"
        log.info(f"  {name}: {lines} lines, sha256 ok ({source})")
    log.info(f"multi30k: {len(LINES) * len(LANGS)} files verified in {dest}")
