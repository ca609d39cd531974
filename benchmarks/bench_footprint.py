"""Benchmark: the real-size footprint of the recipes on their default model, Qwen2.5-0.5B-Instruct.

    python benchmarks/bench_footprint.py   # no GPU: grpo_math.py, ~3 min on 2 idle cores; writes results/footprint.json
    python benchmarks/bench_footprint.py   # CUDA GPU: also grpo_tools.py and grpo_code.py, each with and without
                                           # --use_vllm (colocate) where vLLM is installed; GPU peak memory and
                                           # tokens/s per run; about 8 minutes on one GPU

No download: the model is Qwen2.5-0.5B-Instruct's architecture, built from its published config
values (QWEN2_5_0_5B_INSTRUCT below) with random weights (seeded), saved to a temporary folder
with the demo's tiny tokenizer (assets/tiny-qwen-math: Qwen2.5's chat template, 468 tokens; its
ids fit the 151,936-row embedding). Same parameter count, layers and vocabulary-sized logits as
the real model, so memory and compute per token are the real model's.

Then grpo_math.py runs as a user runs it, once per variant (full fine-tuning, LoRA r=16), in a
child process of its own: `python -c` imports grpo_math and calls `grpo_math.main([...flags...])`
(its documented Python entry point) on the toy GSM8K-style data, and prints one JSON line. On a
GPU, grpo_tools.py and grpo_code.py run the same way on their toy data (full fine-tuning, a few
steps), with TRL's transformers generation and, where vLLM is installed, with `--use_vllm`
colocated. Random weights make no tool calls, so these runs measure generation and training at
the full completion length, not the tool loop. Each run reports:
    - peak resident memory of that process (VmHWM), and on CUDA torch.cuda.max_memory_allocated();
    - seconds per optimizer step: wall clock between the ends of consecutive steps (a callback
      only records timestamps), the first step left out as warm-up; also the CPU time the child
      used per step (all threads), which other jobs on the machine barely change; TRL's own
      `step_time` (which leaves out the optimizer step) is kept in the JSON as a cross-check;
    - trainable and total parameters of the model the trainer holds;
    - tokens per second: TRL's `num_tokens` (prompt + completion tokens trained on) over the measured steps.
Worst case by construction: random weights almost never sample EOS (1 token in 151,936), so every
completion runs to max_completion_length. A trained model stops earlier and costs less.
Not the real workload in one respect: the toy prompts are ~63 tokens with the tiny tokenizer;
GSM8K prompts with Qwen's tokenizer are ~100-200. Memory for activations grows with
prompt + completion tokens.
"""

import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "footprint.json"
TOKENIZER = ROOT / "assets" / "tiny-qwen-math"
DATASET = ROOT / "assets" / "toy_math"
DATASETS = {"grpo_math": DATASET, "grpo_tools": ROOT / "assets" / "toy_tools",
            "grpo_code": ROOT / "assets" / "toy_code"}
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
os.environ.update(OFFLINE)  # nothing here may touch the Hub

# From https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct/blob/main/config.json (architecture fields;
# the token ids come from the tokenizer we pair it with). Published size: 0.49B parameters, 0.36B
# without the embedding (model card).
QWEN2_5_0_5B_INSTRUCT = dict(
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    vocab_size=151936,
    max_position_embeddings=32768,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    hidden_act="silu",
    attention_dropout=0.0,
    initializer_range=0.02,
    use_sliding_window=False,
    sliding_window=32768,
    max_window_layers=21,
    use_cache=True,
    torch_dtype="bfloat16",
)
PUBLISHED_PARAMETERS = 0.49e9
PUBLISHED_NON_EMBEDDING_PARAMETERS = 0.36e9

