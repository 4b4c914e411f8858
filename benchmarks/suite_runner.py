"""The suite runner's speed: episodes per minute of the reference agent on the sim tier, 1 and 2 workers side by side.

Each round runs the same attempts (every instance ``-k`` times) through `rsi_env.suite.runner.run_suite` once with
one worker and once with two (a process pool, started inside the timed call as a user's run starts it), each in a
fresh process, in alternating order so that drift in the machine's speed hits both alike; each run writes a fresh
run folder and a fresh experience store, as a run does. The rate is attempts over wall seconds; the median of
the rounds is printed with the ratio to one worker.

The instances are ``--suite``'s (a sample of ``--sample``), or, where no suite is shipped yet, a stand-in of the
first ``--per-family`` candidates of each flag family of the suite's plan (`rsi_env.suite.plan`) whose defaults
pass their guards, each with the defaults as its reference and pass line: the episode a flag instance's reference
plays (reset, the edit writing ``serving.yaml``, the submission's measurement), without the build's ceiling search.
Run: ``python benchmarks/suite_runner.py [--suite rsi-bench-v1 --sample 30] [-k 1] [--rounds 2]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import yaml  # noqa: E402

from rsi_env.suite.instance import Instance, Suite, list_suites, load, threshold_for  # noqa: E402
from rsi_env.suite.runner import run_attempt, run_suite, sample_instances  # noqa: E402


def stand_in_suite(per_family: int, folder: Path) -> Suite:
    """The first ``per_family`` flag candidates of each family, each with vLLM's defaults as its reference."""
    from rsi_env.search import Evaluator
    from rsi_env.suite.plan import flag_candidates

    taken: dict[str, int] = {}
    instances = []
    for c in flag_candidates():
        if taken.get(c.family, 0) >= per_family:
            continue
        ev = Evaluator(c.env_id, c.seed, budget=0, env_kwargs=dict(c.env_kwargs))
        try:
            if not all(t.ok for t in ev.env.base_tels):
                continue  # defaults that fail on this chip: the build leaves such a candidate out too
            task, base = ev.env.task, ev.env.baseline_config.to_dict()
            config = {f: base[f] for f in ev.env.flag_names}
        finally:
            ev.close()
        taken[c.family] = taken.get(c.family, 0) + 1
        instances.append(Instance(
            id=c.id, front=c.front, family=c.family, env_id=c.env_id,
            env_kwargs={**c.env_kwargs, "improvement_threshold": threshold_for(0.0, 0.95)}, seed=c.seed, tier="sim",
            budget=task.max_measurements, max_steps=task.max_steps, difficulty="easy",
            criterion={"kind": "ceiling", "ceiling": 0.0, "fraction": 0.95, "method": "defaults", "measured": 1},
            reference={"config": config}))
    def write(name: str, keep: list[Instance]) -> str:
        suite = Suite(id="suite-runner-bench", instances=tuple(keep), ceiling_fraction=0.95, calibrations={},
                      frozen="benchmark")
        (folder / name).write_text(yaml.safe_dump(suite.to_dict(), sort_keys=False))
        return str(folder / name)

    probe = write("candidates.yaml", instances)  # only those whose reference passes (defaults may miss an SLO)
    path = write("suite-runner-bench.yaml",
                 [i for i in instances if run_attempt(probe, i.id, "reference", 0, record=False).passed])
    return load(path)


def one_run(suite_path: str, ids: list[str], k: int, workers: int, folder: Path,
            store: bool) -> tuple[float, float, int, int]:
    """Wall and CPU seconds, attempts and passes of one run with ``workers`` workers, in a fresh process.

    A process of its own, as a user's ``rsi-env suite run`` is: no cache of an earlier run (this one's set-up
    measured the same instances) is warm; the import of rsi-env is done before the clock starts.
    """
    out = Path(tempfile.mkdtemp(prefix=f"w{workers}-", dir=folder))
    env = {**os.environ, "RSI_ENV_STORE": f"sqlite:///{out}/experience.sqlite" if store else "off"}
    res = subprocess.run([sys.executable, __file__, "--child", json.dumps([suite_path, ids, k, workers, str(out)])],
                         capture_output=True, text=True, env=env, timeout=3600)
    if res.returncode != 0:
        sys.exit(f"a run with {workers} workers failed:\n{res.stderr[-3000:]}")
    seconds, cpu, n, ok = json.loads(res.stdout.strip().splitlines()[-1])
    return seconds, cpu, n, ok


