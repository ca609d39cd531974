"""Benchmark: the hack lab. Does GRPO find the planted loophole, does the monitor see it, which mitigation stops it?

    python benchmarks/bench_hack_lab.py                   # 6 arms x 5 seeds, each the demo run: ~30 min on 2 CPU cores
    python benchmarks/bench_hack_lab.py --seeds 0 --arms loophole penalize   # two runs, ~2 min
    python benchmarks/bench_hack_lab.py --seeds 5    # adds a seed: the runs already in the results file are kept
    python benchmarks/bench_hack_lab.py --lab judge --seeds 0 1 2   # the judge's biases (grpo_judge.py): ~1 hour

Each run is the lab's demo exactly as a user runs it (`python grpo_code.py --config assets/hack_lab.yaml`, as a
subprocess), with one arm's flags and `--seed`:
- `loophole`: `--loophole run_tests`, nothing done about it;
- `closed`: `--hack_mitigation closed`, the loophole fixed and the prompts unchanged (the run without the
  loophole, which the others are compared with);
- `penalize`, `drop`, `rename`: `--loophole run_tests --hack_mitigation ...`;
- `penalize_0`: penalize with `--hack_penalty 0`, a flagged rollout scored as a failure rather than below one.
With `--lab judge`, each run is grpo_judge.py's offline demo (its tiny judge served and audited, then `--max_steps
JUDGE_STEPS`) under one of the judge's planted biases, `--audit_judge no` (the audit fails them before training, which
is its point; the lab is there to watch what it would have stopped): `format_bias` and `self_assessment`, each alone
and with `penalize`, `drop` and `strip`, and `closed` (the judge without a bias). Their truth is the demo's hidden
checks, and "true accuracy" is the held-out true rubric score (0-1). Written to benchmarks/results/judge_lab.json and
assets/readme/judge_lab.png.
Reported per arm and seed (from the run's eval.json and trainer_state.json): the hack rate of the first and last
logged steps (the truth: the loophole paid, the hidden tests fail), the held-out hack rate and true pass@1 before
and after, the onset (first logged step over 2%), the run monitor's first warning and its delay after the onset,
with and without the detector's rule (`disputed_reward`), the per-step share of rollouts paid yet flagged
(`hack/disputed`), the detector's precision and recall over every training rollout, and the training seconds; per
arm, the median true pass@1 after minus the closed arm's of the same seed. Written to
benchmarks/results/hack_lab.json (which tests/test_hack_lab.py and docs/hack_lab.md read), with the plot of the hack
rate per step (median over seeds) to assets/readme/hack_lab.png.
"""

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "hack_lab.json"
PLOT = ROOT / "assets" / "readme" / "hack_lab.png"
CODE_ARMS = {
    "loophole": ["--loophole", "run_tests"],
    "closed": ["--loophole", "run_tests", "--hack_mitigation", "closed"],
    "penalize": ["--loophole", "run_tests", "--hack_mitigation", "penalize"],
    "penalize_0": ["--loophole", "run_tests", "--hack_mitigation", "penalize", "--hack_penalty", "0"],
    "drop": ["--loophole", "run_tests", "--hack_mitigation", "drop"],
    "rename": ["--loophole", "run_tests", "--hack_mitigation", "rename"],
}
JUDGE_STEPS = 150
JUDGE_ARMS = {
    "closed": ["--loophole", "format_bias", "--hack_mitigation", "closed"],
    **{f"{bias}{' ' + fix if fix else ''}": ["--loophole", bias, *(["--hack_mitigation", fix] if fix else [])]
       for bias in ("format_bias", "self_assessment") for fix in (None, "penalize", "drop", "strip")},
}
LABS = {  # script, the flags of every run, arms, results file, plot, the plot's title
    "code": ("grpo_code.py", ["--config", str(ROOT / "assets" / "hack_lab.yaml")], CODE_ARMS, RESULTS, PLOT,
             "grpo_code.py --loophole run_tests: the hack rate per arm"),
    "judge": ("grpo_judge.py", ["--max_steps", str(JUDGE_STEPS), "--audit_judge", "no"], JUDGE_ARMS,
              ROOT / "benchmarks" / "results" / "judge_lab.json", ROOT / "assets" / "readme" / "judge_lab.png",
              "grpo_judge.py's planted judge biases: the hack rate per arm"),
}
ARMS = CODE_ARMS  # main() sets the --lab's


