"""`mt serve` with several models, and reloads: real server processes on 127.0.0.1.

Three tiny random models (en->de, de->en, fr->de), one per `-c`: requests are routed by language
pair (both APIs, `source: "auto"` text by text), `/languages` is their union, `/v1/models` names
each; two models that claim one pair stop the server with one line. A reload (SIGHUP, and
POST /v1/admin/reload with an admin key) under a bounded load loop: no request fails, /ready is 503
until the new model is warm, the new model answers afterwards and the old worker is gone; a
checkpoint that fails to load leaves the old model serving. SIGTERM with --drain-seconds: /ready
503 at once while translation still answers, then exit 0."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from test_serve import (
    ENV,
    _model_worker_pid,
    free_port,
    httpx,
    metric,
    mt_translate,
    server,
    wait_until,
)

from mt.errors import MTError
from mt.serve.specs import parse_specs

pytestmark = pytest.mark.requires("httpx", "fastapi", "uvicorn", "py3langid", "fastapi_offline")

EN = ["The cat sleeps on the warm sofa.", "Two children are playing in the garden."]
DE = ["Die Katze schläft auf dem warmen Sofa.", "Zwei Kinder spielen im Garten."]
FR = ["Le chat dort sur le canapé chaud.", "Deux enfants jouent dans le jardin."]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny random checkpoints by name: en-de, de-en, fr-de, and en-de2 (another en->de model)."""
    from mt.deploy.tiny import write_random_checkpoint
    root = tmp_path_factory.mktemp("models")
    made = {}
    for name, seed, langs in (("en-de", 1, ("en", "de")), ("de-en", 2, ("de", "en")), ("fr-de", 3, ("fr", "de")),
                              ("en-de2", 4, ("en", "de"))):
        made[name] = write_random_checkpoint(root / f"{name}.pt", seed=seed, src_lang=langs[0], tgt_lang=langs[1])
    return made


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_specs_are_one_model_per_c() -> None:
    assert parse_specs(["a.pt", "b.pt,c.pt", "export-dir"]) == ((Path("a.pt"),), (Path("b.pt"), Path("c.pt")),
                                                               (Path("export-dir"),))
    with pytest.raises(MTError, match=r"^-c a.pt,: an empty path in the comma list"):
        parse_specs(["a.pt,"])


def test_three_models_in_one_server_are_routed_by_pair(models: dict[str, Path]) -> None:
    want = {name: mt_translate(models[name], lines) for name, lines in (("en-de", EN), ("de-en", DE), ("fr-de", FR))}
    assert len({tuple(lines) for lines in want.values()}) == 3  # three different models
    with server(models["en-de"], "-c", str(models["de-en"]), "-c", str(models["fr-de"])) as (url, _):
        assert httpx.get(url + "/languages").json() == [
            {"code": "en", "name": "English", "targets": ["de"]}, {"code": "de", "name": "German", "targets": ["en"]},
            {"code": "fr", "name": "French", "targets": ["de"]}]
        listed = httpx.get(url + "/v1/models").json()["models"]
        assert [(m["id"], m["pairs"], m["files"]) for m in listed] == [
            (sha256(models[name]), [{"source": name[:2], "target": name[3:]}], [f"{name}.pt"])
            for name in ("en-de", "de-en", "fr-de")]
        ready = httpx.get(url + "/ready").json()
        assert ready["status"] == "ready" and [m["id"] for m in ready["models"]] == [m["id"] for m in listed]
        for name, lines in (("en-de", EN), ("de-en", DE), ("fr-de", FR)):
            src, tgt = name.split("-")
            lt = httpx.post(url + "/translate", json={"q": lines, "source": src, "target": tgt}, timeout=60).json()
            assert lt["translatedText"] == want[name], name
            v1 = httpx.post(url + "/v1/translate", json={"segments": lines, "source": src}, timeout=60).json()
            assert [t["text"] for t in v1["translations"]] == want[name] and v1["model"]["id"] == sha256(models[name])
        # The target alone decides when one model translates into it; for "de" two do.
        by_target = httpx.post(url + "/v1/translate", json={"segments": DE, "target": "en"}, timeout=60).json()
        assert [t["text"] for t in by_target["translations"]] == want["de-en"]
        both = httpx.post(url + "/v1/translate", json={"segments": EN, "target": "de"})
        assert both.status_code == 400 and "name the pair" in both.json()["error"]
        none = httpx.post(url + "/translate", json={"q": "x", "source": "fr", "target": "en"})
        assert none.status_code == 400 and none.json()["error"] == (
            "language pair fr-en: not served; this server translates en-de, de-en, fr-de")
        # source auto: each text to the model of its detected language (English and French into German).
        auto = httpx.post(url + "/translate", json={"q": [EN[0], FR[0], EN[1]], "source": "auto", "target": "de"},
                          timeout=60).json()
        assert auto["translatedText"] == [want["en-de"][0], want["fr-de"][0], want["en-de"][1]]
        assert [d["language"] for d in auto["detectedLanguage"]] == ["en", "fr", "en"]
        card = httpx.get(url + "/v1/model-card", params={"model": listed[1]["id"][:12]}).json()
        assert card["model_id"] == listed[1]["id"] and card["languages"] == {"source": "de", "target": "en"}
        assert httpx.get(url + "/v1/model-card", params={"model": "0" * 12}).status_code == 404
        assert f'mt_model_info{{id="{listed[2]["id"]}",pairs="fr-de"' in httpx.get(url + "/metrics").text


