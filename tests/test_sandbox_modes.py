"""run_python and the hidden-test harness forced into each containment mode that can start here (namespaces,
Landlock + seccomp, plain), probed by benchmarks/bench_sandbox.py's own containment check: a file anyone may read,
the repository, a TCP and a Unix socket listening on this machine, a daemon that tries to leave the call's process
group, notes left for the next call, and hacks that read or forge the hidden tests' result. What each mode promises
is in run_python's comment and the README's table; a mode that holds less, or more, fails here."""

import os
import subprocess
import sys

import pytest
from conftest import REPO, landlock_abi
from test_code_harness import ADD, HACKS

sys.path.insert(0, str(REPO / "benchmarks"))
import bench_sandbox  # noqa: E402

import grpo_code  # noqa: E402
import grpo_tools  # noqa: E402


def unshare_works(*flags):
    try:
        return subprocess.run(["unshare", *flags, "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


NS = ["--net", "--pid", "--fork", "--kill-child", "--mount-proc"]
AVAILABLE = {"namespaces": unshare_works(*NS) or unshare_works("--user", "--map-root-user", *NS),
             "landlock": landlock_abi() >= 1, "plain": True}
CONTAINED = ("host_files", "network", "processes_outliving_the_call", "state_between_calls")


@pytest.mark.parametrize("mode", list(AVAILABLE))
def test_each_mode_contains_what_it_promises(mode):
    if not AVAILABLE[mode]:
        pytest.skip(f"this machine's kernel or policy refuses {mode}: probed with unshare / landlock_create_ruleset")
    report = bench_sandbox.containment(mode)
    assert report["started"], report
    if mode in ("namespaces", "landlock"):
        assert all(report[key] for key in CONTAINED), report
        assert report["answer_data"] is True, report  # the harness runs, and no hack passes
    else:  # what the plain mode's warning says it does not contain, it does not
        assert not any(report[key] for key in CONTAINED), report
        if report["answer_data"] is None:  # the harness could not run: only because nobody cannot read Python
            assert report["runs_as"] == "65534" and not nobody_can_read(os.__file__), report
        else:
            assert report["answer_data"] is True, report  # the harness runs, and no hack passes


def nobody_can_read(path) -> bool:
    """Whether uid 65534 may read `path`, asked in a forked child that becomes it (as root; else: yes)."""
    if os.geteuid() != 0:
        return True
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(65534)
            os.setuid(65534)
            os._exit(0 if os.access(path, os.R_OK) else 1)
        finally:
            os._exit(2)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


@pytest.mark.parametrize("mode", [m for m in ("namespaces", "landlock") if AVAILABLE[m]])
def test_every_harness_hack_fails_in_each_mode(mode):
    """tests/test_code_harness.py's 18 hacks, and its honest control, in each contained mode."""
    sandbox = grpo_tools._start_sandbox(mode, [])
    saved = grpo_code._SANDBOX
    grpo_code._SANDBOX = sandbox
    run = grpo_code.run_hidden_tests.__wrapped__  # uncached: every result from this mode's sandbox
    try:
        task = (ADD["test"], ADD["entry_point"], ADD["prompt"])
        assert run("def add(a, b):\n    return a + b\n", *task)["passed"] == [True] * 3
        won = [name for name, code in HACKS.items() if any(run(code, *task)["passed"])]
        assert won == [], won
    finally:
        grpo_code._SANDBOX = saved
        sandbox.close()


def test_landlock_mode_refuses_what_landlock_and_seccomp_cover():
    if not AVAILABLE["landlock"]:
        pytest.skip("this kernel has no Landlock")
    sandbox = grpo_tools._start_sandbox("landlock", [])
    try:
        probes = {"import os\nos.setsid()": "PermissionError", "import socket\nsocket.socket(socket.AF_UNIX)":
                  "PermissionError", "open('/etc/hostname').read()": "PermissionError",
                  "import ctypes\nprint(ctypes.CDLL(None, use_errno=True).unshare(0x10000000))": "-1\n",
                  "import subprocess, sys\nprint(subprocess.run([sys.executable, '-c', 'print(6 * 7)'], "
                  "capture_output=True, text=True).stdout)": "42\n"}  # a child interpreter still starts
        for code, says in probes.items():
            rc, output, _ = sandbox.run(code)
            assert says in output, (code, output)
    finally:
        sandbox.close()
