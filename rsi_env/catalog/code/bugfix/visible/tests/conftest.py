"""Make the workspace's engine modules (kv_cache, engine, config) and the simulator's package importable."""

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), "@PKG_ROOT@"]
