"""Benchmark: steps and time to the demo's target accuracy, our recipe against the 2025 demo's.

    python benchmarks/bench_recipe.py     # ~10 min on 2 CPU cores; prints a table, writes results/recipe.json

Same tiny model, toy data, system prompt and held-out questions (the offline demo's, from
assets/) for every arm; only the reward functions and the GRPOConfig values change:
    ours         grpo_math.py's rubric and its demo settings (grpo_math.DEMO_SETTINGS);
    2025         the original 2025 single-file demo: its five rewards (exact-match correctness 2.0,
                 is-an-integer 0.5, strict and soft format 0.5 each, tag counting) and its config
                 (lr 5e-6, AdamW betas 0.9/0.99, weight decay 0.1, 10% warm-up, cosine, batch 1
                 prompt x 16 generations x 4 accumulation = 64 completions a step, max_grad_norm
                 0.1, beta 0.04, temperature 0.9, per-sequence loss);
    2025, demo lr  the same, at the demo's learning rate (2e-4, constant): how much of the gap is
                 the learning rate alone (5e-6 is for a 1.5B model, not a 0.1M one).
Both ours and 2025 generate 64 completions per optimizer step, so a step is the same amount of
data. Completions are capped at the demo's 40 tokens in every arm (the 2025 demo's 786 matters
only for models that ramble; the tiny model's answers take ~20). Every --eval_every steps the arm
is scored on the 200 held-out questions, greedy, with grpo_math.py's own evaluation; the time
that takes is not counted. Target: held-out accuracy >= --target (default 0.60, the demo's
starting 0.34 plus the 0.25 gain its test requires). An arm that does not reach it within
--max_steps is reported as not reached, and the ratio against it is a lower bound.
"""

import argparse
import datetime
import json
import os
import platform
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "recipe.json"
os.environ.update({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                   "TOKENIZERS_PARALLELISM": "false"})
sys.path.insert(0, str(ROOT))

import grpo_math  # noqa: E402
from transformers import TrainerCallback  # noqa: E402
from trl import GRPOTrainer  # noqa: E402


# --- The 2025 demo's rewards, rewritten from its description (see shared notes): same rules ----------

def gold_2025(answer: str) -> str:
    return answer.split("####")[-1].strip().replace(",", "").replace("$", "")


def answer_2025(text: str) -> str:  # the text after the last <answer>, up to </answer>
    return text.split("<answer>")[-1].split("</answer>")[0].strip()


def correctness_2025(completions, answer, **kwargs):
    return [2.0 if answer_2025(c[0]["content"]) == gold_2025(a) else 0.0 for c, a in zip(completions, answer)]


def integer_2025(completions, **kwargs):
    return [0.5 if answer_2025(c[0]["content"]).isdigit() else 0.0 for c in completions]


def strict_format_2025(completions, **kwargs):
    pattern = r"^<reasoning>\n.*?\n</reasoning>\n<answer>\n.*?\n</answer>\n$"
    return [0.5 if re.match(pattern, c[0]["content"]) else 0.0 for c in completions]


def soft_format_2025(completions, **kwargs):
    pattern = r"<reasoning>.*?</reasoning>\s*<answer>.*?</answer>"
    return [0.5 if re.match(pattern, c[0]["content"]) else 0.0 for c in completions]


def tag_count_2025(completions, **kwargs):
    def count(text):
        score = 0.0
        if text.count("<reasoning>\n") == 1:
            score += 0.125
        if text.count("\n</reasoning>\n") == 1:
            score += 0.125
        if text.count("\n<answer>\n") == 1:
            score += 0.125 - len(text.split("\n</answer>\n")[-1]) * 0.001
        if text.count("\n</answer>") == 1:
            score += 0.125 - (len(text.split("\n</answer>")[-1]) - 1) * 0.001
        return score
    return [count(c[0]["content"]) for c in completions]


REWARDS_2025 = [correctness_2025, integer_2025, strict_format_2025, soft_format_2025, tag_count_2025]
CONFIG_2025 = ["--learning_rate", "5e-6", "--adam_beta1", "0.9", "--adam_beta2", "0.99", "--weight_decay", "0.1",
               "--lr_scheduler_type", "cosine", "--per_device_train_batch_size", "16",
               "--gradient_accumulation_steps", "4", "--num_generations", "16", "--max_grad_norm", "0.1",
               "--beta", "0.04", "--temperature", "0.9", "--loss_type", "grpo"]


class EvalEvery(TrainerCallback):
    """Scores the held-out questions every `every` steps; the time that takes is not counted."""

    def __init__(self, every, target, dataset):
        self.every, self.target, self.dataset = every, target, dataset
        self.trainer, self.points, self.eval_seconds = None, [], 0.0

    def score(self, step):
        start = time.perf_counter()
        accuracy = grpo_math.evaluate(self.trainer, self.dataset, batch_size=200)["accuracy"]
        self.eval_seconds += time.perf_counter() - start
        train_seconds = time.perf_counter() - self.started - self.eval_seconds
        self.points.append({"step": step, "accuracy": accuracy, "train_seconds": round(train_seconds, 1)})
        print(f"    step {step:4d}: held-out accuracy {accuracy:.3f} ({train_seconds:.0f} s of training)", flush=True)

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = time.perf_counter()
        self.score(0)

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.every == 0:
            self.score(state.global_step)


