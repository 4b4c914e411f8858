"""rsi-env in the LLM-RL stack's own interfaces: TRL's ``environment_factory`` (`trl_env`). Each integration loads
only where it is imported; ``import rsi_env`` loads none of them."""
