# %% [markdown]
# ## Imports
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
    python grpo_math.py --eval_only --eval_num_samples 8 # no training: will GRPO learn anything?
    python grpo_math.py --help                           # every flag: this script's and all of GRPOConfig's
From Python or a notebook: `import grpo_math; grpo_math.main(["--max_steps", "10"])`.
Several machines: the accelerate line on each, plus `--num_machines 2 --num_processes 16
--machine_rank 0|1 --main_process_ip IP --main_process_port 29500` before the script name.
vLLM server mode: `trl vllm-serve --model Qwen/Qwen2.5-0.5B-Instruct` on one GPU, then
`CUDA_VISIBLE_DEVICES=1 python grpo_math.py --use_vllm --vllm_mode server` on another.

What to expect
    CPU demo (measured, 2 cores): held-out accuracy 34% -> 72%, strict format 1.00 throughout,
    about 1.8 minutes in all (300 steps, 7 held-out checks). See README.md.
    GPU (estimates): Qwen2.5-0.5B-Instruct starts near 20-30% on GSM8K in this strict format
    and climbs over a few hundred steps; the format rewards rise first, correctness follows.
Outputs, in --output_dir: checkpoints, the final model, eval.json (held-out scores before and after, the monitor's
warnings), training_curves.png and every evaluated answer in eval_*.jsonl (README: Watching a run).

How this departs from textbook GRPO (DeepSeekMath), all of it TRL's defaults unless noted
    - beta = 0: no KL penalty and no reference model (less memory; DAPO, Dr. GRPO do the same).
    - loss_type = "dapo": token-level loss normalisation, no per-sequence length bias.
    - One optimisation step per generation batch, so the clipped ratio is 1 and clipping is idle.
    - Rewards are a weighted sum of several functions (RUBRIC below), not a single verifier, and
      the format terms together pay less than a correct answer, so no format hack beats solving.
"""

import functools, glob, importlib.util, json, math, os, re, sys, time  # noqa: E401
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import torch
from transformers import Trainer, TrainerCallback
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
SYSTEM_PROMPT = """Respond in the following format:
<reasoning>
...
</reasoning>
<answer>
...
</answer>"""

DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"  # fits a free Colab T4 (16 GB) with full fine-tuning
DEFAULT_DATASET = ("openai/gsm8k", "main")  # what --dataset_name means when it is not given


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
    eval_only: bool = arg(False, "Evaluate --model_name_or_path (a Hub id, a folder, a checkpoint, a PEFT adapter "
                                 "folder) on the held-out questions, write eval.json and the trajectories, and exit.")
    eval_num_samples: int = arg(1, "1 = greedy only. N > 1: also sample N completions per question at the training "
                                   "temperature: pass@1, pass@N and the signal report (will GRPO learn anything?).")
    mid_eval_steps: int = arg(0, "Every this many steps, greedy accuracy on --num_mid_eval_examples held-out "
                                 "questions, logged as eval/accuracy and plotted (0 = never).")
    num_mid_eval_examples: int = arg(64, "Held-out questions scored at each mid-run evaluation (the first ones).")
    train_samples_per_log: int = arg(2, "Rollouts saved to train_samples.jsonl per logged step (0 = none, -1 = all).")
    replay: str = arg(None, "A finished run's --output_dir: score its completions again with RUBRIC as it is now.")
    skip_zero_signal: int = arg(0, "N > 0: a prompt whose last group all scored the same (no signal) sits out its "
                                   "next N turns, others taking its place; acts from the 2nd epoch on (0 = off).")


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
        apply_hardware_defaults(self, "outputs/grpo_math")  # precision for the hardware, the run's folder
        super().__post_init__()


# %% [markdown]
# The offline demo's settings, used when there is no CUDA GPU: a tiny model and toy data from `assets/`, which need
# no network.
# %%
# These replace the defaults above (flags and YAML still win). A tiny model needs a far larger learning rate.
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
    mid_eval_steps=50,  # held-out accuracy at 6 points of the run, plotted beside the reward
)


# %% [markdown]
# ## Data
# Each question becomes a chat prompt under the system prompt; pass `--dataset_name` to train on your own data.
# %%
def load_data(script_args, tokenizer, seed):
    name = script_args.dataset_name
    dataset = read_dataset(name, script_args.dataset_config)
    train = split_of(dataset, script_args.dataset_train_split, name, "--dataset_train_split")
    for flag, column in [("question_column", script_args.question_column),
                         ("answer_column", script_args.answer_column)]:
        if column not in train.column_names:
            raise RecipeError(f"dataset '{name}' has no column '{column}' (it has {train.column_names}): "
                              f"pass --{flag} NAME")
    if script_args.dataset_test_split in dataset:
        test = dataset[script_args.dataset_test_split]
    else:  # hold some training rows out for evaluation
        train, test = hold_out(train, script_args.num_eval_examples, seed)

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
        labelled = rows.filter(lambda row: gold_number(row["answer"]) is not None)
        if len(labelled) < len(rows):  # broken labels teach nothing: say so, and train on the rest
            if len(rows) and not len(labelled):
                raise RecipeError(f"no answer in dataset '{script_args.dataset_name}' states a single number "
                                  f"(e.g. {str(rows[0]['answer'])[-40:]!r}): check --answer_column")
            print(f"dropped {len(rows) - len(labelled)} of {len(rows)} rows whose answer states no single number "
                  "(check --answer_column)")
        rows = labelled
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
def correctness_reward(completions, answer, **kwargs) -> list:
    """1.0 when the one <answer> block states the gold number, else 0.0; None when the gold states none."""
    scores = []
    for completion, gold in zip(completions, answer):
        target = gold_number(gold)
        if target is None:  # a broken label (load_data drops them): no say, as in rewards.py
            scores.append(None)
            continue
        content = extract_answer(completion_text(completion))
        value = parse_number(content) if content is not None else None
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
# ## Training
# The call that trains: the rubric wired into TRL's `GRPOTrainer`. Then how a run is judged: the held-out metrics
# `evaluate` reports before and after training, and the reward the run monitor watches.
# %%
OUTCOME_REWARD = "correctness_reward"  # the reward the run monitor compares the others with
HELD_OUT_TABLE = ("accuracy", "format_rate")  # the before/after table printed at the end
ACCURACY_IS = "the gold number in the answer block"


def build_trainer(script_args, training_args, model_args, tokenizer, train_dataset, rewards):
    """TRL's GRPOTrainer with `rewards`, RUBRIC's functions (main() wraps the first to print and save samples)."""
    return GRPOTrainer(
        model=load_model(model_args),
        reward_funcs=rewards,
        args=training_args,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
        quantization_config=get_quantization_config(model_args),
    )


def replay_environment(script_args, row: dict):
    """--replay: a fresh environment for a recorded rollout's tool calls to run in again; this recipe has no tools."""
    return None


def run_facts(script_args) -> dict:
    """What eval.json records about the run besides the model, the dataset and the scores."""
    return {}


