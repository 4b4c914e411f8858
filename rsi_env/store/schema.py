"""The experience store's schema, as an ordered list of migrations.

A store remembers the version it reached in ``schema_version``; opening it applies every later
migration, in order, inside one write transaction, so two processes opening an old store at once
migrate it exactly once. A migration is never edited after it ships: a change is a new one.
"""

from __future__ import annotations

__all__ = ["MIGRATIONS", "SCHEMA_VERSION"]

# Version k is reached by running MIGRATIONS[k - 1].
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 1: measurements (one row per workload measured) and episodes.
    (
        """CREATE TABLE measurements (
            id INTEGER PRIMARY KEY,
            uid TEXT NOT NULL UNIQUE,          -- stable across export/import
            created REAL NOT NULL,             -- unix time
            tier TEXT NOT NULL,                -- sim | real | endpoint
            engine_version TEXT NOT NULL,
            calibration TEXT,                  -- sim: the calibration used
            model TEXT NOT NULL,
            model_features TEXT NOT NULL,      -- JSON: ModelSpec.features
            hardware TEXT NOT NULL,
            hardware_features TEXT NOT NULL,   -- JSON: HardwareSpec.features (+ price_per_hour)
            num_gpus INTEGER NOT NULL,
            workload TEXT NOT NULL,            -- its name
            workload_hash TEXT NOT NULL,
            workload_spec TEXT NOT NULL,       -- JSON: Workload.to_dict()
            workload_stats TEXT NOT NULL,      -- JSON: lengths, rate, concurrency, requests
            config TEXT NOT NULL,              -- JSON: the flags set (EngineConfig.to_dict(only_set=True))
            config_key TEXT NOT NULL,          -- sha256 of config, 16 hex
            resolved TEXT,                     -- JSON: what the engine resolved (real tier: as vLLM reported)
            telemetry TEXT NOT NULL,           -- JSON: Telemetry.to_dict()
            ok INTEGER NOT NULL,
            gpu_seconds REAL NOT NULL,         -- duration x GPUs: what this measurement costs(/would cost) on GPUs
            cost_usd REAL NOT NULL,
            source TEXT NOT NULL,              -- who asked: env:<task>, search:<name>, cli, ...
            episode TEXT,
            trial TEXT,                        -- the workloads measured together for one configuration
            sim_key TEXT,                      -- sim tier: the deterministic measurement's key (recorded once)
            extra TEXT                         -- JSON: anything else (real tier: startup_s, counters)
        )""",
        "CREATE UNIQUE INDEX measurements_sim_key ON measurements(sim_key) WHERE sim_key IS NOT NULL",
        "CREATE INDEX measurements_context ON measurements(model, hardware, engine_version, workload_hash)",
        """CREATE TABLE episodes (
            id TEXT PRIMARY KEY,
            created REAL NOT NULL,
            task TEXT NOT NULL,
            kwargs TEXT NOT NULL,              -- JSON
            seed INTEGER,
            actions TEXT NOT NULL,             -- JSON list
            rewards TEXT NOT NULL,             -- JSON list
            final_config TEXT NOT NULL,        -- JSON
            best_score REAL,
            passed INTEGER,
            steps INTEGER NOT NULL,
            measurements INTEGER NOT NULL,
            source TEXT NOT NULL,
            extra TEXT
        )""",
    ),
    # 2: calibrations fitted from the store, with provenance and held-out error; tier lookups.
    (
        """CREATE TABLE calibrations (
            id TEXT PRIMARY KEY,
            created REAL NOT NULL,
            hardware TEXT NOT NULL,
            engine_version TEXT NOT NULL,
            rows_used INTEGER NOT NULL,
            held_out_error TEXT NOT NULL,      -- JSON
            provenance TEXT NOT NULL,          -- JSON
            path TEXT                          -- where the YAML was written
        )""",
        "CREATE INDEX measurements_tier ON measurements(tier, hardware, engine_version)",
    ),
    # 3: a benchmark suite's attempts: the episode an agent played on an instance, its conversation and result.
    (
        """CREATE TABLE trajectories (
            id TEXT PRIMARY KEY,               -- suite run's attempt key: run/instance/agent/attempt
            created REAL NOT NULL,
            suite TEXT NOT NULL,               -- suite id and content digest: rsi-bench-v1@<digest>
            instance TEXT NOT NULL,
            agent TEXT NOT NULL,
            attempt INTEGER NOT NULL,
            episode TEXT,                      -- episodes.id of the env's own record (actions, rewards)
            passed INTEGER NOT NULL,
            reward REAL NOT NULL,
            result TEXT NOT NULL,              -- JSON: the attempt's outcome (steps, measurements, tokens, ...)
            messages TEXT NOT NULL,            -- JSON: an LLM agent's messages and tool calls, with their results
            observations TEXT NOT NULL         -- JSON: the observation text after each step
        )""",
        "CREATE INDEX trajectories_run ON trajectories(suite, agent, instance)",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)
