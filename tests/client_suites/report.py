"""What the client-suite runners share: the repository's root and the marked section of docs/protocol.md that each
runner's `--write` replaces with its table."""
from __future__ import annotations

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "protocol.md")


def replace_between(begin: str, end: str, text: str, path: str = DOC) -> None:
    """Put `text` between the lines `begin` and `end` of `path`."""
    with open(path) as f:
        doc = f.read()
    start, stop = doc.index(begin) + len(begin), doc.index(end)
    with open(path, "w") as f:
        f.write(doc[:start] + "\n" + text + "\n" + doc[stop:])
