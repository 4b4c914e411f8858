"""RSI/Scheduler-v0: the policy's tier (`tier`), its sandboxed driver and server, and its hidden checks.

`sandboxed` runs ``policy.py``'s keys in a fresh sandbox through the trusted driver (`run_policy`) and
the agent's side (`policy_server`); `checks` holds the scored hidden checks; `env` is the environment.
"""
