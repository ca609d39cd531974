"""The tools of grpo_tools.py under misuse: each bad input comes back promptly as readable "Error: " text, and
run_python leaves nothing behind (processes, files, network connections) and keeps the caller's secrets."""

import multiprocessing
import os
import socket
import subprocess
import threading
import time
import tracemalloc
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grpo_tools import calculator, run_python

RUN_LIMIT_S = 15   # run_python's own wall-clock limit is 5 s; generous for a loaded 2-core machine
CALC_LIMIT_S = 1
REPO = Path(__file__).resolve().parent.parent


def _unshare_works(*flags):
    try:
        return subprocess.run(["unshare", *flags, "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


# What this machine allows, probed here independently of the code under test: where namespaces work, run_python
# must use them (CI runs as root on this kind of machine); where they don't, it documents a weaker guarantee and
# the tests below check exactly that fallback.
NS_FLAGS = ["--net", "--pid", "--fork", "--kill-child", "--mount-proc"]
NAMESPACES = _unshare_works(*NS_FLAGS) or _unshare_works("--user", "--map-root-user", *NS_FLAGS)
DROPS_ROOT = NAMESPACES and os.geteuid() == 0  # started as root, the code runs as "nobody"


def timed_run(code):
    """run_python(code) from a worker thread, as TRL may call it; a call that hangs fails the test."""
    results = []
    worker = threading.Thread(target=lambda: results.append(run_python(code)), daemon=True)
    worker.start()
    worker.join(RUN_LIMIT_S)
    assert not worker.is_alive(), f"run_python did not return within {RUN_LIMIT_S} s"
    assert len(results) == 1 and isinstance(results[0], str), "run_python raised instead of returning text"
    return results[0]


def _calc_in_child(sender, expression):
    try:
        sender.send(("returned", calculator(expression)))
    except BaseException as e:
        sender.send(("raised", repr(e)))


def timed_calc(expression):
    """calculator(expression) in a forked child, so that a runaway computation (which holds the GIL) fails the
    test after CALC_LIMIT_S instead of hanging it."""
    ctx = multiprocessing.get_context("fork")
    receiver, sender = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_calc_in_child, args=(sender, expression), daemon=True)
    child.start()
    try:
        assert receiver.poll(CALC_LIMIT_S), f"calculator did not return within {CALC_LIMIT_S} s: {expression[:40]!r}"
        outcome, value = receiver.recv()
        assert outcome == "returned", f"calculator raised {value} on {expression[:40]!r}"
        return value
    finally:
        child.kill()
        child.join()


def pids_with(marker):
    """Processes on this machine whose command line contains `marker`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:  # gone meanwhile
            pass
    return found


def survivors(marker):
    """Processes left with `marker` after a short grace for SIGKILL delivery; they are killed before returning."""
    deadline = time.monotonic() + 3
    while pids_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = pids_with(marker)
    for pid in left:
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    return left


def sleep_marker():
    return f"1000.{uuid.uuid4().int % 10**9:09d}"  # `sleep 1000.123456789`: a command line nobody else has


# ----------------------------------------------------------------------------- run_python: normal use
def test_printed_output_is_returned():
    assert timed_run("print(6 * 7)\nprint('done')") == "42\ndone\n"


def test_exception_returns_error_with_the_traceback_last_line():
    result = timed_run("def f():\n    raise ValueError('bad input 17')\nf()")
    assert result.startswith("Error: ")
    assert result.splitlines()[-1] == "ValueError: bad input 17"


def test_concurrent_calls_from_threads():
    codes = [f"import time\ntime.sleep(0.5)\nprint({i} * 1000)" for i in range(4)]
    start = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run_python, codes))
    assert results == [f"{i * 1000}\n" for i in range(4)]
    assert time.monotonic() - start < RUN_LIMIT_S


# ----------------------------------------------------------------------------- run_python: limits
def test_infinite_loop_times_out():
    result = timed_run("while True:\n    pass")
    assert result.startswith("Error: ")
    assert "timed out" in result or "CPU time" in result


def test_huge_allocation_is_refused():
    result = timed_run("x = bytearray(8 * 2**30)\nprint('allocated')")
    assert result.startswith("Error: ")
    assert "MemoryError" in result and "allocated" not in result


def test_output_flood_is_capped_without_filling_memory():
    tracemalloc.start()
    try:
        result = timed_run("line = 'x' * 999\nfor _ in range(50_000):\n    print(line)")  # 50 MB
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.startswith("Error: ") and "size limit" in result
    assert "x" * 500 in result
    assert len(result) < 2_300
    assert peak < 8 * 2**20, f"the caller held {peak / 2**20:.0f} MB while reading the output"


# ----------------------------------------------------------------------------- run_python: isolation
def test_parent_environment_is_not_visible(monkeypatch):
    secret = f"secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("GRPO_TOOLS_TEST_SECRET", secret)
    # A stand-in for the trainer: a process that holds the secret in its environment from the start (what
    # /proc/<pid>/environ shows; variables set later in this test process would not appear there).
    trainer = subprocess.Popen(["sleep", "60"], env={"GRPO_TOOLS_TEST_SECRET": secret})
    try:
        result = timed_run(f"import os\nprint(sorted(os.environ.items()))\n"
                           f"try:\n    print(open('/proc/{trainer.pid}/environ').read())\n"
                           f"except OSError as e:\n    print('unreadable', e)")
    finally:
        trainer.kill()
        trainer.wait()
    assert "PATH" in result.splitlines()[0]  # the environment was printed ...
    assert secret not in result.splitlines()[0]  # ... without the caller's variables
    if NAMESPACES:  # other processes are out of sight (PID namespace, own /proc) or not ours (run as "nobody")
        assert secret not in result and "unreadable" in result, result
    else:  # documented fallback: the child's own environment is clean, but /proc/<pid>/environ of processes
        assert "unreadable" in result or secret in result  # of the same user stays readable


@pytest.mark.parametrize("how, setsid", [("subprocess.Popen", False), ("double fork + setsid", True)])
def test_no_process_outlives_the_call(how, setsid):
    marker = sleep_marker()
    if setsid:  # the classic daemon: leave the session and the process group, then lose the parent
        code = (f"import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
                f"        os.execvp('sleep', ['sleep', '{marker}'])\n    os._exit(0)\nprint('started')")
    else:
        code = f"import subprocess\nsubprocess.Popen(['sleep', '{marker}'])\nprint('started')"
    result = timed_run(code)
    assert result == "started\n"
    left = survivors(marker)
    if NAMESPACES or not setsid:
        assert not left, f"{how}: `sleep {marker}` outlived the call"
    else:  # documented fallback: without a PID namespace a setsid() daemon escapes the process group
        assert left


def test_timeout_kills_background_processes_too():
    marker = sleep_marker()
    code = (f"import subprocess\nsubprocess.Popen(['sleep', '{marker}'])\n"
            f"subprocess.Popen(['sleep', '{marker}'], start_new_session=True)\nwhile True:\n    pass")
    result = timed_run(code)
    assert result.startswith("Error: ")
    left = survivors(marker)
    assert len(left) == (0 if NAMESPACES else 1)  # without namespaces the setsid() one escapes (documented)


def test_network_is_unreachable():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        result = timed_run(f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
                           f"    print('CONNECTED')\nexcept OSError as e:\n    print('BLOCKED', e)")
        server.settimeout(0.2)
        try:
            server.accept()[0].close()
            accepted = True
        except socket.timeout:
            accepted = False
    if NAMESPACES:
        assert result.startswith("BLOCKED") and not accepted, result
    else:  # documented fallback: no network namespace, so the network is reachable
        assert result.startswith("CONNECTED") and accepted, result


def test_files_do_not_survive_the_call():
    marker = f"grpo_tools_test_{uuid.uuid4().hex}"
    in_repo = REPO / f"{marker}.txt"
    result = timed_run(
        "import os\nopen('left.txt', 'w').write('x')\n"
        "print(os.path.abspath('left.txt'))\nprint(os.readlink('/proc/self/fd/1'))\n"
        f"for path in ['/dev/shm/{marker}', {str(in_repo)!r}]:\n"
        "    try:\n        open(path, 'w').write('x')\n    except OSError as e:\n        print('refused', path, e)\n"
        f"with open('/tmp/{marker}', 'wb') as f:\n    f.write(b'0' * 3 * 2**20)\n")
    lines = result.splitlines()
    assert result.startswith("Error: ") and lines[-1] == "OSError: [Errno 27] File too large", result  # > 1 MB
    left_txt, output_file = Path(lines[1]), Path(lines[2])
    assert left_txt.name == "left.txt" and not left_txt.exists()  # the working directory is gone ...
    assert not output_file.parent.exists()  # ... and so is the folder that held the captured output
    outside = [Path(f"/tmp/{marker}"), Path(f"/dev/shm/{marker}")]
    try:
        if NAMESPACES:  # private /tmp and /dev/shm, discarded with the mount namespace
            assert not any(p.exists() for p in outside)
        else:  # documented fallback: files outside the working directory stay, each cut at the file-size limit
            assert Path(f"/tmp/{marker}").stat().st_size <= 2**20
        if DROPS_ROOT:  # as "nobody" the caller's files are read-only
            assert not in_repo.exists() and f"refused {in_repo}" in result
    finally:
        for p in [*outside, in_repo]:
            p.unlink(missing_ok=True)


# ----------------------------------------------------------------------------- calculator
@pytest.mark.parametrize("expression, expected", [
    ("23 * 47", "1081"), ("7 / 2", "3.5"), ("10 / 2", "5"), ("-(3 + 4) * 2", "-14"), ("2 ** 10", "1024"),
    ("1e3 + 1", "1001"), ("2**-1", "0.5"), ("17 // 5 + 17 % 5", "5"), ("0.1 + 0.2", "0.3"), ("1 / 3", "0.3333333333"),
    ("+5 - -5", "10"), ("(" * 90 + "1" + ")" * 90, "1"), ("-" * 199 + "1", "-1"),
])
def test_calculator_arithmetic(expression, expected):
    assert timed_calc(expression) == expected


@pytest.mark.parametrize("expression, says", [
    ("9**9**9", "too large"), ("10**100000", "too large"), ("2.0 ** 5000", "too large"), ("1e400", "too large"),
    ("1/0", "division by zero"), ("5 % 0", "division by zero"), ("0 ** -1", "division by zero"),
    ("(1).__class__", "attribute"), ("__import__('os')", "call"), ("lambda: 1", "lambda"), ("x + 1", "name"),
    ("'a' * 3", "text"), ("[i for i in range(9)]", "comprehension"), ("(-8) ** 0.5", "real number"),
    ("1" * 1_000_000, "too long"), ("(" * 10_000, "too long"), ("1 +", "not a valid"), ("", "not a valid"),
])
def test_calculator_refuses_with_a_readable_error(expression, says):
    result = timed_calc(expression)
    assert result.startswith("Error: ") and says in result, result


def test_tools_have_schemas_trl_can_build():
    from transformers.utils import get_json_schema

    for tool, arg in [(calculator, "expression"), (run_python, "code")]:
        function = get_json_schema(tool)["function"]
        assert function["parameters"]["properties"][arg]["type"] == "string"
        assert function["parameters"]["required"] == [arg]
        assert function["description"] and "Args:" not in function["description"]
