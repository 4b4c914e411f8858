"""`plain`: a value as JSON holds it — dicts and lists of Python scalars, numpy's scalars unwrapped.

Episodes and measurements are stored and compared as JSON; Gymnasium's spaces hand out numpy scalars
(``np.float32(0.75)``) that ``json`` refuses and that compare unequal to their own round trip.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["plain"]


def plain(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x
