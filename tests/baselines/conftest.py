"""Make the repository's ``baselines`` package importable however pytest is started.

``baselines/`` is a top-level package of the repository, not of the installed distribution:
``python -m pytest`` from the root finds it, a bare ``pytest`` may not (and would then see this
test folder, also named ``baselines``). Putting the root first on ``sys.path`` settles it.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
