# %% [markdown]
# ## Imports
# The script's header and summary, its imports, and `arg`, the helper that declares the settings below.
# %%
# /// script
# requires-python = ">=3.10"
# dependencies = [
#     "torch>=2.4",
#     "transformers>=5.2",
#     "trl>=1.16",
#     "datasets>=4.7",
#     "peft>=0.17",
#     "accelerate>=1.10",
#     "matplotlib>=3.8",
#     "pyyaml>=6.0",
# ]
# ///
"""GRPO on GSM8K-style math in one file: a small instruct model learns to reason, then answer.

The model writes `<reasoning>...</reasoning><answer>...</answer>`; a rubric of small reward
functions (correctness, format, a numeric-answer bonus) scores each completion, and TRL's
GRPOTrainer pushes the model towards the completions that beat the others in their group.
Fork this file: change a reward, the model or the dataset, and run it again.

Run it
    python grpo_math.py                                  # no GPU: offline demo on a tiny model (~1.5 min)
    python grpo_math.py --max_steps 250                  # one GPU: Qwen2.5-0.5B-Instruct on GSM8K
    python grpo_math.py --use_peft --learning_rate 2e-5  # LoRA: a fraction of the memory
    python grpo_math.py --use_peft --load_in_4bit        # QLoRA (needs `pip install bitsandbytes`)
    python grpo_math.py --use_vllm                       # faster generation (needs `pip install vllm`)
    python grpo_math.py --config my_run.yaml             # any flag below, from a YAML file
    accelerate launch --config_file accelerate_configs/ddp.yaml --num_processes 4 grpo_math.py
        # 4 GPUs, data parallel; accelerate_configs/ has ZeRO-2, ZeRO-3 and FSDP files too
    torchrun --nproc_per_node 2 grpo_math.py             # two processes on CPU: tries the launch path
    python grpo_math.py --help                           # every flag: this script's and all of GRPOConfig's
From Python or a notebook: `import grpo_math; grpo_math.main(["--max_steps", "10"])`.
Several machines: the accelerate line on each, plus `--num_machines 2 --num_processes 16
--machine_rank 0|1 --main_process_ip IP --main_process_port 29500` before the script name.
vLLM server mode: `trl vllm-serve --model Qwen/Qwen2.5-0.5B-Instruct` on one GPU, then
`CUDA_VISIBLE_DEVICES=1 python grpo_math.py --use_vllm --vllm_mode server` on another.

What to expect
    CPU demo (measured, 2 cores): held-out accuracy 34% -> 72%, strict format 1.00 throughout,
    about 1.5 minutes in all (300 steps). See README.md.
    GPU (estimates): Qwen2.5-0.5B-Instruct starts near 20-30% on GSM8K in this strict format
    and climbs over a few hundred steps; the format rewards rise first, correctness follows.
Outputs, in --output_dir: checkpoints, the final model, eval.json (accuracy and format rate
before and after training) and training_curves.png.

How this departs from textbook GRPO (DeepSeekMath), all of it TRL's defaults unless noted
    - beta = 0: no KL penalty and no reference model (less memory; DAPO, Dr. GRPO do the same).
    - loss_type = "dapo": token-level loss normalisation, no per-sequence length bias.
    - One optimisation step per generation batch, so the clipped ratio is 1 and clipping is idle.
    - Rewards are a weighted sum of several functions (RUBRIC below), not a single verifier, and
      the format terms together pay less than a correct answer, so no format hack beats solving.
"""

import functools
import glob
import importlib.util
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import torch
from trl import GRPOConfig, GRPOTrainer, ModelConfig, TrlParser, get_peft_config, get_quantization_config
from trl.models import unwrap_model_for_generation


