"""The code's shape (docs/architecture.md): no source file over MAX_FILE_LINES lines, and no class over
MAX_CLASS_LINES lines unless its docstring says why it stays one class and how long it is ("which is why it stays one
class of about N lines", N within a tenth of its length), so a class only grows past that on purpose."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("engine", "segments", "txn", "replication", "bench", "tests")
SUFFIXES = (".py", ".pyx", ".pxd", ".java")
MAX_FILE_LINES = 800
MAX_CLASS_LINES = 400
WHY = re.compile(r"(?:which )?is why (?:it|they) stays? one class of about (\d+) lines")


def sources(root: Path = ROOT) -> list[Path]:
    return sorted(p for folder in FOLDERS if (root / folder).is_dir() for p in (root / folder).rglob("*")
                  if p.suffix in SUFFIXES and ".cache" not in p.parts)


def long_files(root: Path = ROOT) -> list[str]:
    out = []
    for p in sources(root):
        n = len(p.read_text(encoding="utf-8").splitlines())
        if n > MAX_FILE_LINES:
            out.append(f"{p.relative_to(root)}: {n} lines")
    return out


def _pyx_classes(text: str):
    """(name, first line, last line, docstring) of each top-level class of a Cython source."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if re.match(r"(cdef )?class \w+", line)]
    for k, i in enumerate(starts):
        end = len(lines)
        for j in range(i + 1, len(lines)):
            if lines[j] and not lines[j][0].isspace() and not lines[j].startswith(("#", ")")):
                end = j
                break
        body = "\n".join(lines[i + 1:end])
        doc = re.search(r'"""(.*?)"""', body, re.S)
        yield re.match(r"(?:cdef )?class (\w+)", lines[i]).group(1), i + 1, end, doc.group(1) if doc else ""


def long_classes(root: Path = ROOT) -> list[str]:
    out = []
    for p in sources(root):
        text = p.read_text(encoding="utf-8")
        if p.suffix == ".py":
            found = [(n.name, n.lineno, n.end_lineno, ast.get_docstring(n) or "")
                     for n in ast.walk(ast.parse(text)) if isinstance(n, ast.ClassDef)]
        elif p.suffix == ".pyx":
            found = list(_pyx_classes(text))
        else:
            continue
        for name, first, last, doc in found:
            size = last - first + 1
            if size <= MAX_CLASS_LINES:
                continue
            said = WHY.search(" ".join(doc.split()))
            if said is None or abs(int(said.group(1)) - size) > size / 10:
                out.append(f"{p.relative_to(root)}: {name} is {size} lines; its docstring says "
                           f"{said.group(0) if said else 'nothing of why it stays one class'}")
    return out


def test_no_source_file_is_over_800_lines():
    assert long_files() == []


def test_a_class_over_400_lines_says_why_and_how_long_it_is():
    assert long_classes() == []


def test_the_shape_checks_find_what_breaks_them(tmp_path):
    (tmp_path / "engine").mkdir()
    filler = "\n".join(f"    x{i} = {i}" for i in range(MAX_CLASS_LINES + 20))
    (tmp_path / "engine" / "big.py").write_text(
        f'class Quiet:\n    """No reason given."""\n{filler}\n\n\n'
        f'class Stale:\n    """One lock, which is why it stays one class of about 100 lines."""\n{filler}\n\n\n'
        f'class Said:\n    """One lock, which is why it stays one class of about {MAX_CLASS_LINES + 22} lines."""\n'
        f'{filler}\n')
    (tmp_path / "engine" / "_n.pyx").write_text(f"cdef class Native:\n    cdef int a\n{filler}\n")
    assert [f.split(":")[0] for f in long_files(tmp_path)] == ["engine/big.py"]
    found = long_classes(tmp_path)
    assert [f.split(": ")[1].split()[0] for f in found] == ["Native", "Quiet", "Stale"], found


def shape_shifters(root: Path = ROOT) -> list[str]:
    """The places where an object's attribute lookup may do work or an object becomes another: a class that defines
    `__getattr__`, an assignment to an object's `__class__` or `__dict__` (the lazy objects of docs/architecture.md's
    "Lazy partitions" are explicit instead: a slot's `load()`, the replica manager's `made()`)."""
    out = []
    for p in sources(root):
        if p.suffix != ".py" or "tests" in p.relative_to(root).parts[:1]:
            continue
        tree = ast.parse(p.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                out += [f"{p.relative_to(root)}:{f.lineno}: {node.name}.__getattr__" for f in node.body
                        if isinstance(f, ast.FunctionDef) and f.name in ("__getattr__", "__getattribute__")]
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                out += [f"{p.relative_to(root)}:{node.lineno}: {ast.unparse(t)} =" for t in targets
                        if isinstance(t, ast.Attribute) and t.attr in ("__class__", "__dict__")]
    return out


def test_no_object_loads_on_attribute_lookup_or_changes_its_class():
    assert shape_shifters() == []


def test_the_shape_shifter_check_catches_each_kind(tmp_path):
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "lazy.py").write_text(
        "class A:\n    def __getattr__(self, name):\n        return 1\n\n\n"
        "def become(a, b):\n    a.__class__ = type(b)\n    a.__dict__ = b.__dict__\n\n\n"
        "def __getattr__(name):  # a module's own, for lazy imports, is not an object's\n    return name\n")
    assert shape_shifters(tmp_path) == ["engine/lazy.py:2: A.__getattr__", "engine/lazy.py:7: a.__class__ =",
                                        "engine/lazy.py:8: a.__dict__ ="]
