"""Benchmark: each offline demo run the way a user runs it, for the figures README.md and docs/ quote.

    python benchmarks/bench_demos.py                       # ~8 min on 2 CPU cores (4 demos, once each)
    python benchmarks/bench_demos.py --runs 2              # each demo twice: how much the figures move
    python benchmarks/bench_demos.py --demos math          # one demo, ~2 min
    python benchmarks/bench_demos.py --add                 # once more, added to the runs in results/demos.json

Each run is `python grpo_x.py --output_dir DIR` in a fresh process with no GPU (the scripts then run their offline
demo: tiny model, toy data, DEMO_SETTINGS). Reported per demo and run: the held-out scores before and after training
(eval.json's "before" and "after", greedy), the steps, the monitor's warnings, the training script's own clock
(eval.json's wall_time_seconds: model loading to the end of the last evaluation) and the process's wall time (what
the user waits, Python's imports included), the child's CPU seconds and the load average before it started (other
work on the machine stretches the wall time). The summary gives each figure's range over the runs: the scores'
range is how much they move; the least wall time (best of N) is the machine's speed, the others are that plus
whatever else ran beside it. --add keeps the runs already in the results file and adds this invocation's (on a
quieter spell, say).

The first math run's log history (the keys instruments.plot_curves draws, rounded) goes to demo_math_log.json and
is drawn with plot_curves into assets/readme/watching_math.png: docs/watching.md's figure, which
tests/test_readme_figures.py redraws from the log to check that the committed PNG is today's plot.
"""

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "demos.json"
MATH_LOG = ROOT / "benchmarks" / "results" / "demo_math_log.json"
FIGURE = ROOT / "assets" / "readme" / "watching_math.png"
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
DEMOS = ("math", "tools", "code", "search")
PLOTTED = ("step", "reward", "eval/accuracy", "completions/mean_length", "frac_reward_zero_std")


def run_demo(demo: str, out: Path) -> dict:
    """One `python grpo_<demo>.py --output_dir out`; its eval.json figures and how long it took."""
    load, cpu, started = os.getloadavg()[0], resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    result = subprocess.run([sys.executable, str(ROOT / f"grpo_{demo}.py"), "--output_dir", str(out)], cwd=ROOT,
                            env=dict(os.environ, **OFFLINE), capture_output=True, text=True, timeout=3600)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"grpo_{demo}.py failed:\n{result.stderr[-3000:]}")
    if "offline demo" not in result.stdout:
        raise SystemExit(f"grpo_{demo}.py did not run its offline demo (a GPU or a model was found)")
    evaluation = json.loads((out / "eval.json").read_text())

    def scores(split):  # the held-out table's numbers; nested reports (the signal report) left out
        return {key: value for key, value in evaluation[split].items()
                if isinstance(value, (int, float)) and not isinstance(value, bool)}

    return {"before": scores("before"), "after": scores("after"), "steps": evaluation["global_step"],
            "warnings": [w["rule"] for w in evaluation["warnings"]],
            "script_seconds": evaluation["wall_time_seconds"], "process_seconds": round(seconds, 1),
            "process_cpu_seconds": round(after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime, 1),
            "loadavg_before": round(load, 2)}  # other work on the machine: a busy one stretches the wall time


def trimmed_log(out: Path) -> list:
    """The run's log history, only what plot_curves draws, rounded: small enough to commit."""
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    kept = []
    for entry in history:
        entry = {key: round(value, 4) if isinstance(value, float) else value for key, value in entry.items()
                 if key in PLOTTED or (key.startswith("rewards/") and key.endswith("/mean"))}
        if len(entry) > 1:  # more than the step
            kept.append(entry)
    return kept


def span(values: list) -> dict:
    return {"min": min(values), "max": max(values)}


