"""The fast tier's boundary is computed from measured durations, and names test files that exist."""

from __future__ import annotations

from pathlib import Path

from tests.slow_tests import durations, load, slow_set

LOG = """============================= slowest durations ==============================
30.00s call     tests/a.py::test_slow
2.50s setup    tests/a.py::test_slow
4.00s call     tests/b.py::test_mid[x]
1.00s call     tests/b.py::test_fast
0.50s teardown tests/b.py::test_fast
"""


def test_durations_add_setup_call_and_teardown_and_the_slowest_files_go_first():
    per = durations(LOG)
    assert per == {"tests/a.py::test_slow": 32.5, "tests/b.py::test_mid[x]": 4.0, "tests/b.py::test_fast": 1.5}
    assert slow_set(per, budget_s=10) == {"tests/a.py": 32.5}  # whole files: a module's tests share its fixtures
    assert slow_set(per, budget_s=2) == {"tests/a.py": 32.5, "tests/b.py": 5.5}
    assert slow_set(per, budget_s=100) == {}


def test_every_slow_test_s_file_exists_and_has_its_seconds():
    root = Path(__file__).resolve().parents[1]
    assert load() and all((root / f).is_file() for f in load())
    assert all(secs > 0 for secs in load().values())


def test_the_list_reads_back_what_main_writes(tmp_path, monkeypatch):
    import tests.slow_tests as st

    log = tmp_path / "durations.log"
    log.write_text(LOG + "3.00s call     tests/a.py::test_other@group\n")  # pytest-xdist's group suffix
    monkeypatch.setattr(st, "SLOW_FILE", tmp_path / "slow.txt")
    monkeypatch.setattr("sys.argv", ["slow_tests", str(log), "--budget-s", "10"])
    st.main()
    assert st.load() == {"tests/a.py": 36.0}