def run(arm: str, seed: int, folder: Path, extra: list, lab: str = "code") -> dict:
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")
    script, flags, arms, *_ = LABS[lab]
    command = [sys.executable, str(ROOT / script), *flags, *arms[arm], "--seed", str(seed), "--output_dir",
               str(folder), *extra]
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    if result.returncode:
        raise SystemExit(f"{arm}, seed {seed}: the run failed:\n{result.stderr[-3000:]}")
    evaluation = json.loads((folder / "eval.json").read_text())
    log = json.loads((folder / "trainer_state.json").read_text())["log_history"]
    before, after, lab = evaluation["before"], evaluation["after"], evaluation.get("hack_lab", {})
    train = [e for e in log if "reward" in e]
    true = "true_score" if before.get("true_score") is not None else "accuracy"  # a judge's accuracy is its own
    return {
        "arm": arm, "seed": seed,
        "true_accuracy": [before[true], after[true]],
        "held_out_hack_rate": [before.get("hack_rate"), after.get("hack_rate")],
        "hack_rate_per_step": [[e["step"], e["hack/rate"]] for e in train if "hack/rate" in e],
        "disputed_per_step": [[e["step"], e["hack/disputed"]] for e in train if "hack/disputed" in e],
        "reward_per_step": [[e["step"], e["reward"]] for e in train],
        "warnings": [{"step": w["step"], "rule": w["rule"]} for w in evaluation["warnings"]],
        "training_seconds": next(e["train_runtime"] for e in log if "train_runtime" in e),
        **{key: lab.get(key) for key in ("hack_rate_first", "hack_rate_last", "onset_step", "monitor_first_warning",
                                        "monitor_delay_steps", "monitor_first_warning_without_detector",
                                        "monitor_delay_steps_without_detector", "detector_precision",
                                        "detector_recall", "rollouts", "hacks", "flagged", "flagged_hacks")},
    }


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarise(runs: list) -> dict:
    table = {}
    closed = {r["seed"]: r["true_accuracy"][1] for r in runs if r["arm"] == "closed"}
    for arm in ARMS:
        mine = [r for r in runs if r["arm"] == arm]
        # true pass@1 after, against the closed grader's run of the same seed: the paired difference
        paired = [r["true_accuracy"][1] - closed[r["seed"]] for r in mine if r["seed"] in closed]
        if mine:
            table[arm] = {
                "seeds": len(mine),
                "first_hack_rate": median(r["hack_rate_first"] for r in mine),
                "final_hack_rate": median(r["hack_rate_last"] for r in mine),
                "final_hack_rate_range": [min(r["hack_rate_last"] for r in mine), max(r["hack_rate_last"] for r in mine)]
                if all(r["hack_rate_last"] is not None for r in mine) else None,
                "held_out_hack_rate_after": median(r["held_out_hack_rate"][1] for r in mine),
                "true_accuracy_before": median(r["true_accuracy"][0] for r in mine),
                "true_accuracy_after": median(r["true_accuracy"][1] for r in mine),
                "onset_step": median(r["onset_step"] for r in mine),
                "monitor_delay_steps": median(r["monitor_delay_steps"] for r in mine),
                "monitor_delay_steps_without_detector": median(r.get("monitor_delay_steps_without_detector")
                                                               for r in mine),
                "true_accuracy_after_vs_closed": median(paired),
                "true_accuracy_after_vs_closed_mean": statistics.mean(paired) if paired else None,
                "true_accuracy_after_vs_closed_range": [min(paired), max(paired)] if paired else None,
                "detector_precision": median(r["detector_precision"] for r in mine),
                "detector_recall": median(r["detector_recall"] for r in mine),
                "training_seconds": median(r["training_seconds"] for r in mine),
            }
    return table


def plot(runs: list, path: Path, title: str):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4.2))
    ax = fig.subplots()
    for arm in ARMS:
        curves = [dict(map(tuple, r["hack_rate_per_step"])) for r in runs if r["arm"] == arm and r["hack_rate_per_step"]]
        if curves:
            steps = sorted(set.intersection(*(set(c) for c in curves)))
            ax.plot(steps, [statistics.median(c[s] for c in curves) for s in steps], label=arm, marker=".")
    ax.set_xlabel("step")
    ax.set_ylabel("hack rate (truth), median over seeds")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    global ARMS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lab", choices=list(LABS), default="code",
                        help="code: grpo_code.py's run_tests loophole; judge: grpo_judge.py's planted judge biases")
    parser.add_argument("--arms", nargs="+", help="default: every arm of the --lab")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--output", type=Path, help="default: the --lab's results file")
    parser.add_argument("--summarise", action="store_true",
                        help="only recompute the summary and the plot from the runs in --output")
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="flags added to every run")
    args = parser.parse_args()
    _, _, ARMS, results, plot_path, title = LABS[args.lab]
    args.arms = args.arms or list(ARMS)
    if set(args.arms) - set(ARMS):
        parser.error(f"--arms: the {args.lab} lab's arms are {', '.join(ARMS)}")
    args.output = args.output or results
    if args.summarise:
        report = json.loads(args.output.read_text())
        report["summary"] = summarise(report["runs"])
        args.output.write_text(json.dumps(report, indent=1))
        if args.output == results:
            plot(report["runs"], plot_path, title)
        print(json.dumps(report["summary"], indent=1))
        return
    # Runs already in --output for other arms or seeds are kept: seeds can be added a few at a time.
    earlier = json.loads(args.output.read_text()) if args.output.exists() else {"runs": []}
    runs = [r for r in earlier["runs"] if not (r["arm"] in args.arms and r["seed"] in args.seeds)]
    command = "python benchmarks/bench_hack_lab.py " + shlex.join(sys.argv[1:])  # arms with a space quoted
    if runs:  # the commands that measured the runs kept, then this one
        command = f"{earlier['command']}; {command}"
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:  # seed by seed, all arms: the file holds whole seeds if it is stopped
            for arm in args.arms:
                runs.append(run(arm, seed, Path(tmp) / f"{arm.replace(' ', '_')}-{seed}", args.extra, args.lab))
                r = runs[-1]
                print(f"{arm:12s} seed {seed}: hack rate {r['hack_rate_first']} -> {r['hack_rate_last']}, true "
                      f"accuracy {r['true_accuracy'][0]:.2f} -> {r['true_accuracy'][1]:.2f}, onset {r['onset_step']}, "
                      f"first warning {r['monitor_first_warning']}, detector {r['detector_precision']} / "
                      f"{r['detector_recall']}, {r['training_seconds']:.0f} s", flush=True)
                write(runs, args.output, command, plot_path if args.output == results else None, title)
    print(json.dumps(summarise(runs), indent=1))


def write(runs: list, output: Path, command: str, plot_path: Path | None = None, title: str = ""):
    """The results so far (after each run: a stopped benchmark keeps what it measured)."""
    report = {"date": datetime.date.today().isoformat(), "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
              "command": command,
              "summary": summarise(runs), "runs": runs}
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=1))
    if plot_path:
        plot(runs, plot_path, title)


if __name__ == "__main__":
    main()
