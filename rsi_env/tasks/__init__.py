"""The code-task families, each in one home: its env, its tier wrapper, its hidden checks and its sandboxed runner.

`scheduler`, `bugfix`, `dayzero` and `kernel` build on the envs (`rsi_env.envs.core`) and the tiers'
generic hooks (the sim's policy keys, the real engine's scheduler class). No sandbox sees this folder
(`rsi_env.sandbox.runtime.EXCLUDED`): the files a sandbox runs are copied into it by path.
"""
