"""Benchmark: does turn-level credit (--turn_credit) reach the search demo's target sooner than plain GRPO?

    python benchmarks/bench_turn_credit.py              # ~12 min on 2 CPU cores (3 seeds x 2 arms)
    python benchmarks/bench_turn_credit.py --seeds 42   # one seed, ~4 min
    python benchmarks/bench_turn_credit.py --long       # the long-horizon demo (chains of 2-8, folding)

Both arms run grpo_search.py's offline demo (its tiny model, toy two-hop questions and corpus, its
DEMO_SETTINGS) with the same seed, in this process, taking turns; the only difference is
--turn_credit. Every --eval_every steps each arm is scored, greedy, on --eval_examples held-out
questions by grpo_search.py's own mid-run evaluation. With --long, both arms run the long-horizon demo
instead (`--config assets/long_search.yaml`: chains of 2 to 8 scholars, 16 tool calls for the deepest,
a context that folds), checked after every one of its 10 steps on its 84 held-out questions, since it
passes its targets within 2 or 3 steps (~25 min for 3 seeds).
The two-hop demo passes its target within about 10 of its 80 steps, so the default checks every 2 steps and
stops at 30. Targets: held-out exact match >= the score before training + each of --gains (0.20 is the
gain the two-hop demo's test requires, 0.30 the long one's; the larger ones ask for most of what the run
can reach). Reported per seed and target: the first
evaluated step at or past it and the training seconds until then (evaluation time not counted);
then the final exact match and searches per question that found a supporting document. An arm
that never reaches a target within --max_steps is reported as not reached.
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
RESULTS = ROOT / "benchmarks" / "results" / "turn_credit.json"
LONG_CONFIG = ROOT / "assets" / "long_search.yaml"
os.environ.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                   "TOKENIZERS_PARALLELISM": "false"})
sys.path.insert(0, str(ROOT))

import grpo_search  # noqa: E402
import instruments  # noqa: E402


def run_arm(turn_credit: bool, seed: int, args) -> dict:
    """One demo run; the time of each mid-run evaluation is taken out of the training clock."""
    evaluations, evaluating = [], {"seconds": 0.0}
    original = instruments.MidRunEval.on_step_end

    def timed(self, train_args, state, control, **kwargs):
        started = time.perf_counter()
        original(self, train_args, state, control, **kwargs)
        if self.every and state.global_step % self.every == 0:
            evaluating["seconds"] += time.perf_counter() - started
            accuracy = next(e["eval/accuracy"] for e in reversed(state.log_history) if "eval/accuracy" in e)
            evaluations.append({"step": state.global_step, "exact_match": accuracy,
                                "train_seconds": round(time.perf_counter() - clock - evaluating["seconds"], 1)})

    instruments.MidRunEval.on_step_end = timed
    try:
        with tempfile.TemporaryDirectory() as out:
            clock = time.perf_counter()
            results = grpo_search.main([*(["--config", LONG_CONFIG] if args.long else []),
                                        "--output_dir", out, "--seed", seed, "--max_steps", args.max_steps,
                                        "--mid_eval_steps", args.eval_every,
                                        "--num_mid_eval_examples", args.eval_examples, "--num_eval_examples",
                                        args.eval_examples, "--save_steps", 10_000, "--print_samples_every", 0,
                                        *(["--turn_credit"] if turn_credit else [])])
    finally:
        instruments.MidRunEval.on_step_end = original
    targets = {}
    for gain in args.gains:
        target = evaluations[0]["exact_match"] + gain
        reached = next((e for e in evaluations if e["exact_match"] >= target - 1e-9), None)
        targets[f"{gain:+.2f}"] = {"target": round(target, 3), "step": reached["step"] if reached else None,
                                   "seconds": reached["train_seconds"] if reached else None}
    return {"turn_credit": turn_credit, "seed": seed, "targets": targets, "evaluations": evaluations,
            "final_exact_match": results["after"]["accuracy"],
            "final_supporting_searches": results["after"]["supporting_searches"],
            "warnings": [w["rule"] for w in results["warnings"]]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="42,1,2", help="comma-separated training seeds; both arms run each")
    parser.add_argument("--long", action="store_true", help="the long-horizon demo instead of the two-hop one")
    parser.add_argument("--max_steps", type=int, default=None, help="default: 30 (--long: 10, the demo's)")
    parser.add_argument("--eval_every", type=int, default=None, help="default: 2 (--long: 1)")
    parser.add_argument("--eval_examples", type=int, default=None, help="default: 100 (--long: 84, all of them)")
    parser.add_argument("--gains", type=lambda text: [float(g) for g in text.split(",")], default=None,
                        help="comma-separated gains over the starting exact match, one target each (default: "
                             "0.2,0.4,0.5; --long: 0.3,0.5,0.7)")
    parser.add_argument("--out", type=Path, default=None, help="default: results/turn_credit.json (--long: "
                        "results/turn_credit_long.json)")
    args = parser.parse_args()
    args.max_steps = args.max_steps or (10 if args.long else 30)
    args.eval_every = args.eval_every or (1 if args.long else 2)
    args.gains = args.gains or ([0.3, 0.5, 0.7] if args.long else [0.2, 0.4, 0.5])
    args.eval_examples = args.eval_examples or (84 if args.long else 100)
    args.out = args.out or RESULTS.with_name("turn_credit_long.json" if args.long else "turn_credit.json")
    runs = []
    for seed in map(int, args.seeds.split(",")):
        for turn_credit in (False, True):
            run = run_arm(turn_credit, seed, args)
            runs.append(run)
            print(f"seed {seed} {'turn credit' if turn_credit else 'GRPO':>11}: " + "; ".join(
                f"{name} ({t['target']:.2f}) at step {t['step']} ({t['seconds']} s)" for name, t in run["targets"].items())
                + f"; final exact match {run['final_exact_match']:.2f}, supporting searches "
                f"{run['final_supporting_searches']:.2f}")

    def summary(turn_credit):
        arm = [r for r in runs if r["turn_credit"] == turn_credit]
        result = {}
        for name in arm[0]["targets"]:
            steps = [r["targets"][name]["step"] for r in arm if r["targets"][name]["step"] is not None]
            seconds = [r["targets"][name]["seconds"] for r in arm if r["targets"][name]["seconds"] is not None]
            result[name] = {"reached": f"{len(steps)} of {len(arm)}",
                            "median_steps": statistics.median(steps) if steps else None,
                            "median_seconds": round(statistics.median(seconds), 1) if seconds else None}
        return {"targets": result,
                "median_final_exact_match": statistics.median(r["final_exact_match"] for r in arm),
                "median_final_supporting_searches": statistics.median(r["final_supporting_searches"] for r in arm)}

    report = {"benchmark": "turn_credit", "date": datetime.date.today().isoformat(), "machine": platform.platform(),
              "cpus": os.cpu_count(), "settings": vars(args) | {"out": str(args.out)},
              "grpo": summary(False), "turn_credit": summary(True), "runs": runs}
    print(f"\n{'arm':<13}{'target':>8}{'reached':>9}{'steps':>7}{'seconds':>9}   (medians over seeds)")
    for name in ("grpo", "turn_credit"):
        for target, s in report[name]["targets"].items():
            steps, seconds = s["median_steps"], s["median_seconds"]
            print(f"{name:<13}{target:>8}{s['reached']:>9}{'-' if steps is None else f'{steps:g}':>7}"
                  f"{'-' if seconds is None else f'{seconds:.1f}':>9}")
        print(f"{name:<13} final exact match {report[name]['median_final_exact_match']:.2f}, supporting searches "
              f"{report[name]['median_final_supporting_searches']:.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
