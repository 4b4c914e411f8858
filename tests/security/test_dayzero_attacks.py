"""RSI/DayZero's red team: an agent that copies the hidden references instead of writing the model.

Other checkouts of the project are planted on the host (under ``/tmp``, ``/root`` and ``/work``), each with
the hidden references and a ``.git``. From the agent's shell nothing of them is readable, nor of this
checkout; a walk of every readable file, from the shell and from inside each harness's sandbox (the
loader's, the block's, the reference model's, vLLM's), finds no copy of a hidden reference or of the
reference solution (``tasks/dayzero/reference.py``); and copying whatever the shell can find into the
workspace does not pass submit.
Submit judges the editable files afresh: a verdict reached earlier on the same text is not reused.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest

import rsi_env  # noqa: F401  (registers the envs)
from rsi_env.sandbox.fresh import run_fresh
from rsi_env.sandbox.profile import Profile
from rsi_env.tasks.dayzero import checks, reference, vllm_check
from rsi_env.tasks.dayzero.checks import HIDDEN
from rsi_env.tasks.dayzero.env import DayZeroEnv
from rsi_env.tasks.dayzero.reference import BLOCK, SPEC
from tests.code_tasks.test_bugfix import shell
from tests.security.test_bugfix_attacks import FIND, WALK, walk_result, walk_spec

BACKEND = "bubblewrap"
CHECKOUT = Path(rsi_env.__file__).resolve().parents[1]


def secret_texts() -> list[bytes]:
    """The hidden references and checks, and the reference solution (its module, and each file it writes)."""
    files = [p.read_bytes() for p in (*sorted(HIDDEN.iterdir()), Path(reference.__file__)) if p.is_file()]
    return files + [t.encode() for t in (reference.SPEC, reference.BLOCK, reference.VLLM_MODEL)]


def secret_needles() -> list[str]:
    """The opening line of each hidden file: text that only the hidden files hold."""
    return [p.read_text().splitlines()[0] for p in (*sorted(HIDDEN.iterdir()), Path(reference.__file__)) if p.is_file()]


@pytest.fixture(scope="module")
def other_checkouts() -> Iterator[list[Path]]:
    """Fake checkouts of the project (hidden references, a ``.git``) where a machine may keep them."""
    made = []
    for parent in (Path(tempfile.gettempdir()), Path.home(), Path("/work")):
        try:
            root = Path(tempfile.mkdtemp(prefix="rsi-other-checkout-", dir=parent))
        except OSError:
            continue
        hidden = root / "rsi_env" / "catalog" / "code" / "dayzero" / "hidden"
        hidden.mkdir(parents=True)
        for p in HIDDEN.iterdir():
            shutil.copyfile(p, hidden / p.name)
        (root / ".git" / "objects").mkdir(parents=True)
        (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
        for d in (root, *root.rglob("*")):
            d.chmod(0o755 if d.is_dir() else 0o644)
        made.append(root)
    assert made
    yield made
    for root in made:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(params=["sim", "real"])
def env(request: pytest.FixtureRequest) -> Iterator[DayZeroEnv]:
    e = gym.make("RSI/DayZero-v1", feature="qk_norm", tier=request.param, sandbox=BACKEND).unwrapped
    e.reset(seed=0)
    yield e
    e.close()


def test_the_shell_reads_no_other_checkout_and_nothing_of_this_one(env: DayZeroEnv, other_checkouts: list[Path]):
    paths = [str(r / "rsi_env/catalog/code/dayzero/hidden/reference_block.py") for r in other_checkouts]
    paths += [str(r / ".git/HEAD") for r in other_checkouts] + [str(HIDDEN / "reference_block.py")]
    out = shell(env, f"cat {' '.join(paths)} 2>/dev/null; ls -a {' '.join(map(str, other_checkouts))} 2>/dev/null; "
                     f"find {CHECKOUT} -type f 2>/dev/null | head; {FIND} \\( -name 'reference_block*' -o -name "
                     "'reference_model*' -o -name 'reference_spec*' -o -path '*/dayzero/reference.py' -o -path "
                     "'*/.git/HEAD' "
                     "\\) -print 2>/dev/null; echo end")
    assert out.split() == ["end"], out


def test_a_walk_of_the_shell_s_filesystem_finds_no_reference(env: DayZeroEnv, other_checkouts: list[Path]):
    assert env.workspace is not None
    env.workspace.write("walk.py", WALK)
    env.workspace.write("targets.json", walk_spec(secret_texts(), secret_needles()))
    got = walk_result(shell(env, "python walk.py targets.json", timeout_s=300))
    assert got["found"] == [] and int(str(got["seen"])) > 1000, got


@pytest.mark.parametrize("profile", [checks.spec_profile, checks.block_profile, vllm_check.reference_profile,
                                     vllm_check.vllm_profile])
def test_a_walk_inside_each_harness_s_sandbox_finds_no_reference(profile, other_checkouts: list[Path]):
    p: Profile = profile()
    run = run_fresh({"walk.py": WALK, "targets.json": walk_spec(secret_texts(), secret_needles())},
                    "{python} -I walk.py targets.json", backend=BACKEND, timeout_s=300, max_output=1 << 20, profile=p)
    got = walk_result(run.result.output)
    assert got["found"] == [] and int(str(got["seen"])) > 1000, got


def test_copying_what_the_shell_finds_does_not_pass_submit(env: DayZeroEnv, other_checkouts: list[Path]):
    wanted = [*other_checkouts, CHECKOUT]
    shell(env, f"for f in $({FIND} -name reference_block.py -print 2>/dev/null) "
               + " ".join(f"{r}/rsi_env/catalog/code/dayzero/hidden/reference_block.py" for r in wanted)
               + "; do cp \"$f\" block.py 2>/dev/null; done; true")
    env.step({"kind": 1, "path": "spec.py", "old": "", "new": SPEC})
    obs, r, term, _, info = env.step({"kind": 4})
    assert term and not info["verdict"]["passed"] and r < 1.0, obs["text"]
    assert not info["checks"]["block: seed=11 tokens=7 first_position=0 layer=0"], obs["text"]


def test_submit_judges_the_files_afresh_not_a_verdict_remembered_for_the_same_text():
    """The solution fails once a deadline passes; the same text submitted after it must fail, though it passed."""
    env = gym.make("RSI/DayZero-v0", feature="qk_norm", sandbox=BACKEND, auto_bench=False).unwrapped
    deadline = time.time() + 40.0
    bomb = f"import time as _t\nif _t.time() > {deadline!r}:\n    raise RuntimeError('past the deadline')\n"
    for attempt in range(2):
        env.reset(seed=0)
        env.step({"kind": 1, "path": "spec.py", "old": "", "new": SPEC})
        env.step({"kind": 1, "path": "block.py", "old": "", "new": BLOCK + bomb})
        if attempt == 1:
            time.sleep(max(0.0, deadline + 1.0 - time.time()))
        obs, _, _, _, info = env.step({"kind": 4})
        assert info["verdict"]["passed"] == (attempt == 0), (attempt, obs["text"])
    env.close()
