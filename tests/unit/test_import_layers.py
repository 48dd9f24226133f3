"""docs/architecture.md: imports only point down. A module's layer is the folder it lives in, lowest first:
engine/common, then engine/record and engine/_native (the codec), segments, engine/log (the log layer), txn (the
transaction coordinator), replication, and the facade (the rest of engine/: Engine, clients, tools, spark). The folders segments/, txn/ and replication/ import
as engine.segments, engine.txn and engine.replication (an installed wheel holds them inside engine/), never by their
folder's name. The native modules (engine/_native/*.pyx) touch no other module's private members: a `_name` of an object
is read only through `self` or a variable typed with a cdef class (declared in the module or in a `.pxd` it cimports),
so what native code uses of Python objects is their public names, the seams their docstrings state."""
from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("engine", "segments", "txn", "replication")
FOLDER_LAYERS = PACKAGES[1:]  # top-level folders that import as engine.<folder>
# (module prefix, rank): the longest matching prefix names a module's layer
LAYERS = {"engine.common": 0, "engine.record": 1, "engine._native": 1, "engine.segments": 2, "engine.log": 3,
          "engine.txn": 4, "engine.replication": 5, "engine": 6}


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
    assert layer(_module_name(ROOT / "txn" / "transaction_coordinator.py", ROOT)) == "engine.txn"
    assert layer(_module_name(ROOT / "engine" / "log" / "unified_log.py", ROOT)) == "engine.log"


def test_imports_only_point_down():
    assert violations() == []


def test_the_checker_catches_an_upward_import(tmp_path):
    """Plant upward imports in a copy of the tree's shape: each must be reported, and only those."""
    for package in ("engine", "engine/common", "engine/record", "engine/_native", "engine/clients", "engine/log",
                    "segments", "txn", "replication"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "segments" / "log.py").write_text("from engine.replication import partition\n")
    (tmp_path / "engine" / "record" / "records.py").write_text("import engine.segments\nfrom engine.common import errors\n")
    (tmp_path / "engine" / "common" / "clock.py").write_text("from engine.record import codec\n")
    (tmp_path / "engine" / "_native" / "_acc.pyx").write_text("from engine.clients import accumulator\n")
    (tmp_path / "txn" / "state.py").write_text("from engine.segments import log\nfrom engine.common import errors\n")
    (tmp_path / "engine" / "clients" / "producer.py").write_text("from engine.replication import partition\n")
    (tmp_path / "replication" / "broker.py").write_text("from txn import state\n")  # by its folder's name
    (tmp_path / "engine" / "log" / "unified_log.py").write_text("from engine.txn import state\n")  # the log is below
    (tmp_path / "engine" / "log" / "log_read.py").write_text("from engine.segments import log\n")
    found = violations(tmp_path)
    assert len(found) == 6, found
    for planted in ("segments/log.py", "engine/record/records.py", "engine/common/clock.py",
                    "engine/_native/_acc.pyx", "replication/broker.py", "engine/log/unified_log.py"):
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


def _cdef_classes(path: Path, native: Path) -> set[str]:
    """The cdef classes a .pyx may type a variable with: its own and those it cimports from engine._native."""
    text = path.read_text()
    known = set(re.findall(r"^\s*cdef class (\w+)", text, re.M))
    for module, names in re.findall(r"^from engine\._native\.(\w+) cimport (.+)$", text, re.M):
        pxd = native / f"{module}.pxd"
        declared = set(re.findall(r"^\s*cdef class (\w+)", pxd.read_text(), re.M)) if pxd.exists() else set()
        known |= {n.strip() for n in names.strip("()").split(",") if n.strip() in declared}
    return known


def private_reaches(path: Path) -> list[str]:
    """`x._name` in a .pyx (comments and strings aside) where `x` is neither `self` nor a name some declaration types
    with a cdef class (`cdef T a, b`, a parameter `T a`; `(<T>x)._name` too): a private member of an object whose
    class the module does not declare."""
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
              if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)]
    known = _cdef_classes(path, path.parent)
    typed = {"self"}
    for i, t in enumerate(tokens[:-1]):
        if t.type == tokenize.NAME and t.string in known:
            j = i + 1
            while j < len(tokens) and tokens[j].type == tokenize.NAME:
                typed.add(tokens[j].string)
                if j + 1 < len(tokens) and tokens[j + 1].string == ",":
                    j += 2
                else:
                    break
    found = []
    for i, t in enumerate(tokens[1:-1], 1):
        name = tokens[i + 1]
        if t.string != "." or name.type != tokenize.NAME or not name.string.startswith("_") or name.string[:2] == "__":
            continue
        receiver = tokens[i - 1]
        if receiver.type == tokenize.NAME and (receiver.string in typed or receiver.string in ("engine", "_native")):
            continue
        if receiver.string == ")":  # a cast: (<T>x)._name
            depth, k = 0, i - 1
            while k > 0:
                depth += {")": 1, "(": -1}.get(tokens[k].string, 0)
                if depth == 0:
                    break
                k -= 1
            if tokens[k + 1].string == "<" and tokens[k + 2].string in known:
                continue
        found.append(f"{path.name}:{t.start[0]}: {receiver.string}.{name.string}")
    return found


