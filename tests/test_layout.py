"""The package layout: stages import only the stages below them, no module imports another in a
cycle, every module stays readable in one sitting, each command has a module of its own, and only
the checkpoint module reads checkpoints.

The order, bottom to top (ARCHITECTURE.md):

    config, config_load, config_checks, errors, textio, device   (the base every stage uses)
    {data, text} -> model -> decode -> eval -> {train, deploy} -> serve -> commands -> cli

A module may import its own stage and any stage below it. Every import counts: module level,
inside functions and under `if TYPE_CHECKING:`, since each of them ties the two modules together.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mt"
MAX_LINES = 450  # "small enough to read in one sitting": ~400, with a little slack for docstrings

BASE = {"mt", "mt.__main__", "mt.config", "mt.config_load", "mt.config_checks", "mt.errors", "mt.textio",
        "mt.device"}
RANK = {"data": 1, "text": 1, "model": 2, "decode": 3, "eval": 4, "train": 5, "deploy": 5, "serve": 6,
        "commands": 7, "cli": 8,
        "cli_support": 8}  # mt/cli_support.py: what mt/cli.py's declarations stand on, in the cli stage


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def stage_of(module: str) -> str:
    """'mt.train.loop' -> 'train', 'mt.commands' -> 'commands', base modules -> 'base'."""
    if module in BASE:
        return "base"
    return module.split(".")[1]


def rank_of(module: str) -> int:
    return 0 if module in BASE and module != "mt.__main__" else RANK.get(stage_of(module), RANK["cli"])


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The mt modules `path` imports anywhere in it (a `from mt.x import y` of a submodule y counts as mt.x.y)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.split(".")[0] == "mt")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.split(".")[0] == "mt":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
    return {name for name in found if name in modules}


def import_graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): imports_of(p, modules) - {module_name(p)} for p in paths}


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """'a imports b' for every import of a module in a stage above a's own."""
    return [f"{a} ({stage_of(a)}) imports {b} ({stage_of(b)}), a stage above it"
            for a, targets in sorted(graph.items()) for b in sorted(targets)
            if rank_of(b) > rank_of(a) and b != "mt"]


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle as [a, b, ..., a], or [] when the graph has none (depth-first search)."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return []

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return []


def test_the_checks_catch_what_they_name() -> None:
    """The two checks on small made-up graphs: they find a cycle and an upward import, and pass clean ones."""
    assert find_cycle({"mt.a": {"mt.b"}, "mt.b": {"mt.c"}, "mt.c": {"mt.a"}}) == ["mt.a", "mt.b", "mt.c", "mt.a"]
    assert find_cycle({"mt.a": {"mt.b"}, "mt.b": set(), "mt.c": {"mt.a", "mt.b"}}) == []
    assert upward_imports({"mt.model.transformer": {"mt.train.loss"}}) == [
        "mt.model.transformer (model) imports mt.train.loss (train), a stage above it"]
    assert upward_imports({"mt.config": {"mt.data.corpus"}}) == [
        "mt.config (base) imports mt.data.corpus (data), a stage above it"]
    assert upward_imports({"mt.train.loop": {"mt.eval.evaluate", "mt.model.checkpoint", "mt.train.step"}}) == []


def test_every_module_belongs_to_a_known_stage() -> None:
    unknown = [m for m in import_graph() if stage_of(m) != "base" and stage_of(m) not in RANK]
    assert not unknown, f"modules outside the known stages (add the stage to RANK and ARCHITECTURE.md): {unknown}"


def test_no_module_imports_a_stage_above_its_own() -> None:
    problems = upward_imports(import_graph())
    assert not problems, "\n".join(problems)


def test_no_import_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert not cycle, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_module_is_small_enough_to_read_in_one_sitting(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(PACKAGE.parent)}: {lines} lines; split it by job (limit {MAX_LINES})"


MAX_FUNCTION_LINES = 90  # "functions under ~80" (DESIGN.md); the longest today is sample_search's 90
MAX_SERVE_FUNCTION_LINES = 80  # the server's routes and dependencies stay small (issue 33)


