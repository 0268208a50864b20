"""Shared fixtures: the Multi30k mirror, a fetched copy, the tiny config and a prepared tiny run.

`tiny_run` is session-scoped and shared: treat its run directory as read-only (copy it, or use
`tiny_config` for a fresh run directory, when a test writes there).
"""

from __future__ import annotations

import importlib
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from mt.config import Config
from mt.config_load import load_config

REPO = Path(__file__).resolve().parents[1]
TINY_YAML = REPO / "configs" / "tiny.yaml"


@pytest.fixture(scope="module")
def random_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random-weight checkpoint (mt/deploy/tiny.py): no corpus needed."""
    from mt.deploy.tiny import write_random_checkpoint
    return write_random_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny.pt")


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models run fastest on one thread; extra threads only contend on a busy CI machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def train_stopped_at(cfg: Config, update: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Train `cfg` and send SIGTERM while update `update` runs: it completes, last.pt is written
    and training stops there (the first half of every exact-resume test)."""
    import signal

    import mt.train.loop
    from mt.model.checkpoint import load_checkpoint

    real_progress = mt.train.loop.training_progress

    def progress_then_sigterm(step: int, elapsed: float, **limits: int | float) -> float:
        if step == update - 1:
            os.kill(os.getpid(), signal.SIGTERM)
        return real_progress(step, elapsed, **limits)

    with monkeypatch.context() as patch:
        patch.setattr(mt.train.loop, "training_progress", progress_then_sigterm)
        mt.train.loop.train(cfg)
    assert load_checkpoint(cfg.run_dir / "checkpoints" / "last.pt")["update"] == update


OFFLINE_ENV = "MT_TESTS_OFFLINE"


def offline_subset() -> bool:
    """True when the user asked for the tests that need no Multi30k data (MT_TESTS_OFFLINE=1)."""
    return os.environ.get(OFFLINE_ENV, "").strip() not in ("", "0")


# --------------------------------------------------------------------------- what the suite needs
#
# `make test` installs everything the project declares (pyproject.toml's dev extra: ctranslate2,
# fastapi, uvicorn, httpx, selenium, ...; chromium through `make browser-deps`), so a test whose
# requirement is missing FAILS: a skip there would hide a broken install behind a green run. Only
# the offline subset (MT_TESTS_OFFLINE=1, `make test-offline`) may skip it, as it skips data tests.
# Tests say what they need with `require(NAME)` (in a test or fixture: returns the module) or the
# marker `@pytest.mark.requires(NAME, ...)` (also as a module's `pytestmark`; checked before any
# fixture runs), never with `pytest.importorskip`. NAME is a Python module, or one of NEEDS.


def _cxx_compiler() -> bool:
    names = [os.environ.get("CXX", ""), "g++", "c++", "clang++"]  # what torch.compile's C++ builder looks for
    return any(name and shutil.which(name) for name in names)


def _onednn_linear() -> bool:
    from mt.device import onednn_linear_available

    return onednn_linear_available()


NEEDS: dict[str, tuple[Callable[[], bool], str]] = {
    "java": (lambda: shutil.which("java") is not None, "W3C's EPUBCheck (tests/test_documents_slides.py) runs on "
                                                        "Java: install a JRE (Debian: apt-get install "
                                                        "default-jre-headless; `make browser-deps` does)"),
    "msgfmt": (lambda: shutil.which("msgfmt") is not None, "gettext's msgfmt checks translated .po files: "
                                                              "install gettext (Debian: apt-get install gettext; "
                                                              "`make browser-deps` does)"),
    "c++ compiler": (_cxx_compiler, "torch.compile on CPU builds its kernels with a C++ compiler: install g++ "
                                    "(Debian: apt-get install g++) or point $CXX at one"),
    "onednn packed linear": (_onednn_linear, "this torch build has no torch.ops.mkldnn._reorder_linear_weight / "
                                             "_linear_pointwise (mt.device.onednn_linear_available): install the "
                                             "torch the Makefile pins (TORCH_SPEC)"),
}


def require(name: str) -> ModuleType | None:
    """The module `name` imported (None for a NEEDS entry that is there); when it is missing the
    calling test FAILS with what to install, or is skipped when MT_TESTS_OFFLINE=1 asked for the
    offline subset."""
    if name in NEEDS:
        check, fix = NEEDS[name]
        if check():
            return None
        problem = f"{name} missing: {fix}"
    else:
        try:
            return importlib.import_module(name)
        except ImportError as e:
            problem = (f"Python module {name!r} missing ({e}): pyproject.toml declares it; install the extras "
                       f"with `make install-dev` (pip install -e '.[dev]')")
    if offline_subset():
        pytest.skip(f"{problem} ({OFFLINE_ENV}=1: offline subset)")
    pytest.fail(f"{problem}. `make test` installs everything the project declares, so this is a broken "
                f"install, not a reason to skip (only {OFFLINE_ENV}=1 / `make test-offline` skips it)", pytrace=False)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "requires(*names): the test needs these modules or NEEDS entries "
                                       "(tests/conftest.py `require`): missing ones fail it, or skip it offline")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """The `requires` marker: checked before the test's fixtures are set up (a missing module fails fast)."""
    for mark in item.iter_markers("requires"):
        for name in mark.args:
            require(name)


