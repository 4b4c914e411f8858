"""Real measurements as the fit reads them, and the seeded split that holds whole configurations out.

Measurements are the JSON lines :mod:`rsi_env.real.vllm_driver` or :mod:`rsi_env.real.sglang_driver` writes (one
per config and workload). Whole configurations are held out (never one workload of a config), chosen by a seeded
split, so the held-out error is the error on configurations the fit has never seen.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from rsi_env.engine.engines import row_engine
from rsi_env.engine.model import load_model
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.workload import Workload
from rsi_env.errors import CalibrationError

__all__ = ["Keyed", "Sample", "dense_and_moe", "load_samples", "read_rows", "samples_from_rows", "split"]


@dataclass(frozen=True)
class Sample:
    """One real measurement: what ran, and what the real engine reported."""

    model: str
    flags: dict[str, Any]
    workload: Workload
    real: Telemetry
    num_gpu_blocks: int
    engine_version: str
    startup_s: float
    longest_gap_s: float = 0.0  # the longest time between two consecutive steps of the real run's step trace
    cpu_probe_ms: float | None = None  # the host's CPU probe before the engine started (`rsi_env.real.host`)

    @property
    def config_key(self) -> str:
        return f"{self.model} {json.dumps(self.flags, sort_keys=True)}"


def samples_from_rows(rows: list[dict[str, Any]], where: str = "the measurements") -> list[Sample]:
    """Samples from real-tier measurement lines (the driver's JSON form); failed measurements are skipped."""
    out = []
    for row in rows:
        tel = Telemetry.from_dict(row["telemetry"])
        if tel.error:
            continue
        t = (row.get("steps") or {}).get("t") or []
        resolved = row.get("resolved") or {}
        _, release = row_engine(row)
        blocks = resolved.get("num_gpu_blocks") or resolved.get("max_total_num_tokens") or 0  # SGLang's: its pool
        out.append(Sample(row["model"], row["flags"], Workload.from_dict(row["workload_spec"]), tel, int(blocks), release,
                          float(row.get("startup_s") or 0.0), float(np.diff(t).max()) if len(t) > 1 else 0.0,
                          (row.get("host") or {}).get("cpu_probe_ms")))
    if not out:
        raise CalibrationError(f"no usable measurements in {where}")
    return out


def read_rows(paths: list[str] | list[str | Path]) -> tuple[list[str], list[dict[str, Any]]]:
    """The files' texts (for a calibration's digest) and their measurement lines, each file read once."""
    texts = [Path(p).read_text() for p in paths]
    return texts, [json.loads(line) for t in texts for line in t.splitlines() if line.strip()]


def load_samples(paths: list[str | Path]) -> list[Sample]:
    return samples_from_rows(read_rows(paths)[1], str([str(p) for p in paths]))


class Keyed(Protocol):
    """What `split` splits: anything that names its configuration."""

    @property
    def config_key(self) -> str: ...


_K = TypeVar("_K", bound=Keyed)


def split(samples: list[_K], seed: int, held_fraction: float = 0.3) -> tuple[list[_K], list[_K]]:
    """Hold out whole configurations: a seeded hash of each config decides, defaults always train."""
    keys = sorted({s.config_key for s in samples})
    scored = sorted(keys, key=lambda k: hashlib.sha256(f"{seed}:{k}".encode()).hexdigest())
    held = {k for k in scored if "{}" not in k}  # every model's default config stays in training
    n_held = max(1, round(held_fraction * len(keys)))
    held = set([k for k in scored if k in held][:n_held])
    return [s for s in samples if s.config_key not in held], [s for s in samples if s.config_key in held]


def dense_and_moe(samples: list[Sample]) -> tuple[list[Sample], list[Sample]]:
    """The samples of dense models and those of MoE models: the two stages of every fit."""
    is_moe = {m: load_model(m).is_moe for m in {s.model for s in samples}}
    return [s for s in samples if not is_moe[s.model]], [s for s in samples if is_moe[s.model]]
