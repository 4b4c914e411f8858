"""Moving experience between stores and machines: export and import as JSONL (always) or Parquet (with pyarrow).

An export is one JSON object per line, ``{"kind": "measurement" | "episode" | "calibration", ...row}``;
importing it into another store adds what that store lacks (rows keep their ``uid``/``id``, so an
import twice adds nothing). Import also reads the real tier's own measurement files
(:mod:`rsi_env.real.vllm_driver` lines, e.g. ``data/measurements/h200-vllm0.26/*.jsonl``, and
:mod:`rsi_env.real.sglang_driver` lines, filed under ``sglang-<version>``), so measurements taken before the store
existed feed the store, and through it the calibration.
"""

from __future__ import annotations

import hashlib
import json
from calendar import timegm
from collections.abc import Iterable, Iterator
from pathlib import Path
from time import strptime
from typing import Any

from rsi_env.engine.engines import row_engine
from rsi_env.engine.hardware import load_hardware
from rsi_env.engine.model import load_model
from rsi_env.engine.telemetry import Telemetry
from rsi_env.engine.workload import Workload
from rsi_env.errors import StoreError
from rsi_env.store.db import CALIBRATION_COLUMNS, EPISODE_COLUMNS, JSON_COLUMNS, MEASUREMENT_COLUMNS, ExperienceStore
from rsi_env.store.record import REAL_EXTRAS, measurement_rows

__all__ = ["driver_rows", "export_store", "import_files"]

_KINDS = {"measurement": "measurements", "episode": "episodes", "calibration": "calibrations"}


def _records(store: ExperienceStore) -> Iterator[dict[str, Any]]:
    for r in store.measurements():
        r.pop("id", None)
        yield {"kind": "measurement", **r}
    for r in store.episodes():
        yield {"kind": "episode", **r}
    for r in store.calibrations():
        yield {"kind": "calibration", **r}


def export_store(store: ExperienceStore, out: str | Path, fmt: str | None = None) -> dict[str, int]:
    """Write the whole store to ``out`` (``.jsonl``, or ``.parquet``: one file per kind, ``out`` + ``.episodes`` …)."""
    path = Path(out)
    fmt = fmt or ("parquet" if path.suffix == ".parquet" else "jsonl")
    counts = {k: 0 for k in _KINDS}
    if fmt == "jsonl":
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as f:
            for rec in _records(store):
                counts[rec["kind"]] += 1
                f.write(json.dumps(rec, sort_keys=True) + "\n")
        return counts
    if fmt != "parquet":
        raise StoreError(f"unknown export format {fmt!r}: use jsonl or parquet")
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise StoreError("Parquet export needs pyarrow (pip install pyarrow); JSONL works without it") from None
    by_kind: dict[str, list[dict[str, Any]]] = {k: [] for k in _KINDS}
    for rec in _records(store):
        by_kind[rec.pop("kind")].append({k: json.dumps(v) if k in JSON_COLUMNS and v is not None else v
                                         for k, v in rec.items()})
    for kind, rows in by_kind.items():
        counts[kind] = len(rows)
        target = path if kind == "measurement" else path.with_name(f"{path.stem}.{_KINDS[kind]}.parquet")
        pq.write_table(pa.Table.from_pylist(rows), target)
    return counts


def _parquet_records(path: Path) -> Iterator[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise StoreError(f"reading {path} needs pyarrow (pip install pyarrow)") from None
    if path.name.endswith(".episodes.parquet"):
        kind = "episode"
    elif path.name.endswith(".calibrations.parquet"):
        kind = "calibration"
    else:
        kind = "measurement"
    for row in pq.read_table(path).to_pylist():
        yield {"kind": kind, **{k: json.loads(v) if k in JSON_COLUMNS and isinstance(v, str) else v
                                for k, v in row.items()}}


def _when(s: str | None) -> float:
    if not s:
        return 0.0
    return float(timegm(strptime(s[:19], "%Y-%m-%dT%H:%M:%S")))


def driver_rows(lines: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Store rows from the real tier's measurement lines; one engine start's cost is charged to its first row."""
    out: list[dict[str, Any]] = []
    seen_starts: set[tuple[str, str, float]] = set()
    for raw in lines:
        kind, release = row_engine(raw)  # vLLM's driver lines or SGLang's
        cfg = kind.make(raw.get("flags") or {})
        model, hw = load_model(raw["model"]), load_hardware(raw["hardware"])
        w = Workload.from_dict(raw["workload_spec"])
        tel = Telemetry.from_dict(raw["telemetry"])
        start_key = (raw["model"], json.dumps(raw.get("flags"), sort_keys=True), float(raw.get("startup_s") or 0.0))
        startup = 0.0 if start_key in seen_starts else start_key[2]
        seen_starts.add(start_key)
        gpus = cfg.num_gpus
        gs = (float(raw.get("wall_s") or tel.duration_s) + startup) * gpus
        row = measurement_rows("real", release, cfg, model, hw, [w], [tel], resolved=[raw.get("resolved")],
                               extras=[{k: raw.get(k) for k in REAL_EXTRAS}],
                               gpu_seconds=[gs])[0]
        row["uid"] = hashlib.sha256(json.dumps(raw, sort_keys=True).encode()).hexdigest()[:32]
        row["created"] = _when(raw.get("when"))
        row["trial"] = hashlib.sha256(repr(start_key).encode()).hexdigest()[:32]
        row["source"] = "import:real-tier-file"
        out.append(row)
    return out


def import_files(store: ExperienceStore, paths: Iterable[str | Path]) -> dict[str, int]:
    """Add the rows of export files (JSONL/Parquet) and real-tier measurement files; returns new rows per kind."""
    added = {k: 0 for k in _KINDS}
    for p in map(Path, paths):
        if not p.is_file():
            raise StoreError(f"no such file to import: {p}")
        if p.suffix == ".parquet":
            records = list(_parquet_records(p))
        else:
            records = []
            for n, line in enumerate(p.read_text().splitlines(), 1):
                if line.strip():
                    try:
                        records.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise StoreError(f"{p}:{n}: not a JSON line ({exc})") from None
        driver = [r for r in records if "kind" not in r and "workload_spec" in r
                  and ("vllm_version" in r or "sglang_version" in r)]
        unknown = [r for r in records if "kind" not in r and r not in driver]
        if unknown:
            raise StoreError(f"{p}: {len(unknown)} lines are neither an rsi-env export nor real-tier measurements")
        meas = [r for r in records if r.get("kind") == "measurement"] + driver_rows(driver)
        added["measurement"] += store.add_measurements(
            [{c: r.get(c) for c in MEASUREMENT_COLUMNS} for r in meas])
        eps = [{c: r.get(c) for c in EPISODE_COLUMNS} for r in records if r.get("kind") == "episode"]
        if eps:
            added["episode"] += store.add_episodes(eps)
        for r in records:
            if r.get("kind") == "calibration":
                store.add_calibration({c: r.get(c) for c in CALIBRATION_COLUMNS})
                added["calibration"] += 1
    return added
