"""rsi-bench, a frozen, versioned set of task instances: for now the pass@k an agent scores on it."""

from rsi_env.suite.passk import mean_pass_at_k, pass_at_k

__all__ = ["mean_pass_at_k", "pass_at_k"]
