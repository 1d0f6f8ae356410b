"""The ExecuTorch runtime's progress lines on stderr are dropped where they come from."""

from __future__ import annotations

import os
import sys

from vla_edge.runners.executorch_program import set_executorch_threads, without_runtime_chatter


def test_the_thread_pool_reset_writes_nothing_to_stderr(capfd) -> None:
    set_executorch_threads(1)
    set_executorch_threads(2)
    out, err = capfd.readouterr()
    assert "cpuinfo_utils.cpp" not in err and "threadpool.cpp" not in err
    assert err == ""


def test_other_lines_written_meanwhile_are_passed_on(capfd) -> None:
    def call() -> int:
        os.write(2, b"[threadpool.cpp:66] Resetting threadpool to 1 threads.\n")
        os.write(2, b"a real warning\n")
        print("[cpuinfo_utils.cpp:71] Reading file /sys/x", file=sys.stderr)
        print("a Python warning", file=sys.stderr)
        return 7

    assert without_runtime_chatter(call) == 7
    _, err = capfd.readouterr()
    assert sorted(err.splitlines()) == ["a Python warning", "a real warning"]
