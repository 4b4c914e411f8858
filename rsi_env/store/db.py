"""`ExperienceStore`: every measurement and episode, in one SQLite file that many processes write at once.

SQLite in WAL mode: readers never block the writer, and a writer killed mid-transaction leaves
the file as it was at its last commit (the WAL's uncommitted frames are ignored on the next open).
Each write is one short ``BEGIN IMMEDIATE`` transaction (a batch of rows), with a busy timeout so
concurrent writers — Ray workers, parallel searches — wait their turn instead of failing. One
connection per process, opened lazily and reopened after a fork.

Where the store lives (``RSI_ENV_STORE``, or the ``url`` argument):

- unset: ``$XDG_CACHE_HOME/rsi-env/experience.sqlite`` (``~/.cache/rsi-env/…``);
- ``sqlite:///relative/path.sqlite`` or ``sqlite:////absolute/path.sqlite`` (SQLAlchemy's form), or a plain path;
- ``sqlite://`` or ``:memory:``: in memory, this process only;
- ``off`` (or ``none``, ``0``, ``false``, empty): no store; nothing is recorded.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rsi_env.errors import StoreError
from rsi_env.store.schema import MIGRATIONS, SCHEMA_VERSION

__all__ = ["DISABLED", "ExperienceStore", "default_store_url", "parse_store_url"]

DISABLED = frozenset({"off", "none", "0", "false", "no", "disabled"})
MEASUREMENT_COLUMNS = (
    "uid", "created", "tier", "engine_version", "calibration", "model", "model_features", "hardware",
    "hardware_features", "num_gpus", "workload", "workload_hash", "workload_spec", "workload_stats", "config",
    "config_key", "resolved", "telemetry", "ok", "gpu_seconds", "cost_usd", "source", "episode", "trial", "sim_key",
    "extra")
EPISODE_COLUMNS = ("id", "created", "task", "kwargs", "seed", "actions", "rewards", "final_config", "best_score",
                   "passed", "steps", "measurements", "source", "extra")
TRAJECTORY_COLUMNS = ("id", "created", "suite", "instance", "agent", "attempt", "episode", "passed", "reward", "result",
                      "messages", "observations")
CALIBRATION_COLUMNS = ("id", "created", "hardware", "engine_version", "rows_used", "held_out_error", "provenance",
                       "path")
JSON_COLUMNS = frozenset({"model_features", "hardware_features", "workload_spec", "workload_stats", "config",
                          "resolved", "telemetry", "extra", "kwargs", "actions", "rewards", "final_config",
                          "held_out_error", "provenance", "result", "messages", "observations"})
_BUSY_MS = 60_000


def default_store_url() -> str:
    """``RSI_ENV_STORE`` if set, else the SQLite file under the user's cache directory."""
    env = os.environ.get("RSI_ENV_STORE")
    if env is not None:
        return env
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return f"sqlite:///{cache / 'rsi-env' / 'experience.sqlite'}"


def parse_store_url(url: str) -> str | None:
    """The SQLite path (or ``:memory:``) a store URL names; ``None`` for a disabled store."""
    u = url.strip()
    if u.lower() in DISABLED or not u:
        return None
    if u in ("sqlite://", "sqlite:///:memory:", ":memory:"):
        return ":memory:"
    if u.startswith("sqlite:///"):
        path = u[len("sqlite:///"):]
        if not path:
            raise StoreError(f"store URL {url!r} names no file: use sqlite:///path/to/experience.sqlite")
        return path
    if "://" in u:
        raise StoreError(f"unsupported store URL {url!r}: use sqlite:///PATH, a plain path, or 'off'")
    return u


def _dumps(x: Any) -> str:
    return json.dumps(x, sort_keys=True, separators=(",", ":"), default=_jsonable)


def _jsonable(x: Any) -> Any:
    if hasattr(x, "item"):
        return x.item()
    if isinstance(x, (set, frozenset, tuple)):
        return list(x)
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def encode(row: Mapping[str, Any], columns: Sequence[str]) -> tuple[Any, ...]:
    """A row dict as the tuple of its column values, JSON columns as text."""
    return tuple(_dumps(row.get(c)) if c in JSON_COLUMNS and row.get(c) is not None else row.get(c) for c in columns)


