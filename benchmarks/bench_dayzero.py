"""RSI/DayZero-v1's cost per check: wall seconds of the sandboxed loader and block runs, per feature.

For each feature, uncached: the workspace loader in a fresh sandbox (``spec.py``, standard library),
the block harness on the template, on the reference solution, and on the hidden reference (``block.py``,
torch: six cases each), and a whole episode (reset, two edits with auto-bench, submit) once those are cached.
Run: ``python benchmarks/bench_dayzero.py [--backend bubblewrap]`` (the reference solution is the package's
hidden ``rsi_env.tasks.dayzero.reference``). ``--real`` instead times the real tier per feature, under
``flock /tmp/rsi-vllm.lock``: the hidden reference's checkpoint and tokens, then one vLLM run (engine start
included) of the reference ``vllm_model.py`` and one of the template, with the greedy tokens matched and the
template's reason.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
from timing import timed  # benchmarks/timing.py, beside this script

import rsi_env  # noqa: F401
from rsi_env.tasks.dayzero import checks
from rsi_env.tasks.dayzero.checks import FEATURES, HIDDEN, block_cases, checks_spec, load_feature, run_block, run_spec
from rsi_env.tasks.dayzero.env import TEMPLATE_DIR
from rsi_env.tasks.dayzero.reference import BLOCK, SPEC, VLLM_MODEL


def real(backend: str) -> None:
    from rsi_env.tasks.dayzero.vllm_check import check_in_vllm, reference_tokens

    print(f"backend {backend}; seconds (vLLM runs include the engine start)")
    print(f"{'feature':16} {'reference':>9} {'solution':>9} {'tokens matched':>15} {'template':>9}  template's reason")
    for name in FEATURES:
        f = load_feature(name)
        t = time.perf_counter()
        solved = check_in_vllm(VLLM_MODEL, f, backend)
        sol_s, t = time.perf_counter() - t, time.perf_counter()
        _, want, _ = reference_tokens(f, solved.seed or 0, backend)  # the reference it was judged against
        ref_s, t = time.perf_counter() - t, time.perf_counter()
        plain = check_in_vllm((TEMPLATE_DIR / "vllm_model.py").read_text(), f, backend)
        plain_s = time.perf_counter() - t
        got = solved.tokens or []
        matched = sum(a == b for g, w in zip(got, want, strict=False) for a, b in zip(g, w, strict=False))
        print(f"{name:16} {ref_s:9.1f} {sol_s:9.1f} {f'{matched}/{sum(map(len, want))}':>15} {plain_s:9.1f}  "
              f"{'passed (!)' if plain.ok else plain.reason[:110]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="bubblewrap")
    p.add_argument("--real", action="store_true", help="time the real tier (vLLM) instead")
    a = p.parse_args()
    if a.real:
        real(a.backend)
        return
    print(f"backend {a.backend}; seconds")
    print(f"{'feature':16} {'loader':>7} {'template block':>15} {'solution block':>15} {'reference block':>16} "
          f"{'episode (cached)':>17}")
    contexts = [int(c) for c in checks_spec()["contexts"]]
    for name in FEATURES:
        f = load_feature(name)
        checks._CACHE.clear()
        cases = block_cases(f)
        loader = timed(run_spec, SPEC, {"config.json": f.config, "tiny/config.json": f.tiny}, contexts, a.backend)
        blocks = [timed(run_block, src, f.tiny, cases, a.backend) for src in (
            (TEMPLATE_DIR / "block.py").read_text(), BLOCK, (HIDDEN / "reference_block.py").read_text())]
        env = gym.make("RSI/DayZero-v1", feature=name, sandbox=a.backend).unwrapped
        t = time.perf_counter()
        env.reset(seed=0)
        env.step({"kind": 1, "path": "spec.py", "old": "", "new": SPEC})
        env.step({"kind": 1, "path": "block.py", "old": "", "new": BLOCK})
        _, _, _, _, info = env.step({"kind": 4})
        episode = time.perf_counter() - t
        assert info["verdict"]["passed"]
        env.close()
        print(f"{name:16} {loader:7.2f} {blocks[0]:15.2f} {blocks[1]:15.2f} {blocks[2]:16.2f} {episode:17.2f}")


if __name__ == "__main__":
    main()
