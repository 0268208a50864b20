"""Limits per API key and per client address (`mt.serve.limits`): the keys file (plain and YAML),
the token buckets on a fake clock, the client address behind trusted proxies, the app's 429 with
Retry-After; and one real `mt serve` with a YAML keys file: limits hit, key names (never keys) in
the access log and metrics, and SIGHUP re-reading the file without a restart."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
import test_serve
from test_serve import httpx, server, wait_until

from mt.errors import MTError
from mt.serve import limits
from mt.serve.limits import DAY, MINUTE, ApiKey, KeyRing, Limited, Limiter, client_address, read_keys_file
from mt.serve.requests import ApiError, check_key
from mt.serve.settings import ServeSettings

tiny = test_serve.tiny  # the module-scoped tiny random checkpoint (and its synthetic lines)
pytestmark = pytest.mark.requires("httpx", "fastapi", "uvicorn", "libretranslatepy", "fastapi_offline")

YAML = """# team keys
keys:
  - name: weblate
    key: "k-weblate"
    requests_per_minute: 2
  - name: mastodon
    key: k-mastodon
    characters_per_day: 10
  - key: k-third
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "keys"
    path.write_text(text, encoding="utf-8")
    return path


def test_plain_keys_file_keeps_working_with_names(tmp_path: Path) -> None:
    ring = read_keys_file(write(tmp_path, "# clients\nk-alpha\n\nk-beta  # second\nk-alpha\n"))
    assert [(k.name, k.key, k.requests_per_minute, k.characters_per_day) for k in ring.keys] == [
        ("key-1", "k-alpha", None, None), ("key-2", "k-beta", None, None)]
    assert "k-alpha" not in repr(ring) and "k-alpha" not in repr(ring.keys[0])
    settings = ServeSettings(api_keys=ring)
    assert check_key("k-beta", settings).name == "key-2" and check_key(None, ServeSettings()) is None
    with pytest.raises(ApiError, match="not valid"):
        check_key("k-gamma", settings)


def test_yaml_keys_file_names_and_limits(tmp_path: Path) -> None:
    ring = read_keys_file(write(tmp_path, YAML))
    assert [(k.name, k.key, k.requests_per_minute, k.characters_per_day) for k in ring.keys] == [
        ("weblate", "k-weblate", 2, None), ("mastodon", "k-mastodon", None, 10), ("key-3", "k-third", None, None)]
    assert ring.match("k-mastodon").name == "mastodon" and ring.match("k-nope") is None


