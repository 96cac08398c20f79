"""``python -m cuberay``: the same command line as the ``cuberay`` script."""

from __future__ import annotations

from cuberay.cli import run

if __name__ == "__main__":
    run()
