"""Benchmark: do the hidden tests' verdicts depend on how busy the machine is?

    python benchmarks/bench_verdicts.py     # ~6 min on 2 CPU cores; prints a table, writes results/verdicts.json

One batch of 100 solutions, all correct, scored by sandbox.run_hidden_tests_batch as grpo_code.py's reward scores a
step's rollouts (in parallel, SCORING_THREADS at once):
    30 LeetCode reference solutions (tests/data/leetcode: medium and hard, 3,262 asserts in all)
    50 HumanEval reference solutions (tests/data/humaneval)
    20 slow but correct solutions of a one-case task, spending 0.40 to 1.60 CPU seconds (steps of 0.06 s): what a
       brute-force answer costs, near the 2 CPU-second limit of a case
scored alone (1x), and beside busy processes that make the machine 2x and 4x oversubscribed ((x - 1) busy
processes per core), under two regimes, taking turns:
    cpu limits   sandbox.py's: 2 CPU seconds a case, 4 a solution, the wall clock a 5x backstop
    wall limits  the same numbers as wall-clock limits (TEST_WALL_FACTOR = 1): what the harness did before
A flip: a solution whose case-by-case verdict differs from its verdict under the same regime alone. Target: no flip
under cpu limits at 4x.
"""

import argparse
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


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loads", default="1,2,4", help="oversubscription levels, e.g. 1,2,4")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    solutions, tests, entry_points, setups, kinds = batch()
    cores = os.cpu_count() or 1
    regimes = {"cpu limits": sandbox.TEST_WALL_FACTOR, "wall limits": 1}
    runs = {}
    for load in [int(x) for x in args.loads.split(",")]:
        busy = [subprocess.Popen([sys.executable, "-c", "while True:\n    pass\n"]) for _ in range((load - 1) * cores)]
        try:
            time.sleep(0.5)
            for regime, factor in regimes.items():
                results, seconds = score(solutions, tests, entry_points, setups, factor)
                runs[(regime, load)] = (results, seconds)
                print(f"{regime}, {load}x: {seconds:.1f} s", file=sys.stderr)
        finally:
            for process in busy:
                process.kill()
                process.wait()
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
    print(f"\n| regime | load | seconds | all tests passed (of {len(solutions)}) | flips against 1x | timed out |")
    print("| --- | --- | --- | --- | --- | --- |")
    for regime, loads in table.items():
        for load, row in loads.items():
            print(f"| {regime} | {load} | {row['seconds']} | {row['all_passed']} | {row['flips']} | {row['timed_out']} |")
    result = {"date": datetime.date.today().isoformat(), "machine": f"{platform.system()} {platform.machine()}, "
              f"{cores} CPU cores", "python": platform.python_version(), "solutions": len(solutions),
              "kinds": {k: kinds.count(k) for k in sorted(set(kinds))}, "sandbox_mode": sandbox._sandbox_mode().mode,
              "limits": {"case_cpu_s": sandbox.TEST_CASE_CPU_S, "solution_cpu_s": sandbox.TESTS_CPU_S,
                         "wall_factor": regimes["cpu limits"]}, "regimes": table}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