def arg(default, help):
    """A config field whose comment is also its --help text."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: default, metadata={"help": help})
    return field(default=default, metadata={"help": help})


# %% [markdown]
# ## Config
# The system prompt the model must follow and the model to train: change `DEFAULT_MODEL` to train another one.
# %%
# =====================================================================================
# CONFIG: every knob in one place. Each one is also a flag (--name value), a key in a
# YAML file (--config file.yaml) and an argument of main([...]) from Python.
# =====================================================================================
SYSTEM_PROMPT = """Respond in the following format:
<reasoning>
...
</reasoning>
<answer>
...
</answer>"""

DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"  # fits a free Colab T4 (16 GB) with full fine-tuning


# %% [markdown]
# Data and evaluation settings, each also a flag of `main([...])`, e.g. `main(["--num_eval_examples", "50"])`.
# %%
@dataclass
class ScriptArguments:
    dataset_name: str = arg(None, "Hub dataset id, or a local .json/.jsonl/.parquet file or folder. "
                                  "Default: openai/gsm8k (the toy set in assets/ for the offline demo).")
    dataset_config: str = arg(None, "Dataset configuration, e.g. 'main' for openai/gsm8k.")
    dataset_train_split: str = arg("train", "Split to train on.")
    dataset_test_split: str = arg("test", "Split to evaluate on; if the dataset has none, "
                                           "num_eval_examples rows are held out of the train split.")
    question_column: str = arg("question", "Column with the question text.")
    answer_column: str = arg("answer", "Column with the gold answer (a number, or GSM8K text ending '#### 72').")
    max_prompt_tokens: int = arg(256, "Prompts longer than this are dropped: TRL no longer truncates them.")
    num_eval_examples: int = arg(200, "Held-out questions scored before and after training (0 = skip).")
    eval_batch_size: int = arg(32, "Questions per generate() call during evaluation.")
    print_samples_every: int = arg(25, "Print one sample completion every this many steps (0 = never).")


# %% [markdown]
# Training settings: TRL's `GRPOConfig` with this recipe's defaults; change one here, or pass it as a flag.
# %%
@dataclass
class RecipeConfig(GRPOConfig):
    """TRL's GRPOConfig with this recipe's defaults. Every other GRPOConfig field is a flag too."""

    output_dir: str = arg(None, "Where checkpoints, eval.json and plots go. Default: outputs/grpo_math/<time>.")
    learning_rate: float = arg(5e-6, "Full fine-tuning of a 0.5B model; with --use_peft try 2e-5.")
    lr_scheduler_type: str = arg("cosine", "Learning-rate schedule.")
    warmup_steps: int = arg(10, "Linear warm-up steps (GRPOConfig no longer takes warmup_ratio).")
    weight_decay: float = arg(0.1, "AdamW weight decay, as in the original 2025 demo.")
    adam_beta2: float = arg(0.99, "AdamW beta2, as in the original 2025 demo.")
    max_grad_norm: float = arg(0.1, "Aggressive clipping keeps early, noisy RL updates small.")
    per_device_train_batch_size: int = arg(8, "Completions per device per step (not prompts).")
    gradient_accumulation_steps: int = arg(4, "Generation batch = batch x accumulation x GPUs = 32 completions.")
    num_generations: int = arg(8, "Completions per prompt; GRPO compares them. Must divide the generation batch.")
    max_completion_length: int = arg(256, "Tokens per completion; GSM8K reasoning of a 0.5B model fits.")
    max_steps: int = arg(500, "Optimizer steps (overrides num_train_epochs).")
    logging_steps: int = arg(5, "Log (and plot) every this many steps.")
    save_steps: int = arg(50, "Checkpoint every this many steps; --resume_from_checkpoint continues from one.")
    gradient_checkpointing: bool = arg(True, "Trade compute for memory; needed for full fine-tuning on a T4.")
    bf16: bool = arg(None, "Default: on where the GPU supports bf16, off on T4s (fp16 is used) and on CPU (fp32).")
    fp16: bool = arg(None, "Default: on for GPUs without bf16 (e.g. a T4), off otherwise.")
    report_to: str = arg("none", "Experiment tracker: none, trackio, wandb, tensorboard.")
    resume_from_checkpoint: str = arg(None, "A checkpoint folder, or 'last' for the newest one in --output_dir.")

    def __post_init__(self):
        # Hardware-aware precision, decided here so that derived settings below see the final values.
        if self.bf16 is None and self.fp16 is None:
            has_cuda = torch.cuda.is_available()
            self.bf16 = has_cuda and torch.cuda.is_bf16_supported(including_emulation=False)  # T4: emulated
            self.fp16 = has_cuda and not self.bf16
        self.bf16, self.fp16 = bool(self.bf16), bool(self.fp16)
        if not torch.cuda.is_available():
            self.dataloader_pin_memory = False  # pinning only helps copies to a GPU
            if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # torchrun without GPUs: one gloo group on CPU,
                self.use_cpu = True                          # not N unaware copies of a one-process run
        if self.output_dir is None:
            if self.resume_from_checkpoint not in (None, "last"):  # continue in the run's own folder
                self.output_dir = str(Path(self.resume_from_checkpoint).resolve().parent)
            else:
                self.output_dir = time.strftime("outputs/grpo_math/%Y%m%d-%H%M%S")
        super().__post_init__()


# %% [markdown]
# The offline demo's settings, used when there is no CUDA GPU: a tiny model and toy data from `assets/`, which need
# no network.
# %%
# The offline demo: used when there is no CUDA GPU and no --model_name_or_path. These replace
# the defaults above (flags and YAML still win). A tiny model needs a far larger learning rate.
ASSETS = Path(__file__).resolve().parent / "assets" if "__file__" in globals() else Path("assets").resolve()
DEMO_SETTINGS = dict(
    model_name_or_path=str(ASSETS / "tiny-qwen-math"),  # made by assets/make_demo_assets.py
    dataset_name=str(ASSETS / "toy_math"),               # train.jsonl / test.jsonl, GSM8K-style
    learning_rate=2e-4,
    lr_scheduler_type="constant",
    warmup_steps=0,
    max_grad_norm=1.0,
    weight_decay=0.0,
    per_device_train_batch_size=64,
    gradient_accumulation_steps=1,
    num_generations=8,
    max_completion_length=40,
    max_steps=300,
    save_steps=50,
    gradient_checkpointing=False,
    eval_batch_size=200,
)


# %% [markdown]
# ## Data
# Each question becomes a chat prompt under the system prompt; pass `--dataset_name` to train on your own data.
# %%
# =====================================================================================
# DATA: questions become chat prompts; the answer column is kept for the rewards.
# =====================================================================================
def load_data(script_args, tokenizer, seed):
    from datasets import load_dataset

    name = script_args.dataset_name
    path = Path(name)
    try:
        if path.is_file():  # a single local file: its format comes from the extension
            builder = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}.get(path.suffix)
            if builder is None:
                raise RecipeError(f"cannot read {name}: use a .json, .jsonl, .parquet or .csv file")
            dataset = load_dataset(builder, data_files=str(path))
        else:  # a Hub id, or a local folder holding train/test files
            dataset = load_dataset(name, script_args.dataset_config)
    except (ConnectionError, FileNotFoundError, OSError) as error:
        if isinstance(error, RecipeError):
            raise
        raise RecipeError(f"cannot load dataset '{name}' ({type(error).__name__}): check the id or path and your "
                          "network, or pass a local file with --dataset_name data.jsonl") from None
    except ValueError as error:  # e.g. a missing or unknown configuration name
        raise RecipeError(f"cannot load dataset '{name}': {str(error).splitlines()[0]}") from None

    if script_args.dataset_train_split not in dataset:
        raise RecipeError(f"dataset '{name}' has no split '{script_args.dataset_train_split}' "
                          f"(it has {list(dataset)}): pass --dataset_train_split NAME")
    train = dataset[script_args.dataset_train_split]
    for flag, column in [("question_column", script_args.question_column),
                         ("answer_column", script_args.answer_column)]:
        if column not in train.column_names:
            raise RecipeError(f"dataset '{name}' has no column '{column}' (it has {train.column_names}): "
                              f"pass --{flag} NAME")
    if script_args.dataset_test_split in dataset:
        test = dataset[script_args.dataset_test_split]
    else:  # hold some training rows out for evaluation
        split = train.train_test_split(test_size=max(1, script_args.num_eval_examples), seed=seed)
        train, test = split["train"], split["test"]

    def to_prompt(row):
        return {"prompt": [{"role": "system", "content": SYSTEM_PROMPT},
                           {"role": "user", "content": str(row[script_args.question_column])}],
                "answer": str(row[script_args.answer_column])}

    def fits(row):
        ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True,
                                            return_dict=False)
        return len(ids) <= script_args.max_prompt_tokens

    splits = []
    for rows in (train, test):
        rows = rows.map(to_prompt, remove_columns=[c for c in rows.column_names if c != "answer"])
        before = len(rows)
        rows = rows.filter(fits)
        if len(rows) < before:
            print(f"dropped {before - len(rows)} of {before} prompts longer than {script_args.max_prompt_tokens} "
                  "tokens (--max_prompt_tokens)")
        splits.append(rows)
    if len(splits[0]) == 0:
        raise RecipeError(f"no training prompt fits in {script_args.max_prompt_tokens} tokens: "
                          "raise --max_prompt_tokens")
    return splits[0], splits[1].select(range(min(script_args.num_eval_examples, len(splits[1]))))


# %% [markdown]
# ## Rubric
# Helpers the rewards share: the text of a completion, its one `<answer>` block and the number in it.
# %%
# =====================================================================================
# RUBRIC: each reward is a plain function, logged on its own as rewards/<name>/mean.
# TRL calls them with the completions plus every dataset column (here: `answer`).
# Each returns a score in [0, 1]; RUBRIC below weighs them. Copies live in rewards.py.
# =====================================================================================
def completion_text(completion) -> str:
    """A completion is a string, or a list of chat messages: take the last assistant message."""
    if isinstance(completion, str):
        return completion
    for message in reversed(completion or []):
        if isinstance(message, dict) and message.get("role") == "assistant":
            return str(message.get("content") or "")
    return ""


NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?", re.ASCII)


def parse_number(text: str):
    """The one number a short answer states ('72', '$72.0', '72 clips', '\\boxed{1,000}'), else None.

    None when there is no number, or several different ones ('72 or 73'), or digits from other
    scripts (look-alikes such as '７２' must not pass for 72).
    """
    if any(ch.isdigit() and ch not in "0123456789" for ch in text):
        return None
    values = set()
    for token in NUMBER.findall(text):
        if len(token) > 40:  # no real answer is this long; also keeps Fraction() cheap
            return None
        values.add(Fraction(token.replace(",", "")))
    return values.pop() if len(values) == 1 else None


def extract_answer(text: str):
    """The content of the one <answer>...</answer> block, or None (no block, unclosed, or several)."""
    if text.count("<answer>") != 1 or text.count("</answer>") != 1:
        return None
    start, end = text.index("<answer>") + len("<answer>"), text.index("</answer>")
    return text[start:end] if start <= end else None


def gold_number(answer: str):
    """GSM8K gold: the text after '####' (or the whole text), without ',' and '$'."""
    answer = str(answer)
    gold = answer.rsplit("####", 1)[-1].replace(",", "").replace("$", "").strip()
    return parse_number(gold)


# %% [markdown]
# The reward that matters most, 1.0 for the gold number in the answer block: edit it, then run it and every cell
# below again.
# %%
def correctness_reward(completions, answer, **kwargs) -> list[float]:
    """1.0 when the one <answer> block states the gold number, else 0.0."""
    scores = []
    for completion, gold in zip(completions, answer):
        content = extract_answer(completion_text(completion))
        value = parse_number(content) if content is not None else None
        target = gold_number(gold)
        scores.append(1.0 if value is not None and value == target else 0.0)
    return scores


# %% [markdown]
# A small bonus for answering with exactly one number, right or wrong.
# %%
def numeric_answer_reward(completions, **kwargs) -> list[float]:
    """1.0 when the one <answer> block states exactly one number (right or wrong), else 0.0."""
    scores = []
    for completion in completions:
        content = extract_answer(completion_text(completion))
        scores.append(1.0 if content is not None and parse_number(content) is not None else 0.0)
    return scores


# %% [markdown]
# The tags and layouts that the three format rewards below look for.
# %%
TAGS = ("<reasoning>", "</reasoning>", "<answer>", "</answer>")
STRICT_FORMAT = re.compile(r"<reasoning>\n.+?\n</reasoning>\n<answer>\n.+?\n</answer>\n?", re.DOTALL)
LENIENT_FORMAT = re.compile(r"\s*<reasoning>.*?</reasoning>\s*<answer>.*?</answer>\s*", re.DOTALL)


# %% [markdown]
# 1.0 for exactly the layout the system prompt shows, newlines included.
# %%
def strict_format_reward(completions, **kwargs) -> list[float]:
    """1.0 for exactly the layout the system prompt shows (newlines included), else 0.0."""
    scores = []
    for completion in completions:
        text = completion_text(completion)
        once = all(text.count(tag) == 1 for tag in TAGS)  # also keeps the regex linear-time
        scores.append(1.0 if once and STRICT_FORMAT.fullmatch(text) else 0.0)
    return scores


# %% [markdown]
# 1.0 for a reasoning block then an answer block, whatever the whitespace around them.
# %%
def lenient_format_reward(completions, **kwargs) -> list[float]:
    """1.0 for a reasoning block then an answer block, any whitespace around them, else 0.0."""
    scores = []
    for completion in completions:
        text = completion_text(completion)
        once = all(text.count(tag) == 1 for tag in TAGS)
        scores.append(1.0 if once and LENIENT_FORMAT.fullmatch(text) else 0.0)
    return scores


# %% [markdown]
# Partial credit, 0.25 per tag used once, that guides the model towards the format.
# %%
def tag_count_reward(completions, **kwargs) -> list[float]:
    """0.25 per tag that appears exactly once; </answer> counts only when nothing follows it.

    Partial credit that guides a model towards the format. Never negative: the 2025 demo's
    version subtracted per trailing character and could go below zero.
    """
    scores = []
    for completion in completions:
        text = completion_text(completion)
        score = sum(0.25 for tag in TAGS[:3] if text.count(tag) == 1)
        if text.count("</answer>") == 1 and not text.split("</answer>", 1)[1].strip():
            score += 0.25
        scores.append(score)
    return scores


# %% [markdown]
# The rubric of (reward, weight) pairs: add your own reward here, and run this cell again after editing any reward
# above.
# %%
# (reward function, weight). Format and bonus terms together pay 1.0, a correct answer 2.0:
# a completion can never earn more by gaming the format than by being right.
RUBRIC = [
    (correctness_reward, 2.0),
    (numeric_answer_reward, 0.25),
    (strict_format_reward, 0.25),
    (lenient_format_reward, 0.25),
    (tag_count_reward, 0.25),
]


# %% [markdown]
# ## Trainer
# Plumbing: flags and the demo fallback, input checks, checkpoints, the tokenizer and sample printing; nothing to
# change here.
# %%
# =====================================================================================
# TRAINER AND EVALUATION: plumbing. You should not need to change anything below.
# =====================================================================================
class RecipeError(Exception):
    """A problem with the input, reported as one line that says how to fix it."""


def build_parser():
    return TrlParser((ScriptArguments, RecipeConfig, ModelConfig))


def parse_args(argv=None):
    """CLI/YAML/main([...]) -> (script_args, training_args, model_args), demo settings applied."""
    if argv is None:  # in Jupyter/Colab, sys.argv holds the kernel's own arguments: ignore them
        argv = [] if "ipykernel" in sys.modules else sys.argv[1:]
    argv = [str(a) for a in argv]
    try:
        script_args, training_args, model_args = build_parser().parse_args_and_config(argv)
        demo = model_args.model_name_or_path is None and not torch.cuda.is_available()
        if demo:  # parse again with the demo's defaults underneath the user's flags and YAML
            parser = build_parser()
            parser.set_defaults_with_config(**DEMO_SETTINGS)
            script_args, training_args, model_args = parser.parse_args_and_config(argv)
    except ValueError as error:  # GRPOConfig validates as it is built
        message = str(error).splitlines()[0]
        if "divisible" in message:
            message += (" Fix: make per_device_train_batch_size x gradient_accumulation_steps x number of GPUs "
                        "a multiple of num_generations, e.g. --per_device_train_batch_size 8 --num_generations 8")
        raise RecipeError(message) from None
    if demo:
        print("No CUDA GPU and no --model_name_or_path: running the offline demo (tiny model and toy data "
              f"from {ASSETS}). Pass --model_name_or_path {DEFAULT_MODEL} to train a real model.")
        if not Path(model_args.model_name_or_path).exists():
            raise RecipeError(f"demo model not found at {model_args.model_name_or_path}: run "
                              "`python assets/make_demo_assets.py`, or pass --model_name_or_path")
    if model_args.model_name_or_path is None:
        model_args.model_name_or_path = DEFAULT_MODEL
    if script_args.dataset_name is None:
        script_args.dataset_name, script_args.dataset_config = "openai/gsm8k", "main"
    return script_args, training_args, model_args


def check_environment(training_args, model_args):
    if training_args.use_vllm and importlib.util.find_spec("vllm") is None:
        raise RecipeError("--use_vllm needs vLLM, which is not installed: `pip install vllm` (Linux + CUDA GPU)")
    quantized = model_args.load_in_4bit or model_args.load_in_8bit
    if quantized and not model_args.use_peft:
        raise RecipeError("a quantized model cannot be fully fine-tuned: add --use_peft (QLoRA)")
    if quantized and importlib.util.find_spec("bitsandbytes") is None:
        raise RecipeError("--load_in_4bit/--load_in_8bit need bitsandbytes: `pip install bitsandbytes` "
                          "(CUDA GPU), or drop the flag")
    weights = training_args.reward_weights
    if weights is not None and len(weights) != len(RUBRIC):
        raise RecipeError(f"--reward_weights has {len(weights)} values but RUBRIC has {len(RUBRIC)} functions")


def resolve_checkpoint(training_args):
    """Refuse to overwrite a run's checkpoints; turn 'last' into the newest checkpoint folder."""
    checkpoints = sorted(glob.glob(os.path.join(training_args.output_dir, "checkpoint-*")),
                         key=lambda p: int(p.rsplit("-", 1)[-1]) if p.rsplit("-", 1)[-1].isdigit() else -1)
    resume = training_args.resume_from_checkpoint
    if resume is None:
        if checkpoints:
            raise RecipeError(f"{training_args.output_dir} already holds checkpoints: pass "
                              "--resume_from_checkpoint last to continue, or choose another --output_dir")
        return None
    if resume == "last":
        if not checkpoints:
            raise RecipeError(f"no checkpoint-* folder in {training_args.output_dir} to resume from")
        return checkpoints[-1]
    if not Path(resume, "trainer_state.json").exists():
        raise RecipeError(f"{resume} is not a checkpoint folder (no trainer_state.json)")
    return resume


