"""DESIGN.md §2: imports only point down. engine/_native, engine.records and engine.errors (and the
codec's helpers) are leaves; segments < txn < replication < the engine facade."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# the leaf modules of the engine package: they may import only each other
LEAVES = {
    "engine.errors", "engine.records", "engine.batch_format", "engine.compression", "engine.columns",
    "engine.clock", "engine.codec", "engine._native", "engine.structs", "engine.accumulator",
}
RANK = {"leaf": 0, "segments": 1, "txn": 2, "replication": 3, "engine": 4}


def _layer(module: str) -> str | None:
    top = module.split(".")[0]
    if top == "engine":
        return "leaf" if any(module == m or module.startswith(m + ".") for m in LEAVES) else "engine"
    return top if top in RANK else None


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


def _imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(_import_statements(path)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            out += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return out


def _module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def violations(root: Path = ROOT) -> list[str]:
    found = []
    for package in ("engine", "segments", "txn", "replication"):
        for path in sorted((root / package).rglob("*.py")) + sorted((root / package).rglob("*.pyx")):
            if path.suffix == ".pyx":
                source_module = "engine._native"
            else:
                source_module = _module_name(path, root)
            own = _layer(source_module)
            if source_module == "engine":  # the package facade re-exports leaves and may grow upward
                continue
            for lineno, target in _imports(path):
                layer = _layer(target)
                if layer is None or target == "engine":  # the bare package: importing any leaf runs it
                    continue
                where = f"{path.relative_to(root)}:{lineno}"
                if (RANK[layer] > RANK[own] or (own == "leaf" and layer != "leaf")) and not any(
                        f.startswith(where + " ") for f in found):
                    found.append(f"{where} ({own}) imports {target} ({layer})")
    return found


def test_imports_only_point_down():
    assert violations() == []


def test_the_checker_catches_an_upward_import(tmp_path):
    """Plant `segments` importing `replication` in a copy of the tree: it must be reported."""
    for package in ("engine", "segments", "txn", "replication"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "segments" / "log.py").write_text("from replication import partition\n")
    (tmp_path / "engine" / "records.py").write_text("import segments\n")
    (tmp_path / "txn" / "state.py").write_text("from segments import log\nfrom engine import errors\n")
    found = violations(tmp_path)
    assert len(found) == 2, found
    assert any("segments/log.py" in f and "replication" in f for f in found)
    assert any("engine/records.py" in f for f in found)