def test_native_code_reaches_no_private_member_of_another_module():
    pyx = sorted((ROOT / "engine" / "_native").glob("*.pyx"))
    assert len(pyx) >= 14
    assert [f for p in pyx for f in private_reaches(p)] == []


def test_the_private_reach_checker_catches_one(tmp_path):
    native = tmp_path / "_native"
    native.mkdir()
    (native / "_seam.pxd").write_text("cdef class Seam:\n    cdef int _count\n")
    (native / "_user.pyx").write_text(
        "from engine._native._seam cimport Seam\n"
        "cdef class Own:\n    cdef object _log\n    cdef Seam _seam\n"
        "    def ok(self, Seam s):\n        cdef Seam a, b\n"
        "        return self._log, self._seam._count, s._count, a._count, b._count, (<Seam>self._log)._count\n"
        "    def bad(self, segment):\n"
        "        x = segment._lock  # a comment about y._z is no access\n"
        "        return self._log._storage_error, '(s._count)', x\n")
    assert private_reaches(native / "_user.pyx") == ["_user.pyx:9: segment._lock", "_user.pyx:10: _log._storage_error"]


NAMEDTUPLE_API = frozenset(("_replace", "_asdict", "_fields", "_make"))  # public, underscored to spare field names


def python_private_reaches(path: Path) -> list[str]:
    """`x._name` in a Python module where `x` is not `self` or `cls` (a namedtuple's own API aside): a private
    member of another object, `super()._hook` (an override of another class's private hook) included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                and node.attr not in NAMEDTUPLE_API \
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node.value)}.{node.attr}")
    return sorted(found)


def test_the_clients_reach_no_private_member_of_another_object():
    """The synchronous and asyncio clients wrap one core (engine.clients.consumer_core, the producer's steps) through
    public names: none reads another object's private state or overrides its private hooks."""
    modules = sorted((ROOT / "engine" / "clients").glob("*.py")) + sorted((ROOT / "engine" / "aio").glob("*.py"))
    assert len(modules) >= 10
    assert [f for p in modules for f in python_private_reaches(p)] == []
    # the synchronous consumer extends the core with its waits: it uses none of the core's private members either
    sync = ast.parse((ROOT / "engine" / "clients" / "consumer.py").read_text())
    assert [n.attr for n in ast.walk(sync) if isinstance(n, ast.Attribute) and n.attr.startswith("_")
            and not n.attr.startswith("__")] == []


def test_the_python_private_reach_checker_catches_one(tmp_path):
    (tmp_path / "wrapper.py").write_text(
        "class W(Base):\n"
        "    def ok(self, t):\n        return self._core.fetch(), t._replace(a=1), cls._x if 0 else self._own\n"
        "    def _hook(self):\n        super()._hook()\n        return self._core._positions  # c._d in a comment\n")
    assert python_private_reaches(tmp_path / "wrapper.py") == ["wrapper.py:5: super()._hook",
                                                               "wrapper.py:6: self._core._positions"]


def facade_reach(root: Path = ROOT, composition: str = "engine.composition", facade: str = "engine.engine") -> list[str]:
    """The modules the composition root imports, directly or not, that import the facade (an arrow back up into it)."""
    modules = {_module_name(p, root): p for package in PACKAGES for p in (root / package).rglob("*.py")}
    seen, pending, found = set(), [composition], []
    while pending:
        m = pending.pop()
        if m in seen or m not in modules:
            continue
        seen.add(m)
        targets = {t for _, t in _imports(modules[m])}
        if facade in targets:
            found.append(m)
        pending += [t for t in targets if t in modules]
    return sorted(found)


def test_nothing_the_engine_is_made_of_imports_the_engine():
    assert facade_reach() == []


def test_the_facade_reach_checker_finds_one(tmp_path):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    (tmp_path / "engine" / "composition.py").write_text("from engine.queue import StagedWrites\n")
    (tmp_path / "engine" / "queue.py").write_text("def f():\n    from engine.engine import open\n")
    (tmp_path / "engine" / "engine.py").write_text("from engine import composition\n")
    assert facade_reach(tmp_path) == ["engine.queue"]