def decode(row: sqlite3.Row) -> dict[str, Any]:
    """A fetched row as a dict, JSON columns parsed."""
    return {k: (json.loads(row[k]) if k in JSON_COLUMNS and row[k] is not None else row[k])
            for k in row.keys()}  # noqa: SIM118  (iterating a Row yields values)


class ExperienceStore:
    """The experience store at ``url`` (see the module docstring); ``url=None`` reads ``RSI_ENV_STORE``."""

    def __init__(self, url: str | None = None) -> None:
        self.url = default_store_url() if url is None else url
        path = parse_store_url(self.url)
        if path is None:
            raise StoreError(f"the store is disabled ({self.url!r}); set RSI_ENV_STORE=sqlite:///PATH to use one")
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._pid = -1

    def __repr__(self) -> str:
        return f"ExperienceStore({self.path!r})"

    # ---- connection ------------------------------------------------------------------------------
    @property
    def conn(self) -> sqlite3.Connection:
        """This process's connection, opened (and migrated) on first use and after a fork."""
        if self._conn is None or self._pid != os.getpid():
            self._conn = self._open()
            self._pid = os.getpid()
        return self._conn

    def _open(self) -> sqlite3.Connection:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(self.path, timeout=_BUSY_MS / 1000, isolation_level=None, check_same_thread=False)
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout={_BUSY_MS}")
            if self.path != ":memory:":
                mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise StoreError(f"{self.path}: SQLite could not switch to WAL mode (got {mode!r})")
            conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across a killed process
            self._migrate(conn)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open the experience store {self.path}: {exc}") from None
        return conn

    @staticmethod
    def _version(conn: sqlite3.Connection) -> int:
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
        return int(row[0] or 0)

    def _migrate(self, conn: sqlite3.Connection, upto: int = SCHEMA_VERSION) -> None:
        """Apply every migration past the store's version, in order, in one write transaction."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            have = self._version(conn)
            if have > SCHEMA_VERSION:
                raise StoreError(f"{self.path} has schema version {have}, newer than this rsi-env knows "
                                 f"({SCHEMA_VERSION}): upgrade rsi-env, or point RSI_ENV_STORE at another file")
            for v in range(have + 1, upto + 1):
                for stmt in MIGRATIONS[v - 1]:
                    conn.execute(stmt)
                conn.execute("INSERT INTO schema_version (version) VALUES (?)", (v,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    @property
    def schema_version(self) -> int:
        return self._version(self.conn)

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One short write transaction (``BEGIN IMMEDIATE``: writers queue on the lock, never deadlock)."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        if self._conn is not None and self._pid == os.getpid():
            self._conn.close()
        self._conn = None

    # ---- writes -----------------------------------------------------------------------------------
    def add_measurements(self, rows: Iterable[Mapping[str, Any]]) -> int:
        """Insert measurement rows (dicts of `MEASUREMENT_COLUMNS`) in one transaction; returns how many were new.

        A sim-tier row whose ``sim_key`` is already stored, or any row whose ``uid`` is, is skipped:
        the simulator is deterministic, so a repeat adds nothing, and an import twice adds nothing.
        """
        values = [encode(r, MEASUREMENT_COLUMNS) for r in rows]
        if not values:
            return 0
        cols = ", ".join(MEASUREMENT_COLUMNS)
        marks = ", ".join("?" * len(MEASUREMENT_COLUMNS))
        with self.transaction() as conn:
            before = conn.total_changes
            conn.executemany(f"INSERT OR IGNORE INTO measurements ({cols}) VALUES ({marks})", values)
            return conn.total_changes - before

    def add_episode(self, row: Mapping[str, Any]) -> None:
        """Insert (or replace: the same episode recorded again as it went on) one episode row."""
        cols = ", ".join(EPISODE_COLUMNS)
        with self.transaction() as conn:
            conn.execute(f"INSERT OR REPLACE INTO episodes ({cols}) VALUES ({', '.join('?' * len(EPISODE_COLUMNS))})",
                         encode(row, EPISODE_COLUMNS))

    def add_episodes(self, rows: Iterable[Mapping[str, Any]]) -> int:
        values = [encode(r, EPISODE_COLUMNS) for r in rows]
        cols = ", ".join(EPISODE_COLUMNS)
        with self.transaction() as conn:
            before = conn.total_changes
            marks = ", ".join("?" * len(EPISODE_COLUMNS))
            conn.executemany(f"INSERT OR IGNORE INTO episodes ({cols}) VALUES ({marks})", values)
            return conn.total_changes - before

    def add_trajectory(self, row: Mapping[str, Any]) -> None:
        """Insert (or replace: an attempt run again) one suite attempt (a dict of `TRAJECTORY_COLUMNS`)."""
        cols = ", ".join(TRAJECTORY_COLUMNS)
        with self.transaction() as conn:
            conn.execute(f"INSERT OR REPLACE INTO trajectories ({cols}) VALUES "
                         f"({', '.join('?' * len(TRAJECTORY_COLUMNS))})", encode(row, TRAJECTORY_COLUMNS))

    def add_calibration(self, row: Mapping[str, Any]) -> None:
        cols = ", ".join(CALIBRATION_COLUMNS)
        with self.transaction() as conn:
            conn.execute(f"INSERT OR REPLACE INTO calibrations ({cols}) VALUES "
                         f"({', '.join('?' * len(CALIBRATION_COLUMNS))})", encode(row, CALIBRATION_COLUMNS))

    # ---- reads ------------------------------------------------------------------------------------
    def measurements(self, where: str = "", params: Sequence[Any] = (), limit: int | None = None
                     ) -> list[dict[str, Any]]:
        """Measurement rows (JSON decoded), oldest first; ``where`` is an SQL condition on the columns."""
        sql = "SELECT * FROM measurements" + (f" WHERE {where}" if where else "") + " ORDER BY id"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [decode(r) for r in self.conn.execute(sql, tuple(params))]

    def episodes(self, where: str = "", params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        sql = "SELECT * FROM episodes" + (f" WHERE {where}" if where else "") + " ORDER BY created"
        return [decode(r) for r in self.conn.execute(sql, tuple(params))]

    def trajectories(self, where: str = "", params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Suite attempts (JSON decoded), oldest first; ``where`` is an SQL condition on the columns."""
        sql = "SELECT * FROM trajectories" + (f" WHERE {where}" if where else "") + " ORDER BY created"
        return [decode(r) for r in self.conn.execute(sql, tuple(params))]

    def calibrations(self) -> list[dict[str, Any]]:
        return [decode(r) for r in self.conn.execute("SELECT * FROM calibrations ORDER BY created")]

    def stats(self) -> dict[str, Any]:
        """Counts: measurements (per tier), episodes, distinct models/hardware/workloads, GPU-seconds and cost."""
        c = self.conn
        one = (lambda sql: c.execute(sql).fetchone()[0])  # noqa: E731
        by_tier = {r[0]: {"measurements": r[1], "failed": r[2], "gpu_seconds": r[3] or 0.0, "cost_usd": r[4] or 0.0}
                   for r in c.execute("SELECT tier, count(*), sum(1 - ok), sum(gpu_seconds), sum(cost_usd) "
                                      "FROM measurements GROUP BY tier ORDER BY tier")}
        return {
            "store": self.path, "schema_version": self.schema_version,
            "measurements": one("SELECT count(*) FROM measurements"),
            "episodes": one("SELECT count(*) FROM episodes"),
            "calibrations": one("SELECT count(*) FROM calibrations"),
            "by_tier": by_tier,
            "models": one("SELECT count(DISTINCT model) FROM measurements"),
            "hardware": one("SELECT count(DISTINCT hardware) FROM measurements"),
            "workloads": one("SELECT count(DISTINCT workload_hash) FROM measurements"),
            "configs": one("SELECT count(DISTINCT config_key) FROM measurements"),
            "sources": {r[0]: r[1] for r in c.execute("SELECT source, count(*) FROM measurements GROUP BY source")},
            "first": one("SELECT min(created) FROM measurements"), "last": one("SELECT max(created) FROM measurements"),
        }

    def integrity_ok(self) -> bool:
        return str(self.conn.execute("PRAGMA integrity_check").fetchone()[0]) == "ok"


def now() -> float:
    return time.time()