def evaluate(trainer, dataset, batch_size: int, num_samples: int = 1, trajectories: Path | None = None,
             step: int | None = None) -> dict:
    """Greedy accuracy and strict-format rate in [0, 1]; with num_samples > 1 also pass@1, pass@N and the signal
    report. Every completion, parsed answer and reward goes to `trajectories` (one JSON line per question)."""
    if len(dataset) == 0:
        return {}
    samples = num_samples if num_samples > 1 else 0
    answers = generate_answers(trainer, dataset, batch_size, samples)
    golds = list(dataset["answer"])
    flat = [text for row in answers for text in row]
    scores = score(flat, answer=[gold for gold, row in zip(golds, answers) for _ in row])
    per_row, first = [], 0
    for row in answers:
        per_row.append(scores[first:first + len(row)])
        first += len(row)
    # Accuracy and format are these two functions whatever RUBRIC holds: a rubric under test must not grade itself
    correct = correctness_reward(flat, answer=[gold for gold, row in zip(golds, answers) for _ in row])
    greedy = [first for first in range(0, len(flat), 1 + samples)]
    metrics = {"accuracy": sum(correct[i] for i in greedy) / len(greedy),
               "format_rate": sum(strict_format_reward([flat[i] for i in greedy])) / len(greedy),
               "num_examples": len(greedy), "questions_per_process": trainer._questions_per_process,
               "sample_completion": answers[0][0]}
    if samples:
        metrics.update(sample_metrics([sum(correct[i + 1:i + 1 + samples]) for i in greedy], samples))
    if trajectories is not None and trainer.accelerator.is_main_process:
        with open(trajectories, "a", encoding="utf-8") as f:
            for prompt, gold, texts, scored in zip(dataset["prompt"], golds, answers, per_row):
                f.write(json.dumps({"step": step, "prompt": prompt, "answer": gold, "completions": [
                    {"text": text, "greedy": i == 0, "parsed_answer": extract_answer(text), **s}
                    for i, (text, s) in enumerate(zip(texts, scored))]}) + "\n")
    return metrics


# %% [markdown]
# # Machinery
# ---- machinery: the same in every script, held identical by tests; you rarely need to edit below ----
#
# Above: this recipe's settings, data, tools, rubric and the call that trains. Below: how every script runs. Each
# part is written out in every script that needs it, word for word, and tests/test_shared_blocks.py holds the
# copies equal, so that a fix goes into every copy.
# %% [markdown]
# ## Trainer
# Flags and the demo fallback, input checks, checkpoints, the model and tokenizer, sample printing and saving.
# %%
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
    if demo and not script_args.replay:  # a replay loads no model
        print("No CUDA GPU and no --model_name_or_path: running the offline demo (tiny model and toy data "
              f"from {ASSETS}). Pass --model_name_or_path {DEFAULT_MODEL} to train a real model.")
        if not Path(model_args.model_name_or_path).exists():
            raise RecipeError(f"demo model not found at {model_args.model_name_or_path}: run "
                              "`python assets/make_demo_assets.py`, or pass --model_name_or_path")
    if model_args.model_name_or_path is None:
        model_args.model_name_or_path = DEFAULT_MODEL
    if script_args.dataset_name is None:
        script_args.dataset_name, script_args.dataset_config = DEFAULT_DATASET
    return script_args, training_args, model_args


def check_environment(script_args, training_args, model_args):
    if training_args.use_vllm and importlib.util.find_spec("vllm") is None:
        raise RecipeError("--use_vllm needs vLLM, which is not installed: `pip install vllm` (Linux + CUDA GPU)")
    quantized = model_args.load_in_4bit or model_args.load_in_8bit
    if quantized and not model_args.use_peft:
        raise RecipeError("a quantized model cannot be fully fine-tuned: add --use_peft (QLoRA)")
    if quantized and importlib.util.find_spec("bitsandbytes") is None:
        raise RecipeError("--load_in_4bit/--load_in_8bit need bitsandbytes: `pip install bitsandbytes` "
                          "(CUDA GPU), or drop the flag")
    if script_args.eval_num_samples < 1 or script_args.mid_eval_steps < 0 or script_args.train_samples_per_log < -1:
        raise RecipeError("--eval_num_samples must be 1 or more, --mid_eval_steps 0 or more (0 turns it off), "
                          "--train_samples_per_log 0 or more, or -1 for every rollout")
    if script_args.skip_zero_signal < 0:
        raise RecipeError("--skip_zero_signal is the turns a prompt with no signal sits out: 0 (off) or more")
    evaluation = Path(training_args.output_dir, "eval.json")
    if script_args.eval_only and evaluation.exists() and "eval_only" not in json.loads(evaluation.read_text()):
        raise RecipeError(f"{training_args.output_dir} holds a training run's eval.json: pass another --output_dir "
                          "for --eval_only, so that the run's results are kept")
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


def load_model(model_args):
    """What GRPOTrainer gets as its model: the id or folder itself, except for a PEFT adapter folder (what
    --use_peft saves), which becomes its base model with the adapter merged in."""
    folder = Path(model_args.model_name_or_path)
    if not (folder / "adapter_config.json").exists() or (folder / "config.json").exists():
        return model_args.model_name_or_path
    from peft import AutoPeftModelForCausalLM

    try:  # the base model is the one named in adapter_config.json
        return AutoPeftModelForCausalLM.from_pretrained(folder, dtype=model_args.dtype).merge_and_unload()
    except OSError as error:
        raise RecipeError(f"cannot load the base model of the adapter in {folder} ({error}): check "
                          "base_model_name_or_path in its adapter_config.json") from None


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
    try:  # every recipe's prompt opens with a system message (SYSTEM_PROMPT)
        tokenizer.apply_chat_template([{"role": "system", "content": "."}, {"role": "user", "content": "."}],
                                      add_generation_prompt=True, tokenize=False)
    except Exception as error:  # jinja2's TemplateError, raised by the template itself
        raise RecipeError(f"'{model_args.model_name_or_path}' has {template_family(tokenizer.chat_template)} chat "
                          f"template, which refuses this recipe's prompt ({error}): use another model, or fold "
                          "SYSTEM_PROMPT into the user message in load_data") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def with_logging(reward_func, every: int):
    """Wrap a reward so that it also logs tool use per rollout and prints one trajectory every
    `every` steps (main process)."""
    last_printed = {"step": -every}

    @functools.wraps(reward_func)  # keeps the name, so the logged metric is unchanged
    def wrapper(completions, **kwargs):
        scores = reward_func(completions, **kwargs)
        if kwargs.get("log_metric") and kwargs.get("environments"):
            environments = kwargs["environments"]
            kwargs["log_metric"]("tools/calls_per_rollout", sum(e.calls for e in environments) / len(environments))
            turns = [sum(1 for m in c if m.get("role") == "assistant") for c in completions if not isinstance(c, str)]
            if turns:
                kwargs["log_metric"]("tools/turns_per_rollout", sum(turns) / len(turns))
        state = kwargs.get("trainer_state")
        step = state.global_step if state is not None else 0
        if every and step - last_printed["step"] >= every and int(os.environ.get("RANK", "0")) == 0:
            last_printed["step"] = step
            print(f"\n--- sample at step {step} ({reward_func.__name__} = {scores[0]}) ---\n"
                  f"{format_trajectory(completions[0])[:800]}\n---")
        return scores

    return wrapper


def format_trajectory(completion) -> str:
    """A rollout as readable text: assistant turns, tool calls and tool results."""
    if isinstance(completion, str):
        return completion
    lines = []
    for message in completion:
        for call in message.get("tool_calls") or []:
            function = call.get("function", call)
            lines.append(f"[{message.get('role')} calls] {function.get('name')}({json.dumps(function.get('arguments'))})")
        if message.get("content"):
            lines.append(f"[{message.get('role')}] {message['content']}")
    return "\n".join(lines)


