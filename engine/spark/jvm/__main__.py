"""`python -m engine.spark.jvm [--force]`: build kafkalog-spark.jar if it is missing or stale, saying so in one line."""
import sys

from engine.spark.jvm import build

try:
    print(build(force="--force" in sys.argv))
except RuntimeError as exc:
    print(exc, file=sys.stderr)
    sys.exit(1)
