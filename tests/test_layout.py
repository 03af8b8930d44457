"""The layout shows the pipeline: imports point down, never in a circle, and each room imports only the rooms below it.

The rooms, bottom up: errors, units, codec, extensions; model; kafka, format; segment; compaction; run; prestage;
planning, watch; stages, engines; pipeline, reports; rehearse, rolling, cluster; commands, cli, monitor. Read from the
code's own import statements (every one, including those under TYPE_CHECKING or inside functions), as a reviewer
would.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "migrate"

# what each room may import (besides itself); a room not listed here may import anything below the top
ALLOWED = {
    "errors": set(),
    "extensions": set(),
    "units": set(),
    "codec": {"errors"},
    "model": {"codec", "errors", "kafka"},
    "kafka": {"errors"},
    "format": {"errors", "extensions"},
    "segment": {"errors", "format", "kafka", "model"},
    "compaction": {"errors", "format", "model", "segment"},
    # the run's own files, and what became of a converted partition's segments after its swap (read with the rooms
    # of segments and their formats, below it)
    "run": {"codec", "errors", "extensions", "format", "kafka", "model", "segment"},
    "watch": {"codec", "errors", "model", "units"},
    "stages": {
        "codec",
        "compaction",
        "errors",
        "format",
        "kafka",
        "model",
        "planning",
        "prestage",
        "run",
        "segment",
        "watch",
    },
    "engines": {"errors", "format", "model", "run", "watch"},
    "prestage": {"codec", "errors", "kafka", "model", "run", "segment", "units"},
    # the read-only Kafka endpoint, and the real consumers run through it
    "serve": {"errors", "format", "kafka", "segment"},
    "consumers": {"errors", "format", "kafka", "segment", "serve"},
    # a cluster manifest's verbs: each broker runs the verbs below it over its own part, on its own host
    "cluster": {"codec", "engines", "errors", "model", "pipeline", "planning", "run", "stages"},
    # the rolling cut-over: the gate, and a driver that runs the verbs below it broker by broker
    "rolling": {
        "codec",
        "engines",
        "errors",
        "kafka",
        "model",
        "pipeline",
        "planning",
        "prestage",
        "reports",
        "run",
        "stages",
        "units",
    },
}
TOP = {"commands", "cli", "monitor"}  # nothing imports these but the command line itself (and the preload's face)


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(REPO).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _imports() -> dict[str, set[str]]:
    modules = _modules()
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("migrate"):
                for target in (node.module, *(f"{node.module}.{a.name}" for a in node.names)):
                    if target in modules and target not in (name, "migrate"):
                        edges[name].add(target)
            elif isinstance(node, ast.Import):
                edges[name] |= {a.name for a in node.names if a.name in modules and a.name != name}
    return edges


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt, path)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (found := visit(start, [])) is not None:
            return found
    return None


def test_no_module_imports_another_in_a_circle():
    assert _cycle(_imports()) is None


def test_no_room_imports_another_in_a_circle():
    rooms: dict[str, set[str]] = defaultdict(set)
    for source, targets in _imports().items():
        rooms[_room(source)] |= {_room(t) for t in targets if _room(t) != _room(source)}
    assert _cycle(rooms) is None


def test_each_room_imports_only_the_rooms_below_it():
    wrong = sorted(
        f"{source} imports {target}"
        for source, targets in _imports().items()
        for target in targets
        if _room(source) != _room(target)
        and (
            (_room(source) in ALLOWED and _room(target) not in ALLOWED[_room(source)])
            or (_room(target) in TOP and _room(source) not in TOP)
        )
    )
    assert wrong == []


def test_at_most_eight_modules_stand_at_the_root():
    root = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    assert len(root) <= 8, root


def test_no_file_holds_a_page_and_no_module_is_over_800_lines():
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        assert "<html" not in text.lower() and "<script" not in text.lower(), path
        assert text.count("\n") <= 800, (path, text.count("\n"))
