"""The experience store: every measurement (both tiers) and every episode, queryable, shared across processes.

`ExperienceStore` is the seam (SQLite, WAL, versioned schema); :mod:`rsi_env.store.record` fills it
automatically from the tiers and the environments; :mod:`rsi_env.store.warm_start` proposes
starting configurations for a new (model, hardware, workload) from the nearest experience;
:mod:`rsi_env.store.transfer` moves experience between stores (JSONL, Parquet) and imports the real
tier's measurement files; ``rsi-env experience stats|best|export|import`` is the command line.
"""

from rsi_env.store.db import ExperienceStore, default_store_url, parse_store_url
from rsi_env.store.record import default_store, record_episode, record_measurements, recording

__all__ = ["ExperienceStore", "default_store", "default_store_url", "parse_store_url", "record_episode",
           "record_measurements", "recording"]
