"""Run configs.yaml's SGLang configurations on the GPU machine, one driver process (one engine start) each, rows
under $OUT as they come, and stop starting new ones before the call's time runs out.

    python3 research/sglang_fit/run_configs.py --out $OUT --deadline 560 [NAME ...]

Names default to every configuration whose rows are not in --done (a folder of earlier calls' rows). The chip is
read from nvidia-smi: the rows are labelled with the catalog entry of the card that is there.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import yaml

from rsi_env.real.host import gpu_names

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# Engine start (~50 s) and the three short workloads (~30 s) with a margin; rag_chat adds its ~55 s.
NEED_S = 100.0
RAG_S = 60.0


def hardware() -> str:
    names = " ".join(gpu_names()).upper()
    return "h200" if "H200" in names else "h100-sxm" if "H100" in names else "cpu"


def command(cfg: dict, default_workloads: list[str], model: str, hw: str, out: Path) -> list[str]:
    cmd = [sys.executable, "-m", "rsi_env.real.sglang_driver", "--model", model, "--hardware", hw,
           "--slo-from-workload", "--out", str(out / f"{cfg['name']}.jsonl")]
    for w in cfg.get("workloads", default_workloads):
        cmd += ["--workload", str(ROOT / "rsi_env/catalog/workloads" / f"{w}.yaml")]
    for k, v in cfg.get("set", {}).items():
        cmd += ["--set", f"{k}={str(v).lower() if isinstance(v, bool) else v}"]
    for k, v in cfg.get("server", {}).items():
        cmd += ["--server-arg", f"{k}={v}"]
    return cmd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--deadline", type=float, default=560.0, help="seconds from now to stop by")
    ap.add_argument("--done", type=Path, default=None, help="skip configurations with rows here")
    args = ap.parse_args()
    t0 = time.monotonic()
    spec = yaml.safe_load((HERE / "configs.yaml").read_text())
    cfgs = spec["configs"]
    if args.names:
        cfgs = [c for c in cfgs if c["name"] in args.names]
    if args.done:
        cfgs = [c for c in cfgs if not (args.done / f"{c['name']}.jsonl").exists()]
    hw = hardware()
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"hardware {hw} ({gpu_names()}); configs {[c['name'] for c in cfgs]}", flush=True)
    for cfg in cfgs:
        wls = cfg.get("workloads", spec["workloads"])
        need = NEED_S + (RAG_S if "rag_chat" in wls else 0.0)
        left = args.deadline - (time.monotonic() - t0)
        if left < need:
            print(f"skip {cfg['name']}: {left:.0f} s left, needs ~{need:.0f}", flush=True)
            continue
        t = time.monotonic()
        with open(args.out / f"{cfg['name']}.log", "w") as log:
            try:
                rc = subprocess.run(command(cfg, spec["workloads"], spec["model"], hw, args.out), stdout=log,
                                    stderr=subprocess.STDOUT, timeout=left - 5, cwd=ROOT).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        rows = args.out / f"{cfg['name']}.jsonl"
        n = len(rows.read_text().splitlines()) if rows.exists() else 0
        print(f"{cfg['name']}: rc {rc}, {n} rows, {time.monotonic() - t:.0f} s", flush=True)


if __name__ == "__main__":
    main()