def find_multi30k() -> Path | None:
    """A folder holding Multi30k's train.en.gz: $MT_DATA_MIRROR, ../shared/data/multi30k, or the
    repo's data/multi30k (what `make data` fetches); None when there is none."""
    env = os.environ.get("MT_DATA_MIRROR", "").strip()
    candidates = [Path(env)] if env else [REPO.parent / "shared" / "data" / "multi30k", REPO / "data" / "multi30k"]
    for path in candidates:
        if (path / "train.en.gz").is_file():
            return path
    return None


@pytest.fixture(scope="session")
def mirror_dir() -> Path:
    """The local Multi30k copy (see `find_multi30k`).

    Without one a data test FAILS (a suite that skipped most of itself must not look green),
    unless the offline subset was asked for explicitly: MT_TESTS_OFFLINE=1 (`make test-offline`).
    """
    path = find_multi30k()
    if path is None:
        where = os.environ.get("MT_DATA_MIRROR", "").strip() or "../shared/data/multi30k or data/multi30k"
        if offline_subset():
            pytest.skip(f"Multi30k not found at {where} ({OFFLINE_ENV}=1: offline subset)")
        pytest.fail(f"Multi30k not found at {where}: run `make data` (downloads it, or set MT_DATA_MIRROR to a "
                    f"local copy), or run only the offline subset with {OFFLINE_ENV}=1 / `make test-offline`",
                    pytrace=False)
    return path


@pytest.fixture(scope="session")
def multi30k_dir(mirror_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the 15 verified Multi30k `{split}.{lang}.gz` files, fetched from the mirror."""
    from mt.data.fetch import fetch_multi30k

    dest = tmp_path_factory.mktemp("multi30k")
    fetch_multi30k(dest, mirror_dir)
    return dest


def tiny_config_at(data_dir: Path, run_root: Path, overrides: list[str] | None = None) -> Config:
    """configs/tiny.yaml reading `data_dir` and writing under `run_root` (plus `--set` style overrides)."""
    return load_config(TINY_YAML, [f"data.path={data_dir}", f"run_root={run_root}", *(overrides or [])])


@pytest.fixture
def tiny_config(multi30k_dir: Path, tmp_path: Path) -> Config:
    """configs/tiny.yaml with data.path = the fetched Multi30k and run_root = a fresh tmp dir (not prepared)."""
    return tiny_config_at(multi30k_dir, tmp_path / "runs")


@pytest.fixture(scope="session")
def tiny_base(tiny_run: Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny en->de model trained for 6 updates from seed 7 (validated, so best.pt exists): the
    checkpoint fine-tuning tests (`train.init_from`) start from. Read-only, shared."""
    from test_train import copy_run

    from mt.train.loop import train

    cfg = copy_run(tiny_run, tmp_path_factory.mktemp("base"), max_updates=6, valid_every=0, valid_bleu=False,
                   keep_checkpoints=0, log_every=1000, threads=1, seed=7, warmup=2)  # another seed than the runs'
    train(cfg)
    return cfg.run_dir / "checkpoints" / "best.pt"


@pytest.fixture(scope="session")
def tiny_run(multi30k_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Config:
    """The tiny config, already prepared: `load_split(cfg.run_dir, 'train')` works. Read-only, shared."""
    from mt.data.prepare import prepare

    cfg = tiny_config_at(multi30k_dir, tmp_path_factory.mktemp("tiny_runs"))
    prepare(cfg)
    return cfg


@pytest.fixture
def reports(caplog: pytest.LogCaptureFixture) -> Callable[[], str]:
    """The stage reports (INFO messages of the "mt" loggers) logged since the last call, as text."""
    caplog.set_level(logging.INFO, logger="mt")

    def read() -> str:
        text = "\n".join(record.getMessage() for record in caplog.records if record.name.startswith("mt"))
        caplog.clear()
        return text

    return read


@pytest.fixture(scope="session")
def multi_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(config path, run dir) of a tiny en->{de,ru} multi-pair model, trained once per session
    (test_multipair.py and test_serve_pairs.py share it)."""
    from test_multipair import train_multi_run

    return train_multi_run(tmp_path_factory.mktemp("multi"))