def test_two_models_claiming_one_pair_stop_the_server(models: dict[str, Path], tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "mt", "serve", "-c", str(models["en-de"]), "-c",
                           str(models["en-de2"]), "--port", str(free_port())],
                          env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2  # as every mt error
    assert proc.stderr.splitlines()[-1] == (
        f"mt: error: -c {models['en-de']} and -c {models['en-de2']} both translate en-de: serve each language pair from "
        "one model (an ensemble is one -c with its checkpoints joined by commas)")
    assert "Traceback" not in proc.stderr


class LoadLoop:
    """Clients sending /v1/translate requests back to back until stopped (bounded: at most `limit`
    requests each); every status and the model id that answered, in order."""

    def __init__(self, url: str, key: str, clients: int = 3, limit: int = 2000) -> None:
        self.url, self.key, self.limit = url, key, limit
        self.results: list[tuple[float, int, str]] = []
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._client, args=(i,)) for i in range(clients)]
        for thread in self.threads:
            thread.start()

    def _client(self, i: int) -> None:
        with httpx.Client(timeout=60) as client:
            for n in range(self.limit):
                if self.stopping.is_set():
                    return
                r = client.post(self.url + "/v1/translate", headers={"X-API-Key": self.key},
                                json={"segments": [f"{EN[n % 2]} {i} {n}"]})  # never cached
                self.results.append((time.monotonic(), r.status_code,
                                     r.json()["model"]["id"] if r.status_code == 200 else r.text))

    def stop(self) -> list[tuple[float, int, str]]:
        self.stopping.set()
        for thread in self.threads:
            thread.join(60)
        return self.results


