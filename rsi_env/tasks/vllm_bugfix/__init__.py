"""RSI/VLLMBugFix-v0: bugs in the installed vLLM's own code, and deployments written for an older vLLM.

`modules` names the engine modules a workspace may hold and shows the sandbox the workspace's copies in
place of the installed ones, `mutations` loads the exact-text bug operators, `harness` is the driver that
starts a workspace's engine on token-id requests (run in fresh sandboxes, and the agent's
``run_engine.py``), `runs` builds its jobs and runs it (and the clean vLLM, remembered per version),
`checks` judges a workspace against the clean engine, `generator` verifies instances per installed vLLM,
`tier` measures a workspace's engine, `env` is the environment and `reference` its fix.
"""
