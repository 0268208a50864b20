"""README.md is the front door: short, the two quickstart commands, and links that resolve.

Its commands are checked with the documentation's (tests/test_docs.py); the configuration
reference it used to embed is now docs/reference/configuration.md.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 250


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def test_readme_quickstart_is_two_commands():
    quick = _readme().split("## Quickstart", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in quick.strip().splitlines()]
    assert commands == ["make demo", "make test"]


def test_readme_is_short():
    lines = len(_readme().splitlines())
    assert lines <= MAX_LINES, f"README.md has {lines} lines (at most {MAX_LINES}): move the detail to docs/"


def test_readme_relative_links_resolve():
    """Every relative link or image of README.md names a file of the repository (so it works on
    GitHub), and every link into docs/ names a page of the site."""
    targets = re.findall(r"\]\(([^)\s]+)\)", _readme())
    relative = [t for t in targets if not re.match(r"[a-z]+:|#", t)]
    assert len(relative) >= 15
    for target in relative:
        path = target.split("#", 1)[0]
        assert (ROOT / path).is_file(), f"README.md links to {target}, which does not exist"
        if path.startswith("docs/") and not path.startswith("docs/images/"):
            assert path.endswith(".md"), f"README.md links to {target}: link the page's .md file"


def _results_rows(text: str) -> list[str]:
    head = "| direction | test set | BLEU | chrF | TER | training | hardware | command |"
    assert head in text
    rows = []
    for line in text.split(head, 1)[1].splitlines()[2:]:  # after the header and its --- line
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def test_readme_results_table_is_the_results_page_table():
    rows = _results_rows(_readme())
    assert len(rows) == 18 and rows[0].startswith("| en→de | test_2016_flickr | **37.49** |")
    # a row names the command that trains it now: plain `make demo` is the recipe's, the hand-tuned
    # config's rows say CONFIG=
    model = ""
    for row in rows:
        cells = [c.strip() for c in row.split("|")]
        model = model if cells[6] in ("same model", "the same two models", "the same three models") else cells[6]
        assert (cells[-2] == "`make demo`") == model.startswith("recipe:") or cells[-2] == "same", row
    assert rows == _results_rows((ROOT / "docs/results.md").read_text(encoding="utf-8"))
