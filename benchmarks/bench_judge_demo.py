"""Benchmark: grpo_judge.py's offline demo over several seeds, for the figures README.md and docs/ quote.

    python benchmarks/bench_judge_demo.py                  # seeds 0, 1, 2: ~30 min on 2 CPU cores
    python benchmarks/bench_judge_demo.py --seeds 0        # one run, ~10 min

Each run is `python grpo_judge.py --seed S --output_dir DIR` in a fresh process with no GPU: the script serves the
tiny judge of assets/tiny-judge, audits it and trains the tiny policy on the toy planets (DEMO_SETTINGS). Reported per
run, from its eval.json: the held-out scores before and after training (greedy answers to 64 questions): the judged
score, the true rubric score (the hidden checks, never seen by the reward) and the judge's agreement with the truth
on every (answer, criterion) pair; the audit's line; the judge's calls and the seconds training waited for it, and
their share of the run's wall time. The summary gives each figure's range over the runs, and whether the targets
are met (true score up >= 0.25, agreement >= 0.90 before and after, <= 10 minutes). Written to
results/judge_demo.json, which tests/test_grpo_judge.py checks the README and docs against.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "judge_demo.json"
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
TARGETS = {"true_score_gain": 0.25, "judge_agreement": 0.90, "minutes": 10.0}


def run_demo(seed: int, out: Path) -> dict:
    started, load = time.perf_counter(), os.getloadavg()[0]
    result = subprocess.run([sys.executable, str(ROOT / "grpo_judge.py"), "--seed", str(seed), "--output_dir",
                             str(out)], cwd=ROOT, env=dict(os.environ, **OFFLINE), capture_output=True, text=True,
                            timeout=3600)
    if result.returncode != 0:
        raise SystemExit(f"grpo_judge.py --seed {seed} failed:\n{result.stderr[-3000:]}")
    if "offline demo" not in result.stdout:
        raise SystemExit("grpo_judge.py did not run its offline demo (a GPU or a model was found)")
    evaluation = json.loads((out / "eval.json").read_text())
    audit = next(line for line in result.stdout.splitlines() if "the judge passed its audit" in line)
    judge = evaluation["after"]["judge"]
    wall = evaluation["wall_time_seconds"]
    keep = ("accuracy", "true_score", "judge_agreement")
    return {"seed": seed, "global_step": evaluation["global_step"], "wall_time_seconds": round(wall, 1),
            "process_seconds": round(time.perf_counter() - started, 1), "load_before": round(load, 2),
            "before": {k: round(evaluation["before"][k], 4) for k in keep},
            "after": {k: round(evaluation["after"][k], 4) for k in keep},
            "audit": audit.strip(),
            "judge": {"calls": judge["calls"], "cached": judge["cached"], "failures": judge["failures"],
                      "unparsable": judge["unparsable"], "wall_seconds": round(judge["wall_seconds"], 1),
                      "share_of_wall_time": round(judge["wall_seconds"] / wall, 3)}}


def summarize(runs: list[dict]) -> dict:
    def span(values):
        return [round(min(values), 4), round(max(values), 4)]

    gains = [r["after"]["true_score"] - r["before"]["true_score"] for r in runs]
    agreement = [r[when]["judge_agreement"] for r in runs for when in ("before", "after")]
    minutes = [r["wall_time_seconds"] / 60 for r in runs]
    return {"runs": len(runs),
            "true_score_before": span([r["before"]["true_score"] for r in runs]),
            "true_score_after": span([r["after"]["true_score"] for r in runs]),
            "true_score_gain": span(gains),
            "judged_before": span([r["before"]["accuracy"] for r in runs]),
            "judged_after": span([r["after"]["accuracy"] for r in runs]),
            "judge_agreement": span(agreement),
            "minutes": span(minutes),
            "judge_share_of_wall_time": span([r["judge"]["share_of_wall_time"] for r in runs]),
            "targets": TARGETS,
            "targets_met": {"true_score_gain": min(gains) >= TARGETS["true_score_gain"],
                            "judge_agreement": min(agreement) >= TARGETS["judge_agreement"],
                            "minutes": max(minutes) <= TARGETS["minutes"]}}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            runs.append(run_demo(seed, Path(tmp) / f"seed{seed}"))
            r = runs[-1]
            print(f"seed {seed}: true score {r['before']['true_score']:.2f} -> {r['after']['true_score']:.2f}, "
                  f"judged {r['before']['accuracy']:.2f} -> {r['after']['accuracy']:.2f}, agreement "
                  f"{r['before']['judge_agreement']:.2f} / {r['after']['judge_agreement']:.2f}, "
                  f"{r['wall_time_seconds'] / 60:.1f} min (judge {r['judge']['share_of_wall_time']:.0%})", flush=True)
    report = {"command": "python grpo_judge.py --seed S", "machine": f"{os.cpu_count()} CPU cores, no GPU",
              "summary": summarize(runs), "runs": runs}
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report["summary"], indent=2))
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
