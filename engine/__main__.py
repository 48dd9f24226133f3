"""`python -m engine` runs the same CLI as the `kafkalog` console script."""
from engine.tools.cli import main

raise SystemExit(main())
