"""The experience store's database: URLs, migrations, concurrent writers, a writer killed mid-write."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from rsi_env.errors import StoreError
from rsi_env.store import ExperienceStore, parse_store_url
from rsi_env.store.db import MEASUREMENT_COLUMNS
from rsi_env.store.schema import MIGRATIONS, SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[2]


def _row(trial: str, k: int, payload: str = "") -> dict:
    """A complete measurement row; ``payload`` makes the transaction long enough to be killed inside."""
    return {"uid": uuid.uuid4().hex, "created": time.time(), "tier": "sim", "engine_version": "0.26",
            "calibration": "default", "model": "m", "model_features": {"params_b": 8.0}, "hardware": "h",
            "hardware_features": {"memory_gb": 80.0}, "num_gpus": 1, "workload": f"w{k}", "workload_hash": f"h{k}",
            "workload_spec": {"name": f"w{k}"}, "workload_stats": {"requests": 1.0}, "config": {"k": k},
            "config_key": "c", "resolved": None, "telemetry": {"duration_s": 1.0, "pad": payload}, "ok": 1,
            "gpu_seconds": 1.0, "cost_usd": 0.001, "source": "test", "episode": None, "trial": trial,
            "sim_key": None, "extra": None}


def test_urls():
    assert parse_store_url("off") is None and parse_store_url("") is None and parse_store_url("None") is None
    assert parse_store_url("sqlite:////tmp/x.sqlite") == "/tmp/x.sqlite"
    assert parse_store_url("sqlite:///rel/x.sqlite") == "rel/x.sqlite"
    assert parse_store_url("/tmp/y.sqlite") == "/tmp/y.sqlite"
    assert parse_store_url("sqlite://") == ":memory:"
    with pytest.raises(StoreError, match="unsupported store URL"):
        parse_store_url("postgres://db/x")
    with pytest.raises(StoreError, match="disabled"):
        ExperienceStore("off")


def test_wal_and_schema(tmp_path):
    st = ExperienceStore(f"sqlite:///{tmp_path / 's.sqlite'}")
    assert st.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert st.schema_version == SCHEMA_VERSION
    assert st.stats()["measurements"] == 0 and st.integrity_ok()


def test_an_old_store_is_migrated_in_order_and_keeps_its_rows(tmp_path):
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    ExperienceStore(str(path))._migrate(conn, upto=1)  # a store as version 1 of rsi-env left it
    conn.execute("INSERT INTO measurements (uid, created, tier, engine_version, model, model_features, hardware, "
                 "hardware_features, num_gpus, workload, workload_hash, workload_spec, workload_stats, config, "
                 "config_key, telemetry, ok, gpu_seconds, cost_usd, source) VALUES ('u1', 0, 'sim', '0.26', 'm', "
                 "'{}', 'h', '{}', 1, 'w', 'h', '{}', '{}', '{}', 'c', '{}', 1, 0, 0, 't')")
    assert [r[0] for r in conn.execute("SELECT version FROM schema_version")] == [1]
    assert not conn.execute("SELECT name FROM sqlite_master WHERE name='calibrations'").fetchall()
    conn.close()
    st = ExperienceStore(str(path))
    assert st.schema_version == SCHEMA_VERSION == len(MIGRATIONS)
    assert [r["uid"] for r in st.measurements()] == ["u1"]
    assert st.calibrations() == []  # the table migration 2 adds
    st.conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION + 1,))
    st.close()
    with pytest.raises(StoreError, match="newer than this rsi-env knows"):
        _ = ExperienceStore(str(path)).conn


def _writer(path: str, n_batches: int, who: int) -> None:
    st = ExperienceStore(path)
    for b in range(n_batches):
        st.add_measurements([_row(f"{who}-{b}", k) for k in range(3)])


def _run_writers(path: str, n_writers: int, n_batches: int) -> None:
    """``n_writers`` processes (spawned: no inherited connection) each add ``n_batches`` batches; all exit cleanly."""
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, n_batches, w)) for w in range(n_writers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0


def test_concurrent_writers_lose_nothing(tmp_path):
    path = str(tmp_path / "c.sqlite")
    _ = ExperienceStore(path).conn  # created (and migrated) once; the writers race on the rows
    _run_writers(path, n_writers=4, n_batches=40)
    st = ExperienceStore(path)
    rows = st.measurements()
    assert len(rows) == 4 * 40 * 3
    trials: dict[str, int] = {}
    for r in rows:
        trials[r["trial"]] = trials.get(r["trial"], 0) + 1
    assert len(trials) == 160 and set(trials.values()) == {3}
    assert st.integrity_ok()


def test_concurrent_first_opens_migrate_once(tmp_path):
    path = str(tmp_path / "race.sqlite")
    _run_writers(path, n_writers=3, n_batches=2)
    st = ExperienceStore(path)
    assert [r[0] for r in st.conn.execute("SELECT version FROM schema_version ORDER BY version")] == \
        list(range(1, SCHEMA_VERSION + 1))
    assert len(st.measurements()) == 3 * 2 * 3


def test_a_writer_killed_mid_write_leaves_the_store_readable_and_consistent(tmp_path):
    path = tmp_path / "k.sqlite"
    script = textwrap.dedent(f"""
        import sys, time, uuid
        sys.path.insert(0, {str(ROOT)!r})
        from tests.store.test_db import _row
        from rsi_env.store import ExperienceStore
        st = ExperienceStore({str(path)!r})
        b = 0
        while True:  # batches of 8 rows of ~20 kB each: most of the time is spent inside a transaction
            st.add_measurements([_row(f"t{{b}}", k, "x" * 20000) for k in range(8)])
            b += 1
            if b == 3:
                print("ready", flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(0.4)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    st = ExperienceStore(str(path))
    assert st.integrity_ok()
    rows = st.measurements()
    assert len(rows) >= 3 * 8
    per_trial: dict[str, list[dict]] = {}
    for r in rows:
        per_trial.setdefault(r["trial"], []).append(r)
    # Every committed batch is whole, every row complete; nothing half-written is visible.
    assert all(len(v) == 8 for v in per_trial.values())
    for r in rows:
        assert all(r[c] is not None for c in ("uid", "tier", "model", "workload_hash", "config_key", "source"))
        assert isinstance(r["telemetry"], dict) and len(r["telemetry"]["pad"]) == 20000
    assert st.add_measurements([_row("after", 0)]) == 1  # and it takes new writes
    assert json.loads(st.conn.execute("SELECT telemetry FROM measurements WHERE trial='after'").fetchone()[0])


def test_all_columns_are_written(tmp_path):
    st = ExperienceStore(str(tmp_path / "a.sqlite"))
    st.add_measurements([_row("t", 0)])
    r = st.measurements()[0]
    assert set(MEASUREMENT_COLUMNS) <= set(r)
