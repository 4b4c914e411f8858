"""`Calibration`: the coefficients that turn the roofline into seconds and bytes, per chip and vLLM release.

Coefficients are data (``rsi_env/catalog/calibration/<hardware>-vllm<version>.yaml``), fitted by
:mod:`rsi_env.calibrate` against real measurements and stored with their provenance and held-out
error. The newest fit of a (hardware, version) wins — the catalog's, or one ``rsi-env calibrate``
wrote into the user's calibration directory — and every measurement names it (``Telemetry.calibration``).
A (hardware, version) with no fitted file falls back to ``default.yaml`` — vendor-typical
efficiencies — and the telemetry says so (``calibration: "default"``).
"""

from __future__ import annotations

import math
import os
import stat
from dataclasses import asdict, dataclass, field, fields, replace
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from rsi_env.errors import CalibrationError

__all__ = ["CPU_TERMS", "Calibration", "COEFFICIENTS", "MM_REF_PARAMS", "load_calibration", "release_tag",
           "user_calibration_dir"]


@dataclass(frozen=True)
class Calibration:
    """Efficiencies (fractions of the datasheet roofline), overheads (seconds) and memory terms (bytes)."""

    id: str = "default"
    hardware: str = "*"
    engine_version: str = "*"
    # GPU roofline efficiencies.
    mm_eff: float = 0.70          # dense GEMM FLOP/s reached on large batches, fraction of peak
    mm_half_tokens: float = 64.0  # tokens at which a GEMM reaches half of mm_eff (small batches underuse the MMA units)
    # ... for a layer of MM_REF_PARAMS weights per GPU; smaller matrices (a small model, or one split by tensor
    # parallelism) give fewer tiles per token and need more tokens: the half point scales as (ref/params)**exp.
    mm_half_exp: float = 0.0
    moe_mm_eff: float = 0.6       # routed experts' grouped GEMMs (vLLM's fused-MoE kernel), fraction of mm_eff
    roofline_sharpness: float = 3.0  # soft maximum of compute and memory time (higher: less overlap penalty)
    bw_eff: float = 0.80          # weight streaming, fraction of peak bandwidth
    attn_eff: float = 0.45        # prefill attention FLOP/s, fraction of peak
    kv_bw_eff: float = 0.60       # paged KV-cache reads, fraction of peak bandwidth
    kv_shared_read: float = 0.0   # SGLang's decode: fraction of a pass's repeated reads of a shared cached prefix's
    #                               KV (one per request beyond the first) that cost no HBM traffic (a hit in the
    #                               GPU's L2); 0 reads every request's whole context from HBM
    comm_eff: float = 0.70        # all-reduce bus bandwidth, fraction of the link's
    allreduce_s: float = 1.0e-5   # fixed cost of one all-reduce beyond the link latency (kernel, barrier)
    # Per-step overheads.
    step_s: float = 4.0e-4        # fixed device-side cost of a step (sampler, graph launch)
    per_req_s: float = 4.0e-6     # per scheduled request (metadata, sampling)
    per_token_s: float = 1.0e-8   # per scheduled token beyond the roofline (embedding, norms)
    quant_layer_s: float = 0.0    # per layer, fp8 weights: quantizing the activations before each linear layer
    piecewise_layer_s: float = 1.0e-5  # per layer, CPU to launch a step with prompt tokens: piecewise CUDA graphs,
    #                                    attention called from Python between them (overlaps the kernels: see
    #                                    StepCost.dispatch)
    eager_layer_s: float = 6.0e-5      # per layer, CPU to launch an enforce_eager step's kernels from Python (overlaps
    #                                    the kernels: see StepCost.dispatch)
    uncaptured_layer_s: float = 3.0e-4  # per layer, CPU to launch a compiled model's batch above the largest CUDA
    #                                     graph (overlaps the kernels: see StepCost.dispatch)
    uncaptured_moe_layer_s: float = 2.0e-4  # ... and per MoE layer on top (routing, sorting, the expert kernels'
    #                                         launches from Python)
    eager_allreduce_s: float = 5.0e-5  # per all-reduce launched outside a CUDA graph (tensor parallel, eager steps)
    cpu_step_s: float = 1.5e-3    # engine-core CPU per step (schedule + update)
    cpu_per_req_s: float = 1.2e-5  # engine-core CPU per running request per step
    cpu_per_new_req_s: float = 2.0e-4  # engine-core CPU per request admitted in the step (inputs, hashing)
    cpu_switch_per_req_s: float = 0.0  # SGLang: CPU per running request the device waits for where a prefill follows
    #                                    a decode (the overlap loop schedules it among the running batch unhidden:
    #                                    `rsi_env.sim.sglang.engine`); vLLM's sim does not read it
    uncaptured_per_req_s: float = 0.0  # SGLang: per request of a decode pass above the largest CUDA graph, on top of
    #                                    its launches (the eager forward's per-request work, unhidden by the kernels:
    #                                    `rsi_env.sim.sglang.engine`); vLLM's sim does not read it
    frontend_s: float = 1.5e-3    # request in and tokens out through the front-end process (IPC, streaming)
    # The host's CPU state, read by the real tier's probe (`rsi_env.real.host.cpu_probe_ms`: a fixed piece of
    # interpreter work, timed before the engine starts): the CPU terms (`CPU_TERMS`) hold at a probe of
    # cpu_probe_ref_ms and scale as (probe / ref) ** cpu_probe_exp at another (`Calibration.at_cpu_probe`). A ref of 0:
    # no probe stage was fitted, and the calibration cannot be moved to a probe.
    cpu_probe_ref_ms: float = 0.0
    cpu_probe_exp: float = 0.0
    # Memory profile (vLLM's determine_available_memory).
    non_torch_bytes: float = 1.5e9     # CUDA context, cuBLAS/NCCL workspaces
    act_token_coef: float = 1.0        # x (2*intermediate + 4*hidden) * 2 bytes per batched token
    act_logit_coef: float = 2.0        # x vocab * 4 bytes per sampled request in the profile run
    act_moe_coef: float = 1.0          # x the fused-MoE kernel's intermediate caches per batched token (MoE only)
    cudagraph_bytes: float = 0.0       # memory CUDA graphs take off the KV cache
    provenance: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Calibration:
        names = {f.name for f in fields(cls)}
        unknown = set(raw) - names
        if unknown:
            raise CalibrationError(f"unknown calibration fields {sorted(unknown)}")
        return cls(**raw)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def with_coefficients(self, values: dict[str, float]) -> Calibration:
        unknown = set(values) - set(COEFFICIENTS)
        if unknown:
            raise CalibrationError(f"not calibration coefficients: {sorted(unknown)}")
        return replace(self, **values)  # type: ignore[arg-type]

    def at_cpu_probe(self, probe_ms: float) -> Calibration:
        """This calibration for a host whose CPU probe read ``probe_ms``: its CPU terms scaled by
        ``(probe_ms / cpu_probe_ref_ms) ** cpu_probe_exp``, every GPU term kept, the id marked with the probe.

        One H200 host kind ran the same configuration's CPU-bound steps up to twice as slowly from one engine start to
        the next while the GPU's kernels did not move; a rule on the probe did no better there than one constant
        factor (research/calibration-notebook.md), so the stage that fits it is a study (research/probe_fit.py),
        and ``simulate`` takes a calibration moved by it like any other.
        """
        if self.cpu_probe_ref_ms <= 0:
            raise CalibrationError(f"calibration {self.id!r} has no CPU-probe reference (cpu_probe_ref_ms is 0): "
                                   "fit one with research/probe_fit.py")
        if not (probe_ms > 0 and math.isfinite(probe_ms)):
            raise CalibrationError(f"a CPU probe is a positive number of milliseconds, not {probe_ms!r}")
        f = (probe_ms / self.cpu_probe_ref_ms) ** self.cpu_probe_exp
        return replace(self.with_cpu_factor(f), id=f"{self.id}@probe{probe_ms:g}ms")

    def with_cpu_factor(self, factor: float) -> Calibration:
        """This calibration with every CPU term (`CPU_TERMS`) multiplied by ``factor``, the GPU's kept."""
        return replace(self, **{n: getattr(self, n) * factor for n in CPU_TERMS})

    def save(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))


