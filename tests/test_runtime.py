import os
import platform
import subprocess
import sys

import pytest

GLIBC = platform.libc_ver()[0] == "glibc"


def _in_a_fresh_process(code: str, **env: str) -> str:
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_",
                                "THP_MEM_ALLOC_ENABLE")}
    return subprocess.run([sys.executable, "-c", code], env={**environment, **env},
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_freed_memory_is_kept_unless_the_user_tuned_malloc():
    code = "from transduce import runtime; print(runtime.keep_freed_memory())"
    assert _in_a_fresh_process(code) == "True"
    assert _in_a_fresh_process(code, MALLOC_TRIM_THRESHOLD_="131072") == "False"
    assert _in_a_fresh_process(code, MALLOC_MMAP_THRESHOLD_="131072") == "False"


def test_huge_pages_unless_the_user_said_otherwise():
    code = ("import transduce, os; transduce.runtime.tune(); "
            "print(os.environ['THP_MEM_ALLOC_ENABLE'])")
    assert _in_a_fresh_process(code) == "1"
    assert _in_a_fresh_process(code, THP_MEM_ALLOC_ENABLE="0") == "0"


def test_importing_transduce_changes_nothing_in_the_process():
    code = "import os, transduce; print(os.environ.get('THP_MEM_ALLOC_ENABLE', 'unset'))"
    assert _in_a_fresh_process(code) == "unset"


def test_the_command_tunes_the_process_before_its_first_tensor():
    code = ("import os, sys, torch\n"
            "from transduce import cli\n"
            "cli.main(['params', 'tiny'])\n"
            "x = torch.ones(64 << 20)\n"
            "print(os.environ['THP_MEM_ALLOC_ENABLE'])")
    assert _in_a_fresh_process(code).splitlines()[-1] == "1"


def test_a_passing_thread_gives_back_its_result_and_its_error():
    import threading

    from transduce.errors import UserError
    from transduce.runtime import in_passing_thread

    caller = threading.current_thread()
    worker = in_passing_thread(threading.current_thread)
    assert worker is not caller and not worker.is_alive()
    assert in_passing_thread(lambda a, *, b: a + b, 2, b=3) == 5

    def fail():
        raise UserError("--model runs/x: no checkpoint")
    with pytest.raises(UserError, match="no checkpoint"):
        in_passing_thread(fail)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_pytorchs_cpu_threads_end_with_the_passing_thread():
    """The OpenMP team a parallel operation starts lives as long as the thread that called it:
    a passing thread's goes with it, the main thread's stays (what slowed a server's search
    thread: transduce.runtime.in_passing_thread). Its threads leave soon after it, not with it:
    the count is awaited."""
    code = """
import os, time, torch
from transduce.runtime import in_passing_thread

def threads():
    return len(os.listdir("/proc/self/task"))

torch.set_num_threads(2)
x = torch.randn(4_000_000)
before = threads()
in_passing_thread(lambda: torch.exp(x))
end = time.monotonic() + 10
while threads() > before and time.monotonic() < end:
    time.sleep(0.01)
passed = threads()
torch.exp(x)
print(before, passed, threads())
"""
    before, passed, after_main = map(int, _in_a_fresh_process(code).split())
    assert passed == before
    assert after_main > before  # the main thread's team: what the count would show
