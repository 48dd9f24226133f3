"""`python -m bench.readme_tables [LATEST_MD] [README]`: rewrite the README's benchmark tables from the
`latest.md` of one `make bench` run (`make bench` calls it), so that no figure in them is typed by hand.

The headline table keeps the rows of what users do (encode, decode reading every field, send(), consume, log
append, Spark, mirror); the figures (point reads, recovery, opening) and the peak-RSS tables are copied whole. Every
other row stays in latest.md.
"""
from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LATEST = os.path.join(ROOT, "bench", "results", "latest.md")
README = os.path.join(ROOT, "README.md")
START = "<!-- benchmark tables: written by `python -m bench.readme_tables` from bench/results/latest.md -->"
END = "<!-- end of benchmark tables -->"
HEADLINE_GROUPS = ("codec encode", "codec decode, read every field", "produce", "consume", "log append", "spark",
                   "mirror", "listener", "async produce", "async consume")


def _tables(text: str) -> tuple[list[str], list[list[str]]]:
    """The lines before the first table, and each table as its lines."""
    intro: list[str] = []
    tables: list[list[str]] = []
    in_table = False
    for line in text.splitlines():
        if line.startswith("|"):
            if not in_table:
                tables.append([])
            tables[-1].append(line)
            in_table = True
        else:
            in_table = False
            if not tables and line.strip():
                intro.append(line)
    return intro, tables


def render(latest_md: str) -> str:
    """The README's generated section for one run's latest.md."""
    intro, tables = _tables(latest_md)
    if not tables:
        raise ValueError("latest.md holds no table")
    rows = tables[0]
    headline = rows[:2] + [row for row in rows[2:] if row.split("|")[1].strip() in HEADLINE_GROUPS]
    parts = intro + ["", *headline]
    for table in tables[1:]:
        parts += ["", *table]
    return "\n".join(parts)


def update(latest_path: str = LATEST, readme_path: str = README) -> bool:
    """Replace the README's section between the markers; True if it changed."""
    with open(latest_path) as f:
        return replace_between(readme_path, START, END, render(f.read()))


def replace_between(path: str, start_marker: str, end_marker: str, section: str) -> bool:
    """Put `section` between the two marker lines of the file at `path`; True if that changed it."""
    with open(path) as f:
        text = f.read()
    head, start, rest = text.partition(start_marker)
    _, end, tail = rest.partition(end_marker)
    if not start or not end:
        raise ValueError(f"{path} lacks the markers {start_marker!r} and {end_marker!r}")
    new = f"{head}{start_marker}\n{section.rstrip()}\n{end_marker}{tail}"
    if new == text:
        return False
    with open(path, "w") as f:
        f.write(new)
    return True


def generated_section(readme: str, start_marker: str = START, end_marker: str = END) -> str:
    """The README's section between the markers, as written."""
    return readme.partition(start_marker)[2].partition(end_marker)[0].strip("\n")


if __name__ == "__main__":
    changed = update(*sys.argv[1:3])
    print("README benchmark tables " + ("rewritten" if changed else "already current"))