def long_functions(path: Path, limit: int) -> list[str]:
    """'name (N lines)' for each function or method in `path` longer than `limit` lines."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [f"{node.name} ({node.end_lineno - node.lineno + 1} lines)" for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit]


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_functions_are_short(path: Path) -> None:
    limit = MAX_SERVE_FUNCTION_LINES if "serve" in path.relative_to(PACKAGE).parts else MAX_FUNCTION_LINES
    assert long_functions(path, limit) == [], f"{path.relative_to(PACKAGE.parent)}: split by job (limit {limit})"


def test_long_functions_are_found(tmp_path: Path) -> None:
    source = tmp_path / "long.py"
    source.write_text("def short():\n    return 1\n\n\nasync def long():\n" + "    x = 1\n" * 5)
    assert long_functions(source, 5) == ["long (6 lines)"]
    assert long_functions(source, 6) == []


# Names only decoding uses (a data batcher's max_tokens, seed and temperature are its own).
DECODE_KNOBS = {"beam", "alpha", "n_best", "sampling", "top_k", "top_p", "precision", "length_penalty",
                "max_len_a", "max_len_b", "forbid_unk", "no_repeat_ngram", "no_repeat_ngram_size",
                "repetition_penalty", "protect", "case", "ending", "loop_retry"}
MAX_KNOB_FUNCTIONS = 2  # issue 74: settings travel whole (DecodeConfig, DecodeOverrides, SearchSettings)


def knob_functions(path: Path) -> list[str]:
    """'name (knobs)' for each function of `path` taking three or more decoding knobs as parameters."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            knobs = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs if p.arg in DECODE_KNOBS]
            if len(knobs) >= 3:
                found.append(f"{node.name} ({', '.join(knobs)})")
    return found


def test_decoding_settings_travel_whole() -> None:
    """At most two functions in mt/ take three or more decoding knobs as loose parameters: the rest
    take a `DecodeConfig`, `DecodeOverrides` or `SearchSettings` whole."""
    found = [f"{p.relative_to(PACKAGE.parent)}: {f}" for p in sorted(PACKAGE.rglob("*.py")) for f in knob_functions(p)]
    assert len(found) <= MAX_KNOB_FUNCTIONS, found


def test_knob_functions_are_found(tmp_path: Path) -> None:
    source = tmp_path / "knobs.py"
    source.write_text("def search(x, *, beam, alpha, n_best=1):\n    pass\n\n\ndef batch(max_tokens, seed, beam):\n    pass\n")
    assert knob_functions(source) == ["search (beam, alpha, n_best)"]


# ---------------------------------------------------------------------------- one module per command

COMMANDS = PACKAGE / "commands"
SHARED_COMMAND_MODULES = {"decoding"}  # what several commands share (the decoding flags), not a command


def cli_commands() -> dict[str, str]:
    """Each `mt` command's name (a group's commands by their own name: `mt data fetch` -> fetch) ->
    the name of its function in mt/cli.py."""
    from mt.cli import app

    found: dict[str, str] = {}
    apps = [app]
    while apps:
        current = apps.pop()
        for command in current.registered_commands:
            name = command.name or command.callback.__name__.replace("_", "-")
            assert name not in found, f"two commands named {name!r}: one module each cannot tell them apart"
            found[name] = command.callback.__name__
        apps.extend(group.typer_instance for group in current.registered_groups)
    return found


def test_each_command_has_a_module_named_after_it() -> None:
    """`mt NAME` lives in mt/commands/NAME.py, and mt/commands/ holds no module that is not a command's
    (besides the shared ones named above)."""
    commands = {name.replace("-", "_") for name in cli_commands()}
    modules = {p.stem for p in COMMANDS.glob("*.py")} - {"__init__"} - SHARED_COMMAND_MODULES
    assert len(commands) == 14  # + clean (37), backtranslate, distill (38), import hf (36)
    assert sorted(commands - modules) == [], "commands without a module in mt/commands/"
    assert sorted(modules - commands) == [], "modules in mt/commands/ that are no command's (name a shared one above)"


