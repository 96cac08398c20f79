"""cuberay's home: the one folder everything it writes on this machine goes under, unless told otherwise.

``$CUBERAY_HOME``, else ``~/.cuberay``. The local head's state and logs live there, and a platform file that
leaves ``spec.storage`` unset keeps its database, logs, checkpoints and tenant storage there too. A platform
file's own ``spec.storage`` wins over it for that platform's data (README, "Live platform").
"""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "CUBERAY_HOME"
DEFAULT_HOME = "~/.cuberay"


def home() -> Path:
    return Path(os.environ.get(HOME_ENV) or DEFAULT_HOME).expanduser()


def where_home() -> str:
    """Why :func:`home` is what it is, in a few words."""
    return f"${HOME_ENV}" if os.environ.get(HOME_ENV) else f"the default, {DEFAULT_HOME} (set ${HOME_ENV} for another)"
