"""POST /translate_file and GET /download_file as LibreTranslate answers them (its app.py and
tests/test_api/test_api_translate_file.py), through a real `mt serve` of the tiny random en->de
checkpoint: a subtitle file and a Word document come back translated as the CLI translates their
texts, their shape kept; each bad request is the status LibreTranslate gives, in JSON."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
import test_serve
from test_documents import SRT, _docx
from test_serve import httpx, mt_translate, server

pytestmark = pytest.mark.requires("httpx", "fastapi", "uvicorn", "lxml", "srt", "webvtt", "docx")
tiny = test_serve.tiny


@pytest.fixture(scope="module")
def files_server(tiny) -> Iterator[str]:
    with server(tiny[0], "--beam", "1", "--max-file-bytes", "100000", "--max-segments", "2") as (url, _):
        yield url


def _send(url: str, name: str, data: bytes, **fields: str) -> httpx.Response:
    return httpx.post(url + "/translate_file", data={"source": "en", "target": "de", **fields},
                      files={"file": (name, data)}, timeout=60)


def test_subtitles_and_a_document_through_the_server(tiny, files_server: str) -> None:
    import docx
    import srt

    from mt.text.subtitles import rewrap

    settings = httpx.get(files_server + "/frontend/settings", timeout=30).json()
    assert settings["filesTranslation"] is True
    assert settings["supportedFilesFormat"] == [".txt", ".html", ".htm", ".srt", ".vtt", ".docx", ".odt",
                                                ".pptx", ".odp", ".epub", ".md", ".markdown", ".po", ".pot", ".xlf",
                                                ".xliff"]
    r = _send(files_server, "film.srt", SRT.encode())
    assert r.status_code == 200, r.text
    url = r.json()["translatedFileUrl"]
    assert url.startswith(files_server + "/download_file/") and url.endswith(".film.de.srt")
    got = httpx.get(url, timeout=30)
    assert got.status_code == 200 and got.headers["content-disposition"] == 'attachment; filename="film.de.srt"'
    source, out = list(srt.parse(SRT)), list(srt.parse(got.text))
    assert [(c.index, c.start, c.end) for c in out] == [(c.index, c.start, c.end) for c in source]
    plain = [source[0], source[2]]  # jobs of at most --max-segments 2 lines: the file still whole
    want = mt_translate(tiny[0], [" ".join(c.content.split()) for c in plain], "--beam", "1")
    assert [out[0].content, out[2].content] == [rewrap(t, c.content.count("\n") + 1) for t, c in zip(want, plain)]
    r = _send(files_server, "report.docx", _docx(), source="auto")
    document = docx.Document(io.BytesIO(httpx.get(r.json()["translatedFileUrl"], timeout=30).content))
    assert [run.bold for run in document.paragraphs[0].runs] == [None, True, None, None]
    assert document.sections[0].header.paragraphs[0].text not in ("", "the header")


@pytest.mark.requires("polib", "markdown_it", "msgfmt")
def test_a_po_file_keeps_its_placeholders_through_the_server(files_server: str, tmp_path) -> None:
    """The server's callables protect placeholders (mt.text.protect): a random model's c-format
    translation still holds %d and %s once each, in order, and the catalogue passes msgfmt --check."""
    import subprocess

    import polib
    from test_documents_l10n import _catalogue

    r = _send(files_server, "app.po", _catalogue())
    assert r.status_code == 200, r.text
    path = tmp_path / "app.de.po"
    path.write_bytes(httpx.get(r.json()["translatedFileUrl"], timeout=30).content)
    entry = polib.pofile(str(path)).find("Saved %d files in %s")
    assert entry is not None and entry.fuzzy and entry.msgstr.count("%d") == entry.msgstr.count("%s") == 1
    assert entry.msgstr.index("%d") < entry.msgstr.index("%s")
    check = subprocess.run(["msgfmt", "--check", "--use-fuzzy", "-o", "/dev/null", str(path)], capture_output=True,
                           text=True)
    assert check.returncode == 0, check.stderr


@pytest.mark.parametrize(("name", "data", "fields", "status", "error"), [
    (None, b"", {}, 400, "Invalid request: missing file parameter"),
    ("a.txt", b"Hello", {"target": ""}, 400, "Invalid request: missing target parameter"),
    ("program.exe", b"MZ\x90\x00", {}, 400, "Invalid request: file format not supported"),
    ("a.txt", b"Hello", {"target": "zz"}, 400, "language pair en-zz: not served"),
    ("bad.docx", b"not a zip", {}, 400, "bad.docx: not a readable .docx file"),
    ("bad.odt", b"PK\x03\x04broken", {}, 400, "bad.odt: not a readable .odt file"),
    ("bad.pptx", b"PK\x03\x04broken", {}, 400, "bad.pptx: not a readable .pptx file"),
    ("bad.epub", b"not a zip", {}, 400, "bad.epub: not a readable .epub file"),
    ("bad.srt", b"1\n00:00:01,000 --> 00:00:0x\nhi\n", {}, 400, "bad.srt: .srt: cue 1 ends before it starts"),
    ("bad.vtt", b"00:00:01.000 --> 00:00:02.000\nhi\n", {}, 400, "bad.vtt: .vtt: not a WebVTT file"),
    ("bad.po", b'msgid "a"\nmsgstr "b" "c\n', {}, 400, "bad.po: .po: Syntax error"),
    ("bad.xlf", b"<!DOCTYPE x [<!ENTITY a 'a'>]><xliff/>", {}, 400, "bad.xlf: XLIFF: a DOCTYPE"),
    ("big.txt", b"x" * 200_000, {}, 413, "body: "),
])
def test_bad_files_are_one_json_error(files_server: str, name, data, fields, status, error) -> None:
    if name is None:
        r = httpx.post(files_server + "/translate_file", data={"source": "en", "target": "de"},
                       files={"other": ("x.txt", b"x")}, timeout=30)
    else:
        r = _send(files_server, name, data, **fields)
    assert r.status_code == status and r.json()["error"].startswith(error), r.text


def test_download_names_are_checked(files_server: str) -> None:
    for name, status in (("%2E%2E", 400), ("..%2F..%2Fetc%2Fpasswd", 404), ("x.txt", 400), ("0" * 32 + ".gone.txt", 404)):
        r = httpx.get(f"{files_server}/download_file/{name}", timeout=30)
        assert r.status_code == status and "error" in r.json(), (name, r.text)


def test_no_files_switch_and_the_store_bounds() -> None:
    from fastapi.testclient import TestClient

    from mt.serve.app import create_app
    from mt.serve.filestore import FileStore, safe_name
    from mt.serve.settings import ServeSettings

    client = TestClient(create_app(ServeSettings(files=False), ()))  # no lifespan: no model loads
    assert client.post("/translate_file", files={"file": ("a.txt", b"x")}).status_code == 403
    assert client.get("/download_file/" + "0" * 32 + ".a.txt").json() == {
        "error": "Files translation are disabled on this server."}
    now = [0.0]
    store = FileStore(keep_s=10, max_files=2, max_bytes=100, clock=lambda: now[0])
    a, b, c = (store.put(b"x" * 40, "text/plain", f"{n}.txt") for n in "abc")
    assert store.get(a) is None and store.get(b) and store.get(c)  # two files at most
    d = store.put(b"y" * 90, "text/plain", "../../d e.txt")
    assert d.endswith(".d_e.txt") and [store.get(n) is not None for n in (b, c, d)] == [False, False, True]
    now[0] = 11
    assert store.get(d) is None and safe_name("..\\..\\.bashrc") == "bashrc"
