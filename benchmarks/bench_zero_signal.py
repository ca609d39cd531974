"""Benchmark: does --skip_zero_signal (rest prompts whose last group all scored the same) reach the target sooner?

    python benchmarks/bench_zero_signal.py                        # ~25 min on 2 CPU cores (2 demos x 3 seeds x 2 arms)
    python benchmarks/bench_zero_signal.py --demos math --seeds 42  # one demo, one seed, ~4 min

Each arm runs a demo's own settings (grpo_math.py's and grpo_tools.py's offline demos: their tiny models
and DEMO_SETTINGS) with the same seed, in this process, taking turns; the only difference is
--skip_zero_signal (0 against --rest). The option learns from a prompt's previous visit, so it can only act
from the second epoch on: both arms train on the first --train_prompts rows of the demo's training set, which
makes the demo's steps several epochs (math: 300 steps x 8 prompts over 400 prompts = 6 epochs; tools:
200 x 4 over 160 = 5). On a one-epoch run (GSM8K's 7,473 questions in 300 steps) it does nothing.

Reported per demo, seed and arm: the share of rollouts that carried a gradient (1 - TRL's frac_reward_zero_std,
averaged over the logged steps), the prompts passed over, the first evaluated step at or past each target
(held-out accuracy before training + each of --gains, greedy, on --eval_examples held-out questions, every
--eval_every steps) with the training seconds until then (evaluation time not counted), the final accuracy
and the whole run's training seconds. An arm that never reaches a target is reported as not reached.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "zero_signal.json"
os.environ.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                   "TOKENIZERS_PARALLELISM": "false"})
sys.path.insert(0, str(ROOT))

import grpo_math  # noqa: E402
import grpo_tools  # noqa: E402
import instruments  # noqa: E402

DEMOS = {"math": (grpo_math, "toy_math", 400), "tools": (grpo_tools, "toy_tools", 160)}  # script, data, prompts


def subset(data: str, prompts: int, folder: Path) -> Path:
    """The demo's data folder with only the first `prompts` training rows (the held-out set unchanged)."""
    folder.mkdir(parents=True, exist_ok=True)
    train = (ROOT / "assets" / data / "train.jsonl").read_text().splitlines()
    if prompts > len(train):
        raise SystemExit(f"--train_prompts {prompts}: the {data} demo has only {len(train)} training rows")
    (folder / "train.jsonl").write_text("\n".join(train[:prompts]) + "\n")
    (folder / "test.jsonl").write_text((ROOT / "assets" / data / "test.jsonl").read_text())
    return folder


def run_arm(demo: str, rest: int, seed: int, args) -> dict:
    """One demo run; the time of each mid-run evaluation is taken out of the training clock."""
    script, data, prompts = DEMOS[demo]
    evaluations, evaluating = [], {"seconds": 0.0}
    original = instruments.MidRunEval.on_step_end

    def timed(self, train_args, state, control, **kwargs):
        started = time.perf_counter()
        original(self, train_args, state, control, **kwargs)
        if self.every and state.global_step % self.every == 0:
            evaluating["seconds"] += time.perf_counter() - started
            accuracy = next(e["eval/accuracy"] for e in reversed(state.log_history) if "eval/accuracy" in e)
            evaluations.append({"step": state.global_step, "accuracy": accuracy,
                                "train_seconds": round(time.perf_counter() - clock - evaluating["seconds"], 1)})

    instruments.MidRunEval.on_step_end = timed
    try:
        with tempfile.TemporaryDirectory() as out:
            dataset = subset(data, args.train_prompts or prompts, Path(out) / "data")
            clock = time.perf_counter()
            results = script.main(["--dataset_name", dataset, "--output_dir", Path(out) / "run", "--seed", seed,
                                   *(["--max_steps", args.max_steps] if args.max_steps else []),
                                   "--mid_eval_steps", args.eval_every, "--num_mid_eval_examples", args.eval_examples,
                                   "--num_eval_examples", args.eval_examples, "--save_steps", 10_000,
                                   "--print_samples_every", 0, "--logging_steps", 5, "--skip_zero_signal", rest])
            seconds = time.perf_counter() - clock - evaluating["seconds"]
            logs = json.loads((Path(out) / "run" / "trainer_state.json").read_text())["log_history"]
    finally:
        instruments.MidRunEval.on_step_end = original
    quiet = [entry["frac_reward_zero_std"] for entry in logs if "frac_reward_zero_std" in entry]
    passed_over = [entry["zero_signal/passed_over"] for entry in logs if "zero_signal/passed_over" in entry]
    targets = {}
    for gain in args.gains:
        target = evaluations[0]["accuracy"] + gain
        reached = next((e for e in evaluations if e["accuracy"] >= target - 1e-9), None)
        targets[f"{gain:+.2f}"] = {"target": round(target, 3), "step": reached["step"] if reached else None,
                                   "seconds": reached["train_seconds"] if reached else None}
    return {"demo": demo, "skip_zero_signal": rest, "seed": seed, "train_prompts": args.train_prompts or prompts,
            "steps": results["global_step"], "signal_share": round(1 - statistics.mean(quiet), 3),
            "passed_over": int(passed_over[-1]) if passed_over else 0, "targets": targets,
            "evaluations": evaluations, "final_accuracy": results["after"]["accuracy"],
            "train_seconds": round(seconds, 1), "warnings": [w["rule"] for w in results["warnings"]]}


