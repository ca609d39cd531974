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

    floor = "unshare + python" if "unshare + python" in latency else "bare python"
    report = {
        "date": datetime.date.today().isoformat(), "machine": f"{platform.system()} {platform.machine()}, "
        f"{cores} CPU cores", "python": platform.python_version(), "calls": args.calls,
        "sandbox": {"namespaces": sandbox.namespaces, "drops_root": sandbox.drop, "startup_s": startup_s},
        "latency": latency, "throughput": throughput, "floor": floor,
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
    print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
