"""The `difftest` command: `main` parses the subcommands (main.py); `show` prints a case and its
reproducers (show.py); common.py holds what they share. The top layer, with the pytest plugin."""

from difftest.cli.main import main

__all__ = ["main"]