def test_reload_under_load_drops_nothing(models: dict[str, Path], tmp_path: Path) -> None:
    served = tmp_path / "model.pt"
    shutil.copy(models["en-de"], served)
    old_id, new_id = sha256(models["en-de"]), sha256(models["en-de2"])
    keys = tmp_path / "keys.yaml"
    keys.write_text('keys:\n  - {name: app, key: "k-app"}\n  - {name: ops, key: "k-ops", admin: true}\n')
    log = tmp_path / "serve.log"
    with server(served, "--api-keys", str(keys), "--threads", "1", "--drain-seconds", "2", log=log) as (url, proc):
        old_worker = _model_worker_pid(proc.pid)
        loop = LoadLoop(url, "k-app")
        wait_until(lambda: len(loop.results) >= 10, "the load loop running", 30)
        shutil.copy(models["en-de2"], tmp_path / "next.pt")
        os.replace(tmp_path / "next.pt", served)  # as an operator would: the new checkpoint in place, atomically
        proc.send_signal(signal.SIGHUP)
        saw_503 = False
        deadline = time.monotonic() + 60
        while (ready := httpx.get(url + "/ready", timeout=5)).status_code != 200 or \
                ready.json()["model"]["id"] != new_id:
            saw_503 |= ready.status_code == 503 and ready.json()["error"].startswith("reloading")
            assert time.monotonic() < deadline, "the reload did not finish in 60 s"
            time.sleep(0.02)
        switched = time.monotonic()
        wait_until(lambda: sum(t > switched for t, _, _ in loop.results) >= 10, "requests after the switch", 30)
        results = loop.stop()
        assert saw_503, "/ready never said 503 while the new model loaded"
        assert [r for r in results if r[1] != 200] == []  # no request failed
        ids = [model_id for _, _, model_id in results]
        assert ids[0] == old_id and ids[-1] == new_id and set(ids) == {old_id, new_id}
        assert all(model_id == new_id for t, _, model_id in results if t > switched + 1)
        wait_until(lambda: not Path(f"/proc/{old_worker}").exists(), "the old worker process ended", 30)
        assert metric(url, 'mt_reloads_total{result="ok"}') == 1

        # A checkpoint that does not load: the old (here: current) model keeps serving.
        served.write_bytes(b"not a checkpoint")
        no_key = httpx.post(url + "/v1/admin/reload")
        assert no_key.status_code == 403
        not_admin = httpx.post(url + "/v1/admin/reload", headers={"X-API-Key": "k-app"})
        assert not_admin.status_code == 403 and not_admin.json()["error"] == "api_key: key app is not an admin key"
        failed = httpx.post(url + "/v1/admin/reload", headers={"X-API-Key": "k-ops"}, timeout=120)
        assert failed.status_code == 500 and failed.json()["error"].startswith(
            "reload (POST /v1/admin/reload) failed, the old models keep serving: ")
        assert httpx.get(url + "/ready").json()["model"]["id"] == new_id
        ok = httpx.post(url + "/v1/translate", headers={"X-API-Key": "k-app"}, json={"segments": EN})
        assert ok.status_code == 200 and ok.json()["model"]["id"] == new_id
        shutil.copy(models["en-de"], served)
        back = httpx.post(url + "/v1/admin/reload", headers={"X-API-Key": "k-ops"}, timeout=120)
        assert back.status_code == 200 and [m["id"] for m in back.json()["models"]] == [old_id]
        assert metric(url, 'mt_reloads_total{result="failed"}') == 1

        # A worker that dies after its checkpoint was replaced on disk is not restarted with weights
        # the server would serve under the old id: /health says so until a reload.
        shutil.copy(models["en-de2"], tmp_path / "next.pt")
        os.replace(tmp_path / "next.pt", served)
        wait_until(lambda: httpx.get(url + "/health").status_code == 200, "the retired workers gone", 30)
        os.kill(_model_worker_pid(proc.pid), signal.SIGKILL)
        wait_until(lambda: "the checkpoint changed on disk" in httpx.get(url + "/health").text,
                   "/health naming the changed checkpoint", 30)
        refused = httpx.post(url + "/v1/translate", headers={"X-API-Key": "k-app"}, json={"segments": ["x y"]})
        assert refused.status_code == 503 and "the checkpoint changed on disk" in refused.json()["error"]
        assert httpx.get(url + "/health").status_code == 503
        proc.send_signal(signal.SIGHUP)
        wait_until(lambda: httpx.get(url + "/health").status_code == 200 and
                   httpx.get(url + "/ready").json().get("model", {}).get("id") == new_id, "reloaded", 60)

        # SIGTERM with --drain-seconds: not ready at once, still translating, then a clean exit.
        proc.send_signal(signal.SIGTERM)
        wait_until(lambda: httpx.get(url + "/ready").status_code == 503, "/ready 503 after SIGTERM", 5)
        assert httpx.get(url + "/ready").json() == {"error": "draining: the server is stopping"}
        still = httpx.post(url + "/v1/translate", headers={"X-API-Key": "k-app"}, json={"segments": EN})
        assert still.status_code == 200
        assert proc.wait(timeout=30) == 0
    text = log.read_text(encoding="utf-8")
    assert "Traceback" not in text and "k-ops" not in text
    assert sum("failed, the old models keep serving" in line for line in text.splitlines()) == 1


def test_a_checkpoint_path_with_a_comma_is_one_model(tmp_path: Path) -> None:
    """Issue 45, item 8: `-c` split every value on commas, so a checkpoint named `run,v2.pt` could
    not be served; a value that names an existing path is that one model now."""
    from mt.serve.specs import parse_specs

    odd = tmp_path / "run,v2.pt"
    odd.write_bytes(b"x")
    (tmp_path / "a.pt").write_bytes(b"x")
    assert parse_specs([str(odd)]) == ((odd,),)
    assert parse_specs([f"{tmp_path / 'a.pt'},{tmp_path / 'b.pt'}"]) == ((tmp_path / "a.pt", tmp_path / "b.pt"),)