@pytest.mark.parametrize("text, message", [
    ("keys:\n  - name: a\n    key: k1\n    requests_per_day: 3\n", "line 2: unknown field requests_per_day"),
    ("keys:\n  - key: k1\n  - key: k2\n    requests_per_minute: 0\n", "line 3: requests_per_minute: expected a whole"),
    ("keys:\n  - name: a\n    key: k1\n  - name: a\n    key: k2\n", "line 4: name 'a' given twice"),
    ("keys:\n  - name: a\n    key: k-secret\n  - name: b\n    key: k-secret\n", "line 4: key given twice"),
    ("keys:\n  - name: a b\n    key: k1\n", "line 2: name: expected a word"),
    ("keys:\n  - name: a\n", "line 2: key: expected a string"),
    ("keys:\n  - key: [k1\n", "line 3: "),
    ("keys:\n", "expected `keys:` and a list"),
    ("k1\nk 2\n", "line 2: a key may not contain spaces"),
    ("# nothing\n", "no keys in the file"),
])
def test_bad_keys_files_are_one_line_errors(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(MTError) as e:
        read_keys_file(path)
    assert str(e.value).startswith(f"--api-keys {path}: ") and message in str(e.value)
    assert "\n" not in str(e.value) and "k-secret" not in str(e.value)


def test_token_buckets_on_a_fake_clock() -> None:
    clock = Clock()
    limiter = Limiter(clock)
    per_minute = [("requests_per_minute", 2, MINUTE, 1)]
    limiter.take("key a", per_minute)
    limiter.take("key a", per_minute)
    with pytest.raises(Limited) as e:
        limiter.take("key a", per_minute)
    assert e.value.retry_after == 30 and "2 requests a minute" in e.value.message
    limiter.take("key b", per_minute)  # another key has its own bucket
    clock.now += 29
    with pytest.raises(Limited) as e:
        limiter.take("key a", per_minute)
    assert e.value.retry_after == 1
    clock.now += 1
    limiter.take("key a", per_minute)
    # all or none: a request over the characters refused takes no request either
    both = [("requests_per_minute", 1, MINUTE, 1), ("characters_per_day", 100, DAY, 60)]
    limiter.take("key c", both)
    clock.now += 60
    with pytest.raises(Limited) as e:
        limiter.take("key c", both)
    assert "characters_per_day" in e.value.message and e.value.retry_after == pytest.approx(17222, abs=2)
    limiter.take("key c", [("requests_per_minute", 1, MINUTE, 1), ("characters_per_day", 100, DAY, 40)])
    with pytest.raises(Limited, match="exceed the limit of 100 characters a day"):
        limiter.take("key d", [("characters_per_day", 100, DAY, 101)])
    limiter.take("key e", [("requests_per_minute", None, MINUTE, 1)] * 100)  # None: no limit


def test_full_buckets_are_forgotten_as_requests_come() -> None:
    """One bucket per client address seen: each request forgets a few of the least recently used
    that are full again (as good as new)."""
    clock = Clock()
    limiter = Limiter(clock)
    per_minute = [("requests_per_minute", 60, MINUTE, 1)]
    for address in ("a", "b", "c"):
        limiter.take(address, per_minute)
    assert len(limiter) == 3
    clock.now += 0.5  # not full again yet: nothing dropped
    limiter.take("d", per_minute)
    assert len(limiter) == 4
    clock.now += 1  # a, b, c, d full again
    limiter.take("e", per_minute)
    assert len(limiter) == 1
    for _ in range(59):
        limiter.take("e", per_minute)
    with pytest.raises(Limited):  # e's own bucket was kept
        limiter.take("e", per_minute)


def test_buckets_are_bounded_in_memory_and_in_the_cost_of_a_request() -> None:
    """Issue 45, item 2: a day's bucket stays not-full for a day, so clients that send once each
    (one IPv6 client can be millions of addresses) used to pile up buckets without bound, and past
    10,000 every request scanned them all, under the lock, on the event loop."""
    clock = Clock()
    limiter = Limiter(clock, max_buckets=20_000)
    per_day = [("characters_per_day", 100_000, DAY, 50)]
    for i in range(30_000):  # never full again within the test: the old pruning could drop none
        limiter.take(f"address 10.{i >> 16}.{(i >> 8) & 255}.{i & 255}", per_day)
        clock.now += 0.001
    assert len(limiter) == 20_000  # the bound holds: the least recently used went first

    def takes_beside(buckets: int) -> None:
        """2,000 new clients' takes, on a limiter full at `buckets` buckets."""
        full = Limiter(clock, max_buckets=buckets)
        for i in range(buckets):
            full.take(f"address 10.{i >> 16}.{(i >> 8) & 255}.{i & 255}", per_day)
        before = time.thread_time()
        for i in range(2_000):
            full.take(f"address 192.168.{i >> 8}.{i & 255}", per_day)
        took.setdefault(buckets, []).append(time.thread_time() - before)

    took: dict[int, list[float]] = {}
    for _ in range(3):  # in turn, the fastest of each: a take costs the same beside 2,500 or 20,000 buckets
        takes_beside(2_500)
        takes_beside(20_000)
    ratio = min(took[20_000]) / min(took[2_500])
    assert ratio < 3, f"a take beside 20,000 buckets costs x{ratio:.1f} one beside 2,500"  # scanning them: x8
    for i in range(2_000):
        limiter.take(f"address 192.168.{i >> 8}.{i & 255}", per_day)
    with pytest.raises(Limited):  # a recent client's bucket is still there
        limiter.take("address 192.168.7.207", [("characters_per_day", 100_000, DAY, 99_990)])


def test_an_ipv6_client_is_one_bucket_per_64() -> None:
    assert limits.client_key("2001:db8:1:2:aaaa::1") == limits.client_key("2001:db8:1:2:ffff:1:2:3") == "2001:db8:1:2::/64"
    assert limits.client_key("2001:db8:1:3::1") != limits.client_key("2001:db8:1:2::1")
    assert limits.client_key("::ffff:192.0.2.7") == limits.client_key("192.0.2.7") == "192.0.2.7"
    assert limits.client_key("unknown") == "unknown"


def test_client_address_trusts_named_proxies_only() -> None:
    assert client_address("203.0.113.9", "1.2.3.4", ()) == "203.0.113.9"  # no proxy trusted: header ignored
    assert client_address("203.0.113.9", "1.2.3.4", ("10.0.0.1",)) == "203.0.113.9"  # not from the proxy
    assert client_address("10.0.0.1", "6.6.6.6, 1.2.3.4", ("10.0.0.1",)) == "1.2.3.4"  # right-most untrusted
    assert client_address("10.0.0.1", "1.2.3.4, 10.0.0.7", ("10.0.0.0/8",)) == "1.2.3.4"
    assert client_address("10.0.0.1", "10.0.0.2", ("10.0.0.0/8",)) == "10.0.0.2"
    assert client_address("10.0.0.1", None, ("10.0.0.1",)) == "10.0.0.1"
    with pytest.raises(MTError, match="--trusted-proxy 'proxy.lan'"):
        ServeSettings(trusted_proxies=("proxy.lan",))
    with pytest.raises(MTError, match="--address-requests-per-minute: for a server without --api-keys"):
        ServeSettings(api_keys=KeyRing((ApiKey("a", "k"),)), address_requests_per_minute=5)


def test_per_address_limits_in_the_app(tmp_path: Path) -> None:
    """No model needed: the limit is checked before the model (503 while it loads); a fake clock."""
    from starlette.testclient import TestClient

    from mt.serve.app import create_app

    settings = ServeSettings(address_requests_per_minute=1, address_characters_per_day=50,
                             trusted_proxies=("10.0.0.1",))
    app = create_app(settings, [tmp_path / "none.pt"])  # no lifespan: no model
    clock = Clock()
    app.state.serve.limiter = Limiter(clock)
    proxy = TestClient(app, client=("10.0.0.1", 5000))
    body = {"q": "Hello", "source": "en", "target": "de"}
    assert proxy.post("/translate", json=body, headers={"X-Forwarded-For": "1.2.3.4"}).status_code == 503
    r = proxy.post("/translate", json=body, headers={"X-Forwarded-For": "1.2.3.4"})
    assert r.status_code == 429 and r.headers["retry-after"] == "60"
    assert r.json() == {"error": "address 1.2.3.4: over the limit of 1 request a minute (requests_per_minute)"}
    assert proxy.post("/detect", json={"q": "x"}, headers={"X-Forwarded-For": "5.6.7.8"}).status_code == 503
    assert proxy.post("/detect", json={"q": "x"}).status_code == 503  # the proxy itself is a client
    spoofer = TestClient(app, client=("203.0.113.5", 5000))  # not a trusted proxy: its header is ignored
    assert spoofer.post("/translate", json=body, headers={"X-Forwarded-For": "9.9.9.9"}).status_code == 503
    assert spoofer.post("/translate", json=body, headers={"X-Forwarded-For": "8.8.8.8"}).status_code == 429
    assert proxy.get("/health").status_code == 200 and proxy.get("/health").status_code == 200  # not counted
    clock.now += 60
    big = {**body, "q": "x" * 60}
    r = proxy.post("/translate", json=big, headers={"X-Forwarded-For": "1.2.3.4"})
    assert r.status_code == 429 and "60 characters exceed the limit of 50 characters a day" in r.json()["error"]


def test_keys_limits_names_and_sighup_on_a_real_server(tiny, tmp_path: Path) -> None:
    ckpt, lines = tiny
    keys = write(tmp_path, YAML)
    log = tmp_path / "serve.log"
    with server(ckpt, "--api-keys", str(keys), log=log) as (url, proc):
        v1 = url + "/v1/translate"
        for _ in range(2):
            assert httpx.post(v1, json={"segments": ["a"]}, headers={"X-API-Key": "k-weblate"},
                              timeout=30).status_code == 200
        r = httpx.post(v1, json={"segments": ["a"]}, headers={"X-API-Key": "k-weblate"}, timeout=30)
        assert r.status_code == 429 and 1 <= int(r.headers["retry-after"]) <= 30
        assert r.json()["error"] == "key weblate: over the limit of 2 requests a minute (requests_per_minute)"
        body = {"q": "abcdef", "source": "en", "target": "de", "api_key": "k-mastodon"}
        assert httpx.post(url + "/translate", json=body, timeout=30).status_code == 200
        r = httpx.post(url + "/translate", json=body, timeout=30)
        assert r.status_code == 429 and "characters_per_day" in r.json()["error"] and r.headers["retry-after"]
        assert httpx.post(url + "/detect", json={"q": "hello", "api_key": "k-third"}).status_code == 200
        shown = httpx.get(url + "/metrics").text
        assert 'mt_key_requests_total{key="weblate",route="/v1/translate",status="429"} 1.0' in shown
        assert 'mt_key_requests_total{key="mastodon",route="/translate",status="200"} 1.0' in shown

        keys.write_text("keys:\n  - name: newcomer\n    key: k-new\n", encoding="utf-8")
        proc.send_signal(signal.SIGHUP)
        wait_until(lambda: httpx.post(url + "/detect", json={"q": "hi", "api_key": "k-new"}).status_code == 200,
                   "the new key accepted after SIGHUP")
        assert httpx.post(url + "/detect", json={"q": "hi", "api_key": "k-third"}).status_code == 403
        keys.write_text("keys:\n  - name: broken\n", encoding="utf-8")
        proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "keeping the old keys" in log.read_text(encoding="utf-8"), "the bad file logged")
        assert httpx.post(url + "/detect", json={"q": "hi", "api_key": "k-new"}).status_code == 200
        assert httpx.post(url + "/detect", json={"q": "hi"}).status_code == 403  # still a keyed server
        assert proc.poll() is None
    text = log.read_text(encoding="utf-8")
    assert not any(secret in text for secret in ("k-weblate", "k-mastodon", "k-third", "k-new"))
    access = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert {(a["route"], a["status"]) for a in access if a.get("key") == "weblate"} == {
        ("/v1/translate", 200), ("/v1/translate", 429)}
    assert any(a.get("key") == "newcomer" for a in access)
    assert all("key" not in a for a in access if a["status"] == 403)
    assert sum("keeping the old keys" in line for line in text.splitlines()) == 1
