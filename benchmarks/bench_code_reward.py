"""Benchmark: scoring code with sandbox.py's hidden-test harness (grpo_code.py's reward), against a plain
subprocess per solution.

    python benchmarks/bench_code_reward.py     # ~1 min on 2 CPU cores; prints a table, writes results/code_reward.json

Both arms score the same 164 HumanEval reference solutions (tests/data/humaneval), with the same number of
solutions in flight at once (sandbox.SCORING_THREADS), taking turns for --rounds rounds:
    harness        sandbox.run_hidden_tests_batch: each solution in the sandbox (namespaces, read-only root,
                   no network), the tests in a trusted process, the solution in a fresh worker process, every
                   test case scored on its own (its cache cleared before each round)
    plain process  `python -c "<prompt + solution + tests + check(entry_point)>"`, one subprocess per solution
                   with a 10 s timeout and no containment: the anchor most evaluation harnesses use, pass or
                   fail only
The figure is the median seconds per round of each arm, and their ratio. Both arms must pass every solution.
"""

import argparse
import concurrent.futures
import datetime
import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "code_reward.json"
HUMANEVAL = ROOT / "tests" / "data" / "humaneval" / "HumanEval.jsonl.gz"
sys.path.insert(0, str(ROOT))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each arm, taking turns")
    parser.add_argument("--tasks", type=int, default=164, help="the first N HumanEval tasks")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    import sandbox

    tasks = [json.loads(line) for line in gzip.open(HUMANEVAL, "rt")][:args.tasks]
    solutions = [task["prompt"] + task["canonical_solution"] for task in tasks]
    python = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    start = time.perf_counter()
    running = sandbox._sandbox_mode()  # the one-off start, timed on its own
    startup_s = time.perf_counter() - start

    def harness():
        sandbox._RESULTS.clear()  # every solution runs again, uncached
        results = sandbox.run_hidden_tests_batch(solutions, [t["test"] for t in tasks],
                                                 [t["entry_point"] for t in tasks], [t["prompt"] for t in tasks])
        return [bool(r["passed"]) and all(r["passed"]) for r in results], sum(len(r["passed"]) for r in results)

    def plain_one(job):
        solution, task = job
        program = f"{solution}\n\n{task['test']}\n\ncheck({task['entry_point']})\n"
        try:
            return subprocess.run([python, "-c", program], stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=10).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def plain():
        with concurrent.futures.ThreadPoolExecutor(sandbox.SCORING_THREADS) as pool:
            return list(pool.map(plain_one, zip(solutions, tasks))), len(tasks)

    arms = {"harness": harness, "plain process": plain}
    seconds = {name: [] for name in arms}
    cases = {}
    for _ in range(args.rounds):
        for name, arm in arms.items():
            start = time.perf_counter()
            passed, cases[name] = arm()
            seconds[name].append(time.perf_counter() - start)
            if not all(passed):
                sys.exit(f"{name}: {passed.count(False)} reference solutions failed; every one must pass")

    median = {name: statistics.median(s) for name, s in seconds.items()}
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    report = {
        "date": datetime.date.today().isoformat(), "machine": f"{platform.system()} {platform.machine()}, "
        f"{cores} CPU cores", "python": platform.python_version(), "solutions": len(tasks), "rounds": args.rounds,
        "in_flight": sandbox.SCORING_THREADS,
        "sandbox": {"namespaces": running.namespaces, "drops_root": running.drop, "startup_s": startup_s},
        "seconds": seconds, "median_s": median, "cases_scored": cases,
        "ms_per_solution": {name: 1000 * m / len(tasks) for name, m in median.items()},
        "ratio_harness_over_plain": median["harness"] / median["plain process"],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")

    print(f"sandbox: namespaces={running.namespaces}, drops root={running.drop}, started in {startup_s:.2f} s "
          f"(once per process); {sandbox.SCORING_THREADS} solutions in flight\n")
    print(f"{'arm':<16}{'median s':>10}{'ms/solution':>13}{'scored':>16}")
    for name in arms:
        unit = "test cases" if name == "harness" else "pass/fail"
        print(f"{name:<16}{median[name]:>10.2f}{report['ms_per_solution'][name]:>13.1f}{cases[name]:>6} {unit}")
    print(f"\nratio harness / plain process (seconds for all {len(tasks)} solutions): "
          f"{report['ratio_harness_over_plain']:.2f}")
    print(f"wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