# Per device: the defaults of --steps, --max_completion_length and --gradient_accumulation_steps.
# CPU: 2 steps (one warm-up, one measured) of 32 tokens keep both variants near 3 min on 2 idle cores:
# a full fine-tuning step of 8 x ~95 tokens is ~2.5 TFLOP there (forward, backward, checkpointing
# recompute). Per-step time grows about linearly with prompt + completion tokens. CUDA: the recipe's own lengths
# (grpo_math.py's max_completion_length 256, gradient_accumulation_steps 4), so a GPU run fills
# the README's table with what `python grpo_math.py` costs.
DEVICE_DEFAULTS = {
    "cpu": dict(steps=2, max_completion_length=32, gradient_accumulation_steps=1),
    "cuda": dict(steps=5, max_completion_length=256, gradient_accumulation_steps=4),
}
VARIANTS = {  # the flags that make each variant; learning rates as grpo_math.py's docstring suggests
    "full": [],
    "lora": ["--use_peft", "--lora_r", "16", "--lora_alpha", "32", "--learning_rate", "2e-5"],
}
# On a GPU: the tool scripts, full fine-tuning, 3 steps of 8 completions (one warm-up), with and without vLLM.
SCRIPT_RUNS = {"grpo_tools": ("grpo_tools", []), "grpo_code": ("grpo_code", []),
               "grpo_tools+vllm": ("grpo_tools", ["--use_vllm", "--vllm_mode", "colocate"]),
               "grpo_code+vllm": ("grpo_code", ["--use_vllm", "--vllm_mode", "colocate"])}
SCRIPT_RUN_SETTINGS = dict(steps=3, gradient_accumulation_steps=1)


def qwen_config(**overrides):
    """Qwen2Config with the published values (overrides: for small test models)."""
    from transformers import Qwen2Config

    values = {k: v for k, v in QWEN2_5_0_5B_INSTRUCT.items() if k != "torch_dtype"}
    return Qwen2Config(**{**values, **overrides})


def parameter_counts(config) -> dict:
    """Total and non-embedding parameters, counted on the meta device: no memory, no time."""
    import torch
    from transformers import Qwen2ForCausalLM

    with torch.device("meta"):
        model = Qwen2ForCausalLM(config)
    total = sum(p.numel() for p in model.parameters())  # tied lm_head/embedding counted once
    return {"total": total, "non_embedding": total - model.get_input_embeddings().weight.numel()}


def save_random_model(folder: Path, seed: int = 0, **overrides) -> Path:
    """Random-weight Qwen2.5-0.5B-Instruct architecture + the tiny tokenizer, saved as a model folder."""
    import torch
    from transformers import AutoTokenizer, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER)
    config = qwen_config(bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, **overrides)
    assert len(tokenizer) <= config.vocab_size, "every token id must have an embedding row"
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)  # stored in bf16 like the Hub's; loaded as fp32
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = None
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def grpo_math_argv(model: Path, output_dir: Path, variant: str, steps: int, max_completion_length: int,
                   gradient_accumulation_steps: int, script: str = "grpo_math") -> list[str]:
    """The flags a user would pass to the script (grpo_math.py unless `script` says otherwise) for this variant."""
    flags = VARIANTS[variant] if variant in VARIANTS else SCRIPT_RUNS[variant][1]
    return ["--model_name_or_path", str(model), "--dataset_name", str(DATASETS[script]),
            "--max_steps", str(steps), "--num_eval_examples", "0", "--output_dir", str(output_dir),
            "--per_device_train_batch_size", "8", "--num_generations", "8",
            "--gradient_accumulation_steps", str(gradient_accumulation_steps),
            "--max_completion_length", str(max_completion_length),
            "--warmup_steps", "0", "--logging_steps", "1", "--save_strategy", "no", "--report_to", "none",
            "--print_samples_every", "0", *flags]


