"""The package's imports point down its layers (docs/architecture.md); the few that do not are listed there."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "rsi_env"
# Lowest first; a module may import its own layer and those below it.
LAYERS = [("errors",), ("engine",), ("sandbox",), ("reward",), ("store",), ("sim",), ("real",), ("calibrate",),
          ("envs",), ("tasks",), ("wrappers",), ("search",), ("evaluate",), ("suite",), ("integrations",),
          ("demo", "cli", "__init__"), ("baselines",)]
LEVEL = {name: i for i, names in enumerate(LAYERS) for name in names}
# Each with its reason in docs/architecture.md ("Imports that run upward").
ALLOWED: set[str] = set()
_DYNAMIC = re.compile(r"import_module\(\"([\w.]+)\"\)")


def upward_imports() -> set[str]:
    out = set()
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        if rel.parts[0] == "catalog":
            continue  # the code tasks' templates and hidden parts: they run in sandboxes, not in the package
        text = path.read_text()
        mods = [m for node in ast.walk(ast.parse(text)) for m in
                ([node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else
                 [a.name for a in node.names] if isinstance(node, ast.Import) else [])]
        mods += _DYNAMIC.findall(text)
        here = LEVEL[rel.parts[0].removesuffix(".py")]
        for m in mods:
            parts = m.split(".")
            target = parts[1] if parts[0] == "rsi_env" and len(parts) > 1 else parts[0]
            if parts[0] in ("rsi_env", "baselines") and target in LEVEL and LEVEL[target] > here:
                out.add(f"{rel.as_posix()} -> {m.removeprefix('rsi_env.')}")
    return out


def test_every_module_has_a_layer():
    tops = {p.relative_to(PKG).parts[0].removesuffix(".py") for p in PKG.rglob("*.py")} - {"catalog"}
    assert tops <= set(LEVEL), tops - set(LEVEL)


def test_imports_run_down_but_for_the_listed_ones():
    assert upward_imports() == ALLOWED
    doc = (PKG.parent / "docs" / "architecture.md").read_text()
    assert all(a.split(" -> ")[0] in doc for a in ALLOWED)


def test_a_planted_upward_import_is_seen(tmp_path, monkeypatch):
    """The check reads what it should: a store module importing the envs is caught, as is one through importlib."""
    pkg = tmp_path / "rsi_env"
    (pkg / "store").mkdir(parents=True)
    (pkg / "store" / "bad.py").write_text("from rsi_env.envs.core import RsiEnv\n")
    (pkg / "store" / "sly.py").write_text('import importlib\nimportlib.import_module("baselines.run_all")\n')
    monkeypatch.setattr(__import__(__name__), "PKG", pkg)
    assert upward_imports() == {"store/bad.py -> envs.core", "store/sly.py -> baselines.run_all"}
