"""Every output kind of the translation path for one checkpoint, written to a folder, to diff two
versions of the code: what a refactor of `mt/decode` or `mt/serve` must keep byte-identical.

    PYTHONPATH=/path/to/old/checkout python scripts/tools/path_snapshot.py -c CKPT --mirror M --out before
    PYTHONPATH=. python scripts/tools/path_snapshot.py -c CKPT --mirror M --out after
    diff -r before after

Everything runs through the real command line (`python -m mt translate`, in a child process, so
PYTHONPATH picks the code) and a real `mt serve` process on 127.0.0.1: test sentences plain,
`--scores`, `--n-best 3`, `--no-segment` and `--sampling`; lines holding a company term with
`--glossary`; app strings with placeholders, URLs and numbers (`exp_robust_input`'s), ALL CAPS,
Title Case and shouted words; paragraphs; an HTML file and a .docx; the same sentences, app
strings and paragraphs through `/v1/translate` (n-best too), `/translate` (text and HTML) and a
glossary request. The inputs are made once into `--inputs` (default: OUT/../inputs) and reused.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "experiments"))  # exp_robust_input's app strings

from exp_robust_input import app_strings, shout, title  # noqa: E402

from mt.textio import read_lines  # noqa: E402

TERMS = ROOT / "scripts" / "experiments" / "data" / "company_terms_en_de.tsv"


def make_inputs(mirror: Path, folder: Path, lines: int) -> None:
    """The input files (`folder`), from Multi30k's test sets in `mirror`."""
    flickr = list(read_lines(mirror / "test_2016_flickr.en.gz"))
    mscoco = list(read_lines(mirror / "test_2017_mscoco.en.gz"))
    other = list(read_lines(mirror / "test_2017_flickr.en.gz"))
    folder.mkdir(parents=True, exist_ok=True)
    sources = [line.split("\t")[0] for line in TERMS.read_text(encoding="utf-8").splitlines() if line.strip()]
    words = {w for source in sources for w in source.split("|")}
    held = [line for line in other + mscoco if words & set(line.lower().rstrip(".").split())][:lines // 2]
    caps = flickr[200:200 + lines // 3]
    paragraphs = ["\n".join(flickr[i:i + 3]) + "\n\n  " + " ".join(flickr[i + 3:i + 5]) for i in range(0, lines, 5)]
    files = {
        "flickr.en": flickr[:lines], "mscoco.en": mscoco[:lines], "terms.en": held,
        "app.en": [s for s, _, _ in app_strings(flickr, lines, 1)],
        "caps.en": [line.upper() for line in caps] + [title(line) for line in caps] + [shout(line)[0] for line in caps],
        "paragraphs.en": [p.replace("\n", " ") for p in paragraphs],
    }
    for name, texts in files.items():
        (folder / name).write_text("".join(text + "\n" for text in texts), encoding="utf-8")
    (folder / "page.html").write_text("<html><body>" + "".join(
        f"<p>{line} <b>{line.split()[1]}</b> and <a href='https://example.org'>{line.split()[-1]}</a></p>"
        for line in flickr[300:300 + lines // 4]) + "</body></html>\n", encoding="utf-8")
    import docx  # python-docx, the files extra's tests

    document = docx.Document()
    for line in flickr[350:350 + lines // 4]:
        document.add_paragraph(line).add_run(" " + line.split()[0]).bold = True
    document.save(str(folder / "letter.docx"))


def run_cli(ckpt: Path, inputs: Path, out: Path) -> None:
    """Every `mt translate` variant over the inputs, outputs into `out`."""
    runs = [("flickr.de", "flickr.en", []), ("flickr.scores", "flickr.en", ["--scores"]),
            ("flickr.nbest", "flickr.en", ["--n-best", "3"]), ("flickr.nosegment", "flickr.en", ["--no-segment"]),
            ("flickr.sampled", "flickr.en", ["--sampling", "--seed", "3"]),
            ("mscoco.de", "mscoco.en", []), ("mscoco.scores", "mscoco.en", ["--scores"]),
            ("mscoco.nbest", "mscoco.en", ["--n-best", "3"]),
            ("terms.de", "terms.en", ["--glossary", str(TERMS)]),
            ("terms.nosegment", "terms.en", ["--glossary", str(TERMS), "--no-segment"]),
            ("terms.scores", "terms.en", ["--glossary", str(TERMS), "--scores"]),
            ("app.de", "app.en", []), ("app.scores", "app.en", ["--scores"]), ("caps.de", "caps.en", []),
            ("paragraphs.de", "paragraphs.en", []), ("page.de.html", "page.html", []),
            ("letter.de.docx", "letter.docx", [])]
    for name, source, flags in runs:
        cmd = [sys.executable, "-m", "mt", "translate", "-c", str(ckpt), "-i", str(inputs / source),
               "-o", str(out / name), *flags]
        subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
        if name.endswith(".docx"):  # a zip's timestamps differ run to run: keep its document text
            import docx

            text = "\n".join(p.text for p in docx.Document(str(out / name)).paragraphs)
            (out / name).unlink()
            (out / (name + ".txt")).write_text(text + "\n", encoding="utf-8")


def post(port: int, route: str, body: dict) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{route}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as answer:
        return json.loads(answer.read())


def run_server(ckpt: Path, inputs: Path, out: Path) -> None:
    """The same inputs through a real `mt serve` on 127.0.0.1 (stopped at the end)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "mt", "serve", "-c", str(ckpt), "--host", "127.0.0.1",
                               "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=5):
                    break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("path_snapshot: the server did not start") from None
                time.sleep(1)
        texts = {name: (inputs / name).read_text(encoding="utf-8").splitlines()
                 for name in ("flickr.en", "app.en", "paragraphs.en", "terms.en", "caps.en")}
        found: dict[str, object] = {}
        for name, lines in texts.items():
            rows = [r for i in range(0, len(lines), 50) for r in post(port, "/v1/translate",
                                                                        {"segments": lines[i:i + 50]})["translations"]]
            found[f"v1 {name}"] = [(r["text"], r["confidence"]) for r in rows]
        rows = post(port, "/v1/translate", {"segments": texts["flickr.en"][:40], "n_best": 3})["translations"]
        found["v1 nbest"] = [[(h["text"], h["score"]) for h in r["n_best"]] for r in rows]
        glossary = [{"source": s.split("|")[0], "target": t.split("|")[0]} for s, t in
                    (line.split("\t")[:2] for line in TERMS.read_text(encoding="utf-8").splitlines() if line.strip())]
        rows = post(port, "/v1/translate", {"segments": texts["terms.en"], "glossary": glossary})["translations"]
        found["v1 glossary"] = [r["text"] for r in rows]
        found["libretranslate"] = post(port, "/translate", {"q": texts["paragraphs.en"][:20], "source": "en",
                                                            "target": "de"})["translatedText"]
        html = (inputs / "page.html").read_text(encoding="utf-8")
        found["libretranslate html"] = post(port, "/translate", {"q": html, "source": "en", "target": "de",
                                                                 "format": "html"})["translatedText"]
        (out / "server.json").write_text(json.dumps(found, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    finally:
        server.terminate()
        server.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-c", "--checkpoint", type=Path, required=True)
    parser.add_argument("--mirror", type=Path, default=Path(os.environ.get("MT_DATA_MIRROR", "data/multi30k")))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--inputs", type=Path, default=None, help="default: OUT/../inputs")
    parser.add_argument("--lines", type=int, default=150)
    parser.add_argument("--no-server", action="store_true")
    parser.add_argument("--server-only", action="store_true")
    args = parser.parse_args()
    inputs = args.inputs or args.out.parent / "inputs"
    if not (inputs / "letter.docx").exists():
        make_inputs(args.mirror, inputs, args.lines)
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.server_only:
        run_cli(args.checkpoint, inputs, args.out)
    if not args.no_server:
        run_server(args.checkpoint, inputs, args.out)
    print(f"path_snapshot: wrote {args.out}")


if __name__ == "__main__":
    main()
