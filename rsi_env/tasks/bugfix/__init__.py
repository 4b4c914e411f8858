"""RSI/BugFix-v0: bugs injected into the engine's own code, hidden checks that catch them, instances from seeds.

`templates` builds the clean workspace (BugFix-v0's own engine loop, the package's block pool and config),
`mutations` holds the bug operators, `harness` runs a workspace's engine in a fresh sandbox, `checks` judges
what it did against the clean engine, `generator` turns a seed into a verified bugged instance with its
difficulty, `tier` measures a workspace's engine (`WorkspaceTier`), and `env` is the environment.
"""
