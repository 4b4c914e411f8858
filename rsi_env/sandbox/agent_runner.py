"""Run inside a fresh sandbox: load the agent's module, answer a trusted harness's question with it.

``python -I agent_runner.py HARNESS.py AGENT.py INPUT.json REPORT.json``. Standard library only: it is
copied into the sandbox beside the files it runs (`rsi_env.sandbox.fresh.run_agent_module`), away from
the rsi_env package. HARNESS.py defines ``FUNCTIONS`` (each function AGENT.py must define: name -> how
it is called, for the error message) and ``answer(agent, data)``, which calls them on the input and
returns something JSON can hold. INPUT is read and deleted before the agent's code runs; REPORT is the
answer, or ``{"error": traceback}`` when the agent's module fails to load or to answer. The env
validates whatever comes back: nothing here is trusted.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType


def load(path: Path) -> ModuleType:
    """The module in ``path``, named after the file (``spec.py`` -> ``spec``)."""
    spec = importlib.util.spec_from_file_location(path.stem, path.resolve())
    if spec is None or spec.loader is None:
        raise ImportError(f"{path.name} not found in the workspace")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv: list[str]) -> int:
    harness_file, agent_file, src, dst = (Path(a) for a in argv[1:5])
    data = json.loads(src.read_text())
    src.unlink()
    harness = load(harness_file)
    try:
        agent = load(agent_file)
        for name, call in harness.FUNCTIONS.items():
            if not callable(getattr(agent, name, None)):
                raise AttributeError(f"{agent_file.name} must define a function {call}")
        text = json.dumps(harness.answer(agent, data))
    except Exception as exc:  # the agent's own failure, reported to the agent
        tb = [line.replace(os.getcwd() + "/", "")  # the run's random folder left out: the same run reads the same
              for line in traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-3)]
        text = json.dumps({"error": "".join(tb)[-1500:]})
    dst.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