MM_REF_PARAMS = 2.0e8  # weights per layer per GPU at which mm_half_tokens holds as fitted (a Llama-8B layer)

COEFFICIENTS = tuple(f.name for f in fields(Calibration) if f.type in ("float", float))
# The terms of the host's CPU rather than of its GPU: the engine core's own work per step, per running and per new
# request and at SGLang's decode-to-prefill switch, the front end's round trip, and launching what runs outside full
# CUDA graphs (`Calibration.at_cpu_probe`).
CPU_TERMS = ("cpu_step_s", "cpu_per_req_s", "cpu_per_new_req_s", "cpu_switch_per_req_s", "frontend_s",
             "piecewise_layer_s", "uncaptured_layer_s", "eager_layer_s")


def _calib_dir() -> Any:
    return resources.files("rsi_env") / "catalog" / "calibration"


@cache
def _in_catalog(name: str) -> bool:
    """Whether the package ships calibration ``name`` (the package's files do not change while it runs)."""
    return (_calib_dir() / name).is_file()


@cache
def _load(name: str) -> Calibration:
    entry = _calib_dir() / name
    return Calibration.from_dict(yaml.safe_load(entry.read_text()))


def user_calibration_dir() -> Path:
    """Where ``rsi-env calibrate`` writes fits: ``RSI_ENV_CALIBRATION_DIR``, else the user's cache directory."""
    return Path(_user_dir())


