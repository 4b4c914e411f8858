"""The fast tier's boundary: ``tests/slow.txt`` lists the tests marked ``slow`` (`conftest.py` marks them).

``python -m tests.slow_tests LOG [--budget-s 150]`` reads a ``pytest --durations=0`` log of the whole suite
and writes the list: the slowest test files, longest first, until the rest together fit the budget, each with
its seconds. Whole files, because a module's tests share what its fixtures start (an engine, a Docker daemon, a
run the next tests read): dropping one test would move its cost, or its results, onto the next. The fast tier,
``python -m pytest -m "not slow"``, is everything else (its wall time also has collection and start-up). The
seconds order the whole suite's files, longest first, across pytest-xdist's workers (`conftest.py`).
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from pathlib import Path

SLOW_FILE = Path(__file__).with_name("slow.txt")
_LINE = re.compile(r"^\s*([\d.]+)s (?:setup|call|teardown)\s+(\S+.*)$")


def durations(log: str) -> dict[str, float]:
    """Seconds per test node id, setup, call and teardown together."""
    out: dict[str, float] = defaultdict(float)
    for line in log.splitlines():
        m = _LINE.match(line)
        if m:
            out[m.group(2).strip()] += float(m.group(1))
    return dict(out)


def slow_set(per_test: dict[str, float], budget_s: float) -> dict[str, float]:
    """The fewest slowest test files whose removal leaves at most ``budget_s`` seconds, with their seconds."""
    per_file: dict[str, float] = defaultdict(float)
    for node, secs in per_test.items():
        per_file[node.split("::")[0]] += secs
    left = sum(per_file.values())
    out = {}
    for node, secs in sorted(per_file.items(), key=lambda kv: -kv[1]):
        if left <= budget_s:
            break
        out[node] = secs
        left -= secs
    return dict(sorted(out.items()))


def load() -> dict[str, float]:
    """The slow files and the seconds each took in the log the list was made from."""
    if not SLOW_FILE.is_file():
        return {}
    out = {}
    for line in SLOW_FILE.read_text().splitlines():
        path, _, secs = line.partition("#")
        if path.strip():
            out[path.strip()] = float(secs.split()[0]) if secs.split() else 0.0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--budget-s", type=float, default=150.0)
    a = ap.parse_args()
    per = durations(Path(a.log).read_text(errors="replace"))
    slow = slow_set(per, a.budget_s)
    kept = sum(v for k, v in per.items() if k.split("::")[0] not in slow)
    files = {k.split("::")[0] for k in per}
    SLOW_FILE.write_text(f"# python -m tests.slow_tests (budget {a.budget_s:g} s): {len(slow)} of {len(files)} files, "
                         f"{sum(per.values()) - kept:.0f} s of {sum(per.values()):.0f} s; the rest: {kept:.0f} s\n"
                         + "".join(f"{n}  # {secs:.0f} s\n" for n, secs in slow.items()))
    print(f"{len(slow)} slow files; the fast tier's tests take {kept:.0f} s of {sum(per.values()):.0f} s")


if __name__ == "__main__":
    main()