def load_tokenizer(model_args, training_args):
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path, revision=model_args.model_revision,
                                                  trust_remote_code=training_args.trust_remote_code)
    except OSError:
        raise RecipeError(f"cannot load model '{model_args.model_name_or_path}': not a local folder, and not "
                          "reachable on the Hugging Face Hub. Check the id and your network, or pass a local "
                          "folder with --model_name_or_path") from None
    if tokenizer.chat_template is None:
        raise RecipeError(f"'{model_args.model_name_or_path}' has no chat template: use an instruct/chat model")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def with_sample_printing(reward_func, every: int):
    """Wrap a reward so that it also prints one completion every `every` steps (main process)."""
    last_printed = {"step": -every}

    @functools.wraps(reward_func)  # keeps the name, so the logged metric is unchanged
    def wrapper(completions, **kwargs):
        scores = reward_func(completions, **kwargs)
        state = kwargs.get("trainer_state")
        step = state.global_step if state is not None else 0
        if every and step - last_printed["step"] >= every and int(os.environ.get("RANK", "0")) == 0:
            last_printed["step"] = step
            print(f"\n--- sample at step {step} ({reward_func.__name__} = {scores[0]}) ---\n"
                  f"{completion_text(completions[0])[:600]}\n---")
        return scores

    return wrapper


