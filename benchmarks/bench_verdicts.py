"""Benchmark: do the hidden tests' verdicts, and run_python's answers, depend on how busy the machine is?

    python benchmarks/bench_verdicts.py     # ~12 min on 2 CPU cores; prints two tables, writes results/verdicts.json
    python benchmarks/bench_verdicts.py --parts run_python   # one part; the file keeps the other's last figures

One batch of 100 solutions, all correct, scored by sandbox.run_hidden_tests_batch as grpo_code.py's reward scores a
step's rollouts (in parallel, SCORING_THREADS at once):
    30 LeetCode reference solutions (tests/data/leetcode: medium and hard, 3,262 asserts in all)
    50 HumanEval reference solutions (tests/data/humaneval)
    20 slow but correct solutions of a one-case task, spending 0.40 to 1.60 CPU seconds (steps of 0.06 s): what a
       brute-force answer costs, near the 2 CPU-second limit of a case
scored alone (1x), and beside busy processes that make the machine 2x and 4x oversubscribed ((x - 1) busy
processes per core, each in a session of its own as the sandbox's calls are, so that the kernel's autogroup
scheduling shares the CPU among them all), under two regimes, taking turns:
    cpu limits   sandbox.py's: 2 CPU seconds a case, 4 a solution, the wall clock a 5x backstop
    wall limits  the same numbers as wall-clock limits (TEST_WALL_FACTOR = 1): what the harness did before
A flip: a solution whose case-by-case verdict differs from its verdict under the same regime alone. Target: no flip
under cpu limits at 4x.

The run_python part: 20 tool calls whose code spends 0.5 to 4.3 CPU seconds (steps of 0.2 s), all under the 5 s CPU
limit, made from as many threads as the machine has cores (a training step's rollouts calling tools), at the same
loads, under run_python's limits (5 CPU seconds, all the call's processes together; 25 s of wall clock as a
backstop) and under the same 5 s as a wall-clock limit (what run_python did before). A flip: an answer that is an
"Error: " where alone it was the program's output.
"""

import argparse
import concurrent.futures
import datetime
import gzip
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "verdicts.json"
sys.path.insert(0, str(ROOT))
import sandbox  # noqa: E402

ADD_TEST = "assert add(2, 3) == 5\n"


def slow_but_correct(cpu_seconds: float) -> str:
    return (f"import time\ndef add(a, b):\n    start = time.process_time()\n"
            f"    while time.process_time() - start < {cpu_seconds:.2f}:\n        pass\n    return a + b\n")


def batch():
    """(solutions, tests, entry points, setups, kinds) of the 100 correct solutions."""
    leetcode = [json.loads(line) for line in gzip.open(ROOT / "tests/data/leetcode/leetcode_30.jsonl.gz", "rt")]
    humaneval = [json.loads(line) for line in gzip.open(ROOT / "tests/data/humaneval/HumanEval.jsonl.gz", "rt")][:50]
    rows = [(t["canonical_solution"], "\n".join(t["gt_answer"]), t["func_name"], t["setup_code"], "leetcode")
            for t in leetcode]
    rows += [(t["prompt"] + t["canonical_solution"], t["test"], t["entry_point"], t["prompt"], "humaneval")
             for t in humaneval]
    rows += [(slow_but_correct(0.40 + 0.06 * i), ADD_TEST, "add", "", "slow") for i in range(20)]
    return [list(column) for column in zip(*rows)]


def score(solutions, tests, entry_points, setups, wall_factor: float) -> tuple[list, float]:
    sandbox.TEST_WALL_FACTOR = wall_factor
    sandbox._RESULTS.clear()  # scored afresh, not from the cache
    start = time.monotonic()
    results = sandbox.run_hidden_tests_batch(solutions, tests, entry_points, setups)
    return results, time.monotonic() - start


def spending(cpu_seconds: float) -> str:
    return (f"import time\nstart = time.process_time()\nwhile time.process_time() - start < {cpu_seconds:.2f}:\n"
            f"    pass\nprint('done')\n")


TOOL_CALLS = [spending(0.5 + 0.2 * i) for i in range(20)]


def call_tools(wall_limit: float) -> tuple[list, float]:
    """run_python on TOOL_CALLS, cores threads at once, with its wall-clock limit set to `wall_limit`."""
    sandbox.PYTHON_WALL_S = wall_limit
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        answers = list(pool.map(sandbox.run_python, TOOL_CALLS))
    return answers, time.monotonic() - start


