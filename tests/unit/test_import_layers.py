"""docs/architecture.md: imports only point down. A module's layer is the folder it lives in, lowest first:
engine/common, then engine/record and engine/_native (the codec), segments, txn, replication, and
the facade (the rest of engine/: Engine, clients, tools, spark). The folders segments/, txn/ and replication/ import
as engine.segments, engine.txn and engine.replication (an installed wheel holds them inside engine/), never by their
folder's name."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("engine", "segments", "txn", "replication")
FOLDER_LAYERS = PACKAGES[1:]  # top-level folders that import as engine.<folder>
# (module prefix, rank): the longest matching prefix names a module's layer
LAYERS = {"engine.common": 0, "engine.record": 1, "engine._native": 1, "engine.segments": 2, "engine.txn": 3,
          "engine.replication": 4, "engine": 5}


def layer(module: str) -> str | None:
    """The layer (its folder's prefix) a dotted module name belongs to, None outside the project's packages."""
    found = [prefix for prefix in LAYERS if module == prefix or module.startswith(prefix + ".")]
    return max(found, key=len) if found else None


def _import_statements(path: Path) -> ast.AST:
    """The module's AST; for a .pyx, its top-level Python imports (other lines blanked, numbering kept)."""
    text = path.read_text()
    if path.suffix != ".pyx":
        return ast.parse(text, filename=str(path))
    kept, open_parens = [], 0
    for line in text.splitlines():
        starts = line.startswith(("import ", "from ")) and " cimport " not in line
        if open_parens or starts:
            kept.append(line)
            open_parens += line.count("(") - line.count(")")
        else:
            kept.append("")
    return ast.parse("\n".join(kept), filename=str(path))


def _cimports(path: Path) -> list[tuple[int, str]]:
    """`from X cimport ...` lines of a .pyx or .pxd (the native modules' links to each other)."""
    return [(i, line.split()[1]) for i, line in enumerate(path.read_text().splitlines(), 1)
            if line.startswith("from ") and " cimport " in line]


def _imports(path: Path) -> list[tuple[int, str]]:
    out = _cimports(path) if path.suffix in (".pyx", ".pxd") else []
    for node in ast.walk(_import_statements(path)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            out += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return out


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    if parts[0] in FOLDER_LAYERS:
        parts.insert(0, "engine")
    return ".".join(parts)


def violations(root: Path = ROOT) -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted(p for p in (root / package).rglob("*") if p.suffix in (".py", ".pyx")):
            source = _module_name(path, root)
            own = layer(source)
            if source == "engine":  # the package re-exports every layer's public names
                continue
            for lineno, target in _imports(path):
                if target == "engine":  # the bare package: importing any module of engine/ runs it
                    continue
                theirs = layer(target)
                where = f"{path.relative_to(root)}:{lineno}"
                if any(f.startswith(where + " ") for f in found):  # one finding per import statement
                    continue
                if target.split(".")[0] in FOLDER_LAYERS:
                    found.append(f"{where} imports {target} by its folder's name (an installed kafkalog has none)")
                elif theirs is not None and LAYERS[theirs] > LAYERS[own]:
                    found.append(f"{where} ({own}) imports {target} ({theirs})")
    return found


def test_every_module_has_a_layer():
    modules = [_module_name(p, ROOT) for package in PACKAGES for p in (ROOT / package).rglob("*.py")]
    assert modules and all(layer(m) is not None for m in modules)
    assert layer("engine.record.codec") == "engine.record" and layer("engine.clients.producer") == "engine"
    assert layer("engine._native._records") == "engine._native" and layer("enginex") is None
    assert layer(_module_name(ROOT / "txn" / "unified_log.py", ROOT)) == "engine.txn"


def test_imports_only_point_down():
    assert violations() == []


def test_the_checker_catches_an_upward_import(tmp_path):
    """Plant upward imports in a copy of the tree's shape: each must be reported, and only those."""
    for package in ("engine", "engine/common", "engine/record", "engine/_native", "engine/clients", "segments",
                    "txn", "replication"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "segments" / "log.py").write_text("from engine.replication import partition\n")
    (tmp_path / "engine" / "record" / "records.py").write_text("import engine.segments\nfrom engine.common import errors\n")
    (tmp_path / "engine" / "common" / "clock.py").write_text("from engine.record import codec\n")
    (tmp_path / "engine" / "_native" / "_acc.pyx").write_text("from engine.clients import accumulator\n")
    (tmp_path / "txn" / "state.py").write_text("from engine.segments import log\nfrom engine.common import errors\n")
    (tmp_path / "engine" / "clients" / "producer.py").write_text("from engine.replication import partition\n")
    (tmp_path / "replication" / "broker.py").write_text("from txn import state\n")  # by its folder's name
    found = violations(tmp_path)
    assert len(found) == 5, found
    for planted in ("segments/log.py", "engine/record/records.py", "engine/common/clock.py",
                    "engine/_native/_acc.pyx", "replication/broker.py"):
        assert any(f.startswith(planted) for f in found), (planted, found)


def cycles(root: Path = ROOT) -> list[list[str]]:
    """Import cycles among the project's modules (module-level and deferred imports alike), each as a path."""
    modules = {_module_name(p, root): p for package in PACKAGES for p in (root / package).rglob("*.py")}
    graph = {m: sorted({t for _, t in _imports(p) if t in modules and t != m and t != "engine"})
             for m, p in modules.items() if m != "engine"}
    found, state = [], {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = "open"
        for t in graph.get(m, []):
            if state.get(t) == "open":
                found.append(path[path.index(t):] + [t] if t in path else [m, t])
            elif t not in state:
                visit(t, path + [t])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    return found


def test_no_module_imports_one_that_imports_it_back():
    assert cycles() == []


def test_the_cycle_checker_finds_one(tmp_path):
    pkg = tmp_path / "engine"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from engine.b import x\n")
    (pkg / "b.py").write_text("def f():\n    from engine.a import y\n")
    for folder in FOLDER_LAYERS:
        (tmp_path / folder).mkdir()
    assert cycles(tmp_path) == [["engine.a", "engine.b", "engine.a"]]