def summary(runs: list) -> dict:
    """Each figure's range over the runs (min == max: the same every run)."""
    def figures(split):  # a score with no value in some run (no tool calls: no call success) is left out
        keys = [key for key in runs[0][split] if all(key in r[split] for r in runs)]
        return {key: span([r[split][key] for r in runs]) for key in keys}

    return {"runs": len(runs), "before": figures("before"), "after": figures("after"),
            "steps": runs[0]["steps"], "warnings": sorted({w for r in runs for w in r["warnings"]}),
            "script_seconds": span([r["script_seconds"] for r in runs]),
            "process_cpu_seconds": span([r["process_cpu_seconds"] for r in runs]),
            "process_seconds": span([r["process_seconds"] for r in runs]),
            "loadavg_before": span([r["loadavg_before"] for r in runs])}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--demos", default=",".join(DEMOS), help=f"comma-separated: {', '.join(DEMOS)}")
    parser.add_argument("--runs", type=int, default=1, help="runs of each demo, one after the other")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--math_log", type=Path, default=MATH_LOG, help="where the first math run's log goes")
    parser.add_argument("--figure", type=Path, default=FIGURE, help="the math log drawn by plot_curves")
    parser.add_argument("--add", action="store_true",
                        help="add these runs to those in --out (the math log and figure are left as they are)")
    parser.add_argument("--replace", action="store_true",
                        help="with --add: these demos' earlier runs are dropped (their model was rebuilt)")
    args = parser.parse_args()
    demos = args.demos.split(",")
    if set(demos) - set(DEMOS) or args.runs < 1:
        parser.error(f"--demos takes {', '.join(DEMOS)}; --runs must be 1 or more")
    runs, invocations = {demo: [] for demo in demos}, []
    if args.add and args.out.exists():
        earlier = json.loads(args.out.read_text())
        runs = earlier["runs"] | {demo: runs[demo] for demo in demos if demo not in earlier["runs"] or args.replace}
        invocations = earlier.get("invocations", [])
    settings = vars(args) | {key: str(getattr(args, key)) for key in ("out", "math_log", "figure")}
    invocations.append({"date": datetime.date.today().isoformat(), "loadavg": os.getloadavg()[0]} | settings)
    with tempfile.TemporaryDirectory() as folder:
        for index in range(args.runs):  # round-robin: a slow spell of the machine spreads over the demos
            for demo in demos:
                out = Path(folder) / f"{demo}-{index}"
                run = {"date": datetime.date.today().isoformat()} | run_demo(demo, out)
                runs[demo].append(run)
                print(f"{demo} run {index + 1}: accuracy {run['before']['accuracy']:.2f} -> "
                      f"{run['after']['accuracy']:.2f} in {run['steps']} steps, {run['script_seconds']} s "
                      f"({run['process_seconds']} s with imports), warnings {run['warnings']}", flush=True)
                if demo == "math" and index == 0 and not args.add:
                    log = trimmed_log(out)
                    args.math_log.parent.mkdir(parents=True, exist_ok=True)
                    args.math_log.write_text(json.dumps(log, indent=1))
                    sys.path.insert(0, str(ROOT))
                    import instruments
                    instruments.plot_curves(log, args.figure)
                    print(f"wrote {args.math_log} and {args.figure}")

    report = {"benchmark": "demos", "date": datetime.date.today().isoformat(), "machine": platform.platform(),
              "cpus": os.cpu_count(), "python": platform.python_version(),
              "versions": {name: version(name) for name in ("torch", "transformers", "trl")},
              "invocations": invocations,  # each command that added runs, with its flags
              "summary": {demo: summary(demo_runs) for demo, demo_runs in runs.items()}, "runs": runs}
    print(f"\n{'demo':<8}{'runs':>5}{'accuracy before':>17}{'after':>13}{'script s':>17}{'process s':>17}")
    for demo, s in report["summary"].items():
        def shown(figure, digits):
            low, high = f"{figure['min']:.{digits}f}", f"{figure['max']:.{digits}f}"
            return low if low == high else f"{low}-{high}"
        print(f"{demo:<8}{s['runs']:>5}{shown(s['before']['accuracy'], 2):>17}{shown(s['after']['accuracy'], 2):>13}"
              f"{shown(s['script_seconds'], 0):>17}{shown(s['process_seconds'], 0):>17}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
