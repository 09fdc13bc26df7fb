"""``ragspine ingest | search | eval | serve | demo | libraries | graph``: the command line.

Only argparse at import time; each command imports what it runs.
"""

from ragspine.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
