"""How every `kafkalog` subcommand speaks: human text by default, JSON with `--json`; errors are one line
on stderr; progress bars (tqdm) on stderr only when it is a terminal, so piped output stays clean."""
from __future__ import annotations

import json
import sys
from typing import Iterable, TextIO


class Output:
    def __init__(self, as_json: bool, stream: TextIO | None = None) -> None:
        self.as_json = as_json
        self.stream = stream or sys.stdout

    def result(self, doc, text: str) -> None:
        """The command's whole answer: `doc` as one JSON document, or `text`."""
        self.line(doc, text)

    def line(self, doc, text: str | None) -> None:
        """One item of a streamed answer: a JSON line, or a text line (None prints nothing)."""
        if self.as_json:
            self.stream.write(json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n")
        elif text:
            self.stream.write(text + "\n")


def progress(items: Iterable, total: int | None = None, desc: str = ""):
    """`items` with a progress bar on stderr when stderr is a terminal (tqdm), else as they are."""
    from tqdm import tqdm

    return tqdm(items, total=total, desc=desc, unit="file", disable=not sys.stderr.isatty(), file=sys.stderr,
                leave=False)
