"""The trusted side of a RSI/Kernel-v0 measurement: checks and times a kernel it never imports.

``python -I harness.py request.json result.json``, in a fresh sandbox holding only this file,
``reference.py``, ``worker.py``, ``ops.py`` and the agent's ``kernel.py``. It reads the request (and the
secret it signs its report with), deletes the request, the reference and itself, makes itself
undumpable (so that no process of the same user can read its memory), and only then starts the
candidate's process (``worker.py``). The candidate therefore never shares a process with the
reference, the clock or the report:

- **correctness**: for every check seed, the worker runs the kernel on a fresh input set with NaN-
  poisoned outputs and dumps inputs and outputs; the harness regenerates the same inputs itself and
  compares with its float64 reference (per-dtype tolerances), checks that no NaN poison is left, that
  in-place results are right and that every other input is unchanged;
- **timing**: per timed shape, after a warm-up, blocks of calls on distinct fresh input sets, the eager reference here
  and the kernel in the worker, interleaved and alternating which goes first, for several rounds; the
  kernel's block is timed by this process's clock around the request (minus the median round trip of
  an empty request) after the worker waits for the device; one randomly chosen set of every block is
  checked, so a kernel that skips calls, or caches across calls, is caught; speedup = the fastest
  block's eager time per call / the fastest block's kernel time per call, and the geometric mean over shapes;
- **protocol**: requests are numbered and each reply must carry its request's number, once, so a kernel
  that answers "done" for the worker (to stop the clock early) leaves an extra reply that is caught;
- **report**: ``result.json`` = the JSON body and its HMAC-SHA256 under the request's secret; the env
  refuses a report without a valid signature (the candidate can write files, not sign them).

Known limit: the worker's process is the candidate's, so a kernel that both forges an early reply and
suppresses the worker's own (by rewriting the worker's objects) stops the clock before its work is
done; the random spot check then reads the outputs only after the worker answers the dump request.
Closing that needs the outputs in memory the harness reads itself right after the clock stops
(shared memory on the CPU, CUDA IPC on the GPU), not built yet.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import hmac
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

HERE = Path.cwd()
sys.path.insert(0, str(HERE))
PR_SET_DUMPABLE = 4


class KernelFailure(Exception):
    """The kernel failed a check or its process failed; the message is for the agent."""


def _undumpable() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def _read_reference() -> str:
    """The reference's source, its file and this one deleted (before the candidate's process starts)."""
    path = HERE / "reference.py"
    text = path.read_text()
    path.unlink()
    Path(__file__).unlink(missing_ok=True)
    return text


def _load_reference(text: str) -> Any:
    module = types.ModuleType("kernel_reference")
    exec(compile(text, "<reference>", "exec"), module.__dict__)  # noqa: S102  (our own hidden file)
    return module


class Worker:
    """The candidate's process and the request/reply protocol with it."""

    def __init__(self, op: str, device: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-I", "worker.py", op, device], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1, start_new_session=True)
        self.turn = 0   # every request is numbered; a reply must carry its request's number, once

    def wait_ready(self) -> None:
        self._reply("the import of kernel.py")

    def _reply(self, what: str) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait(timeout=5)
            raise KernelFailure(f"the kernel's process ended during {what} (exit code {code})")
        try:
            reply = json.loads(line)
        except ValueError:
            raise KernelFailure(f"the kernel's process sent a garbled reply during {what}: {line[:200]!r}") from None
        if not isinstance(reply, dict) or reply.get("turn") != self.turn:
            raise KernelFailure(f"the kernel's process sent a reply out of turn during {what} (replies are the "
                                f"worker's, one per request): {line[:200]!r}")
        if isinstance(reply.get("error"), str):
            raise KernelFailure(reply["error"])
        if reply != {"turn": self.turn, "ok": True}:
            raise KernelFailure(f"the kernel's process sent an unexpected reply during {what}: {line[:200]!r}")

    def ask(self, cmd: str, **kw: Any) -> None:
        assert self.proc.stdin is not None
        self.turn += 1
        try:
            self.proc.stdin.write(json.dumps({"cmd": cmd, "turn": self.turn, **kw}) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise KernelFailure(f"the kernel's process is gone (before {cmd})") from None
        self._reply(cmd)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, 9)
        self.proc.kill()
        self.proc.wait()


class Harness:
    def __init__(self, req: dict[str, Any], reference: Any, rng: random.Random, worker: Worker) -> None:
        import ops
        import torch

        self.torch, self.ops, self.ref, self.rng = torch, ops, reference, rng
        self.op, self.device = req["op"], req["device"]
        self.req = req
        self.sync = torch.cuda.synchronize if self.device == "cuda" else (lambda: None)
        self.dump_path = str(HERE / "dump.pt")
        self.device_seconds = 0.0
        self.worker = worker

    # ---- correctness -----------------------------------------------------------------------------------
    def verify(self, worker: Worker, shape: dict[str, Any], first: int, pos: int) -> None:
        """Check the worker's set ``pos`` (inputs ``first + pos``) after its call; `KernelFailure` says what is wrong."""
        torch, ops = self.torch, self.ops
        index = first + pos
        worker.ask("dump", index=pos, path=self.dump_path)
        try:
            raw = torch.load(self.dump_path, weights_only=True, map_location="cpu")
        except Exception as exc:  # noqa: BLE001  (written by the candidate's process: anything can be in it)
            raise KernelFailure(f"the kernel's outputs could not be read back: {type(exc).__name__}") from None
        finally:
            Path(self.dump_path).unlink(missing_ok=True)
        if not (isinstance(raw, dict) and isinstance(raw.get("inputs"), dict) and isinstance(raw.get("outputs"), dict)):
            raise KernelFailure("the kernel's outputs came back malformed")
        inp = ops.make_inputs(shape, index, self.device)   # the worker's numbers, drawn again here
        expected = self.ref.reference64(self.op, inp)          # float64, on the device (fast on a GPU)
        spec = ops.make_outputs(shape, "meta")
        atol, rtol = self.ref.TOLERANCES[shape["dtype"]]
        where = f"on {ops.describe(shape)}"
        for name, want in spec.items():
            got = raw["outputs"].get(name)
            if not isinstance(got, torch.Tensor) or got.shape != want.shape or got.dtype != want.dtype:
                raise KernelFailure(f"{name} is no longer a {want.dtype} tensor of shape {tuple(want.shape)} {where}")
            self._compare(name, got.to(self.device), expected[name], atol, rtol, where)
        for name, before in inp.items():
            if not isinstance(before, torch.Tensor):
                continue
            after = raw["inputs"].get(name)
            if not isinstance(after, torch.Tensor) or after.shape != before.shape or after.dtype != before.dtype:
                raise KernelFailure(f"the input {name} changed its shape or dtype {where}")
            after = after.to(self.device)
            if name in ops.INOUT.get(self.op, ()):
                self._compare(f"{name} (updated in place)", after, expected[name], atol, rtol, where)
            elif not torch.equal(after, before):
                raise KernelFailure(f"the kernel changed its input {name} {where}; only the outputs"
                                    f"{' and ' + ', '.join(ops.INOUT[self.op]) if self.op in ops.INOUT else ''}"
                                    " may be written")

    def _compare(self, name: str, got: Any, want: Any, atol: float, rtol: float, where: str) -> None:
        torch = self.torch
        got = got.double()
        nan = int(torch.isnan(got).sum())
        if nan == got.numel():
            raise KernelFailure(f"{name} was never written {where}: it still holds the NaN poison")
        if nan:
            raise KernelFailure(f"{nan} of {got.numel()} elements of {name} are NaN {where} "
                                "(not written, or computed as NaN)")
        bad = ~torch.isclose(got, want, atol=atol, rtol=rtol)
        if bool(bad.any()):
            err = (got - want).abs()
            flat = int(torch.argmax(torch.where(bad, err, torch.zeros_like(err))))
            idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat, device=got.device), got.shape))
            raise KernelFailure(f"{name} differs from the float64 reference {where}: {int(bad.sum())} of "
                                f"{got.numel()} elements off (worst at {idx}: {float(got[idx]):.6g} vs "
                                f"{float(want[idx]):.6g}; tolerance atol={atol:g}, rtol={rtol:g})")

    # ---- timing ----------------------------------------------------------------------------------------
    def _reference_block(self, shape: dict[str, Any], count: int, first: int) -> float:
        sets = [{**self.ops.make_inputs(shape, first + k, self.device), **self.ops.make_outputs(shape, self.device)}
                for k in range(count)]
        self.sync()
        t0 = time.perf_counter()
        for args in sets:
            self.ref.eager(self.op, args)
        self.sync()
        return time.perf_counter() - t0

    def _kernel_block(self, worker: Worker, shape: dict[str, Any], count: int, first: int, noop: float) -> float:
        worker.ask("prepare", shape=shape, first=first, count=count)
        t0 = time.perf_counter()
        worker.ask("run")
        elapsed = time.perf_counter() - t0
        self.verify(worker, shape, first, self.rng.randrange(count))
        return max(elapsed - noop, 1e-7)

    def time_shape(self, worker: Worker, shape: dict[str, Any]) -> dict[str, Any]:
        rounds, block_s = int(self.req["rounds"]), float(self.req["block_s"])
        cap = max(1, int(self.req["max_block_bytes"]) // max(self.ops.set_bytes(shape, self.device), 1))
        noops = []
        for _ in range(5):
            t0 = time.perf_counter()
            worker.ask("noop")
            noops.append(time.perf_counter() - t0)
        noop = statistics.median(noops)
        first = 1000
        self._reference_block(shape, 1, first)                       # warm-up
        self._kernel_block(worker, shape, 1, first, noop)
        t_ref = self._reference_block(shape, 1, first + 1)           # the size of a block
        t_ker = self._kernel_block(worker, shape, 1, first + 1, noop)
        n_ref = min(cap, max(1, math.ceil(block_s / max(t_ref, 1e-7))))
        n_ker = min(cap, max(1, math.ceil(block_s / max(t_ker, 1e-7))))
        ref_s, ker_s = [], []
        for r in range(rounds):
            base = first + (r + 1) * 1000
            order = ("ref", "ker") if r % 2 == 0 else ("ker", "ref")
            for who in order:
                if who == "ref":
                    t = self._reference_block(shape, n_ref, base)
                    ref_s.append(t / n_ref)
                else:
                    t = self._kernel_block(worker, shape, n_ker, base + 500, noop)
                    ker_s.append(t / n_ker)
                self.device_seconds += t
        # The fastest block of each: on a shared machine noise only ever adds time, so the minimum is the
        # most stable statistic (the median moved by 2x under load here); both sides get the same statistic.
        ref, ker = min(ref_s), min(ker_s)
        return {"seed": shape["seed"], "shape": self.ops.describe(shape), "reference_s": ref, "candidate_s": ker,
                "speedup": ref / ker, "calls": [n_ref, n_ker]}

    # ---- the whole measurement ---------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        ops = self.ops
        shapes = [ops.draw_shape(self.op, s, self.req["model"], self.req["scale"]) for s in self.req["check_seeds"]]
        body: dict[str, Any] = {"correct": False, "error": None, "checked": [], "timings": [], "speedup": None}
        worker = self.worker
        try:
            worker.wait_ready()
            for shape in shapes:           # correctness: one fresh set per seed, then the next seed
                worker.ask("prepare", shape=shape, first=0, count=1)
                worker.ask("run")
                self.verify(worker, shape, 0, 0)
                body["checked"].append(ops.describe(shape))
            body["correct"] = True
            for shape in shapes[: int(self.req["timed_shapes"])]:
                body["timings"].append(self.time_shape(worker, shape))
            speedups = [t["speedup"] for t in body["timings"]]
            body["speedup"] = math.exp(sum(math.log(s) for s in speedups) / len(speedups)) if speedups else None
        except KernelFailure as exc:
            body["correct"] = False
            body["error"] = str(exc)
        finally:
            worker.close()
        body["device_seconds"] = self.device_seconds
        return body


def main(argv: list[str]) -> int:
    req_path, result_path = Path(argv[1]), Path(argv[2])
    req = json.loads(req_path.read_text())
    req_path.unlink()
    secret = bytes.fromhex(req.pop("secret"))
    _undumpable()
    reference_text = _read_reference()
    worker = Worker(req["op"], req["device"])  # imports torch while this process does the same
    reference = _load_reference(reference_text)
    import torch

    torch.set_num_threads(1)
    if req["device"] == "cuda" and not torch.cuda.is_available():
        worker.close()
        body: dict[str, Any] = {"correct": False, "speedup": None, "checked": [], "timings": [],
                                "device_seconds": 0.0, "setup_error": True,
                                "error": f"tier 'real' times on CUDA, but torch {torch.__version__} in the sandbox "
                                         f"sees no CUDA device (CUDA build: {torch.version.cuda})"}
    else:
        body = Harness(req, reference, random.Random(secret), worker).run()
    text = json.dumps(body, sort_keys=True)
    mac = hmac.new(secret, text.encode(), hashlib.sha256).hexdigest()
    result_path.write_text(json.dumps({"body": text, "mac": mac}))
    return 0


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip the interpreter's teardown of torch (a second, here, under load)
