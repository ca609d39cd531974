"""Benchmark: what one run_python call costs, against starting Python with and without namespaces.

    python benchmarks/bench_sandbox.py     # ~1 min on 2 CPU cores; prints a table, writes results/sandbox.json

In one run, from one process, each measured --calls times, taking turns so that a slow spell on
the machine hits every arm:
    bare python      `python -I -c pass` (the interpreter run_python uses), as a subprocess
    unshare + python `unshare --net --pid --fork --kill-child --mount-proc python -I -c pass`:
                     the floor of any sandbox that starts a fresh interpreter in namespaces
                     (needs root or user namespaces; left out where unshare fails)
    run_python       grpo_tools.run_python("pass"), and on a realistic payload: a function plus
                     10 assert lines, as the code recipe's hidden tests run
Then every containment mode of run_python's sandbox that starts here (namespaces, Landlock + seccomp,
plain): what it contains (a file anyone may read and the repository; the hidden tests against hacks
that read or forge them; a TCP and a Unix socket listening on this machine; a daemon that tries to
leave the call's process group; notes left for the next call), and its latency per call, the modes
taking turns.
Latency: median and 95th percentile of single calls. Throughput: --burst calls submitted at once
to a pool of as many threads, wall time against (burst / cores) x the median single call, the
time a perfect scheduler would need; 1.0 means concurrent calls scale with the cores.
The sandbox's one-off start (building its root, on the first call) is timed on its own.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "sandbox.json"
sys.path.insert(0, str(ROOT))

REALISTIC = '''
def running_max(values):
    best, out = None, []
    for v in values:
        best = v if best is None or v > best else best
        out.append(best)
    return out

assert running_max([]) == []
assert running_max([1]) == [1]
assert running_max([1, 3, 2]) == [1, 3, 3]
assert running_max([5, 4, 3]) == [5, 5, 5]
assert running_max([-1, -2, 0]) == [-1, -1, 0]
assert running_max([2, 2, 2]) == [2, 2, 2]
assert running_max(list(range(100))) == list(range(100))
assert running_max([0.5, 1.5, 1.0]) == [0.5, 1.5, 1.5]
assert running_max([3, 1, 4, 1, 5, 9, 2, 6]) == [3, 3, 4, 4, 5, 9, 9, 9]
assert running_max([10, -10]) == [10, 10]
print("10 passed")
'''


ADD = ("def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(5, 7) == 12\n"
       "    assert candidate(-4, 1) == -3\n", "add")  # tests, entry point: a constant answer passes nothing
PASS_LINE = '{"passed": [true, true, true], "errors": [null, null, null], "harness_error": null}'
HARNESS_HACKS = {  # each tries to pass the tests without adding: by reading them, or by forging the result
    "read the tests (files, stdin, /proc, the harness's memory)": r'''
import os, re, sys
def add(a, b):
    found = re.compile(r"candidate\(%d, %d\) == (-?\d+)" % (a, b))
    texts = []
    for path in ["/tmp/main.py", "/dev/stdin", f"/proc/{os.getppid()}/fd/0", f"/proc/{os.getppid()}/cmdline"]:
        try:
            texts.append(open(path, errors="replace").read())
        except Exception:
            pass
    try:
        with open(f"/proc/{os.getppid()}/maps") as maps, open(f"/proc/{os.getppid()}/mem", "rb") as mem:
            for line in maps:
                start, end = (int(x, 16) for x in line.split()[0].split("-"))
                try:
                    mem.seek(start)
                    texts.append(mem.read(min(end - start, 1 << 22)).decode("latin-1"))
                except Exception:
                    pass
    except Exception:
        pass
    for text in texts:
        if found.search(text):
            return int(found.search(text).group(1))
''',
    "forge the result line": f"import os\nfor fd in range(100):\n    try:\n        os.write(fd, b'\\n' + "
                             f"{PASS_LINE!r}.encode() + b'\\n')\n    except OSError:\n        pass\n"
                             f"print({PASS_LINE!r})\ndef add(a, b):\n    return None\n",
    "kill the harness": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\ndef add(a, b):\n    return a + b\n",
}


def containment(mode: str) -> dict:
    """Start run_python's sandbox in `mode` and probe what it contains: True = contained. `started` is False (and
    `why` says why) where the mode cannot start here. `answer_data` is None where the hidden-test harness cannot run
    in this mode here (its honest control fails)."""
    import socket
    import tempfile
    import uuid

    import grpo_code
    import grpo_tools

    failures = []
    sandbox = grpo_tools._start_sandbox(mode, failures)
    if sandbox is None:
        return {"mode": mode, "started": False, "why": "; ".join(failures)}
    saved = grpo_tools._SANDBOX, grpo_code._SANDBOX
    grpo_tools._SANDBOX = grpo_code._SANDBOX = sandbox  # both scripts' calls go to this one
    folder = Path(tempfile.mkdtemp(prefix="bench_sandbox_"))
    marker = uuid.uuid4().hex[:12]
    servers = []
    try:
        os.chmod(folder, 0o755)
        secret = folder / "secret.txt"
        secret.write_text(f"secret {marker}\n")
        os.chmod(secret, 0o644)  # readable by anyone: only the sandbox can keep it from the code
        readme = (ROOT / "README.md").read_text()[:40]
        out = grpo_tools.run_python(f"for path in [{str(secret)!r}, {str(ROOT / 'README.md')!r}]:\n    try:\n"
                                    f"        print(open(path).read()[:40])\n    except OSError:\n        pass\n")
        host_files = marker not in out and readme not in out

        tcp = socket.create_server(("127.0.0.1", 0))
        unix = socket.socket(socket.AF_UNIX)
        unix.bind(str(folder / "listening.sock"))
        os.chmod(folder / "listening.sock", 0o777)
        unix.listen()
        servers += [tcp, unix]
        out = grpo_tools.run_python(
            f"import socket\nfor family, address in [(socket.AF_INET, ('127.0.0.1', {tcp.getsockname()[1]})), "
            f"(socket.AF_UNIX, {str(folder / 'listening.sock')!r})]:\n    try:\n        s = socket.socket(family)\n"
            f"        s.settimeout(2)\n        s.connect(address)\n        print('connected', family)\n"
            f"    except OSError:\n        pass\n")
        network = "connected" not in out

        grpo_tools.run_python(  # a child that leaves the process group (where it may) and sleeps, named `marker`
            f"import ctypes, os, time\nready, done = os.pipe()\nif os.fork() == 0:\n    try:\n        os.setsid()\n"
            f"    except OSError:\n        pass\n    ctypes.CDLL(None).prctl(15, {marker.encode()!r}, 0, 0, 0)\n"
            f"    os.write(done, b'x')\n    time.sleep(30)\n    os._exit(0)\nos.read(ready, 1)\nprint('forked')\n")
        time.sleep(0.5)
        survivors = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()  # "pid (name) state ...": Z is dead, not yet reaped
                if stat[stat.index("(") + 1:stat.rindex(")")] == marker and stat[stat.rindex(")") + 2] != "Z":
                    survivors.append(int(pid))
            except OSError:
                pass
        for pid in survivors:
            os.kill(pid, 9)
        processes = not survivors

        places = [f"/tmp/{marker}", f"/dev/shm/{marker}", marker]
        grpo_tools.run_python(f"for path in {places!r}:\n    try:\n        open(path, 'w').write('note')\n"
                              f"    except OSError:\n        pass\n")
        out = grpo_tools.run_python(f"import os\nprint([os.path.exists(p) for p in {places!r}])")
        state = out.strip() == str([False] * len(places))
        for path in places[:2]:
            Path(path).unlink(missing_ok=True)

        def passed(solution):  # not the cached results of another mode's sandbox
            return getattr(grpo_code.run_hidden_tests, "__wrapped__", grpo_code.run_hidden_tests)(solution, *ADD)["passed"]
        honest = passed("def add(a, b):\n    return a + b\n") == [True, True, True]
        hacks = {name: any(passed(code)) for name, code in HARNESS_HACKS.items()}
        answer_data = (not any(hacks.values())) if honest else None
        return {"mode": mode, "started": True, "runs_as": sandbox.run("import os\nprint(os.getuid())")[1].strip(),
                "host_files": host_files, "answer_data": answer_data, "network": network,
                "processes_outliving_the_call": processes, "state_between_calls": state,
                "hacks_that_passed": [name for name, won in hacks.items() if won] if honest else None}
    finally:
        for server in servers:
            server.close()
        shutil.rmtree(folder, ignore_errors=True)
        grpo_tools._SANDBOX, grpo_code._SANDBOX = saved
        sandbox.close()


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def timed(call):
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=100, help="single calls per arm")
    parser.add_argument("--burst", type=int, default=64, help="concurrent calls in the throughput test")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    import grpo_tools

    start = time.perf_counter()
    sandbox = grpo_tools._sandbox_mode()  # the one-off start: the zygote, its root, and a probe call
    startup_s = time.perf_counter() - start
    python = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    unshare = [shutil.which("unshare") or "unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc"]

    def run(command):
        def call():
            subprocess.run(command, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        return call

    def sandboxed(code, expected):
        def call():
            result = grpo_tools.run_python(code)
            if result != expected:
                sys.exit(f"run_python returned {result[:300]!r}, expected {expected!r}")
        return call

    arms = {"bare python": run([python, "-I", "-c", "pass"]),
            "unshare + python": run([*unshare, python, "-I", "-c", "pass"]),
            "run_python": sandboxed("pass", "(no output: print the values you need)"),
            "run_python, realistic": sandboxed(REALISTIC, "10 passed\n")}
    try:
        arms["unshare + python"]()
    except (OSError, subprocess.CalledProcessError):
        del arms["unshare + python"]  # no namespaces on this machine: that floor does not exist here
    for call in arms.values():  # warm the page cache and the sandbox
        call()
    samples = {name: [] for name in arms}
    for _ in range(args.calls):
        for name, call in arms.items():
            samples[name].append(timed(call))
    latency = {name: {"median_ms": 1000 * statistics.median(s), "p95_ms": 1000 * percentile(s, 0.95)}
               for name, s in samples.items()}

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    throughput = {}
    for name in ("run_python", "run_python, realistic"):
        with ThreadPoolExecutor(args.burst) as pool:
            wall = timed(lambda: list(pool.map(lambda _: arms[name](), range(args.burst))))
        ideal = args.burst / cores * latency[name]["median_ms"] / 1000
        throughput[name] = {"calls": args.burst, "wall_s": wall, "calls_per_s": args.burst / wall,
                            "ideal_s": ideal, "wall_over_ideal": wall / ideal}

    # Every containment mode that starts here: what it contains, then its latency, the modes taking turns
    modes = {mode: containment(mode) for mode in grpo_tools.SANDBOX_MODES}
    running = {mode: grpo_tools._start_sandbox(mode, []) for mode, row in modes.items() if row["started"]}
    try:
        mode_samples = {mode: [] for mode in running}
        for _ in range(args.calls):
            for mode, box in running.items():
                mode_samples[mode].append(timed(lambda: box.run("pass")))
    finally:
        for box in running.values():
            box.close()
    for mode, s in mode_samples.items():
        modes[mode].update(median_ms=1000 * statistics.median(s), p95_ms=1000 * percentile(s, 0.95))
    if "namespaces" in mode_samples:
        for mode in mode_samples:
            modes[mode]["ratio_to_namespaces"] = modes[mode]["median_ms"] / modes["namespaces"]["median_ms"]

    floor = "unshare + python" if "unshare + python" in latency else "bare python"
    report = {
        "date": datetime.date.today().isoformat(), "machine": f"{platform.system()} {platform.machine()}, "
        f"{cores} CPU cores", "python": platform.python_version(), "calls": args.calls,
        "sandbox": {"namespaces": sandbox.namespaces, "drops_root": sandbox.drop, "startup_s": startup_s},
        "latency": latency, "throughput": throughput, "floor": floor, "modes": modes,
        "ratio_run_python_over_floor": latency["run_python"]["median_ms"] / latency[floor]["median_ms"],
        "ratio_run_python_over_bare_python": latency["run_python"]["median_ms"] / latency["bare python"]["median_ms"],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")

    print(f"run_python sandbox: namespaces={sandbox.namespaces}, drops root={sandbox.drop}, "
          f"started in {startup_s:.2f} s (once per process)\n")
    print(f"{'arm':<24}{'median ms':>10}{'p95 ms':>10}")
    for name, row in latency.items():
        print(f"{name:<24}{row['median_ms']:>10.1f}{row['p95_ms']:>10.1f}")
    print(f"\n{'burst':<24}{'calls/s':>10}{'wall s':>10}{'ideal s':>10}{'wall/ideal':>11}")
    for name, row in throughput.items():
        print(f"{name:<24}{row['calls_per_s']:>10.0f}{row['wall_s']:>10.2f}{row['ideal_s']:>10.2f}"
              f"{row['wall_over_ideal']:>11.2f}")
    print(f"\nratio run_python / {floor} (median latency): {report['ratio_run_python_over_floor']:.2f}")
    print(f"ratio run_python / bare python (median latency): {report['ratio_run_python_over_bare_python']:.2f}")
    columns = ("host_files", "answer_data", "network", "processes_outliving_the_call", "state_between_calls")
    print(f"\n{'mode':<12}" + "".join(f"{c.split('_')[0]:>11}" for c in columns) + f"{'median ms':>11}{'vs ns':>7}"
          "   (contained: yes / no; - : cannot be checked here)")
    for mode, row in modes.items():
        if not row["started"]:
            print(f"{mode:<12}cannot start here: {row['why'][:80]}")
            continue
        cells = "".join(f"{'-' if row[c] is None else 'yes' if row[c] else 'no':>11}" for c in columns)
        ratio = row.get("ratio_to_namespaces")
        print(f"{mode:<12}{cells}{row['median_ms']:>11.1f}{'-' if ratio is None else f'{ratio:.2f}':>7}")
    print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