def apply_hardware_defaults(config, output_root: str):
    """RecipeConfig's derived settings: the precision the hardware supports, CPU-only settings, and the run's folder
    (`output_root`/<time>, or the folder of the checkpoint it resumes)."""
    if config.bf16 is None and config.fp16 is None:
        has_cuda = torch.cuda.is_available()
        config.bf16 = has_cuda and torch.cuda.is_bf16_supported(including_emulation=False)  # T4: emulated
        config.fp16 = has_cuda and not config.bf16
    config.bf16, config.fp16 = bool(config.bf16), bool(config.fp16)
    if not torch.cuda.is_available():
        config.dataloader_pin_memory = False  # pinning only helps copies to a GPU
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # torchrun without GPUs: one gloo group on CPU,
            config.use_cpu = True                          # not N unaware copies of a one-process run
    if config.output_dir is None:
        if config.resume_from_checkpoint not in (None, "last"):  # continue in the run's own folder
            config.output_dir = str(Path(config.resume_from_checkpoint).resolve().parent)
        else:
            config.output_dir = time.strftime(f"{output_root}/%Y%m%d-%H%M%S")


def template_error(error: ValueError, model_name: str, chat_template: str) -> Exception:
    """GRPOTrainer's error for a chat template TRL cannot drive tool calls with, as a RecipeError naming the family
    and the fix."""
    if "template" not in str(error).lower():
        return error
    import trl

    reasons = {"does not support tool calling": "it cannot render a tool call and its result",
               "Unrecognized chat template": "TRL has no tool-call parser for it",
               "not training-compatible": "TRL cannot make it prefix-preserving"}
    reason = next((why for text, why in reasons.items() if text in str(error)), str(error).split(". ")[0])
    return RecipeError(f"'{model_name}' has {template_family(chat_template)} chat template, which TRL "
                       f"{trl.__version__} cannot drive tool calls with ({reason}). Use a model of a supported "
                       "family (README: grpo_tools.py, Models): Qwen2.5, Qwen3/3.5/3.6, Llama 3.1/3.2, GLM-4.5, "
                       "gpt-oss, Gemma 4, LFM2 or Nemotron 3")


def template_family(chat_template: str) -> str:
    """'the <name>' of the template TRL ships that `chat_template` is a copy of, else a guess from its markers."""
    import trl

    for path in sorted((Path(trl.__file__).parent / "chat_templates").glob("*.jinja")):
        if path.read_text(encoding="utf-8") == chat_template:
            return f"the {path.stem}"
    markers = {"<|start_header_id|>": "a Llama 3", "<start_of_turn>": "a Gemma 1-3", "<|assistant|>": "a Phi-3 or GLM",
               "<｜Assistant｜>": "a DeepSeek", "<|START_OF_TURN_TOKEN|>": "a Cohere", "[INST]": "a Mistral",
               "<|im_start|>": "a ChatML (Qwen-like, edited or custom)"}
    return next((family for marker, family in markers.items() if marker in chat_template), "an unrecognised")


# %% [markdown]
# ## Reading data
# A dataset from the Hub or a local file, its splits, and held-out rows when it has no test split.
# %%
def read_dataset(name: str, config, flag: str = "--dataset_name"):
    """A Hub dataset or a local file or folder, as a DatasetDict."""
    from datasets import load_dataset

    path = Path(name).expanduser()
    data_file = re.search(r"\.(jsonl?|csv|parquet)(\.(gz|bz2|xz))?$", name) is not None
    looks_local = name.startswith(("/", "./", "../", "~")) or "\\" in name or name.count("/") > 1
    if not path.exists() and (data_file or looks_local):  # not a Hub id: do not ask the Hub for it
        raise RecipeError(f"no such file or folder: {name} (check the path given to {flag})")
    try:
        if path.is_file():  # a single local file: its format comes from the extension (HumanEval.jsonl.gz too)
            suffix = path.suffixes[-2] if len(path.suffixes) > 1 and path.suffix in (".gz", ".bz2", ".xz") else path.suffix
            builder = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}.get(suffix)
            if builder is None:
                raise RecipeError(f"cannot read {name}: use a .json, .jsonl, .parquet or .csv file (or .jsonl.gz)")
            return load_dataset(builder, data_files=str(path))
        return load_dataset(name, config)  # a Hub id, or a local folder holding train/test files
    except (ConnectionError, FileNotFoundError, OSError) as error:
        if isinstance(error, RecipeError):
            raise
        raise RecipeError(f"cannot load dataset '{name}' ({type(error).__name__}): check the id or path and your "
                          "network, or pass a local file with --dataset_name data.jsonl") from None
    except ValueError as error:  # e.g. a missing or unknown configuration name
        raise RecipeError(f"cannot load dataset '{name}': {str(error).splitlines()[0]}") from None


def split_of(dataset, split: str, name: str, flag: str):
    """One split, or several joined with '+' (e.g. 'train+validation')."""
    from datasets import concatenate_datasets

    missing = [part for part in split.split("+") if part not in dataset]
    if missing:
        raise RecipeError(f"dataset '{name}' has no split '{missing[0]}' (it has {list(dataset)}): pass {flag} NAME")
    return concatenate_datasets([dataset[part] for part in split.split("+")])


