"""rsi-bench's verifiers plugin id: ``vf-eval rsi-env-verifiers`` (verifiers 0.4 finds a taskset by importing the
top-level module its id names, and takes the ``Taskset`` and ``Env`` this module exports). The classes live in
`rsi_env.integrations.verifiers_env`; install with ``pip install 'rsi-env[verifiers]'``."""

from rsi_env.integrations.verifiers_env import RsiBenchEnv, RsiBenchTaskset, load_environment

__all__ = ["RsiBenchEnv", "RsiBenchTaskset", "load_environment"]
