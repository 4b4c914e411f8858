"""`run_fresh`: run trusted files (a check, a harness) with an agent's file in a new, empty sandbox.

Hidden checks and measurements of an agent's code never run in the agent's own sandbox, where earlier
commands may have left processes or files behind: each gets a fresh folder holding only the files
given, a fresh sandbox of the chosen backend over it, and both are gone afterwards. Only the named
output files are read back, each size-capped. Within a step, a run gets at most what is left of the step's deadline
(`rsi_env.sandbox.deadline`). `run_harness` reads a harness's JSON report back, with
each way the run can fail named in the caller's words; `run_agent_module` is the common harness, the
agent's module answering a trusted question (`rsi_env.sandbox.agent_runner`).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rsi_env.sandbox.backends import make_sandbox
from rsi_env.sandbox.base import Limits, ShellResult
from rsi_env.sandbox.deadline import Allowance, allowance
from rsi_env.sandbox.profile import Profile

__all__ = ["FreshRun", "ReportErrors", "run_agent_module", "run_fresh", "run_harness"]

MAX_READ_BYTES = 32 << 20
AGENT_RUNNER = Path(__file__).with_name("agent_runner.py")


@dataclass(frozen=True)
class FreshRun:
    """The command's result and the output files it left (None where missing, too large or not a file)."""

    result: ShellResult
    outputs: dict[str, bytes | None] = field(default_factory=dict)
    root: str = ""  # the folder it ran in (gone now), which `run_harness` keeps out of the messages it raises
    limit: Allowance = field(default_factory=lambda: Allowance(0.0))  # the time it was given

    def timeout_text(self) -> str:
        """How long the run was given, for a message that says it did not finish."""
        return self.limit.describe()

    def anonymous(self, text: str) -> str:
        """``text`` with the run's random folder written as ``.``, so that the same run always reads the same."""
        return text.replace(f"{self.root}/", "./").replace(self.root, ".") if self.root else text


def run_fresh(files: Mapping[str, str | bytes], command: str, *, backend: str = "auto", timeout_s: float = 60.0,
              max_output: int = 16384, read: Sequence[str] = (), limits: Limits | None = None,
              profile: Profile | None = None) -> FreshRun:
    """Write ``files`` into a new folder, run ``command`` there in a new sandbox showing ``profile``, read back ``read``.

    ``command`` may use ``{python}``: the interpreter of the sandbox. The run gets ``timeout_s``, or what
    is left of the step's deadline if that is less (none left: not started, read as timed out).
    """
    limit = allowance(timeout_s)
    if limit.spent:
        return FreshRun(ShellResult(None, "", timed_out=True, error="not started: the action's time was spent"),
                        dict.fromkeys(read), limit=limit)
    root = Path(tempfile.mkdtemp(prefix="rsi-fresh-")).resolve()
    try:
        for rel, content in files.items():
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                p.write_bytes(content)
            else:
                p.write_text(content)
        with make_sandbox(backend, root, limits=limits, profile=profile) as sb:
            res = sb.run(command.replace("{python}", sb.python), timeout_s=limit.timeout_s, max_output=max_output)
        outputs: dict[str, bytes | None] = {}
        for rel in read:
            p = root / rel
            ok = p.is_file() and not p.is_symlink() and p.resolve().parent == root and p.stat().st_size <= MAX_READ_BYTES
            outputs[rel] = p.read_bytes() if ok else None
        return FreshRun(res, outputs, str(root), limit)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@dataclass(frozen=True)
class ReportErrors:
    """How a harness run's failures read, raised as ``error`` (the caller's `RsiEnvError` subclass)."""

    error: type[Exception]
    timed_out: str  # the run passed its timeout (the time it had follows: "within 10 s")
    missing: str  # it left no report (the run's output follows in parentheses)
    not_json: str  # the report is not JSON
    raised: str  # the report is ``{"error": ...}``: the agent's code failed (its traceback follows)


def run_harness(files: Mapping[str, str | bytes], command: str, report: str, errors: ReportErrors, *,
                backend: str = "auto", timeout_s: float = 60.0, max_output: int = 16384, limits: Limits | None = None,
                profile: Profile | None = None) -> Any:
    """Run a trusted harness in a fresh sandbox (`run_fresh`) and return its JSON ``report``, parsed.

    A timeout, a missing report, a report that is not JSON and a report of ``{"error": ...}`` raise
    ``errors.error`` with the matching message. Whatever else the report holds came from a process that
    ran the agent's code: the caller validates it. ``errors.timed_out`` is followed by the time the run had.
    """
    run = run_fresh(files, command, backend=backend, timeout_s=timeout_s, max_output=max_output, read=[report],
                    limits=limits, profile=profile)
    res, raw = run.result, run.outputs.get(report)
    if res.timed_out:
        raise errors.error(f"{errors.timed_out} {run.timeout_text()}")
    if raw is None:
        raise errors.error(f"{errors.missing} ({run.anonymous(res.summary().strip())[:600]})")
    try:
        data = json.loads(raw)  # as written: a signed report's body must stay byte for byte
    except ValueError:
        raise errors.error(errors.not_json) from None
    if isinstance(data, dict) and "error" in data:
        raise errors.error(f"{errors.raised}:\n{run.anonymous(str(data['error']))[-1200:]}")
    return data


def run_agent_module(harness: Path, agent_file: str, source: str, inputs: str, errors: ReportErrors, *,
                     input_file: str = "input.json", report: str = "report.json", backend: str = "auto",
                     timeout_s: float = 60.0, max_output: int = 16384, limits: Limits | None = None,
                     profile: Profile | None = None) -> Any:
    """``harness``'s answer (see `rsi_env.sandbox.agent_runner`) with ``source`` as ``agent_file``, on ``inputs``.

    ``inputs`` (JSON text) is written as ``input_file``, the answer read from ``report``. It runs in a
    fresh sandbox through `run_harness`, which raises as it says.
    """
    files = {agent_file: source, AGENT_RUNNER.name: AGENT_RUNNER.read_text(), harness.name: harness.read_text(),
             input_file: inputs}
    return run_harness(files, f"{{python}} -I {AGENT_RUNNER.name} {harness.name} {agent_file} {input_file} {report}",
                       report, errors, backend=backend, timeout_s=timeout_s, max_output=max_output, limits=limits,
                       profile=profile)
