"""``python -m pytest research/``: the studies' own tests, beside the studies (their modules import as top-level)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