def hold_out(train, size: int, seed: int):
    """(train, test): `size` rows of train held out for evaluation, never more than half of them."""
    size = min(size, len(train) // 2)
    if size == 0:
        return train, train.select([])
    split = train.train_test_split(test_size=size, seed=seed)
    return split["train"], split["test"]


# %% [markdown]
# ## Evaluation
# The rubric's scores of held-out answers, pass@N and the signal report; each recipe's `evaluate`, above the
# line, says which metrics it reports.
# %%
def score(completions: list, **columns) -> list[dict]:
    """Each rubric function's reward by name, and the weighted total, for each completion; `columns` are what the
    trainer passes the rewards besides the completions (answer=[...]; environments=[...] in tool runs)."""
    by_name = {func.__name__: (func(completions=completions, **columns), weight) for func, weight in RUBRIC}
    return [{"rewards": {name: values[i] for name, (values, _) in by_name.items()},
             "total": sum(weight * values[i] for values, weight in by_name.values() if values[i] is not None)}
            for i in range(len(completions))]  # None: the reward does not apply (TRL sums it as nothing)


def sample_metrics(right: list, samples: int) -> dict:
    """pass@1, pass@N and the signal report's shares, from the number of right samples for each question."""
    return {"num_samples": samples, "pass@1": sum(right) / (samples * len(right)),
            f"pass@{samples}": sum(k > 0 for k in right) / len(right),
            "signal": {"all_wrong": sum(k == 0 for k in right) / len(right),
                       "mixed": sum(0 < k < samples for k in right) / len(right),
                       "all_right": sum(k == samples for k in right) / len(right)}}


def signal_report(metrics: dict) -> str:
    """What sampled groups say about a GRPO run before it starts: it learns only from groups with mixed rewards."""
    n, signal = metrics["num_samples"], metrics["signal"]
    advice = ("most groups are all wrong: warm-start the model (SFT), use an easier split, or add a partial-credit "
              "reward" if signal["all_wrong"] >= 0.5 else "most groups are all right: use harder data"
              if signal["all_right"] >= 0.5 else "enough mixed groups: GRPO has something to learn from")
    return (f"signal report ({metrics['num_examples']} questions x {n} samples): pass@1 {metrics['pass@1']:.2f}, "
            f"pass@{n} {metrics[f'pass@{n}']:.2f}; all wrong {signal['all_wrong']:.0%}, mixed {signal['mixed']:.0%}, "
            f"all right {signal['all_right']:.0%}: {signal['all_wrong'] + signal['all_right']:.0%} of groups give no signal. {advice}")


# %% [markdown]
# ## Single-turn generation
# Greedy (and sampled) answers to held-out questions, batched, on every process alike.
# %%
@torch.no_grad()
def generate_answers(trainer, dataset, batch_size: int, num_samples: int = 0) -> list[list[str]]:
    """For each row: [its greedy completion, then `num_samples` sampled at the training temperature], each at most
    `max_completion_length` tokens, as in training."""
    model, tokenizer, accelerator, args = trainer.model, trainer.processing_class, trainer.accelerator, trainer.args
    was_training, padding_side = model.training, tokenizer.padding_side
    model.eval()
    tokenizer.padding_side = "left"  # generate() continues from the right end of each row
    answered, rows = [], list(range(len(dataset)))
    # Each process answers an equal share (short shares padded with repeats), so that all of them call
    # generate() equally often, as ZeRO-3 and FSDP need; under ZeRO-3 the unwrap gathers the weights.
    with accelerator.split_between_processes(rows, apply_padding=True) as my_rows, unwrap_model_for_generation(
            trainer.model_wrapped, accelerator, gather_deepspeed3_params=args.ds3_gather_for_generation,
            gradient_checkpointing_kwargs=args.gradient_checkpointing_kwargs) as generator:
        for start in range(0, len(my_rows), batch_size):
            batch_rows = my_rows[start:start + batch_size]
            texts = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False)
                     for p in dataset.select(batch_rows)["prompt"]]
            inputs = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
            answers = [[] for _ in batch_rows]
            for sample in (False, True) if num_samples else (False,):
                with torch.autocast(model.device.type, dtype=torch.bfloat16 if args.bf16 else torch.float16,
                                    enabled=args.bf16 or args.fp16):
                    output = generator.generate(
                        **inputs, max_new_tokens=args.max_completion_length, pad_token_id=tokenizer.pad_token_id,
                        do_sample=sample, **(dict(temperature=args.temperature, top_p=args.top_p,
                                                  num_return_sequences=num_samples) if sample else {}))
                decoded = tokenizer.batch_decode(output[:, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
                per_row = num_samples if sample else 1
                for i in range(len(batch_rows)):
                    answers[i] += decoded[i * per_row:(i + 1) * per_row]
            answered += zip(batch_rows, answers)
    from accelerate.utils import gather_object

    trainer._questions_per_process = gather_object([len(my_rows)])
    by_row = dict(gather_object(answered))  # the padding repeats rows: one answer per row
    model.train(was_training)
    tokenizer.padding_side = padding_side
    return [by_row[row] for row in rows]


# %% [markdown]
# ## Watching the run
# Held-out accuracy during training, a few rollouts of each logging step on disk, and a monitor that warns when the
# run looks hacked or stuck. The thresholds are named below, each with the reason for its value.
# %%
MONITOR_WINDOW = 5      # logged points a rule averages over, so that one noisy point never warns
REWARD_RISE = 0.10      # the total reward rose by this share of its largest possible value ...
ACCURACY_FLAT = 0.02    # ... while held-out accuracy gained less than this: the rubric pays for something else
SATURATED = 0.95        # an auxiliary reward this close to 1 ...
OUTCOME_FLAT = 0.05     # ... while the outcome reward gained less than this since the start: format without substance
NO_SIGNAL = 0.90        # this share of groups with identical rewards (no advantage, no gradient) ...
NO_SIGNAL_POINTS = 10   # ... for this many logged points in a row
LENGTH_COLLAPSE = 0.25  # mean completion length under this share of its start: the model stopped answering
CLIPPED = 0.50          # half the completions cut at max_completion_length: answers never finish
ENTROPY_COLLAPSE = 0.2  # entropy under this share of its start ...
EARLY = 0.3             # ... within the first 30% of the run: the policy stopped exploring before it learned


def monitor_warnings(log_history: list[dict], outcome: str, max_reward: float, max_steps: int,
                     evals: list | None = None) -> list[dict]:
    """The run's warnings so far, each {"rule", "step", "message"}, from the trainer's logged metrics and the
    held-out evaluations `evals` ([(step, accuracy)]; by default the eval/accuracy points in the log)."""
    train = [e for e in log_history if "reward" in e and "step" in e]
    evals = evals if evals is not None else [(e["step"], e["eval/accuracy"]) for e in log_history if "eval/accuracy" in e]
    if len(train) < MONITOR_WINDOW:
        return []
    step, found = train[-1]["step"], []

    def mean(key, entries):
        values = [e[key] for e in entries if e.get(key) is not None]
        return sum(values) / len(values) if values else None

    def warn(rule, message):
        found.append({"rule": rule, "step": step, "message": message})

    head, tail = train[:MONITOR_WINDOW], train[-MONITOR_WINDOW:]
    if len(evals) >= 2 and evals[-1][0] > evals[0][0]:
        before = [e for e in train if e["step"] <= evals[0][0]][-MONITOR_WINDOW:] or head
        after = [e for e in train if e["step"] <= evals[-1][0]][-MONITOR_WINDOW:]
        gain, accuracy_gain = mean("reward", after) - mean("reward", before), evals[-1][1] - evals[0][1]
        if gain >= REWARD_RISE * max_reward and accuracy_gain < ACCURACY_FLAT:
            warn("reward_without_accuracy", f"training reward rose {gain:+.2f} (steps {evals[0][0]}-{evals[-1][0]}) "
                 f"while held-out accuracy moved {accuracy_gain:+.2f} ({evals[0][1]:.2f} -> {evals[-1][1]:.2f}): the "
                 "rubric pays for something other than the task. Look at which rewards/<name>/mean rose, and read "
                 "train_samples.jsonl")
    if len(train) >= 2 * MONITOR_WINDOW and mean(f"rewards/{outcome}/mean", tail) is not None:
        outcome_gain = mean(f"rewards/{outcome}/mean", tail) - mean(f"rewards/{outcome}/mean", head)
        for key in sorted({k for e in tail for k in e if k.startswith("rewards/") and k.endswith("/mean")}):
            level = mean(key, tail)
            if key != f"rewards/{outcome}/mean" and level >= SATURATED and outcome_gain < OUTCOME_FLAT:
                warn("auxiliary_saturated", f"{key.split('/')[1]} is saturated ({level:.2f}) while {outcome} gained "
                     f"{outcome_gain:+.2f}: the model collects the easy reward and not the task. Lower its weight "
                     "or read train_samples.jsonl")
                break
    recent = [e.get("frac_reward_zero_std") for e in train[-NO_SIGNAL_POINTS:]]
    if len(recent) == NO_SIGNAL_POINTS and all(v is not None and v >= NO_SIGNAL for v in recent):
        warn("no_signal", f"{min(recent):.0%} or more of the groups had identical rewards for the last "
             f"{NO_SIGNAL_POINTS} logged points: nothing to learn from. Run --eval_only --eval_num_samples 8 "
             "for the signal report: warm-start, easier data or a partial-credit reward")
    start_length, length = mean("completions/mean_length", head), mean("completions/mean_length", tail)
    if start_length and length is not None and len(train) >= 2 * MONITOR_WINDOW and length < LENGTH_COLLAPSE * start_length:
        warn("length_collapse", f"mean completion length fell from {start_length:.0f} to {length:.0f} tokens: "
             "the model stopped answering. Read train_samples.jsonl; a length or format reward may pay for brevity")
    clipped = mean("completions/clipped_ratio", tail)
    if clipped is not None and clipped >= CLIPPED:
        warn("clipped", f"{clipped:.0%} of completions are cut at max_completion_length: their answers never "
             "finish. Raise --max_completion_length or reward shorter reasoning")
    start_entropy, entropy = mean("entropy", head), mean("entropy", tail)
    if (start_entropy and entropy is not None and len(train) >= 2 * MONITOR_WINDOW and step <= EARLY * max_steps
            and entropy < ENTROPY_COLLAPSE * start_entropy):
        warn("entropy_collapse", f"entropy fell from {start_entropy:.2f} to {entropy:.2f} by step {step} "
             f"({step / max_steps:.0%} of the run): the policy stopped exploring. Lower the learning rate or raise "
             "the temperature")
    return found


class RunMonitor(TrainerCallback):
    """Checks the rules above at every log; prints each warning once and keeps them for eval.json."""

    def __init__(self, max_reward: float, outcome: str = "correctness_reward"):
        self.max_reward, self.outcome, self.warnings = max_reward, outcome, []

    def check(self, log_history, max_steps, evals=None):
        for warning in monitor_warnings(log_history, self.outcome, self.max_reward, max_steps, evals):
            if warning["rule"] not in {w["rule"] for w in self.warnings}:
                self.warnings.append(warning)
                if int(os.environ.get("RANK", "0")) == 0:
                    print(f"\nWARNING (step {warning['step']}): {warning['message']}")

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.check(state.log_history, state.max_steps)


class MidRunEval(TrainerCallback):
    """Every `every` steps: greedy held-out accuracy, logged as eval/<metric> (to --report_to too) and plotted."""

    def __init__(self, trainer, dataset, every: int, trajectories: Path, **evaluate_kwargs):
        self.trainer, self.dataset, self.every, self.trajectories = trainer, dataset, every, trajectories
        self.evaluate_kwargs = evaluate_kwargs

    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step == 0:  # a fresh run: the starting point of the curve
            self.on_step_end(args, state, control)

    def on_step_end(self, args, state, control, **kwargs):
        if self.every and len(self.dataset) and state.global_step % self.every == 0:
            metrics = evaluate(self.trainer, self.dataset, trajectories=self.trajectories, step=state.global_step,
                               **self.evaluate_kwargs)
            # Trainer.log, not GRPOTrainer.log: the latter would flush the step's training metrics into this entry
            Trainer.log(self.trainer, {f"eval/{k}": v for k, v in metrics.items() if isinstance(v, float)})


def row_columns(columns: dict, i: int) -> dict:
    """Row i's dataset columns that the rewards get besides the prompt and answer (hidden tests, supporting
    documents...), those JSON can hold: what --replay needs to score the row again."""
    kept = {}
    for name, values in columns.items():
        if name not in ("prompts", "answer", "completion_ids", "environments", "prompt_index"):
            try:
                kept[name] = json.loads(json.dumps(values[i]))
            except (TypeError, ValueError):  # e.g. an object, not data
                continue
    return kept


def with_sample_saving(reward_func, path: Path, every: int, per_log: int):
    """Wrap a reward so that it also appends `per_log` rollouts of every `every`-th step to `path` (main process):
    plain JSON lines, nothing printed, so it costs next to nothing. `per_log` -1: every rollout this process scored,
    one line per prompt holding its whole group (what --replay needs to recompute GRPO's advantages); on disk,
    about the completions' text plus 1 KB per rollout, each logged step, and the rubric runs twice on those steps
    (the saved scores are computed here: slow rewards, such as hidden tests, cost twice)."""
    saved = {"step": None}

    @functools.wraps(reward_func)  # keeps the name, so the logged metric is unchanged
    def wrapper(completions, **kwargs):
        scores = reward_func(completions, **kwargs)
        state = kwargs.get("trainer_state")
        step = state.global_step if state is not None else 0
        if per_log and step % every == 0 and step != saved["step"] and int(os.environ.get("RANK", "0")) == 0:
            saved["step"] = step
            count = len(completions) if per_log < 0 else per_log
            columns = {k: v[:count] for k, v in kwargs.items() if isinstance(v, list) and len(v) == len(completions)}
            rows = []
            for i, scored in enumerate(score(completions[:count], **columns)):
                completion = completions[i]  # one message's text; a tool run's whole list of messages
                text = completion_text(completion) if len(completion) <= 1 or isinstance(completion, str) else completion
                entry = {"text": text, "greedy": False, "parsed_answer": extract_answer(completion_text(text)), **scored}
                if per_log < 0 and rows and rows[-1]["prompt"] == kwargs["prompts"][i]:  # a group's rollouts are
                    rows[-1]["completions"].append(entry)  # consecutive (TRL's RepeatSampler)
                else:
                    rows.append({"step": step, "prompt": kwargs["prompts"][i], "answer": kwargs["answer"][i],
                                 "columns": row_columns(columns, i), "completions": [entry]})
            with open(path, "a", encoding="utf-8") as f:
                for row in rows:
                    f.write(json.dumps(row, default=str) + "\n")
        return scores

    return wrapper


# %% [markdown]
# ## Groups that teach nothing
# A group whose rollouts all score the same (all right, or all wrong) has zero advantage: it costs a full
# generation and moves nothing. `--skip_zero_signal N` rests such a prompt: it sits out its next N turns and the
# next prompts in the shuffled stream take its place, so every batch is still full of whole groups. Why this way and
# not DAPO's over-generate-and-filter: TRL 1.16 generates one fixed-size batch per step, and the sampler is the one
# place that decides which prompts go into it, identically on every process (same seed, same gathered rewards), so
# GRPO's groups and distributed sampling stay TRL's own. The cost: it learns from a prompt's last visit, so it does
# nothing in the first epoch; a rested prompt comes back after N turns, in case the model has since changed.
# %%
class ZeroSignalSampler(torch.utils.data.Sampler):
    """TRL's RepeatSampler order (a chunk of prompts, each `mini_repeat_count` times, the chunk `repeat_count` times)
    drawn from an endless shuffled stream that passes over resting prompts; each pass is as long as TRL's."""

    def __init__(self, size: int, batch_size: int, mini_repeat_count: int, repeat_count: int, seed: int,
                 shuffle: bool, rest: int):
        self.size, self.batch_size, self.rest = size, batch_size, rest
        self.mini_repeat_count, self.repeat_count, self.shuffle = mini_repeat_count, repeat_count, shuffle
        self.generator = torch.Generator().manual_seed(seed)
        self.stream, self.resting, self.passed_over = [], {}, 0  # resting: prompt -> turns still to sit out

    def next_prompt(self) -> int:
        while True:  # ends: every turn passed over lowers a count, so no prompt rests for ever
            if not self.stream:
                order = torch.randperm(self.size, generator=self.generator) if self.shuffle else range(self.size)
                self.stream = [int(i) for i in order][::-1]  # popped from the end
            index = self.stream.pop()
            if self.resting.get(index, 0) <= 0:
                return index
            self.resting[index] -= 1
            self.passed_over += 1

    def __iter__(self):
        for _ in range(self.size // self.batch_size):
            chunk, held = [], []  # drawn only when the loader needs it, so the latest rests count
            while len(chunk) < self.batch_size:  # distinct prompts, as in TRL's: a new pass may repeat one
                index = self.next_prompt()
                (held if index in chunk else chunk).append(index)
            self.stream.extend(reversed(held))  # first in line for the next chunk
            for _ in range(self.repeat_count):
                for index in chunk:
                    yield from [index] * self.mini_repeat_count

    def __len__(self) -> int:
        return (self.size // self.batch_size) * self.batch_size * self.mini_repeat_count * self.repeat_count

    def record(self, prompt_indices: list, advantages: list, group_size: int) -> int:
        """After a step's scoring (all processes' rollouts, in order): rest the prompts whose group had no signal.
        Returns how many groups had none."""
        quiet = 0
        for start in range(0, len(prompt_indices), group_size):
            prompts = sorted(set(prompt_indices[start:start + group_size]))
            if len(prompts) != 1:  # the processes' samplers disagree
                raise RecipeError(f"one group holds rollouts of different prompts {prompts}: every process must "
                                  "build its sampler with the same seed")
            if all(abs(a) < 1e-6 for a in advantages[start:start + group_size]):
                self.resting[prompt_indices[start]] = self.rest
                quiet += 1
        return quiet


def skip_zero_signal(trainer, rest: int):
    """Have `trainer` draw its prompts from a ZeroSignalSampler and feed it each training step's advantages.
    The train dataset needs a `prompt_index` column (main() adds it): rows carry it to the scoring step."""
    from accelerate.utils import gather_object

    if "prompt_index" not in trainer.train_dataset.column_names:
        raise RecipeError("skip_zero_signal needs the train dataset's `prompt_index` column (main() adds it)")
    args, samplers = trainer.args, []

    def sampler(dataset=None):  # what Trainer calls for each epoch's dataloader, in place of RepeatSampler
        dataset = trainer.train_dataset if dataset is None else dataset
        if not samplers:  # one sampler for the whole run: its stream and resting prompts outlive an epoch
            samplers.append(ZeroSignalSampler(
                len(dataset), args.generation_batch_size // trainer.num_generations, trainer.num_generations,
                trainer.num_iterations * args.steps_per_generation, args.seed, trainer.shuffle_dataset, rest))
        return samplers[0]

    score = trainer._generate_and_score_completions

    def scored(inputs):
        output = score(inputs)
        if samplers and trainer.model.training and inputs and "prompt_index" in inputs[0]:
            indices = gather_object([row["prompt_index"] for row in inputs])  # every process's, in sampler order
            advantages = list(trainer._logs["advantages"])[-len(indices):]  # per rollout, before any turn credit
            quiet = samplers[0].record(indices, advantages, trainer.num_generations)
            metrics = trainer._metrics["train"]
            metrics["zero_signal/quiet_groups"].append(quiet)
            metrics["zero_signal/resting_prompts"].append(sum(n > 0 for n in samplers[0].resting.values()))
            metrics["zero_signal/passed_over"].append(samplers[0].passed_over)  # in all, since the start
        return output

    trainer._get_train_sampler, trainer._generate_and_score_completions = sampler, scored
    return trainer


# %% [markdown]
# ## Plots
# The total reward, each reward, the completion length and the groups with no signal against step, saved as
# `training_curves.png`.
# %%
def plot_curves(log_history: list[dict], path: Path):
    """Total reward, each reward component, completion length and the share of groups with no signal (all the same
    reward: zero advantage) against step, in one PNG."""
    from matplotlib.figure import Figure  # no pyplot: no display needed, a notebook's backend untouched

    logs = [entry for entry in log_history if "reward" in entry and "step" in entry]
    if not logs:
        return None
    steps = [entry["step"] for entry in logs]
    components = sorted({k for entry in logs for k in entry if k.startswith("rewards/") and k.endswith("/mean")})
    fig = Figure(figsize=(16, 4.2))
    axes = fig.subplots(1, 3)
    axes[0].plot(steps, [entry["reward"] for entry in logs], color="black", label="training reward")
    axes[0].set_title("total reward (weighted sum)")
    held_out = [(entry["step"], entry["eval/accuracy"]) for entry in log_history if "eval/accuracy" in entry]
    if held_out:  # on its own 0-1 axis: the line that says whether the reward is paying for the task
        accuracy_axis = axes[0].twinx()
        accuracy_axis.plot(*zip(*held_out), color="tab:green", marker="o", label="held-out accuracy")
        accuracy_axis.set_ylim(0, 1)
        accuracy_axis.set_ylabel("held-out accuracy (greedy)", color="tab:green")
        axes[0].set_title("training reward (black) and held-out accuracy (green)")
    for key in components:
        axes[1].plot(steps, [entry.get(key, math.nan) for entry in logs], label=key.split("/")[1])
    axes[1].set_title("reward components (unweighted, 0-1)")
    axes[1].legend(fontsize=8)
    axes[2].plot(steps, [entry.get("completions/mean_length", math.nan) for entry in logs], color="tab:purple")
    axes[2].set_title("mean completion length (tokens)")
    no_signal = [(entry["step"], entry["frac_reward_zero_std"]) for entry in logs if "frac_reward_zero_std" in entry]
    if no_signal:  # groups whose completions all scored the same: their advantages are zero, they teach nothing
        signal_axis = axes[2].twinx()
        signal_axis.plot(*zip(*no_signal), color="tab:orange", linestyle="--", label="groups with no signal")
        signal_axis.set_ylim(0, 1)
        signal_axis.set_ylabel("share of groups with no signal", color="tab:orange")
        axes[2].set_title("completion length (purple), groups with no signal (orange)")
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


# %% [markdown]
# ## Replay: what would the edited rubric have done?
# `--replay RUN_DIR` scores a finished run's recorded completions (its eval_*.jsonl and train_samples.jsonl) again
# with RUBRIC as it is now, with no model loaded and nothing generated, and reports what the edit changes: each
# reward's mean before and after; in groups (--eval_num_samples N, or --train_samples_per_log -1), how many
# completions' advantage changed sign, the rank agreement of old and new totals (Kendall's tau-b), and how many
# groups' best completion changed; and the completions whose total moved most. Rewards that read the environment
# get a fresh one per rollout (the script's `replay_environment`, set up from the replay's flags) with the rollout's
# recorded tool calls run in it again. A reward whose inputs the recording lacks (a dataset column it did not keep,
# a search corpus it cannot rebuild) is named and not replayed: its recorded score is kept in the new total, and a
# new reward that cannot be replayed is left out of it. Writes replay.json and replay.jsonl into RUN_DIR.
# %%
REPLAYED_FILES = ("eval_before.jsonl", "eval_midrun.jsonl", "eval_after.jsonl", "eval_only.jsonl",
                  "train_samples.jsonl")


def kendall_tau(old: list, new: list) -> float | None:
    """Kendall's tau-b of two score lists (ties allowed); None when either has no two different scores."""
    def sign(x):
        return (x > 0) - (x < 0)

    pairs = [(sign(old[i] - old[j]), sign(new[i] - new[j])) for i in range(len(old)) for j in range(i + 1, len(old))]
    untied_old, untied_new = sum(a != 0 for a, _ in pairs), sum(b != 0 for _, b in pairs)
    if not untied_old or not untied_new:
        return None
    return sum(a * b for a, b in pairs) / math.sqrt(untied_old * untied_new)


def rescore(completions: list, columns: dict, skipped: dict) -> list[dict]:
    """Each RUBRIC reward's scores by name for these completions (None: not replayable, its reason in `skipped`)."""
    by_name = {}
    for func, _ in RUBRIC:
        try:
            by_name[func.__name__] = func(completions=completions, **columns)
        except Exception as error:  # e.g. a missing `environments` or dataset column: named, never scored 0
            skipped.setdefault(func.__name__, f"{type(error).__name__}: {error}".splitlines()[0][:160])
            by_name[func.__name__] = [None] * len(completions)
    return [{name: values[i] for name, values in by_name.items()} for i in range(len(completions))]


def replayed_environment(script_args, row: dict, trajectory):
    """A fresh environment (the script's replay_environment) with a recorded rollout's tool calls run in it again,
    in order, as TRL's loop ran them; None where the script has no tools."""
    environment = replay_environment(script_args, row)
    messages = trajectory if environment is not None and isinstance(trajectory, list) else []
    messages = [m if isinstance(m, dict) else {} for m in messages]  # a hand-edited file: skip what is not a message
    for n, message in enumerate(messages):
        answered = 0  # the calls TRL ran are those with a tool message after them (a capped loop runs none)
        while n + 1 + answered < len(messages) and messages[n + 1 + answered].get("role") == "tool":
            answered += 1
        calls = message.get("tool_calls") if isinstance(message.get("tool_calls"), list) else []
        for call in calls[:answered]:
            function = call.get("function", call) if isinstance(call, dict) else {}
            name, arguments = function.get("name"), function.get("arguments") or {}
            try:
                arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
                if isinstance(name, str) and not name.startswith("_") and name not in ("reset", "get_reward"):
                    getattr(environment, name)(**arguments)
            except Exception:  # a call that failed then fails now: TRL showed the model the error, no tool ran
                continue
    return environment


def replay(run_dir: Path, script_args, shown: int = 5) -> dict:
    """Score RUN_DIR's recorded completions again with the current RUBRIC; write replay.json and replay.jsonl there
    and print the report. Returns the report. `script_args` are the replay's flags: replay_environment's settings."""
    files = [run_dir / name for name in REPLAYED_FILES if (run_dir / name).is_file()]
    if not files:
        raise RecipeError(f"--replay {run_dir}: no {', '.join(REPLAYED_FILES)} there: pass the --output_dir of a "
                          "finished run")
    weights = {func.__name__: weight for func, weight in RUBRIC}
    skipped, records, groups, unreadable = {}, [], [], []
    for path in files:
        for number, line in enumerate(path.open(encoding="utf-8"), start=1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:  # e.g. the last line of a run stopped while writing it
                unreadable.append(f"{path.name}:{number}")
                continue
            texts, recorded = [c["text"] for c in row["completions"]], row.get("columns", {})
            columns = {"prompts": [row["prompt"]] * len(texts), "answer": [row["answer"]] * len(texts),
                       **{name: [value] * len(texts) for name, value in recorded.items()}}
            environments = [replayed_environment(script_args, recorded, text) for text in texts]
            if all(env is not None for env in environments):
                columns["environments"] = environments
            new = rescore(texts, columns, skipped)
            first = len(records)
            for completion, rewards in zip(row["completions"], new):
                kept = {name: completion["rewards"][name] for name in rewards
                        if name in skipped and completion["rewards"].get(name) is not None}
                after = {**rewards, **kept}
                total = sum(weights[name] * value for name, value in after.items() if value is not None)
                records.append({"file": path.name, "step": row["step"], "greedy": completion["greedy"],
                                "text": completion["text"], "before": completion["rewards"],
                                "total_before": completion["total"], "after": after, "total_after": total})
            sampled = [i for i in range(first, len(records)) if not records[i]["greedy"]]
            if len(sampled) > 1:  # one prompt's samples (or, with --train_samples_per_log -1, rollouts): a group
                groups.append(sampled)
    if not records:
        raise RecipeError(f"--replay {run_dir}: no readable completions in {', '.join(p.name for p in files)}: pass "
                          "the --output_dir of a finished run")
    report = {"run_dir": str(run_dir), "files": [path.name for path in files], "completions": len(records),
              "unreadable_lines": unreadable, "not_replayed": skipped, "rewards": {}, "groups": {"count": len(groups)}}
    for name in sorted({n for r in records for n in r["before"]} | set(weights)):
        before = [r["before"][name] for r in records if r["before"].get(name) is not None]
        after = [r["after"][name] for r in records if name not in skipped and r["after"].get(name) is not None]
        report["rewards"][name] = {"before": sum(before) / len(before) if before else None,
                                   "after": sum(after) / len(after) if after else None,
                                   "in_rubric": name in weights, "replayed": name in weights and name not in skipped}
    report["rewards"]["total"] = {"before": sum(r["total_before"] for r in records) / len(records),
                                  "after": sum(r["total_after"] for r in records) / len(records)}
    if groups:
        flipped, taus, best_changed = 0, [], 0
        for group in groups:
            old, new = [records[i]["total_before"] for i in group], [records[i]["total_after"] for i in group]
            old_mean, new_mean = sum(old) / len(old), sum(new) / len(new)
            flipped += sum((o > old_mean) - (o < old_mean) != (n > new_mean) - (n < new_mean) for o, n in zip(old, new))
            tau = kendall_tau(old, new)
            taus += [] if tau is None else [tau]
            best_changed += old.index(max(old)) != new.index(max(new))
        report["groups"].update({"completions": sum(map(len, groups)), "advantage_sign_changed": flipped,
                                 "kendall_tau_mean": sum(taus) / len(taus) if taus else None,
                                 "groups_with_tau": len(taus), "best_completion_changed": best_changed})
    moved = sorted(records, key=lambda r: -abs(r["total_after"] - r["total_before"]))[:shown]
    report["moved_most"] = [{"file": r["file"], "step": r["step"], "total_before": r["total_before"],
                             "total_after": r["total_after"], "text": format_trajectory(r["text"])[:300]}
                            for r in moved if r["total_after"] != r["total_before"]]
    report["hack_battery"] = hack_battery()
    with open(run_dir / "replay.jsonl", "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, default=str) + "\n")
    (run_dir / "replay.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(replay_summary(report))
    print(f"wrote {run_dir / 'replay.json'} and {run_dir / 'replay.jsonl'}")
    return report


def hack_battery() -> dict:
    """rewards.py's reward-hacking cases (`python rewards.py --audit`; when rewards.py is beside this script) scored
    with RUBRIC as it is now: the hacks whose total reaches that of the worst-paid honest answer."""
    here = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
    if not (here / "rewards.py").is_file():
        return {"skipped": f"no rewards.py beside this script in {here}: copy it there to run the hack battery"}
    spec = importlib.util.spec_from_file_location("reward_catalogue", here / "rewards.py")
    catalogue = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(catalogue)
    cases, skipped = catalogue.audit_cases(), {}
    completions = [completion for _, completion in cases]
    columns = {"answer": [catalogue.AUDIT_GOLD] * len(cases),
               "prompts": [[{"role": "user", "content": catalogue.AUDIT_QUESTION}]] * len(cases)}
    scored = rescore(completions, columns, skipped)
    honest = [i for i, (name, _) in enumerate(cases) if name.startswith("honest")]
    try:
        outcome = globals()[OUTCOME_REWARD](completions=[completions[i] for i in honest], **{
            name: [values[i] for i in honest] for name, values in columns.items()})
    except Exception:  # it needs what a GSM8K answer does not have (hidden tests, say)
        outcome = [None]
    if not all(outcome):  # e.g. a code or search task: the battery's answers are not its answers
        return {"skipped": f"the battery's honest answers (a GSM8K number) do not pass {OUTCOME_REWARD}: it does not "
                           "fit this script's task"}
    weights = {func.__name__: weight for func, weight in RUBRIC}
    totals = [sum(weights[name] * value for name, value in rewards.items() if value is not None) for rewards in scored]
    bar = min(totals[i] for i in honest)
    return {"honest_total_min": bar, "not_scored": skipped, "cases": len(cases),
            "paying_hacks": [{"case": name, "total": totals[i]} for i, (name, _) in enumerate(cases)
                             if i not in honest and totals[i] >= bar]}


def replay_summary(report: dict) -> str:
    """The report as a few lines of text."""
    def number(value):
        return "-" if value is None else f"{value:.3f}"

    lines = [f"replay of {report['completions']} completions from {', '.join(report['files'])}",
             f"{'reward':<32}{'before':>9}{'after':>9}"]
    for name, means in report["rewards"].items():
        note = "" if name == "total" else " (not in RUBRIC now)" if not means["in_rubric"] else \
            "" if means["replayed"] else " (not replayed: recorded scores kept)"
        lines.append(f"{name:<32}{number(means['before']):>9}{number(means['after']):>9}{note}")
    for name, reason in report["not_replayed"].items():
        lines.append(f"not replayed: {name}: {reason}")
    if report["unreadable_lines"]:
        lines.append(f"skipped {len(report['unreadable_lines'])} unreadable line(s), e.g. a run stopped while writing: "
                     + ", ".join(report["unreadable_lines"][:5]))
    g = report["groups"]
    if g["count"]:
        lines.append(f"{g['count']} groups of samples: advantage changed sign for {g['advantage_sign_changed']} of "
                     f"{g['completions']} completions; Kendall's tau old vs new {number(g['kendall_tau_mean'])} (mean "
                     f"over the {g['groups_with_tau']} groups whose totals differ); best completion changed in "
                     f"{g['best_completion_changed']} groups")
    else:
        lines.append("no groups of samples recorded: run with --eval_only --eval_num_samples 8 for group statistics")
    for r in report["moved_most"]:
        where = r["file"] + ("" if r["step"] is None else f", step {r['step']}")
        lines.append(f"  {r['total_before']:+.3f} -> {r['total_after']:+.3f}  ({where}): "
                     + r["text"][:120].replace("\n", " "))
    battery = report["hack_battery"]
    if "skipped" in battery:
        lines.append(f"hack battery skipped: {battery['skipped']}")
    else:
        paying = ", ".join(f"{h['case']} ({h['total']:.2f})" for h in battery["paying_hacks"]) or "none"
        lines.append(f"hack battery ({battery['cases']} cases of rewards.py --audit): hacks paid at least as much as "
                     f"the worst-paid honest answer ({battery['honest_total_min']:.2f}): {paying}"
                     + (f"; not scored: {', '.join(battery['not_scored'])}" if battery["not_scored"] else ""))
    return "\n".join(lines)


# %% [markdown]
# ## Command line
# `main` trains, evaluates before and after, and writes `eval.json` and the plot; the cells at the end call it.
# %%
def main(argv=None):
    """Train, evaluate before and after, plot (or, with --eval_only, only evaluate). `argv` is a list of flags;
    None reads sys.argv."""
    started = time.time()
    script_args, training_args, model_args = parse_args(argv)
    if script_args.replay:  # no model, no data: the recorded completions, scored with RUBRIC as it is now
        return replay(Path(script_args.replay), script_args)
    check_environment(script_args, training_args, model_args)
    resume = None if script_args.eval_only else resolve_checkpoint(training_args)
    tokenizer = load_tokenizer(model_args, training_args)
    # grpo_search.py's load_data also returns the corpus, which its build_trainer indexes
    train_dataset, eval_dataset, *recipe_data = load_data(script_args, tokenizer, training_args.seed)
    output_dir = Path(training_args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)

    training_args.model_init_kwargs = {**(training_args.model_init_kwargs or {}), "dtype": model_args.dtype,
                                       "revision": model_args.model_revision,
                                       "attn_implementation": model_args.attn_implementation}
    rewards = [func for func, _ in RUBRIC]
    rewards[0] = with_logging(rewards[0], script_args.print_samples_every)
    rewards[0] = with_sample_saving(rewards[0], output_dir / "train_samples.jsonl", training_args.logging_steps,
                                    script_args.train_samples_per_log)
    if training_args.reward_weights is None:
        training_args.reward_weights = [weight for _, weight in RUBRIC]
    if script_args.skip_zero_signal:  # each row carries its index to the scoring step
        if "prompt_index" in train_dataset.column_names:
            raise RecipeError("the training data has a 'prompt_index' column, which --skip_zero_signal writes "
                              "itself: rename that column, or drop --skip_zero_signal")
        train_dataset = train_dataset.add_column("prompt_index", list(range(len(train_dataset))))
    trainer = build_trainer(script_args, training_args, model_args, tokenizer, train_dataset, rewards, *recipe_data)
    if script_args.skip_zero_signal:
        skip_zero_signal(trainer, script_args.skip_zero_signal)

    main_process = trainer.accelerator.is_main_process
    for name in ("eval_only.jsonl", "eval_before.jsonl", "eval_after.jsonl"):  # this run's, not an earlier one's
        if main_process:
            (output_dir / name).unlink(missing_ok=True)
    evaluation = dict(batch_size=script_args.eval_batch_size)  # the rest as in training: trainer.args
    width = max(map(len, HELD_OUT_TABLE)) + 2

    def report(results):  # the run's facts beside the scores, written by the main process
        if main_process:
            results.update(model=model_args.model_name_or_path, dataset=script_args.dataset_name,
                           **run_facts(script_args), num_processes=trainer.accelerator.num_processes,
                           wall_time_seconds=round(time.time() - started, 1))
            (output_dir / "eval.json").write_text(json.dumps(results, indent=2, default=str))

    if script_args.eval_only:  # no optimizer, no trainer state, no checkpoint
        results = {"eval_only": evaluate(trainer, eval_dataset, num_samples=script_args.eval_num_samples,
                                         trajectories=output_dir / "eval_only.jsonl", **evaluation)}
        report(results)
        if main_process and results["eval_only"]:
            scores = results["eval_only"]
            print(f"\nheld-out ({scores['num_examples']} examples, greedy; accuracy is {ACCURACY_IS}): "
                  + ", ".join(f"{key} {scores[key]:.2f}" for key in HELD_OUT_TABLE if scores[key] is not None))
            if "signal" in scores:
                print(signal_report(scores))
            print(f"wrote {output_dir / 'eval.json'} and {output_dir / 'eval_only.jsonl'}")
        trainer.accelerator.wait_for_everyone()
        return results

    results = {"before": evaluate(trainer, eval_dataset, num_samples=script_args.eval_num_samples,
                                  trajectories=output_dir / "eval_before.jsonl", step=0, **evaluation)}
    if main_process and "signal" in results["before"]:
        print(signal_report(results["before"]))
    monitor = RunMonitor(max_reward=sum(w for w in training_args.reward_weights if w > 0), outcome=OUTCOME_REWARD)
    trainer.add_callback(monitor)
    trainer.add_callback(MidRunEval(trainer, eval_dataset.select(range(min(script_args.num_mid_eval_examples,
                                                                           len(eval_dataset)))),
                                    script_args.mid_eval_steps, output_dir / "eval_midrun.jsonl", **evaluation))
    trainer.train(resume_from_checkpoint=resume)
    trainer.save_model(training_args.output_dir)
    trainer.save_state()  # trainer_state.json: the full log history, next to the final model
    results["after"] = evaluate(trainer, eval_dataset, trajectories=output_dir / "eval_after.jsonl",
                                step=trainer.state.global_step, **evaluation)
    if results["before"] and not any("eval/accuracy" in e for e in trainer.state.log_history):
        # No mid-run evaluation: judge the reward against the held-out accuracy before and after instead
        monitor.check(trainer.state.log_history, trainer.state.max_steps, evals=[
            (0, results["before"]["accuracy"]), (trainer.state.global_step, results["after"]["accuracy"])])
    results["warnings"] = monitor.warnings
    results["global_step"] = trainer.state.global_step
    report(results)
    if main_process:
        plot = plot_curves(trainer.state.log_history, output_dir / "training_curves.png")
        if results["before"]:
            print(f"\n{'held-out':<{width}}{'before':>8}{'after':>8}   ({results['after']['num_examples']} examples; "
                  f"accuracy is {ACCURACY_IS})")
            for key in HELD_OUT_TABLE:
                if results["before"][key] is not None:
                    print(f"{key:<{width}}{results['before'][key]:>8.2f}{results['after'][key]:>8.2f}")
        print(f"{len(monitor.warnings)} monitor warning(s)" + "".join(f"\n  step {w['step']}: {w['message']}"
                                                                   for w in monitor.warnings))
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
        sys.exit(f"{Path(sys.argv[0]).name}: error: {error}")