# The child: runs grpo_math.main(argv) and prints one JSON line. Peak memory is read by the child
# about itself (VmHWM, the high-water mark of its resident set), not by the parent: the parent's
# getrusage(RUSAGE_CHILDREN).ru_maxrss is the largest of ALL children waited for so far, so the
# second variant would report max(first, second). The callback only records timestamps and
# parameter counts; everything else is grpo_math.py's own code path.
CHILD = r"""
import importlib, json, os, resource, sys, time
sys.path.insert(0, os.getcwd())
import torch
from transformers import TrainerCallback
recipe = importlib.import_module(sys.argv[2])

def peak_rss_bytes():
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kB on Linux, bytes on macOS
    return peak if sys.platform == "darwin" else peak * 1024

probe = {"step_ends": []}

class Probe(TrainerCallback):
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        probe["trainable"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
        probe["total"] = sum(p.numel() for p in model.parameters())
        probe["peak_rss_before_training"] = peak_rss_bytes()
        probe["train_begin"] = (time.perf_counter(), time.process_time())

    def on_step_end(self, args, state, control, **kwargs):
        probe["step_ends"].append((time.perf_counter(), time.process_time()))

class ProbedTrainer(recipe.GRPOTrainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.add_callback(Probe())

recipe.GRPOTrainer = ProbedTrainer
if torch.cuda.is_available():
    torch.cuda.reset_peak_memory_stats()
recipe.main(json.loads(sys.argv[1]))
ends = [probe.pop("train_begin")] + probe.pop("step_ends")
probe["step_seconds"] = [b[0] - a[0] for a, b in zip(ends, ends[1:])]
probe["step_cpu_seconds"] = [b[1] - a[1] for a, b in zip(ends, ends[1:])]  # all threads of this process
probe["peak_rss"] = peak_rss_bytes()
if torch.cuda.is_available():
    probe["cuda_max_allocated"] = torch.cuda.max_memory_allocated()
    probe["cuda_max_reserved"] = torch.cuda.max_memory_reserved()
print("FOOTPRINT_JSON " + json.dumps(probe))
"""


