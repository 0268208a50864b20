"""mt.data.fetch: mirror copy, checksum/line checks, idempotence, offline errors, the download path."""

from __future__ import annotations

import hashlib
import io
import shutil
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from mt.data.fetch import BASE_URL, SHA256, fetch_multi30k, multi30k_files
from mt.errors import MTError


def test_mirror_fetch_is_complete_and_idempotent(multi30k_dir: Path, mirror_dir: Path, tmp_path: Path,
                                                 reports: Callable[[], str]) -> None:
    names = sorted(p.name for p in multi30k_dir.iterdir())
    assert names == sorted(name for name, _ in multi30k_files()) and len(names) == 15
    sums = dict(line.split()[::-1] for line in (mirror_dir / "SHA256SUMS").read_text().splitlines() if line.strip())
    assert sums == SHA256  # the hard-coded checksums are the mirror's
    for name in names:
        assert hashlib.sha256((multi30k_dir / name).read_bytes()).hexdigest() == SHA256[name]
    dest = tmp_path / "m"
    shutil.copytree(multi30k_dir, dest, copy_function=shutil.copy2)
    before = {p.name: p.stat().st_mtime_ns for p in dest.iterdir()}
    fetch_multi30k(dest, mirror_dir)
    assert reports().count("present, verified") == 15
    assert {p.name: p.stat().st_mtime_ns for p in dest.iterdir()} == before


def test_env_mirror_and_repair_of_a_corrupt_file(mirror_dir: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    dest = tmp_path / "m"
    dest.mkdir()
    (dest / "val.en.gz").write_bytes(b"half a download")
    monkeypatch.setenv("MT_DATA_MIRROR", str(mirror_dir))
    fetch_multi30k(dest, None)
    assert hashlib.sha256((dest / "val.en.gz").read_bytes()).hexdigest() == SHA256["val.en.gz"]


def test_corrupt_mirror_copy_is_rejected(mirror_dir: Path, tmp_path: Path) -> None:
    bad_mirror = tmp_path / "mirror"
    shutil.copytree(mirror_dir, bad_mirror)
    data = bytearray((bad_mirror / "val.de.gz").read_bytes())
    data[100] ^= 0xFF
    (bad_mirror / "val.de.gz").write_bytes(bytes(data))
    dest = tmp_path / "m"
    with pytest.raises(MTError) as e:
        fetch_multi30k(dest, bad_mirror)
    msg = str(e.value)
    assert msg.startswith(f"{bad_mirror / 'val.de.gz'}: SHA256 mismatch for val.de.gz (expected f0cba2f995189cf5")
    assert "\n" not in msg
    assert not (dest / "val.de.gz").exists()  # never renamed into place
    assert not list(dest.glob("*.part"))
    assert (dest / "train.en.gz").is_file()  # files verified before the bad one are kept


def test_missing_mirror(tmp_path: Path) -> None:
    with pytest.raises(MTError, match="mirror folder '.*nowhere' does not exist"):
        fetch_multi30k(tmp_path / "m", tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(MTError, match=r"mirror file '.*empty/train\.en\.gz' does not exist"):
        fetch_multi30k(tmp_path / "m", tmp_path / "empty")


def test_offline_without_mirror_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MT_DATA_MIRROR", raising=False)

    def no_network(url, timeout=None):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    with pytest.raises(MTError) as e:
        fetch_multi30k(tmp_path / "m", None)
    msg = str(e.value)
    assert msg.startswith(f"{BASE_URL}train.en.gz: download failed")
    assert "set MT_DATA_MIRROR or pass --mirror" in msg
    assert not list((tmp_path / "m").iterdir())


def test_download_path(mirror_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MT_DATA_MIRROR", raising=False)
    urls = []

    def fake_urlopen(url, timeout=None):
        urls.append(url)
        return io.BytesIO((mirror_dir / url.rsplit("/", 1)[1]).read_bytes())

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    fetch_multi30k(tmp_path / "m", None)
    assert urls[0] == "https://github.com/multi30k/dataset/raw/master/data/task1/raw/train.en.gz" and len(urls) == 15
    assert len(list((tmp_path / "m").iterdir())) == 15
