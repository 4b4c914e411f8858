"""The scheduler (engine.py) and config resolution (config.py) on small cases. Run: python -m pytest -q tests/"""

import config
import engine

from rsi_env.engine.config import EngineConfig as PackageConfig
from rsi_env.engine.hardware import load_hardware
from rsi_env.engine.model import load_model
from rsi_env.engine.workload import Workload
from rsi_env.sim import simulate_detailed

MODEL, GPU = load_model("qwen2.5-7b"), load_hardware("l4")


def test_default_resolution_on_an_l4():
    r = config.EngineConfig().resolve(MODEL, GPU, "0.26")
    assert r.max_num_seqs == 256 and r.max_num_batched_tokens == 2048
    assert r.enable_chunked_prefill and r.block_size == 16


def test_a_light_workload_finishes_every_request():
    w = Workload.from_dict({"name": "light", "seed": 1, "requests": 40, "prompt_tokens": 200, "output_tokens": 50,
                            "arrival": {"process": "poisson", "rate": 5}})
    r = config.EngineConfig().resolve(MODEL, GPU, "0.26")
    made = []

    class Resolved(PackageConfig):  # the simulator takes the workspace's resolution
        def resolve(self, *a, **k):
            return r

    def make(*args):
        made.append(engine.EngineSim(*args))
        return made[-1]

    tel, _, _, res = simulate_detailed(Resolved(), MODEL, GPU, w, engine_cls=make)
    assert tel.ok and (res[0].generated == res[0].output_len).all()
    made[0].pool.check()
