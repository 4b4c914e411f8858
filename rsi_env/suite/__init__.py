"""rsi-bench, a frozen, versioned set of task instances: for now the pass@k an agent scores on it, and the chat
agent that plays an env through its tools (`rsi_env.suite.chat`; imported from there, it is not loaded here)."""

from rsi_env.suite.passk import mean_pass_at_k, pass_at_k

__all__ = ["mean_pass_at_k", "pass_at_k"]
