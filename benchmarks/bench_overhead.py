"""Benchmark: what grpo_math.py adds to each training step, against a bare GRPOTrainer.

    python benchmarks/bench_overhead.py     # ~4 min on 2 CPU cores; prints a table, writes results/overhead.json

Both sides train the offline demo's tiny model on its toy data with the demo's settings
(grpo_math.DEMO_SETTINGS) for --steps steps, each in a fresh child process, taking turns
(--rounds times each, so that a slow spell on the machine hits both):
    ours  `python grpo_math.py --max_steps N --output_dir ...`, exactly as a user runs it: the
          sample printing wrapped around a reward, logging, checkpoints every 50 steps, the
          evaluation before and after and the plot;
    bare  the same model, prompts, reward functions and GRPOConfig values handed straight to
          GRPOTrainer, then train(): nothing else.
Measured: seconds per step = TRL's `train_runtime` / steps (its timer around the training loop).
The evaluation and the plot run outside that loop and cost the same whatever the step count
(their time is printed separately); everything the harness does during training is inside it.
Ratio = ours / bare, medians over the rounds; 1.00 means the harness costs nothing per step.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "overhead.json"
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}

# The bare side: GRPOTrainer with grpo_math's config, data and reward functions, and nothing else.
BARE = """
import json, sys
sys.path.insert(0, {root!r})
import grpo_math
from trl import GRPOTrainer

script_args, training_args, model_args, *_ = grpo_math.parse_args({argv!r})
tokenizer = grpo_math.load_tokenizer(model_args, training_args)
train_dataset, _ = grpo_math.load_data(script_args, tokenizer, training_args.seed)
training_args.reward_weights = [weight for _, weight in grpo_math.RUBRIC]
trainer = GRPOTrainer(model=model_args.model_name_or_path, reward_funcs=[func for func, _ in grpo_math.RUBRIC],
                      args=training_args, train_dataset=train_dataset, processing_class=tokenizer)
metrics = trainer.train().metrics
print("RESULT " + json.dumps({{"train_runtime": metrics["train_runtime"], "steps": trainer.state.global_step}}))
"""


def run_ours(steps: int, output_dir: Path) -> dict:
    start = time.perf_counter()
    result = subprocess.run([sys.executable, str(ROOT / "grpo_math.py"), "--max_steps", str(steps),
                             "--output_dir", str(output_dir)], capture_output=True, text=True,
                            env=dict(os.environ, **OFFLINE), cwd=ROOT)
    if result.returncode != 0:
        sys.exit(f"grpo_math.py failed:\n{result.stderr[-3000:]}")
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    runtime = next(entry["train_runtime"] for entry in reversed(history) if "train_runtime" in entry)
    return {"train_runtime": runtime, "steps": history[-1]["step"], "wall": time.perf_counter() - start}


def run_bare(steps: int, output_dir: Path) -> dict:
    argv = ["--max_steps", str(steps), "--output_dir", str(output_dir)]
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", BARE.format(root=str(ROOT), argv=argv)], capture_output=True,
                            text=True, env=dict(os.environ, **OFFLINE), cwd=ROOT)
    if result.returncode != 0:
        sys.exit(f"the bare GRPOTrainer run failed:\n{result.stderr[-3000:]}")
    line = next(line for line in result.stdout.splitlines() if line.startswith("RESULT "))
    return {**json.loads(line[len("RESULT "):]), "wall": time.perf_counter() - start}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100, help="training steps per run (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each side, alternating (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="JSON results file (default: %(default)s)")
    args = parser.parse_args(argv)
    import torch

    if torch.cuda.is_available():  # with a GPU, grpo_math.py would train the real model, not the demo
        sys.exit("bench_overhead.py measures the offline demo (tiny model, CPU): run it without a GPU, "
                 "e.g. CUDA_VISIBLE_DEVICES= python benchmarks/bench_overhead.py")

    runs = {"ours": [], "bare": []}
    with tempfile.TemporaryDirectory() as work:
        for round_number in range(args.rounds):
            for name, run in (("ours", run_ours), ("bare", run_bare)):
                result = run(args.steps, Path(work) / f"{name}-{round_number}")
                result["seconds_per_step"] = result["train_runtime"] / result["steps"]
                runs[name].append(result)
                print(f"round {round_number + 1}/{args.rounds} {name}: {result['seconds_per_step'] * 1e3:.0f} ms/step, "
                      f"{result['wall']:.0f} s in all", flush=True)

    per_step = {name: statistics.median(r["seconds_per_step"] for r in results) for name, results in runs.items()}
    outside = {name: statistics.median(r["wall"] - r["train_runtime"] for r in results)
               for name, results in runs.items()}
    ratio = per_step["ours"] / per_step["bare"]
    print(f"\ngrpo_math.py vs a bare GRPOTrainer, offline demo settings, {args.steps} steps, "
          f"median of {args.rounds} runs each")
    print(f"    {'':6}{'ms/step':>9}{'outside training (load, eval, plot)':>38}")
    for name in ("ours", "bare"):
        print(f"    {name:6}{per_step[name] * 1e3:9.0f}{outside[name]:37.1f}s")
    print(f"    ratio ours / bare per step: {ratio:.3f}")

    report = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "processor": platform.machine(), "cpu_count": os.cpu_count(),
                    "python": platform.python_version()},
        "settings": {"steps": args.steps, "rounds": args.rounds, "model": "assets/tiny-qwen-math",
                     "dataset": "assets/toy_math", "config": "grpo_math.DEMO_SETTINGS"},
        "seconds_per_step": per_step,
        "ratio_ours_over_bare": ratio,
        "seconds_outside_training": outside,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
