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
