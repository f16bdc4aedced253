"""Writes docs/cli.md from the parser: `python -m workers.cli_docs > docs/cli.md`.

The reference is argparse's own help for every command, at a fixed width so the committed file
does not depend on the terminal that generated it; tests/cli/test_cli_grammar.py regenerates it
and fails when the committed copy drifted.
"""

from __future__ import annotations

import os
import sys

from goodput.cli.grammar import reference
from workers.cli_parser import build_parser

WIDTH = "100"


def text() -> str:
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH  # argparse wraps help at the terminal's width
    try:
        return reference(build_parser())
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


if __name__ == "__main__":
    sys.stdout.write(text())
