"""The README's config reference is generated from mt/config.py and must be current."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_config_reference_is_current():
    table = subprocess.run([sys.executable, str(ROOT / "scripts/config_reference.py")],
                           capture_output=True, text=True, check=True).stdout.strip()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert table in readme, "README config table is stale: run python scripts/config_reference.py --write"
    assert "`train.time_budget`" in table and "`model.norm`" in table


def test_readme_quickstart_is_two_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = readme.split("## Quickstart", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in quick.strip().splitlines()]
    assert commands == ["make demo", "make test"]
