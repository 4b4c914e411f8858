"""Runnable baselines and training programs for the `RSI/*` flag tasks, compared at one budget of measurements.

Searches (through `rsi_env.search.evaluator.Evaluator`): `random_search`, vLLM's `auto_tune` procedure,
`coordinate_descent`, `optuna_tpe`. Policies and agents (through the env's own steps,
`baselines.episodes.run_agent`): PPO trained with Stable-Baselines3 (`sb3_ppo`) or RLlib
(`rllib_ppo`), and an LLM agent on any OpenAI-compatible endpoint (`llm_agent`). `run_all` runs
them on held-out seeds and writes tables and learning curves (`report`); `distributed` spreads
measurements over Ray workers. Heavy libraries (Ray, torch, Optuna, SB3) load only inside the
functions that use them.
"""
