"""`rsi_env.sandbox.isolation.CpuClock`: the CPU a worker's process tree spends, read from outside it.

Real processes, no sandbox: a worker that burns CPU in its main thread, in a thread and in a child it waits for, and
one whose child ends unreaped into any count (its parent ignores SIGCHLD). The clock counts each, whatever the
worker's own clocks say, and nothing while the tree is stopped.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time

import pytest

from rsi_env.sandbox.isolation import CpuClock, ProcessTree

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


@pytest.mark.parametrize("mode", ["main", "thread", "child", "orphaned"])
def test_the_clock_counts_the_trees_cpu_wherever_it_is_spent(mode):
    proc = subprocess.Popen([sys.executable, "-c", WORKER, mode, "0.4"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdin is not None and proc.stdout is not None
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
        assert clock.read() == spent   # stopped: nothing more is spent
    finally:
        tree.kill()
        proc.wait()
    # 0.4 s burned, whatever the worker's clocks say; an orphan released unreaped is held by its last sample (50 ms)
    assert (0.3 if mode == "orphaned" else 0.38) <= spent < 2.0, spent
