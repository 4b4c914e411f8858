"""`rsi_env.sandbox.isolation.CpuClock`: the CPU a worker's process tree spends, read from outside it.

Real processes, no sandbox: a worker that burns CPU in its main thread, in a thread and in a child it waits for, and
one whose child ends unreaped into any count (its parent ignores SIGCHLD). The clock counts each, whatever the
worker's own clocks say, and nothing while the tree is stopped.

The clock and the tree run in a driver process of their own that is the subreaper, as in the supervisor: they act on
every descendant of the process they run in, so that process must have started nothing but the worker. A pytest
worker's descendants include whatever else it started (the session's dockerd, which `ProcessTree.kill` would take
along).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# ``python -c WORKER MODE SECONDS``: burns SECONDS of CPU in the way MODE names once a line arrives on stdin, then
# says "done"; its own clocks are wound back by what it burned (as an agent's module could).
WORKER = r"""
import os, signal, sys, threading, time
mode, seconds = sys.argv[1], float(sys.argv[2])
def burn(s):
    end = time.thread_time() + s
    while time.thread_time() < end:
        pass
time.process_time = lambda: 0.0
sys.stdin.readline()
if mode == "thread":
    t = threading.Thread(target=burn, args=(seconds,))
    t.start(); t.join()
elif mode in ("child", "orphaned"):
    if mode == "orphaned":
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)   # the child is released on exit, its time added nowhere
    pid = os.fork()
    if pid == 0:
        burn(seconds)
        os._exit(0)
    if mode == "child":
        os.waitpid(pid, 0)
    else:
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.01)
else:
    burn(seconds)
print("done", flush=True)
sys.stdin.readline()
"""


# ``python -c DRIVER MODE``: the supervisor's part, in a process of its own (the subreaper of what it starts): the
# worker started, stopped, the clock started, the worker let go, sampled until it says "done", stopped again; prints
# the CPU read then and read again 0.2 s later.
DRIVER = r"""
import ctypes, json, os, select, subprocess, sys, time
from rsi_env.sandbox.isolation import CpuClock, ProcessTree
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)   # PR_SET_CHILD_SUBREAPER: an orphan of the worker stays below
worker, mode = sys.argv[1], sys.argv[2]
proc = subprocess.Popen([sys.executable, "-c", worker, mode, "0.4"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                        start_new_session=True)
tree, clock = ProcessTree(proc.pid), CpuClock()
try:
    time.sleep(0.3)   # the interpreter's start, before the clock
    tree.stop()
    clock.start()
    tree.resume()
    proc.stdin.write(b"go\n")
    proc.stdin.flush()
    got = b""
    while b"done" not in got:   # as the supervisor waits for a reply: sampling the tree meanwhile
        if select.select([proc.stdout], [], [], 0.05)[0]:
            got += os.read(proc.stdout.fileno(), 100)
        else:
            clock.sample()
    tree.halt()
    tree.stop()
    spent = clock.read()
    time.sleep(0.2)
    print(json.dumps({"spent": spent, "later": clock.read()}))
finally:
    tree.kill()
    proc.wait()
"""


@pytest.mark.parametrize("mode", ["main", "thread", "child", "orphaned"])
def test_the_clock_counts_the_trees_cpu_wherever_it_is_spent(mode):
    out = subprocess.run([sys.executable, "-c", DRIVER, WORKER, mode], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    spent = got["spent"]
    assert got["later"] == spent   # stopped: nothing more is spent
    # 0.4 s burned, whatever the worker's clocks say; an orphan released unreaped is held by its last sample (50 ms)
    assert (0.3 if mode == "orphaned" else 0.38) <= spent < 2.0, spent