def _user_dir() -> str:
    """`user_calibration_dir` as a string, worked out once per value of the variables it reads."""
    env = os.environ
    return _user_dir_of(env.get("RSI_ENV_CALIBRATION_DIR"), env.get("XDG_CACHE_HOME"), env.get("HOME"))


@lru_cache(maxsize=16)
def _user_dir_of(own: str | None, xdg: str | None, home: str | None) -> str:
    if own:
        return str(Path(own))
    return str(Path(xdg or Path.home() / ".cache") / "rsi-env" / "calibration")


@cache
def _load_user(path: str, mtime_ns: int) -> Calibration:
    return Calibration.from_dict(yaml.safe_load(Path(path).read_text()))


@cache
def _user_files(directory: str, mtime_ns: int, prefix: str) -> tuple[str, ...]:
    """The directory's fits of one (hardware, version), listed once per change of the directory."""
    return tuple(str(p) for p in sorted(Path(directory).glob(f"{prefix}*.yaml")))


def _fitted(cal: Calibration) -> str:
    return str(cal.provenance.get("fitted", ""))


def release_tag(engine_version: str) -> str:
    """A calibration's engine part, in its file name and id: ``vllm0.26`` for a vLLM release, ``sglang-0.5`` for
    SGLang's (major and minor only: patch releases share a fit)."""
    ver = ".".join(str(engine_version).split(".")[:2])
    return ver if ver.startswith("sglang-") else f"vllm{ver}"


def load_calibration(hardware: str, engine_version: str, path: str | Path | None = None) -> Calibration:
    """A calibration file given by path, else the newest fitted one of (hardware, version), else the default.

    Fitted calibrations are the catalog's ``<hardware>-vllm<version>.yaml`` and every
    ``<hardware>-vllm<version>*.yaml`` in :func:`user_calibration_dir` (what ``rsi-env calibrate`` writes);
    the newest by ``provenance.fitted`` wins. Its ``id`` is what every measurement reports as ``calibration``.
    An SGLang release (``sglang-0.5.17``) has files of its own, ``<hardware>-sglang-<version>.yaml``.
    """
    if path is not None:
        return Calibration.from_dict(yaml.safe_load(Path(path).read_text()))
    ver = ".".join(str(engine_version).split(".")[:2])
    tag = release_tag(ver)
    name = f"{hardware}-{tag}.yaml"
    found: list[Calibration] = []
    if _in_catalog(name):
        found.append(_load(name))
    user = _user_dir()  # looked at on every call: a fit written meanwhile is used from then on
    try:
        st = os.stat(user)
    except (OSError, ValueError):
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        for p in _user_files(user, st.st_mtime_ns, f"{hardware}-{tag}"):
            cal = _load_user(p, os.stat(p).st_mtime_ns)
            if cal.hardware == hardware and str(cal.engine_version) == ver:
                found.append(cal)
    if found:
        return max(reversed(found), key=_fitted)  # ties: the later in the list (a user's fit over the catalog's)
    return _default_for(hardware, ver)


@lru_cache(maxsize=64)
def _default_for(hardware: str, ver: str) -> Calibration:
    """The catalog's default calibration, named for (hardware, version): frozen, like the catalog's own files."""
    return replace(_load("default.yaml"), hardware=hardware, engine_version=ver)
