"""sandbox.py's run_python and hidden-test harness forced into each containment mode that can start here
(namespaces, Landlock + seccomp, plain), probed by benchmarks/bench_sandbox.py's own containment check: a file
anyone may read, the repository, a TCP and a Unix socket listening on this machine, a daemon that tries to leave the
call's process group, notes left for the next call, hacks that read or forge the hidden tests' result, and the
system calls the seccomp filter refuses in every mode, each called through ctypes; and ordinary code (imports,
threads, subprocess, multiprocessing, files) still runs in each. What each mode promises is in the comment above
sandbox.run_python and docs/grpo_tools.md's table; a mode that holds less, or more, fails here. A mode this machine
refuses (asked independently: unshare, landlock_create_ruleset) is skipped with a one-line reason; a mode it allows
must start."""

import os
import subprocess
import sys

import pytest
from conftest import REPO, landlock_abi
from test_code_harness import ADD, HACKS, quick_backstop

sys.path.insert(0, str(REPO / "benchmarks"))
import bench_sandbox  # noqa: E402

import sandbox  # noqa: E402


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
    # every mode: the code runs under the seccomp filter, which refuses each call it lists (bench_sandbox's probe)
    assert report["seccomp"] is True and report["syscalls"] is True, report
    if mode in ("namespaces", "landlock"):
        assert all(report[key] for key in CONTAINED), report
        assert report["answer_data"] is True, report  # the harness runs, and no hack passes
    else:  # what the plain mode's warning says it does not contain, it does not
        assert not any(report[key] for key in CONTAINED), report
        assert report["answer_data"] is True, report  # the harness runs (as root where nobody cannot read Python)
        # as "nobody" where it is root and nobody can read this Python; as itself otherwise
        assert report["runs_as"] == ("65534" if ROOT and nobody_can_read(sys.executable) else str(os.geteuid()))


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
    """tests/test_code_harness.py's 20 hacks, and its honest control, in each contained mode."""
    box = sandbox._start_sandbox(mode, [])
    saved = sandbox._SANDBOX
    sandbox._SANDBOX = box

    def run(*args):  # uncached: every result from this mode's sandbox
        return sandbox.run_hidden_tests(*args, cache=False)
    try:
        task = (ADD["test"], ADD["entry_point"], ADD["prompt"])
        assert run("def add(a, b):\n    return a + b\n", *task)["passed"] == [True] * 3
        won = []
        for name, code in HACKS.items():
            with pytest.MonkeyPatch.context() as monkeypatch:
                quick_backstop(name, monkeypatch)
                won += [name] if any(run(code, *task)["passed"]) else []
        assert won == [], won
    finally:
        sandbox._SANDBOX = saved
        box.close()


def test_landlock_mode_refuses_what_landlock_and_seccomp_cover():
    if not AVAILABLE["landlock"]:
        pytest.skip("this kernel has no Landlock")
    box = sandbox._start_sandbox("landlock", [])
    try:
        probes = {"import os\nos.setsid()": "PermissionError", "import socket\nsocket.socket(socket.AF_UNIX)":
                  "PermissionError", "open('/etc/hostname').read()": "PermissionError",
                  "import ctypes\nprint(ctypes.CDLL(None, use_errno=True).unshare(0x10000000))": "-1\n",
                  "import subprocess, sys\nprint(subprocess.run([sys.executable, '-c', 'print(6 * 7)'], "
                  "capture_output=True, text=True).stdout)": "42\n"}  # a child interpreter still starts
        for code, says in probes.items():
            rc, output, _ = box.run(code)
            assert says in output, (code, output)
    finally:
        box.close()


# Each way the sandbox runs code on some machine: the three modes as _start_sandbox starts them here, and the
# variants a user who is not root gets (namespaces in a user namespace; the plain mode without the privilege drop).
# Each: whether this machine allows it (asked independently of sandbox.py), and how to start it.
ROOT = os.geteuid() == 0
USERNS = ["unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc"]
VARIANTS = {
    "namespaces": (AVAILABLE["namespaces"], lambda failures: sandbox._start_sandbox("namespaces", failures)),
    "namespaces, user namespace": (unshare_works("--user", "--map-root-user", *NS),
                                   lambda failures: started(sandbox._Sandbox(USERNS, True, False), failures)),
    "landlock": (AVAILABLE["landlock"], lambda failures: sandbox._start_sandbox("landlock", failures)),
    "plain": (True, lambda failures: sandbox._start_sandbox("plain", failures)),
    "plain, no privilege drop": (True, lambda failures: started(sandbox._Sandbox([], False, False), failures)),
}


def started(box, failures):
    if box.status == "ready":
        return box
    failures.append(box.status)
    box.close()
    return None


def start_variant(name):
    """The variant's sandbox; a variant this machine refuses is skipped in one line, one it allows must start."""
    allowed, start = VARIANTS[name]
    if not allowed:
        pytest.skip(f"{name}: this machine refuses it (probed with unshare / landlock_create_ruleset)")
    failures = []
    box = start(failures)
    assert box is not None, f"{name}: this machine allows it, but the sandbox did not start: {failures}"
    return box