def cpu_busy_jiffies():
    """(busy, total) CPU time of the whole machine from /proc/stat, or None off Linux."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def run_variant(variant: str, model: Path, work: Path, settings: dict) -> dict:
    """One variant (VARIANTS: grpo_math.py) or script run (SCRIPT_RUNS) in a child process of its own."""
    script = "grpo_math" if variant in VARIANTS else SCRIPT_RUNS[variant][0]
    output_dir = work / f"run-{variant}"
    argv = grpo_math_argv(model, output_dir, variant, settings["steps"], settings["max_completion_length"],
                          settings["gradient_accumulation_steps"], script)
    log_path = work / f"{variant}.log"
    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    jiffies_before, children_before = cpu_busy_jiffies(), resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    with open(log_path, "w") as log:
        result = subprocess.run([sys.executable, "-c", CHILD, json.dumps(argv), script], stdout=log,
                                stderr=subprocess.STDOUT, cwd=ROOT, env=dict(os.environ, **OFFLINE))
    wall = time.perf_counter() - started
    output = log_path.read_text()
    lines = [line for line in output.splitlines() if line.startswith("FOOTPRINT_JSON ")]
    if result.returncode != 0 or not lines:
        sys.exit(f"variant '{variant}' failed (exit {result.returncode}); last lines of its output:\n"
                 + "\n".join(output.splitlines()[-30:]))
    probe = json.loads(lines[-1].split(" ", 1)[1])

    # Other work on the machine during the run: all busy CPU time minus our child's own.
    other_cpu_share = None
    jiffies_after, children_after = cpu_busy_jiffies(), resource.getrusage(resource.RUSAGE_CHILDREN)
    if jiffies_before and jiffies_after:
        tick = os.sysconf("SC_CLK_TCK")
        busy = (jiffies_after[0] - jiffies_before[0]) / tick
        elapsed_cpu = (jiffies_after[1] - jiffies_before[1]) / tick  # wall x cores, as the kernel counts it
        ours = (children_after.ru_utime + children_after.ru_stime) - (children_before.ru_utime
                                                                     + children_before.ru_stime)
        other_cpu_share = max(0.0, busy - ours) / elapsed_cpu if elapsed_cpu else None

    state = json.loads((output_dir / "trainer_state.json").read_text())
    trl_step_time = [entry["step_time"] for entry in state["log_history"] if "step_time" in entry]
    steps = probe["step_seconds"]
    steady = steps[1:] or steps  # the first step pays one-off costs (allocator, kernels, lazy inits)
    cpu_steps = probe["step_cpu_seconds"]
    cpu_steady = cpu_steps[1:] or cpu_steps
    tokens = [entry["num_tokens"] for entry in state["log_history"] if "num_tokens" in entry]  # cumulative
    measured_tokens = tokens[-1] - tokens[-1 - len(steady)] if len(tokens) > len(steady) else tokens[-1]
    return {
        "script": f"{script}.py",
        "flags": argv[argv.index("--print_samples_every") + 2:],
        "trainable_parameters": probe["trainable"],
        "total_parameters": probe["total"],
        "peak_rss_bytes": probe["peak_rss"],
        "peak_rss_before_training_bytes": probe["peak_rss_before_training"],
        "cuda_max_allocated_bytes": probe.get("cuda_max_allocated"),
        "cuda_max_reserved_bytes": probe.get("cuda_max_reserved"),
        "seconds_per_step": sum(steady) / len(steady),
        "step_seconds": steps,
        # CPU time (user + system, all threads) of the child per step: barely moved by other jobs
        # competing for the cores, unlike wall-clock seconds. On an idle machine with k cores that the
        # child keeps busy, seconds per step is about this divided by k.
        "cpu_seconds_per_step": sum(cpu_steady) / len(cpu_steady),
        "step_cpu_seconds": cpu_steps,
        "warmup_steps_excluded": len(steps) - len(steady),
        "tokens_per_second": measured_tokens / sum(steady) if tokens and sum(steady) else None,
        "trl_step_time_seconds": trl_step_time,  # TRL's own: generation + loss + backward, no optimizer step
        "mean_completion_length": [entry.get("completions/mean_length") for entry in state["log_history"]
                                   if "completions/mean_length" in entry],
        "child_wall_seconds": wall,
        "loadavg_before": load_before,
        "other_processes_cpu_share": other_cpu_share,
    }


def gib(n):
    return f"{n / 2**30:.1f} GiB" if n is not None else "-"


def main(argv=None):
    import torch

    cuda = torch.cuda.is_available()
    defaults = DEVICE_DEFAULTS["cuda" if cuda else "cpu"]
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=defaults["steps"],
                        help="optimizer steps per variant; the first is left out as warm-up (default: %(default)s)")
    parser.add_argument("--max_completion_length", type=int, default=defaults["max_completion_length"],
                        help="tokens per completion; random weights always use all of them (default: %(default)s)")
    parser.add_argument("--gradient_accumulation_steps", type=int, default=defaults["gradient_accumulation_steps"],
                        help="micro-batches of 8 completions per optimizer step (default: %(default)s)")
    parser.add_argument("--variants", default="full,lora", help="comma-separated, from: " + ", ".join(VARIANTS))
    import importlib.util

    vllm = importlib.util.find_spec("vllm") is not None
    script_runs = [run for run in SCRIPT_RUNS if cuda and (vllm or "vllm" not in run)]
    parser.add_argument("--scripts", default=",".join(script_runs),
                        help="tool-script runs after grpo_math.py's variants, from: " + ", ".join(SCRIPT_RUNS)
                        + " (default on this machine: %(default)s; none without a GPU)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="JSON results file (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    args = parser.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        parser.error(f"unknown variant(s) {unknown}: choose from {', '.join(VARIANTS)}")
    scripts = [s.strip() for s in args.scripts.split(",") if s.strip()]
    if any(s not in SCRIPT_RUNS for s in scripts):
        parser.error(f"unknown script run(s) in {scripts}: choose from {', '.join(SCRIPT_RUNS)}")
    if args.steps < 2:
        print("note: with --steps 1 the only step is the warm-up step, and it is what gets reported")
    settings = {"steps": args.steps, "max_completion_length": args.max_completion_length,
                "gradient_accumulation_steps": args.gradient_accumulation_steps,
                "per_device_train_batch_size": 8, "num_generations": 8,
                "completions_per_step": 8 * args.gradient_accumulation_steps,
                "prompt_tokens": "~63 (toy questions, tiny tokenizer)", "dataset": "assets/toy_math",
                "tokens_per_step": 8 * args.gradient_accumulation_steps * (63 + args.max_completion_length),
                "precision": "bf16 autocast, fp32 weights" if cuda and torch.cuda.is_bf16_supported() else
                             "fp16 autocast, fp32 weights" if cuda else "fp32",
                "gradient_checkpointing": True, "optimizer": "AdamW (torch), grpo_math.py's default",
                "weights": f"random, seed {args.seed}; every completion runs to max_completion_length (worst case)"}

    started = time.perf_counter()
    counts = parameter_counts(qwen_config())
    work = Path(tempfile.mkdtemp(prefix="bench_footprint-"))
    results = {}
    try:
        print(f"building Qwen2.5-0.5B-Instruct's architecture with random weights ({counts['total'] / 1e6:.1f}M "
              f"parameters) in {work}")
        model = save_random_model(work / "model", seed=args.seed)
        for variant in variants:
            print(f"running grpo_math.py, {variant}: {args.steps} steps of {settings['completions_per_step']} "
                  f"completions x {args.max_completion_length} tokens ...", flush=True)
            results[variant] = run_variant(variant, model, work, settings)
            print(f"  done in {results[variant]['child_wall_seconds']:.0f} s", flush=True)
        for run in scripts:
            run_settings = {**settings, **SCRIPT_RUN_SETTINGS}
            print(f"running {SCRIPT_RUNS[run][0]}.py{' with vLLM' if 'vllm' in run else ''}: "
                  f"{run_settings['steps']} steps of 8 completions x {args.max_completion_length} tokens ...",
                  flush=True)
            results[run] = run_variant(run, model, work, run_settings)
            print(f"  done in {results[run]['child_wall_seconds']:.0f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    gpu = torch.cuda.get_device_name(0) if cuda else None
    print(f"\nQwen2.5-0.5B-Instruct (random weights), grpo_math.py on {gpu or 'CPU'}: batch 8 x "
          f"{args.gradient_accumulation_steps} accumulation, 8 generations, {args.max_completion_length} "
          f"completion tokens (all used), ~63 prompt tokens, {args.steps} steps (first excluded)")
    gpu_header = f"{'GPU peak alloc.':>17}" if cuda else ""
    print(f"{'run':<16}{'trainable params':>18}{gpu_header}{'peak RSS':>10}{'s/step':>9}{'tokens/s':>10}"
          f"{'CPU s/step':>12}   flags")
    for variant, r in results.items():
        gpu_memory = f"{gib(r['cuda_max_allocated_bytes']):>17}" if cuda else ""
        rate = f"{r['tokens_per_second']:>10.0f}" if r["tokens_per_second"] else f"{'-':>10}"
        print(f"{variant:<16}{r['trainable_parameters']:>18,}{gpu_memory}{gib(r['peak_rss_bytes']):>10}"
              f"{r['seconds_per_step']:>9.1f}{rate}{r['cpu_seconds_per_step']:>12.1f}   "
              f"{' '.join(r['flags']) or '(none)'}")
    others = [r["other_processes_cpu_share"] for r in results.values() if r["other_processes_cpu_share"] is not None]
    contention = max(others) if others else None
    if contention is not None and contention > 0.1:
        print(f"note: other processes used up to {contention:.0%} of the CPUs during these runs: s/step is slower "
              "than on an idle machine; CPU s/step (all threads) is not")

    import accelerate
    import peft
    import transformers
    import trl

    report = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpu_count": os.cpu_count(), "python": platform.python_version(), "gpu": gpu,
                    "shared_with_other_work": contention is not None and contention > 0.1,
                    "other_processes_max_cpu_share": contention},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__,
                     "peft": peft.__version__, "accelerate": accelerate.__version__},
        "model": {"architecture": "Qwen/Qwen2.5-0.5B-Instruct (config values, random weights)",
                  "config": QWEN2_5_0_5B_INSTRUCT, "parameters": counts["total"],
                  "non_embedding_parameters": counts["non_embedding"]},
        "settings": settings,
        "script_run_settings": SCRIPT_RUN_SETTINGS if scripts else None,
        "memory_measured": ("torch.cuda.max_memory_allocated() of the child; peak_rss_bytes is its VmHWM"
                            if cuda else "VmHWM (peak resident set) of the child process running grpo_math.main"),
        "seconds_per_step_measured": "wall clock between consecutive step ends, first step excluded; "
                                     "cpu_seconds_per_step: the child's CPU time (all threads) over the same steps",
        "variants": results,
        "benchmark_seconds": time.perf_counter() - started,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    where = args.out.resolve()
    print(f"\nwrote {where.relative_to(ROOT) if where.is_relative_to(ROOT) else where} "
          f"({report['benchmark_seconds'] / 60:.1f} min; {report['machine']['platform']}, "
          f"{report['machine']['cpu_count']} CPUs)")
    return report


if __name__ == "__main__":
    main()