def summary(runs: list) -> dict:
    """Medians over seeds for one demo and arm."""
    result = {"signal_share": statistics.median(r["signal_share"] for r in runs),
              "passed_over": statistics.median(r["passed_over"] for r in runs),
              "final_accuracy": statistics.median(r["final_accuracy"] for r in runs),
              "train_seconds": round(statistics.median(r["train_seconds"] for r in runs), 1), "targets": {}}
    for name in runs[0]["targets"]:
        steps = [r["targets"][name]["step"] for r in runs if r["targets"][name]["step"] is not None]
        seconds = [r["targets"][name]["seconds"] for r in runs if r["targets"][name]["seconds"] is not None]
        result["targets"][name] = {"reached": f"{len(steps)} of {len(runs)}",
                                   "median_steps": statistics.median(steps) if steps else None,
                                   "median_seconds": round(statistics.median(seconds), 1) if seconds else None}
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--demos", default="math,tools", help="comma-separated: math, tools")
    parser.add_argument("--seeds", default="42,1,2", help="comma-separated training seeds; both arms run each")
    parser.add_argument("--rest", type=int, default=1, help="--skip_zero_signal of the second arm")
    parser.add_argument("--train_prompts", type=int, default=None,
                        help="training rows each arm uses (default: math 400, tools 160: several epochs)")
    parser.add_argument("--max_steps", type=int, default=None, help="default: the demo's (math 300, tools 200)")
    parser.add_argument("--eval_every", type=int, default=25)
    parser.add_argument("--eval_examples", type=int, default=100)
    parser.add_argument("--gains", type=lambda text: [float(g) for g in text.split(",")], default=[0.2, 0.3],
                        help="comma-separated gains over the starting accuracy, one target each")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    demos = args.demos.split(",")
    if set(demos) - set(DEMOS) or args.rest < 1:
        parser.error(f"--demos takes {', '.join(DEMOS)}; --rest must be 1 or more")
    runs = []
    for demo in demos:
        for seed in map(int, args.seeds.split(",")):
            for rest in (0, args.rest):
                run = run_arm(demo, rest, seed, args)
                runs.append(run)
                print(f"{demo} seed {seed} skip_zero_signal {rest}: signal share {run['signal_share']:.2f}, passed "
                      f"over {run['passed_over']}; " + "; ".join(
                          f"{name} ({t['target']:.2f}) at step {t['step']} ({t['seconds']} s)"
                          for name, t in run["targets"].items())
                      + f"; final accuracy {run['final_accuracy']:.2f} in {run['train_seconds']} s")

    report = {"benchmark": "zero_signal", "date": datetime.date.today().isoformat(), "machine": platform.platform(),
              "cpus": os.cpu_count(), "settings": vars(args) | {"out": str(args.out)},
              "summary": {demo: {arm: summary([r for r in runs if r["demo"] == demo
                                               and r["skip_zero_signal"] == rest])
                                 for arm, rest in (("off", 0), ("on", args.rest))} for demo in demos},
              "runs": runs}
    print(f"\n{'demo':<7}{'arm':<5}{'signal':>8}{'passed over':>13}{'target':>8}{'reached':>9}{'steps':>7}"
          f"{'seconds':>9}{'final':>7}   (medians over seeds)")
    for demo, arms in report["summary"].items():
        for arm, s in arms.items():
            for target, t in s["targets"].items():
                steps, seconds = t["median_steps"], t["median_seconds"]
                print(f"{demo:<7}{arm:<5}{s['signal_share']:>8.2f}{s['passed_over']:>13g}{target:>8}{t['reached']:>9}"
                      f"{'-' if steps is None else f'{steps:g}':>7}{'-' if seconds is None else f'{seconds:.1f}':>9}"
                      f"{s['final_accuracy']:>7.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
