"""`python -m engine.staged_writes <path> <timeout ms>` with a request on stdin: the JVM sink's commit. Prints the
rows appended; a failure is one line on stderr (`ErrorName: message`) and exit status 1."""
from __future__ import annotations

import json
import sys

from engine.common.errors import InvalidConfigurationError, KafkaError
from engine.staged_writes.requester import commit


def main(argv: list[str]) -> int:
    try:
        if len(argv) != 2 or not argv[1].isdigit():
            raise InvalidConfigurationError("usage: python -m engine.staged_writes <path> <timeout ms> < request.json")
        try:
            req = json.load(sys.stdin)
        except ValueError as exc:
            raise InvalidConfigurationError(f"the request on stdin is not JSON: {exc}") from None
        print(commit(argv[0], req, int(argv[1])))
    except KafkaError as exc:  # the caller is the JVM: it reports this one line as the commit's error
        sys.stderr.write(f"{type(exc).__name__}: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
