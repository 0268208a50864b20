"""Start-up, reload and shutdown of one server's models (`mt.serve.state.ServeState`), in every
order they can meet in: whatever the order, every set of models built is either served or closed
(issue 45, item 3: a SIGHUP in the first seconds used to load a second set beside the start-up
one, and whichever finished last won: the other's worker processes and batcher threads leaked).
The orchestration is tested here with fleets that count their closes; tests/test_serve_hostile.py
sends real SIGHUPs to a real server at start-up and counts its worker processes."""

from __future__ import annotations

import threading

import pytest

from mt.errors import MTError
from mt.serve.metrics import Metrics
from mt.serve.settings import ServeSettings
from mt.serve.state import ReloadBusy, ServeState

pytestmark = pytest.mark.requires("fastapi", "prometheus_client", "py3langid")


class CountedFleet:
    """What ServeState needs of a Fleet: models, close, retire; and whether it was closed."""

    def __init__(self, name: str) -> None:
        self.name, self.models, self.closed = name, (), False

    def close(self) -> None:
        self.closed = True

    def retire(self, grace_s: float) -> None:
        self.close()


def _state(builds: list[CountedFleet], hold_first: threading.Event | None = None) -> ServeState:
    state = ServeState(ServeSettings(), (), Metrics(), b"")

    def build() -> CountedFleet:
        fleet = CountedFleet(f"fleet-{len(builds)}")
        builds.append(fleet)
        if hold_first is not None and len(builds) == 1:
            hold_first.wait(10)  # the start-up load is slow; others come meanwhile
        return fleet

    state._build = build  # type: ignore[method-assign]
    return state


def _leaked(state: ServeState, builds: list[CountedFleet]) -> list[str]:
    return [fleet.name for fleet in builds if not fleet.closed and fleet is not state.fleet]


def test_a_reload_during_start_up_leaks_nothing() -> None:
    builds: list[CountedFleet] = []
    release = threading.Event()
    state = _state(builds, release)
    loading = threading.Thread(target=state.load)
    loading.start()
    while not builds:  # the start-up thread is building
        threading.Event().wait(0.01)
    try:
        with pytest.raises(ReloadBusy, match="still loading"):
            state.reload("SIGHUP")
    finally:
        release.set()
        loading.join(10)
    assert state.fleet is builds[0] and _leaked(state, builds) == []
    state.reload("SIGHUP")  # once started, a reload replaces the set and closes the old one
    assert state.fleet is builds[-1] and builds[0].closed and _leaked(state, builds) == []


def test_a_reload_before_the_start_up_thread_runs_is_not_loaded_twice() -> None:
    builds: list[CountedFleet] = []
    state = _state(builds)
    state.reload("SIGHUP")
    state.load()
    assert len(builds) == 1 and state.fleet is builds[0]


def test_models_that_finish_loading_after_shutdown_are_closed() -> None:
    builds: list[CountedFleet] = []
    release = threading.Event()
    state = _state(builds, release)
    loading = threading.Thread(target=state.load)
    loading.start()
    while not builds:
        threading.Event().wait(0.01)
    state.close()  # the server stops while the start-up thread still loads
    release.set()
    loading.join(10)
    assert builds[0].closed and _leaked(state, builds) == []
    with pytest.raises(MTError):
        state.reload("SIGHUP")
    assert all(fleet.closed for fleet in builds)


def test_a_reload_serving_the_same_languages_keeps_the_language_detector() -> None:
    """Found by the 20-minute soak: each reload built the detector (~30 MB of arrays) again in a new
    thread, and the server process grew by ~40 MB over 10 SIGHUPs (malloc arenas); it is built once
    per set of languages now (+1 MB over 10 SIGHUPs, docs/guides/hardening.md)."""
    from mt.serve.detect import detector_for

    first = detector_for(("en", "de"))
    assert detector_for(("en", "de")) is first and detector_for(("en", "fr")) is not first


def test_the_detector_reads_language_codes_as_the_cleaning_stage_does() -> None:
    """One owner of py3langid's codes (mt.data.langid.langid_code, issue 52): a served `pt-BR` is
    langid's `pt` and `nb` its `no` (py3langid has no `nb`), as clean.rules' langid reads them."""
    from mt.data.langid import langid_code
    from mt.serve.detect import LanguageDetector

    detector = LanguageDetector(["en", "pt-BR", "nb", "tlh"])
    assert detector.languages == ["en", "pt-BR", "nb"]  # tlh: not a language py3langid knows
    assert detector.served == {langid_code(code): code for code in detector.languages} == {"en": "en", "pt": "pt-BR", "no": "nb"}
    assert detector.detect("Jeg heter Ola og bor i en liten by ved fjorden.")["language"] == "nb"