# %% [markdown]
# ## Evaluation
# Greedy answers to the held-out questions, scored for accuracy and strict format, before and after training.
# %%
@torch.no_grad()
def evaluate(trainer, dataset, batch_size: int, max_new_tokens: int) -> dict:
    """Greedy answers to held-out questions: accuracy and strict-format rate, in [0, 1]."""
    if len(dataset) == 0:
        return {}
    model, tokenizer, accelerator = trainer.model, trainer.processing_class, trainer.accelerator
    was_training, padding_side = model.training, tokenizer.padding_side
    model.eval()
    tokenizer.padding_side = "left"  # generate() continues from the right end of each row
    answered, rows = [], list(range(len(dataset)))
    # Each process answers an equal share (short shares padded with repeats), so that all of them call
    # generate() equally often, as ZeRO-3 and FSDP need; under ZeRO-3 the unwrap gathers the weights.
    with accelerator.split_between_processes(rows, apply_padding=True) as my_rows, unwrap_model_for_generation(
            trainer.model_wrapped, accelerator, gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
            gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs) as generator:
        for start in range(0, len(my_rows), batch_size):
            batch_rows = my_rows[start:start + batch_size]
            batch = dataset.select(batch_rows)
            texts = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False)
                     for p in batch["prompt"]]
            inputs = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
            with torch.autocast(model.device.type, dtype=torch.bfloat16 if trainer.args.bf16 else torch.float16,
                                enabled=trainer.args.bf16 or trainer.args.fp16):
                output = generator.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False,
                                            pad_token_id=tokenizer.pad_token_id)
            new_tokens = output[:, inputs["input_ids"].shape[1]:]
            answered += zip(batch_rows, tokenizer.batch_decode(new_tokens, skip_special_tokens=True))
    from accelerate.utils import gather_object

    per_process = gather_object([len(my_rows)])
    by_row = dict(gather_object(answered))  # the padding repeats rows: one answer per row
    completions = [by_row[row] for row in rows]
    model.train(was_training)
    tokenizer.padding_side = padding_side
    correct = correctness_reward(completions, dataset["answer"])
    formatted = strict_format_reward(completions)
    return {"accuracy": sum(correct) / len(correct), "format_rate": sum(formatted) / len(formatted),
            "num_examples": len(correct), "questions_per_process": per_process, "sample_completion": completions[0]}