def test_cli_only_declares_the_commands() -> None:
    """Each command function in mt/cli.py imports from mt its own command module and nothing else:
    the checks, the library call and the messages are the command module's."""
    tree = ast.parse((PACKAGE / "cli.py").read_text(encoding="utf-8"))
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    for name, function in cli_commands().items():
        imported = {node.module for node in ast.walk(functions[function])
                    if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "mt"}
        assert imported == {f"mt.commands.{name.replace('-', '_')}"}, f"mt {name}: cli.{function} imports {imported}"


# ---------------------------------------------------------------------------- one reader of checkpoints

CHECKPOINT_MODULE = PACKAGE / "model" / "checkpoint.py"


def torch_loads(path: Path) -> list[int]:
    """Line numbers of `torch.load(...)` calls (or a `from torch import load`) in `path`."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr == "load" and isinstance(node.value, ast.Name) \
                and node.value.id == "torch":
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "torch" and any(a.name == "load" for a in node.names):
            lines.append(node.lineno)
    return lines


def test_only_the_checkpoint_module_calls_torch_load() -> None:
    """A checkpoint is read in one place (mt/model/checkpoint.py), so it is checked one way and read
    once per command (tests/test_loads.py counts the reads)."""
    assert torch_loads(CHECKPOINT_MODULE), "the checkpoint module no longer reads checkpoints? update this test"
    found = [f"{p.relative_to(PACKAGE.parent)}:{line}" for p in sorted(PACKAGE.rglob("*.py")) if p != CHECKPOINT_MODULE
             for line in torch_loads(p)]
    assert not found, f"torch.load outside mt/model/checkpoint.py: {found}"


# ---------------------------------------------------------------------------- tests leave sys.path alone

TESTS = Path(__file__).resolve().parent
SYS_PATH_METHODS = {"insert", "append", "extend", "remove", "pop", "clear", "__setitem__", "__delitem__"}


def _is_sys_path(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name)
            and node.value.id == "sys")


def sys_path_edits(source: str) -> list[int]:
    """Line numbers where `source` changes sys.path: a call of one of its list methods (insert,
    append, remove, ...), an assignment to it or to an item or slice of it (`=`, `+=`, `del`),
    `from sys import path`, or pytest's `monkeypatch.syspath_prepend`."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                (node.func.attr in SYS_PATH_METHODS and _is_sys_path(node.func.value))
                or node.func.attr == "syspath_prepend"):
            lines.append(node.lineno)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            if any(_is_sys_path(t) or (isinstance(t, ast.Subscript) and _is_sys_path(t.value)) for t in targets):
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "sys" and any(a.name == "path" for a in node.names):
            lines.append(node.lineno)
    return sorted(lines)


def test_the_sys_path_check_catches_each_way_of_editing_it() -> None:
    edits = ["sys.path.insert(0, 'scripts')", "sys.path.append('scripts')", "sys.path.remove('scripts')",
             "sys.path.pop(0)", "sys.path[0] = 'scripts'", "sys.path[:0] = ['scripts']", "sys.path += ['scripts']",
             "sys.path = ['scripts']", "del sys.path[0]", "from sys import path",
             "monkeypatch.syspath_prepend('scripts')"]
    for edit in edits:
        assert sys_path_edits(f"import sys\n\n\ndef f(monkeypatch):\n    {edit}\n") == [5], edit
    assert sys_path_edits("import sys\n\nprint(sys.path[0], 'sys.path.insert(0, x)')\nfound = list(sys.path)\n") == []


@pytest.mark.parametrize("path", sorted(TESTS.rglob("*.py")), ids=lambda p: str(p.relative_to(TESTS)))
def test_no_test_file_edits_sys_path(path: Path) -> None:
    """Tests import what they share from tests/support/ and scripts as scripts.<folder>.<name>
    (pyproject.toml's pytest `pythonpath` puts the repository root on the path), and mt as installed:
    a test that edits sys.path changes what every later test in its process imports."""
    lines = sys_path_edits(path.read_text(encoding="utf-8"))
    assert not lines, f"{path.relative_to(TESTS.parent)} edits sys.path at line(s) {lines}; import from tests.support"