def run_arm(name, flags, rewards, weights, args, work):
    print(f"{name}:", flush=True)
    argv = ["--max_steps", str(args.max_steps), "--max_completion_length", "40", "--save_strategy", "no",
            "--logging_steps", "25", "--output_dir", str(Path(work) / re.sub(r"\W+", "-", name)), *flags]
    script_args, training_args, model_args, *_ = grpo_math.parse_args(argv)
    tokenizer = grpo_math.load_tokenizer(model_args, training_args)
    train_dataset, eval_dataset = grpo_math.load_data(script_args, tokenizer, training_args.seed)
    training_args.reward_weights = weights
    callback = EvalEvery(args.eval_every, args.target, eval_dataset)
    trainer = GRPOTrainer(model=model_args.model_name_or_path, reward_funcs=rewards, args=training_args,
                          train_dataset=train_dataset, processing_class=tokenizer, callbacks=[callback])
    callback.trainer = trainer
    trainer.train()
    reached = next((point for point in callback.points if point["accuracy"] >= args.target), None)
    return {"flags": flags, "points": callback.points, "reached": reached,
            "final_accuracy": callback.points[-1]["accuracy"],
            "train_seconds": callback.points[-1]["train_seconds"]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max_steps", type=int, default=300, help="steps per arm (the demo's; default %(default)s)")
    parser.add_argument("--eval_every", type=int, default=25, help="steps between evaluations (default %(default)s)")
    parser.add_argument("--target", type=float, default=0.60, help="held-out accuracy to reach (default %(default)s)")
    parser.add_argument("--arms", default="ours,2025,2025-demo-lr", help="comma-separated (default %(default)s)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="JSON results file (default: %(default)s)")
    args = parser.parse_args(argv)
    if grpo_math.torch.cuda.is_available():
        sys.exit("bench_recipe.py compares recipes on the offline demo (tiny model, CPU): run it without a GPU, "
                 "e.g. CUDA_VISIBLE_DEVICES= python benchmarks/bench_recipe.py")

    ours_rewards = [func for func, _ in grpo_math.RUBRIC]
    ours_weights = [weight for _, weight in grpo_math.RUBRIC]
    demo_lr = ["--learning_rate", str(grpo_math.DEMO_SETTINGS["learning_rate"]), "--lr_scheduler_type", "constant"]
    arms = {
        "ours": ([], ours_rewards, ours_weights),
        "2025": ([*CONFIG_2025, "--warmup_steps", str(args.max_steps // 10)], REWARDS_2025, [1.0] * 5),
        "2025-demo-lr": ([*CONFIG_2025, "--warmup_steps", str(args.max_steps // 10), *demo_lr], REWARDS_2025,
                         [1.0] * 5),
    }
    started = time.perf_counter()
    results = {}
    with tempfile.TemporaryDirectory() as work:
        for name in args.arms.split(","):
            if name not in arms:
                sys.exit(f"bench_recipe.py: error: unknown arm '{name}': choose from {', '.join(arms)}")
            results[name] = run_arm(name, *arms[name], args, work)

    print(f"\nsteps and training time to held-out accuracy >= {args.target:.2f} (tiny model, toy data, "
          f"at most {args.max_steps} steps, checked every {args.eval_every})")
    print(f"    {'arm':<14}{'start':>7}{'final':>7}{'steps':>8}{'seconds':>9}")
    for name, result in results.items():
        reached = result["reached"]
        steps = f"{reached['step']}" if reached else f">{args.max_steps}"
        seconds = f"{reached['train_seconds']:.0f}" if reached else f">{result['train_seconds']:.0f}"
        start = result["points"][0]["accuracy"]
        print(f"    {name:<14}{start:7.2f}{result['final_accuracy']:7.2f}{steps:>8}{seconds:>9}")
    ratios = {}
    if "ours" in results and results["ours"]["reached"] and results["ours"]["reached"]["step"] > 0:
        ours = results["ours"]["reached"]
        for name, result in results.items():
            if name == "ours":
                continue
            other = result["reached"]
            ratios[name] = {
                "steps": (other or {"step": args.max_steps})["step"] / ours["step"],
                "seconds": (other or result)["train_seconds"] / ours["train_seconds"],
                "lower_bound": other is None,
            }
            sign = ">" if other is None else ""
            print(f"    {name} / ours: {sign}{ratios[name]['steps']:.1f}x the steps, "
                  f"{sign}{ratios[name]['seconds']:.1f}x the training time")

    report = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "processor": platform.machine(), "cpu_count": os.cpu_count(),
                    "python": platform.python_version()},
        "settings": {"max_steps": args.max_steps, "eval_every": args.eval_every, "target": args.target,
                     "model": "assets/tiny-qwen-math", "dataset": "assets/toy_math", "eval_questions": 200},
        "arms": results,
        "ratios_against_ours": ratios,
        "benchmark_seconds": round(time.perf_counter() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
