"""Benchmark: does turn-level credit (--turn_credit) reach the search demo's target sooner than plain GRPO?

    python benchmarks/bench_turn_credit.py              # ~25 min on 2 CPU cores (3 seeds x 2 arms)
    python benchmarks/bench_turn_credit.py --seeds 42   # one seed, ~8 min

Both arms run grpo_search.py's offline demo (its tiny model, toy two-hop questions and corpus, its
DEMO_SETTINGS) with the same seed, in this process, taking turns; the only difference is
--turn_credit. Every --eval_every steps each arm is scored, greedy, on --eval_examples held-out
questions by grpo_search.py's own mid-run evaluation. Target: held-out exact match >= the score
before training + --gain (default 0.20, the gain the demo's test requires). Reported per seed: the
first evaluated step at or past the target, the training seconds until then (evaluation time not
counted), and the final exact match and searches per question that found a supporting document.
An arm that never reaches the target within --max_steps is reported as not reached.
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
os.environ.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                   "TOKENIZERS_PARALLELISM": "false"})
sys.path.insert(0, str(ROOT))

import grpo_search  # noqa: E402


def run_arm(turn_credit: bool, seed: int, args) -> dict:
    """One demo run; the time of each mid-run evaluation is taken out of the training clock."""
    evaluations, evaluating = [], {"seconds": 0.0}
    original = grpo_search.MidRunEval.on_step_end

    def timed(self, train_args, state, control, **kwargs):
        started = time.perf_counter()
        original(self, train_args, state, control, **kwargs)
        if self.every and state.global_step % self.every == 0:
            evaluating["seconds"] += time.perf_counter() - started
            accuracy = next(e["eval/accuracy"] for e in reversed(state.log_history) if "eval/accuracy" in e)
            evaluations.append({"step": state.global_step, "exact_match": accuracy,
                                "train_seconds": round(time.perf_counter() - clock - evaluating["seconds"], 1)})

    grpo_search.MidRunEval.on_step_end = timed
    try:
        with tempfile.TemporaryDirectory() as out:
            clock = time.perf_counter()
            results = grpo_search.main(["--output_dir", out, "--seed", seed, "--max_steps", args.max_steps,
                                        "--mid_eval_steps", args.eval_every,
                                        "--num_mid_eval_examples", args.eval_examples, "--num_eval_examples",
                                        args.eval_examples, "--save_steps", 10_000, "--print_samples_every", 0,
                                        *(["--turn_credit"] if turn_credit else [])])
    finally:
        grpo_search.MidRunEval.on_step_end = original
    target = evaluations[0]["exact_match"] + args.gain
    reached = next((e for e in evaluations if e["exact_match"] >= target - 1e-9), None)
    return {"turn_credit": turn_credit, "seed": seed, "target": round(target, 3), "evaluations": evaluations,
            "steps_to_target": reached["step"] if reached else None,
            "seconds_to_target": reached["train_seconds"] if reached else None,
            "final_exact_match": results["after"]["accuracy"],
            "final_supporting_searches": results["after"]["supporting_searches"],
            "warnings": [w["rule"] for w in results["warnings"]]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="42,1,2", help="comma-separated training seeds; both arms run each")
    parser.add_argument("--max_steps", type=int, default=grpo_search.DEMO_SETTINGS["max_steps"])
    parser.add_argument("--eval_every", type=int, default=10)
    parser.add_argument("--eval_examples", type=int, default=100)
    parser.add_argument("--gain", type=float, default=0.20)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    runs = []
    for seed in map(int, args.seeds.split(",")):
        for turn_credit in (False, True):
            run = run_arm(turn_credit, seed, args)
            runs.append(run)
            print(f"seed {seed} {'turn credit' if turn_credit else 'GRPO':>11}: target {run['target']:.2f} at step "
                  f"{run['steps_to_target']} ({run['seconds_to_target']} s); final exact match "
                  f"{run['final_exact_match']:.2f}, supporting searches {run['final_supporting_searches']:.2f}")

    def summary(turn_credit):
        arm = [r for r in runs if r["turn_credit"] == turn_credit]
        steps = [r["steps_to_target"] for r in arm if r["steps_to_target"] is not None]
        seconds = [r["seconds_to_target"] for r in arm if r["seconds_to_target"] is not None]
        return {"reached": f"{len(steps)} of {len(arm)}",
                "median_steps_to_target": statistics.median(steps) if steps else None,
                "median_seconds_to_target": statistics.median(seconds) if seconds else None,
                "median_final_exact_match": statistics.median(r["final_exact_match"] for r in arm),
                "median_final_supporting_searches": statistics.median(r["final_supporting_searches"] for r in arm)}

    report = {"benchmark": "turn_credit", "date": datetime.date.today().isoformat(), "machine": platform.platform(),
              "cpus": os.cpu_count(), "settings": vars(args) | {"out": str(args.out)},
              "grpo": summary(False), "turn_credit": summary(True), "runs": runs}
    print(f"\n{'arm':<13}{'reached':>9}{'steps':>7}{'seconds':>9}{'final EM':>10}{'searches':>10}")
    for name in ("grpo", "turn_credit"):
        s = report[name]
        print(f"{name:<13}{s['reached']:>9}{str(s['median_steps_to_target']):>7}{str(s['median_seconds_to_target']):>9}"
              f"{s['median_final_exact_match']:>10.2f}{s['median_final_supporting_searches']:>10.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