def busy_processes(load: int, cores: int) -> list:
    """(load - 1) busy processes per core, each in a session of its own (see the module's docstring)."""
    return [subprocess.Popen([sys.executable, "-c", "while True:\n    pass\n"], start_new_session=True)
            for _ in range((load - 1) * cores)]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loads", default="1,2,4", help="oversubscription levels, e.g. 1,2,4")
    parser.add_argument("--parts", default="hidden_tests,run_python", help="which parts to run, comma-separated")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    parts = args.parts.split(",")
    unknown = set(parts) - {"hidden_tests", "run_python"}
    if unknown:
        parser.error(f"--parts: unknown {sorted(unknown)}; use hidden_tests, run_python or both")
    solutions, tests, entry_points, setups, kinds = batch()
    cores = os.cpu_count() or 1
    regimes = {"cpu limits": sandbox.TEST_WALL_FACTOR, "wall limits": 1}
    tool_regimes = {"cpu limits": sandbox.PYTHON_WALL_S, "wall limits": sandbox.PYTHON_CPU_S}
    runs, tool_runs = {}, {}
    for load in [int(x) for x in args.loads.split(",")]:
        busy = busy_processes(load, cores)
        try:
            time.sleep(0.5)
            for regime, factor in regimes.items() if "hidden_tests" in parts else ():
                results, seconds = score(solutions, tests, entry_points, setups, factor)
                runs[(regime, load)] = (results, seconds)
                print(f"hidden tests, {regime}, {load}x: {seconds:.1f} s", file=sys.stderr)
            for regime, wall_limit in tool_regimes.items() if "run_python" in parts else ():
                answers, seconds = call_tools(wall_limit)
                tool_runs[(regime, load)] = (answers, seconds)
                print(f"run_python, {regime}, {load}x: {seconds:.1f} s", file=sys.stderr)
        finally:
            for process in busy:
                process.kill()
                process.wait()
    result = json.loads(args.out.read_text()) if args.out.exists() else {}
    result.update({"date": datetime.date.today().isoformat(), "machine": f"{platform.system()} {platform.machine()}, "
                   f"{cores} CPU cores", "python": platform.python_version(), "sandbox_mode": sandbox._sandbox_mode().mode})
    if runs:
        table = {}
        for (regime, load), (results, seconds) in runs.items():
            alone = runs[(regime, 1)][0]
            flips = [kind for kind, got, base in zip(kinds, results, alone) if got["passed"] != base["passed"]]
            timed_out = [kind for kind, got in zip(kinds, results)
                         if any(str(e).startswith("timed out") for e in got["errors"])]
            table.setdefault(regime, {})[f"{load}x"] = {
                "seconds": round(seconds, 1), "all_passed": sum(bool(r["passed"]) and all(r["passed"]) for r in results),
                "flips": len(flips), "flips_by_kind": {k: flips.count(k) for k in sorted(set(flips))},
                "timed_out": len(timed_out), "timed_out_by_kind": {k: timed_out.count(k) for k in sorted(set(timed_out))}}
        print(f"\n| hidden tests | load | seconds | all tests passed (of {len(solutions)}) | flips against 1x | timed out |")
        print("| --- | --- | --- | --- | --- | --- |")
        for regime, loads in table.items():
            for load, row in loads.items():
                print(f"| {regime} | {load} | {row['seconds']} | {row['all_passed']} | {row['flips']} | {row['timed_out']} |")
        result.update({"solutions": len(solutions), "kinds": {k: kinds.count(k) for k in sorted(set(kinds))},
                       "limits": {"case_cpu_s": sandbox.TEST_CASE_CPU_S, "solution_cpu_s": sandbox.TESTS_CPU_S,
                                  "wall_factor": regimes["cpu limits"]}, "regimes": table})
    if tool_runs:
        table = {}
        for (regime, load), (answers, seconds) in tool_runs.items():
            alone = tool_runs[(regime, 1)][0]
            flips = sum(got.startswith("Error: ") and not base.startswith("Error: ") for got, base in zip(answers, alone))
            table.setdefault(regime, {})[f"{load}x"] = {
                "seconds": round(seconds, 1), "answered": sum(answer == "done\n" for answer in answers),
                "flips": flips, "errors": sorted({answer.split("\n")[0] for answer in answers if answer != "done\n"})}
        print(f"\n| run_python | load | seconds | answered (of {len(TOOL_CALLS)}) | flips against 1x |")
        print("| --- | --- | --- | --- | --- |")
        for regime, loads in table.items():
            for load, row in loads.items():
                print(f"| {regime} | {load} | {row['seconds']} | {row['answered']} | {row['flips']} |")
        result["run_python"] = {"calls": len(TOOL_CALLS), "cpu_seconds": "0.5-4.3", "threads": cores,
                                "limits": {"cpu_s": sandbox.PYTHON_CPU_S, "wall_s": tool_regimes["cpu limits"]},
                                "regimes": table}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
