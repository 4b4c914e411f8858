"""RSI/VLLMBugFix-v0's instances for the benchmark suite: one per verified instance of the installed vLLM.

The seed picks the instance (the table's ``seed mod n``), so instance ``k`` of the installed vLLM's table is
reset seed ``k``, named by its bug operators. No vLLM installed: the family has no instances here. vLLM
installed without a fresh table (one stamped with the hash of these modules, operators, checks and harness):
`CatalogError` naming the command that verifies it, rather than a suite silently without the family.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rsi_env.errors import CatalogError
from rsi_env.real.tier import installed_vllm_version

__all__ = ["ENV_ID", "FAMILY", "suite_instances"]

FAMILY = "VLLMBugFix"
ENV_ID = "RSI/VLLMBugFix-v0"


def suite_instances() -> Iterator[tuple[str, str, dict[str, Any], int]]:
    """``(name, env id, env kwargs, reset seed)`` of each verified instance of the installed vLLM."""
    version = installed_vllm_version()
    if version is None:
        return
    from rsi_env.tasks.vllm_bugfix.generator import verified_table

    table = verified_table()
    if not table:
        raise CatalogError(f"RSI/VLLMBugFix-v0 has no verified instance table for the installed vLLM {version}: "
                           "run python -m rsi_env.tasks.vllm_bugfix.generator")
    for seed, inst in enumerate(table):
        yield inst.id, ENV_ID, {}, seed