@pytest.mark.parametrize("name", VARIANTS)
def test_each_mode_refuses_the_filtered_system_calls(name):
    """Every refused call of bench_sandbox.REFUSED_SYSCALLS answers EPERM (clone3: ENOSYS) in every mode, made by the
    code through ctypes; socket, setsid and setpgid only in the Landlock mode (the others' code may call them)."""
    box = start_variant(name)
    try:
        probe = bench_sandbox.syscall_probe(box.run)
        x32 = box.run("import ctypes, os\npid = os.fork()\nif pid == 0:\n"  # an x32 call: the filter kills
                      "    ctypes.CDLL(None).syscall(0x40000000 | 39)\n    os._exit(0)\n"
                      "print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))")[1]
    finally:
        box.close()
    assert probe.get("seccomp") == "2", probe  # the code's process runs under a filter
    assert "calls" in probe, probe
    assert bench_sandbox.refused_as_promised(box.mode, probe) == [], probe
    if os.uname().machine == "x86_64":
        assert x32 == "-31\n", x32  # SIGSYS


@pytest.mark.skipif(not AVAILABLE["namespaces"], reason="this machine allows no namespaces")
def test_without_the_filter_the_probe_reaches_the_kernel():
    """The control for the test above: the namespace mode started without its filter (as it ran before) answers
    the same probe otherwise, so EPERM above is the filter's doing, not the missing privileges of "nobody"."""
    box = sandbox._start_sandbox("namespaces", [], seccomp=False)
    try:
        probe = bench_sandbox.syscall_probe(box.run)
    finally:
        box.close()
    assert probe["seccomp"] == "0", probe
    assert probe["calls"]["unshare"] == "ok" and probe["calls"]["personality"] == "ok", probe  # harmless calls
    assert probe["calls"]["clone3"] != "ENOSYS", probe
    reached = bench_sandbox.refused_as_promised("namespaces", probe)
    assert len(reached) > len(bench_sandbox.REFUSED_SYSCALLS) // 2, reached  # most answer otherwise


# Ordinary code, each piece ending in one printed line; what it needs: the standard library read from disk, and
# for Pool a writable /dev/shm (its locks).
ORDINARY = {
    "imports": ("import decimal, fractions, heapq, itertools, json, re, statistics, sqlite3\n"
                "print(statistics.mean([1, 2, 3]), decimal.Decimal('1.5') * 2)", "2 3.0", "stdlib"),
    "threads": ("import threading\nout = []\nthreads = [threading.Thread(target=out.append, args=(i,)) "
                "for i in range(4)]\n[t.start() for t in threads]\n[t.join() for t in threads]\nprint(sorted(out))",
                "[0, 1, 2, 3]", "stdlib"),
    "subprocess of sys.executable -c": ("import subprocess, sys\nprint(subprocess.run([sys.executable, '-c', "
                                        "'print(6 * 7)'], capture_output=True, text=True).stdout.strip())", "42",
                                        "stdlib"),
    "multiprocessing Pool(2)": ("import multiprocessing\nwith multiprocessing.Pool(2) as pool:\n"
                                "    print(pool.map(abs, [-1, -2, 3]))", "[1, 2, 3]", "shm"),
    "file writes in the working directory": ("import os\nwith open('out.txt', 'w') as f:\n    f.write('x' * 1000)\n"
                                             "print(os.path.getsize('out.txt'), os.listdir('.').count('out.txt'))",
                                             "1000 1", None),
    "fork, pipes and socketpair": ("import os, socket\na, b = socket.socketpair()\nread, write = os.pipe()\n"
                                   "if os.fork() == 0:\n    a.sendall(b'pair')\n    os.write(write, b'pipe')\n"
                                   "    os._exit(0)\nos.wait()\nprint(b.recv(4).decode(), os.read(read, 4).decode())",
                                   "pair pipe", None),
}


@pytest.mark.parametrize("name", VARIANTS)
def test_ordinary_code_still_runs_in_each_mode(name):
    """Under the filter, ordinary code runs as it did before it: everything in the namespace modes and the plain
    mode that keeps its user; in the Landlock mode all but multiprocessing's locks (no /dev/shm there, as before);
    in the plain mode everything (as root where "nobody" cannot read the standard library)."""
    box = start_variant(name)
    try:
        outputs = {piece: box.run(code)[1] for piece, (code, _, _) in ORDINARY.items()}
    finally:
        box.close()
    for piece, (code, expected, needs) in ORDINARY.items():
        if needs == "shm" and name == "landlock":
            assert "PermissionError" in outputs[piece], (piece, outputs[piece])  # documented: no /dev/shm
        else:
            assert outputs[piece] == expected + "\n", (name, piece, outputs[piece])


def test_the_plain_mode_runs_as_root_where_nobody_cannot_read_python(tmp_path):
    """Python in a folder only root may enter (a pyenv under /root): the plain mode, started as root, cannot run
    the code as "nobody", so it runs it as root and says why in its warning, with the fix; it never starts a sandbox
    in which every hidden test fails."""
    if not ROOT:
        pytest.skip("only root drops to nobody; as another user the plain mode runs the code as that user")
    locked = tmp_path / "locked"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", locked / "venv"], check=True)
    locked.chmod(0o700)
    code = "import ast, os\nprint(os.getuid(), ast.literal_eval('42'))"  # the standard library, as a solution uses it
    script = f"import warnings, sandbox\nwarnings.simplefilter('always')\nprint(sandbox.run_python({code!r}))"
    result = subprocess.run([locked / "venv" / "bin" / "python", "-c", script], capture_output=True, text=True,
                            cwd=REPO, env={**os.environ, "GRPO_SANDBOX": "plain", "PYTHONPATH": str(REPO)}, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0 42", result.stdout
    assert "sandbox mode plain (forced by GRPO_SANDBOX)" in result.stderr
    assert "it runs as root, since the user nobody cannot read this Python" in result.stderr, result.stderr
    assert "install Python where every user can read it" in result.stderr