def _child(spec: str) -> None:
    suite_path, ids, k, workers, out = json.loads(spec)
    suite = load(suite_path)
    chosen = [suite.get(i) for i in ids]
    t0, c0 = time.perf_counter(), _cpu()
    attempts = run_suite(suite, chosen, "reference", k=k, workers=workers, out_dir=Path(out), progress=lambda s: None)
    seconds, cpu = time.perf_counter() - t0, _cpu() - c0
    errors = [a for a in attempts if a.error]
    if errors:
        sys.exit(f"{len(errors)} attempts failed, e.g. {errors[0].instance}: {errors[0].error}")
    print(json.dumps([seconds, cpu, len(attempts), sum(a.passed for a in attempts)]))


def _cpu() -> float:
    """CPU seconds of this process and its finished children (a pool's workers, once it has shut down)."""
    import resource

    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


def _warm() -> int:
    import rsi_env.suite.runner  # noqa: F401  (what a worker imports before its first attempt)

    return os.getpid()


def pool_start_seconds(workers: int) -> float:
    """Seconds for a spawned pool of ``workers`` to import the runner in each: the fixed cost of a parallel run."""
    import concurrent.futures as cf
    import multiprocessing

    t0 = time.perf_counter()
    with cf.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        pids = {f.result() for f in [pool.submit(_warm) for _ in range(4 * workers)]}
    assert len(pids) <= workers
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--suite", default=None, help="a suite id or FILE.yaml (default: rsi-bench-v1 where shipped)")
    p.add_argument("--sample", type=int, default=30, help="instances of --suite, drawn with seed 0")
    p.add_argument("--per-family", type=int, default=8, help="the stand-in's candidates per flag family")
    p.add_argument("-k", type=int, default=1, help="attempts per instance (repeats hit the sim's caches)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--no-store", action="store_true", help="RSI_ENV_STORE=off in the runs (default: a fresh store)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        _child(args.child)
        return
    folder = Path(tempfile.mkdtemp(prefix="rsi-bench-suite-runner-"))
    os.environ["RSI_ENV_STORE"] = "off"  # the set-up's measurements go to no store
    name = args.suite or ("rsi-bench-v1" if "rsi-bench-v1" in list_suites() else None)
    if name:
        suite = load(name)
        instances = sample_instances(list(suite.instances), args.sample, 0)
        what = f"{suite.id}: {len(instances)} instances sampled with seed 0"
    else:
        suite = stand_in_suite(args.per_family, folder)
        instances = list(suite.instances)
        what = (f"rsi-bench-v1 is not shipped here: a stand-in of {len(instances)} flag instances "
                f"(of {args.per_family} candidates per family, those whose defaults pass; reference = the defaults)")
    print(f"{what}; reference agent, sim tier, k={args.k}, {os.cpu_count()} cores, {args.rounds} rounds, "
          f"experience store {'off' if args.no_store else 'on'}")
    rates: dict[int, list[float]] = {1: [], 2: []}
    cpus: dict[int, list[float]] = {1: [], 2: []}
    passed: dict[int, int] = {1: 0, 2: 0}
    n = 0
    for r in range(args.rounds):
        for workers in ((1, 2) if r % 2 == 0 else (2, 1)):
            seconds, cpu, n, ok = one_run(suite.source, [i.id for i in instances], args.k, workers, folder,
                                          not args.no_store)
            rates[workers].append(60.0 * n / seconds)
            cpus[workers].append(cpu / n)
            passed[workers] = ok
            print(f"  round {r + 1}, {workers} worker{'s' if workers > 1 else ''}: {n} episodes in {seconds:6.1f} s "
                  f"({rates[workers][-1]:6.1f}/min, {ok} passed)", flush=True)
    one = statistics.median(rates[1])
    print(f"{'workers':>8s} {'episodes/min':>13s} {'vs 1 worker':>12s} {'CPU s/episode':>14s} {'passed':>8s}")
    for workers in (1, 2):
        rate = statistics.median(rates[workers])
        print(f"{workers:8d} {rate:13.1f} {rate / one:12.2f} {statistics.median(cpus[workers]):14.3f} "
              f"{passed[workers]:>5d}/{n}")
    print(f"(a 2-worker pool's start, spawning and importing the runner, takes {pool_start_seconds(2):.1f} s of that; "
          f"load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
