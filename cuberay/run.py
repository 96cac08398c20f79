"""``python -m cuberay.run <job-id>``: the driver of one admitted cuberay job (see cuberay.platform.runner)."""

from __future__ import annotations

import sys

from cuberay.platform.runner import main

if __name__ == "__main__":
    sys.exit(main())
