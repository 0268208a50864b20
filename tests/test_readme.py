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


def test_readme_quickstart_is_the_demo_the_activation_and_the_tests():
    """`make demo`, then how to put the `mt` it installed into .venv on PATH (issue 71: `mt` was
    "command not found" after the demo), then `make test`."""
    quick = _readme().split("## Quickstart", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in quick.strip().splitlines()]
    assert commands == ["make demo", ". .venv/bin/activate", "make test"]


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


def _table(text: str, head: str) -> list[list[str]]:
    """The cells of each row of the Markdown table under `head` (a header line of `text`)."""
    assert head in text, f"no table headed {head!r}"
    rows = []
    for line in text.split(head, 1)[1].splitlines()[2:]:  # after the header and its --- line
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def _scores(cell: str) -> list[float]:
    """The BLEU scores of a results cell: "**37.69** / **37.74** / 38.87" -> [37.69, 37.74, 38.87]."""
    return [float(v.strip().strip("*")) for v in cell.split("/")]


# README's machine cell -> the words that name the same machine in docs/results.md's hardware cells
MACHINES = {"Zen 4": "Zen 4", "Cascade Lake": "Cascade Lake", "with AMX": "Intel AMX",
            "AVX-512 BF16, no AMX": "BF16, no AMX exposed"}


def test_readme_results_are_the_means_of_the_results_page():
    """README's short table is the mean of each machine's `make demo` runs on the results page,
    which keeps every run: each README row names a machine and a command, and its three scores are
    the means of that machine's en→de rows made by that command."""
    readme = _table(_readme(), "| machine (2 cores, torch 2.13.0 CPU build) | runs | test_2016_flickr | "
                                "test_2017_flickr | test_2017_mscoco | `time make demo` | command |")
    page = _table((ROOT / "docs/results.md").read_text(encoding="utf-8"),
                  "| direction | test set | BLEU | chrF | TER | training | hardware | command |")
    assert len(page) >= 18
    models: list[dict] = []  # each model (or set of runs of one model) of the page: hardware, command, scores per set
    for direction, test_set, bleu, *_, training, hardware, command in page:
        if not training.startswith(("same", "the same")):
            models.append({"direction": direction, "hardware": hardware, "command": command, "scores": {}})
        models[-1]["scores"][test_set] = _scores(bleu)
    assert len(readme) >= 4
    for machine, runs, *means, _time, command in readme:
        key = next(k for k in MACHINES if k in machine)
        command = command.split("`")[1]
        found = [m for m in models if m["direction"] == "en→de" and MACHINES[key] in m["hardware"]
                 and m["command"] == f"`{command}`"]
        assert found, f"README's {machine!r} row ({command}): no such rows in docs/results.md"
        for test_set, mean in zip(("test_2016_flickr", "test_2017_flickr", "test_2017_mscoco"), means):
            scores = [s for m in found for s in m["scores"][test_set]]
            assert int(runs) == len(scores), (machine, test_set)
            # rounded half up or half down, as a person writes a mean of two runs (37.055 -> 37.06)
            assert abs(_scores(mean)[0] - sum(scores) / len(scores)) <= 0.005 + 1e-9, (machine, test_set, scores)