# %% [markdown]
# ## Plots
# The total reward, each reward and the completion length against step, saved as `training_curves.png`.
# %%
def plot_curves(log_history: list[dict], path: Path):
    """Total reward, each reward component, and completion length against step, in one PNG."""
    from matplotlib.figure import Figure  # no pyplot: no display needed, a notebook's backend untouched

    logs = [entry for entry in log_history if "reward" in entry and "step" in entry]
    if not logs:
        return None
    steps = [entry["step"] for entry in logs]
    components = sorted({k for entry in logs for k in entry if k.startswith("rewards/") and k.endswith("/mean")})
    fig = Figure(figsize=(16, 4.2))
    axes = fig.subplots(1, 3)
    axes[0].plot(steps, [entry["reward"] for entry in logs], color="black")
    axes[0].set_title("total reward (weighted sum)")
    for key in components:
        axes[1].plot(steps, [entry.get(key, math.nan) for entry in logs], label=key.split("/")[1])
    axes[1].set_title("reward components (unweighted, 0-1)")
    axes[1].legend(fontsize=8)
    axes[2].plot(steps, [entry.get("completions/mean_length", math.nan) for entry in logs], color="tab:purple")
    axes[2].set_title("mean completion length (tokens)")
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


# %% [markdown]
# ## Training
# `main` trains, evaluates before and after, and writes `eval.json` and the plot; the cells at the end call it.
# %%
def main(argv=None):
    """Train, evaluate before and after, plot. `argv` is a list of flags; None reads sys.argv."""
    started = time.time()
    script_args, training_args, model_args = parse_args(argv)
    check_environment(training_args, model_args)
    resume = resolve_checkpoint(training_args)
    tokenizer = load_tokenizer(model_args, training_args)
    train_dataset, eval_dataset = load_data(script_args, tokenizer, training_args.seed)

    training_args.model_init_kwargs = {**(training_args.model_init_kwargs or {}), "dtype": model_args.dtype,
                                       "revision": model_args.model_revision,
                                       "attn_implementation": model_args.attn_implementation}
    rewards = [func for func, _ in RUBRIC]
    rewards[0] = with_sample_printing(rewards[0], script_args.print_samples_every)
    if training_args.reward_weights is None:
        training_args.reward_weights = [weight for _, weight in RUBRIC]
    trainer = GRPOTrainer(
        model=model_args.model_name_or_path,
        reward_funcs=rewards,
        args=training_args,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
        quantization_config=get_quantization_config(model_args),
    )

    max_new_tokens = training_args.max_completion_length
    results = {"before": evaluate(trainer, eval_dataset, script_args.eval_batch_size, max_new_tokens)}
    trainer.train(resume_from_checkpoint=resume)
    trainer.save_model(training_args.output_dir)
    trainer.save_state()  # trainer_state.json: the full log history, next to the final model
    results["after"] = evaluate(trainer, eval_dataset, script_args.eval_batch_size, max_new_tokens)

    output_dir = Path(training_args.output_dir)
    if trainer.accelerator.is_main_process:
        results["model"] = model_args.model_name_or_path
        results["dataset"] = script_args.dataset_name
        results["global_step"] = trainer.state.global_step
        results["num_processes"] = trainer.accelerator.num_processes
        results["wall_time_seconds"] = round(time.time() - started, 1)
        (output_dir / "eval.json").write_text(json.dumps(results, indent=2))
        plot = plot_curves(trainer.state.log_history, output_dir / "training_curves.png")
        if results["before"]:
            print(f"\n{'held-out':<12}{'before':>8}{'after':>8}   ({results['after']['num_examples']} questions)")
            for key in ("accuracy", "format_rate"):
                print(f"{key:<12}{results['before'][key]:>8.2f}{results['after'][key]:>8.2f}")
        print(f"\nwrote {output_dir / 'eval.json'}" + (f" and {plot}" if plot else ""))
    trainer.accelerator.wait_for_everyone()  # the main process wrote the results: now all leave together
    if hasattr(trainer, "end"):
        trainer.end()  # closes trackers and the process group
    return results


# %% active="py"
if __name__ == "__main__":
    try:
        main()
    except RecipeError as error:
        sys.exit(f"grpo_math.py: error: {error}")
