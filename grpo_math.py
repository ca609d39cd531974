# %% [markdown]
# ## Imports
# From this project: instruments.py (the run instruments), optional: without it the script trains and evaluates.
# %%
# /// script
# requires-python = ">=3.10"
# dependencies = [
#     "torch>=2.4",
#     "transformers>=5.2",
#     "trl>=1.16,<1.17",
#     "datasets>=4.7",
#     "peft>=0.17",
#     "accelerate>=1.10",
#     "matplotlib>=3.8",
#     "pyyaml>=6.0",
#     "math-verify>=0.9",  # MATH-style answers (--answer_type symbolic); GSM8K never imports it
# ]
# ///
"""GRPO on GSM8K-style math in one file: a small instruct model learns to reason, then answer.

The model writes `<reasoning>...</reasoning><answer>...</answer>`; a rubric of small reward
functions (correctness, format, a numeric-answer bonus) scores each completion, and TRL's
GRPOTrainer pushes the model towards the completions that beat the others in their group.
Answers are numbers (GSM8K), or MATH-style expressions (fractions, roots, pi, intervals, sets)
that math-verify compares: --answer_type, picked from the data unless given.
Fork this file: change a reward, the model or the dataset, and run it again.

Run it
    python grpo_math.py                                  # no GPU: offline demo on a tiny model (0.8 min)
    python grpo_math.py --max_steps 250                  # one GPU: Qwen2.5-0.5B-Instruct on GSM8K
    python grpo_math.py --dataset_name math.jsonl        # your MATH-style data: answers graded by math-verify
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
Several machines and vLLM's server mode: docs/scale_out.md.

What to expect
    CPU demo (measured, 2 cores): held-out accuracy 34% -> 72%, strict format 1.00 throughout,
    about 0.8 minutes in all (300 steps, 7 held-out checks). See README.md.
    GPU (estimates): Qwen2.5-0.5B-Instruct starts near 20-30% on GSM8K in this strict format
    and climbs over a few hundred steps; the format rewards rise first, correctness follows.
Outputs, in --output_dir: checkpoints and the final model; with instruments.py, eval.json, training_curves.png and
every evaluated answer in eval_*.jsonl (docs/watching.md).

How this departs from textbook GRPO (DeepSeekMath), all of it TRL's defaults unless noted
    - beta = 0: no KL penalty and no reference model (less memory; DAPO, Dr. GRPO do the same).
    - loss_type = "dapo": token-level loss normalisation, no per-sequence length bias.
    - One optimisation step per generation batch, so the clipped ratio is 1 and clipping is idle.
    - Rewards are a weighted sum of several functions (RUBRIC below), not a single verifier, and
      the format terms together pay less than a correct answer, so no format hack beats solving.
"""

import functools, json, os, re, sys, threading, time  # noqa: E401
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Literal

import torch
from accelerate.utils import gather_object
from trl import GRPOConfig, GRPOTrainer, ModelConfig, TrlParser, get_peft_config, get_quantization_config
from trl.models import unwrap_model_for_generation

try:  # the run instruments: the monitor, mid-run evaluation, replay, plots, eval.json (optional: docs/how_it_works.md)
    import instruments
except ImportError:
    instruments = None


def arg(default, help):
    """A config field whose comment is also its --help text."""
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
    answer_column: str = arg("answer", "Column with the gold answer: a number, GSM8K text ending '#### 72', or a "
                                       "MATH-style answer such as \\frac{1}{2} (see --answer_type).")
    answer_type: Literal["auto", "number", "symbolic"] = arg(
        "auto", "How correctness_reward grades. number: each gold is one plain number (GSM8K's text after '####'), "
                "the answer block must state it; \\sqrt{2} or 1/2 is no such gold. symbolic: math-verify compares "
                "answer and gold, so fractions, roots, pi, intervals, equations, sets and matrices are graded "
                "(pip install math-verify). auto: number when every gold is a plain number, else symbolic "
                "(the type is printed at load).")
    max_prompt_tokens: int = arg(256, "Prompts longer than this are dropped: TRL no longer truncates them.")
    num_eval_examples: int = arg(200, "Held-out questions scored before and after training (0 = skip).")
    eval_batch_size: int = arg(32, "Questions per generate() call during evaluation.")
    eval_only: bool = arg(False, "Evaluate --model_name_or_path (a Hub id, a folder, a checkpoint, a PEFT adapter "
                                 "folder) on the held-out questions, write eval.json and the trajectories, and exit.")


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
        complete_config(self, "grpo_math")  # precision for the hardware; outputs/<this file's name>/<time>
        super().__post_init__()


# %% [markdown]
# The offline demo's settings, used with no CUDA GPU: a tiny model and toy data from `assets/` (no network). They
# replace the defaults above (flags and YAML still win); a tiny model needs a far larger learning rate.
# %%
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
    answer_type, why = resolved_answer_type(script_args.answer_type, [
        str(gold) for rows in (train, test) for gold in rows[script_args.answer_column]])
    print(f"answer type: {answer_type} (--answer_type {script_args.answer_type}{why})")

    def to_prompt(row):  # every column reaches the rewards: answer_type tells correctness_reward how to grade
        return {"prompt": [{"role": "system", "content": SYSTEM_PROMPT},
                           {"role": "user", "content": str(row[script_args.question_column])}],
                "answer": str(row[script_args.answer_column]), "answer_type": answer_type}

    def fits(row):
        ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True,
                                            return_dict=False)
        return len(ids) <= script_args.max_prompt_tokens

    splits, grade = [], outcome_reward()
    for rows in (train, test):
        rows = rows.map(to_prompt, remove_columns=[column for column in rows.column_names
                                                   if column not in ("answer", "answer_type")])
        # The rows the outcome reward can grade (None: a gold it cannot read), so that one function decides
        gradable = [grade([""], **{key: [value] for key, value in row.items()})[0] is not None for row in rows]
        dropped = [row["answer"] for row, ok in zip(rows, gradable) if not ok]
        if dropped:  # ungradable golds teach nothing: say so, and train on the rest
            hint = f"(e.g. {dropped[0][-40:]!r}, read as {answer_type}): check --answer_type and --answer_column"
            if len(dropped) == len(rows):
                raise RecipeError(f"{OUTCOME_REWARD} can grade no answer of dataset '{name}' {hint}")
            print(f"dropped {len(dropped)} of {len(rows)} rows whose answer {OUTCOME_REWARD} cannot grade {hint}")
        rows = rows.select([i for i, ok in enumerate(gradable) if ok])
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


def resolved_answer_type(answer_type: str, golds: list) -> tuple:
    """(answer type, why) for --answer_type auto: symbolic when correctness_reward can read some gold only as
    symbolic, else number (GSM8K, with its broken labels, never needs math-verify)."""
    if answer_type != "auto":
        return answer_type, ""
    grade = outcome_reward()
    expressions = [gold for gold in golds if grade([""], answer=[gold], answer_type=["number"])[0] is None
                   and grade([""], answer=[gold], answer_type=["symbolic"])[0] is not None]
    if expressions:
        return "symbolic", (f": {len(expressions)} of {len(golds)} golds are not plain numbers, e.g. "
                            f"{expressions[0][-40:]!r}")
    return "number", f": every gold {OUTCOME_REWARD} can grade is a plain number"


# %% [markdown]
# ## Rubric
# Helpers the rewards share: the text of a completion, its one `<answer>` block, the number in it, the tags.
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


# The tags and layouts the three format rewards below look for
TAGS = ("<reasoning>", "</reasoning>", "<answer>", "</answer>")
STRICT_FORMAT = re.compile(r"<reasoning>\n.+?\n</reasoning>\n<answer>\n.+?\n</answer>\n?", re.DOTALL)
LENIENT_FORMAT = re.compile(r"\s*<reasoning>.*?</reasoning>\s*<answer>.*?</answer>\s*", re.DOTALL)


# %% [markdown]
# How correctness_reward reads a number-type gold and answer (GSM8K); symbolic ones (MATH) come after RUBRIC.
# %%
PLAIN_NUMBER = re.compile(r"-?\d+(?:\.\d+)?", re.ASCII)  # a number-type gold, once GSM8K's ',' and '$' are gone
# Math around the number makes an expression of it ('\sqrt{72}', '72^2', '6!', '9\pi', '72 + 72', '.5' are neither 72
# nor 5); words, '$', '%', degrees, '\boxed{}' and '\text{}' may surround it, and '=' ('x = 72')
MATH_AROUND = re.compile(r"\^(?!\{?\\circ)|\\(?!(?:boxed|text[a-z]*|mathrm|mbox|left|right|circ)(?![A-Za-z]))[A-Za-z]+"
                         r"|[+*/_!<>×÷·√π∞−]|\s-\s|(?<!\d)\.\d")


def plain_gold(answer: str):
    """A number-type gold: GSM8K's text after '####' (or all of it) when it is one plain number ('72', '$1,000',
    '-0.5'), else None: '\\sqrt{2}', '9\\pi', '6!', '1/2' or '[2, \\infty)' are never one of their digits."""
    text = str(answer).rsplit("####", 1)[-1].replace(",", "").replace("$", "").strip()
    return gold_number(answer) if PLAIN_NUMBER.fullmatch(text) else None


def stated_number(content):
    """The number a number-type answer block states (parse_number's), unless math around it makes an expression."""
    return parse_number(content) if content is not None and not MATH_AROUND.search(content) else None


# %% [markdown]
# The reward that matters most, 1.0 for the gold answer; it alone knows the answer types (load_data keeps the rows it
# can grade, evaluate's accuracy is its full marks): a new answer type is a new branch here. Edit it, then rerun the
# cells below.
# %%
def correctness_reward(completions, answer, answer_type=None, **kwargs) -> list:
    """1.0 when the answer equals the gold, else 0.0; None for a gold the answer type cannot read (a broken label,
    which load_data drops and TRL skips). `answer_type`, one per row (load_data's column, from --answer_type):

    - "number" (GSM8K): the gold is one plain number, and the one <answer> block states it ('72', '$72.00',
      '72 clips', '\\boxed{72}', '1,000'); no other number, and no math around it ('\\sqrt{72}', '72^2').
    - "symbolic" (MATH): math-verify finds the answer equal to the gold, so '\\dfrac12', '1/2' and '0.5' are right
      for '\\frac{1}{2}', and intervals, equations, sets and matrices are graded. The answer is the one <answer>
      block, or the last \\boxed{} in it; with no block, the last \\boxed{} of the text. Needs math-verify.
    - None: number when the gold is a plain number, else symbolic.

    >>> correctness_reward(["<answer>0.5</answer>", "<answer>2</answer>"], answer=["1/2", "1/2"])
    [1.0, 0.0]
    """
    # math-verify's time limits are SIGALRM, which only the main thread can set (elsewhere they raise): none there
    seconds = 5 if threading.current_thread() is threading.main_thread() else None
    types = answer_type if isinstance(answer_type, list) else [answer_type] * len(completions)
    scores = []
    for completion, gold, kind in zip(completions, answer, types):
        target, text = plain_gold(gold), completion_text(completion)
        kind = kind or ("number" if target is not None else "symbolic")
        if kind == "number":
            value = stated_number(extract_answer(text)) if target is not None else None
            scores.append(None if target is None else float(value is not None and value == target))
        elif kind == "symbolic":
            expected, given = symbolic_gold(gold), symbolic_answer(text)
            if expected is None or not given or len(given) > 1000:  # no gold to read, or no answer to check
                scores.append(None if expected is None else 0.0)
            else:
                scores.append(math_verify_score(expected, given, seconds))
        else:
            raise ValueError(f"correctness_reward: answer_type {kind!r} is neither 'number' nor 'symbolic'")
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
# The rubric of (reward, weight) pairs: add your reward here, and rerun this cell after editing any reward above.
# %%
# (reward function, weight): format and bonus terms pay 1.0 together, a right answer 2.0: format never beats solving.
RUBRIC = [
    (correctness_reward, 2.0),
    (numeric_answer_reward, 0.25),
    (strict_format_reward, 0.25),
    (lenient_format_reward, 0.25),
    (tag_count_reward, 0.25),
]


# %% [markdown]
# How correctness_reward reads a symbolic-type gold and answer (MATH-style), which math-verify then compares.
# %%
# What sympy could compute for hours (towers of powers, 3-digit exponents, factorials of 4 digits or of a group)
HUGE = re.compile(r"\^\s*\{[^{}]*[\^!]|\^\s*\{?\s*-?\d{3,}|(?:\d{4,}|[)}])\s*!")


def last_boxed(text: str):
    """The content of the last \\boxed{...} in the text (nested braces allowed), else None."""
    start = text.rfind("\\boxed{")
    if start == -1:
        return None
    depth, start = 0, start + len("\\boxed")
    for brace in re.finditer(r"[{}]", text[start:]):
        depth += 1 if brace.group() == "{" else -1
        if depth == 0:
            return text[start + 1:start + brace.start()]
    return None


def symbolic_gold(answer: str):
    """A symbolic-type gold: the text after '####', else the last \\boxed{} (a whole MATH solution), else all of it.
    None when empty, or in words outside \\text{}: math-verify would grade 'see the manual' as a product s*e*e*..."""
    text = str(answer)
    text = (text.rsplit("####", 1)[-1] if "####" in text else last_boxed(text) or text).strip()
    words = re.sub(r"\\(?:text[a-z]*|mathrm|mbox|operatorname|begin|end)\{[^{}]*\}|\\[A-Za-z]+", "", text)
    return text if text and len(text) <= 1000 and not re.search(r"[A-Za-z]{3}", words) else None


def symbolic_answer(text: str):
    """A symbolic-type answer: the one <answer> block, or the last \\boxed{} in it; with no block at all, the last
    \\boxed{} of the text. None when there is none (several or unclosed blocks, like no block, state no answer)."""
    if "<answer>" not in text and "</answer>" not in text:
        return last_boxed(text)
    content = extract_answer(text)
    return None if content is None else (last_boxed(content) or content).strip()


@functools.lru_cache(maxsize=65536)  # a GRPO group shares its gold and often repeats an answer: each pair once
def math_verify_score(gold: str, answer: str, seconds):
    """1.0 when math-verify finds the answer equal to the gold, else 0.0; None when it reads nothing in the gold.
    `seconds`: its time limit, or None where no limit can be set (then what could compute for hours scores 0)."""
    from math_verify import parse, verify  # sympy loads at the first symbolic answer: GSM8K never needs it

    if seconds is None and (HUGE.search(gold) or HUGE.search(answer)):
        return None if HUGE.search(gold) else 0.0
    gold_read = parse(f"\\boxed{{{gold}}}", parsing_timeout=seconds)
    if not gold_read:
        return None
    return float(verify(gold_read, parse(f"\\boxed{{{answer}}}", parsing_timeout=seconds), timeout_seconds=seconds))


# %% [markdown]
# ## Training
# The call that trains: the rubric wired into TRL's `GRPOTrainer`. Then how a run is judged: the held-out metrics
# `evaluate` reports before and after training, and the reward the run monitor watches.
# %%
OUTCOME_REWARD = "correctness_reward"  # the reward the run monitor compares the others with
HELD_OUT_TABLE = ("accuracy", "format_rate")  # the before/after table printed at the end
ACCURACY_IS = "correctness_reward's 1.0: the gold number, or an expression equal to the gold (--answer_type)"


def build_trainer(script_args, training_args, model_args, tokenizer, train_dataset, rewards):
    """TRL's GRPOTrainer with `rewards`, RUBRIC's functions (main() may wrap the first to print samples)."""
    return GRPOTrainer(
        model=load_model(model_args, training_args),
        reward_funcs=rewards,
        args=training_args,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args),
        quantization_config=get_quantization_config(model_args),
    )


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
    # Accuracy is the outcome reward's full marks and format the strict layout, whatever else RUBRIC holds; the
    # rewards get each row's columns (the gold, its answer_type), as in training
    columns = {name: [value for value, row in zip(dataset[name], answers) for _ in row]
               for name in dataset.column_names if name != "prompt"}
    correct = [float(score is not None and score >= 1.0) for score in outcome_reward()(flat, **columns)]
    greedy = [first for first in range(0, len(flat), 1 + samples)]
    metrics = {"accuracy": sum(correct[i] for i in greedy) / len(greedy),
               "format_rate": sum(strict_format_reward([flat[i] for i in greedy])) / len(greedy),
               "num_examples": len(greedy), "questions_per_process": trainer._questions_per_process,
               "sample_completion": answers[0][0]}
    if samples:
        metrics.update(instruments.sample_metrics([sum(correct[i + 1:i + 1 + samples]) for i in greedy], samples))
    if trajectories is not None and trainer.accelerator.is_main_process:  # given with instruments.py
        scores = iter(instruments.score(RUBRIC, flat, **columns))
        with open(trajectories, "a", encoding="utf-8") as f:
            for prompt, gold, texts in zip(dataset["prompt"], golds, answers):
                f.write(json.dumps({"step": step, "prompt": prompt, "answer": gold, "completions": [
                    {"text": text, "greedy": i == 0, "parsed_answer": extract_answer(text), **next(scores)}
                    for i, text in enumerate(texts)]}) + "\n")
    return metrics


# %% [markdown]
# # Machinery
# ---- machinery: the same in every script, held identical by tests; you rarely need to edit below ----
#
# What the script needs to run on its own. What a forker does not edit is imported, one copy for every script: the
# run instruments (instruments.py), the sandbox (sandbox.py). docs/how_it_works.md: "Which file holds what".
# %% [markdown]
# ## Flags
# The flags (and YAML), with the offline demo's settings when there is no GPU, and the settings they imply.
# %%
class RecipeError(Exception):
    """A problem with the input, reported as one line that says how to fix it."""


class RunStopped(Exception):
    """A service the rewards need (a judge's server, say) went away mid-run: stop, keeping what was trained."""


def parse_args(argv=None):
    """CLI/YAML/main([...]) -> [script_args, training_args, model_args, instrument_args (with instruments.py)]."""
    if argv is None:  # in Jupyter/Colab, sys.argv holds the kernel's own arguments: ignore them
        argv = [] if "ipykernel" in sys.modules else sys.argv[1:]
    argv = [str(a) for a in argv]
    flags = [ScriptArguments, RecipeConfig, ModelConfig] + ([instruments.InstrumentArguments] if instruments else [])
    try:  # first the model the flags or YAML name, if any: with none and no GPU, the demo's settings are the defaults
        argv = instruments.config_resolved(argv) if instruments else argv  # the YAML's paths: from its own folder
        # Abbreviations are refused: --max_step would set --max_steps, and a typo could set another flag
        model_flags, parser = (TrlParser(dataclasses, allow_abbrev=False) for dataclasses in ([ModelConfig], flags))
        named = None if {"-h", "--help"} & set(argv) else model_flags.parse_args_and_config(
            argv, return_remaining_strings=True)[0].model_name_or_path
        demo = named is None and not torch.cuda.is_available()
        if demo:  # underneath the user's flags and YAML, which still win
            parser.set_defaults_with_config(**DEMO_SETTINGS)
        parsed = parser.parse_args_and_config(argv)
    except ValueError as error:  # GRPOConfig and the instruments' flags check their values as they are built
        message = str(error).splitlines()[0]
        if "not used by the HfArgumentParser" in message and instruments is None:
            message += " (the run instruments' flags need instruments.py: copy it beside this script)"
        raise RecipeError(instruments.explain(message, flags) if instruments else message) from None
    script_args, training_args, model_args, *instrument_args = parsed
    if demo and not (instrument_args and instrument_args[0].replay):  # a replay loads no model
        data = script_args.dataset_name  # the line names what this run trains on, the user's data or the toy set
        toy = (f" (the toy set, in place of DEFAULT_DATASET {DEFAULT_DATASET[0]!r}: pass --dataset_name to use "
               "another)") if data == DEMO_SETTINGS.get("dataset_name") else ""
        print(f"No CUDA GPU and no --model_name_or_path: the offline demo's model {model_args.model_name_or_path}, "
              f"data {data}{toy}. Pass --model_name_or_path {DEFAULT_MODEL} to train a real model.")
    model_args.model_name_or_path = model_args.model_name_or_path or DEFAULT_MODEL
    if model_args.use_peft and model_args.lora_r < 1:
        raise RecipeError(f"--lora_r {model_args.lora_r}: a LoRA adapter needs a rank of 1 or more: pass --lora_r 16 "
                          "(a usual rank), or leave out --use_peft")
    if training_args.max_steps == 0:  # TRL would train one step anyway, and save it
        raise RecipeError("--max_steps 0 trains nothing: pass --max_steps 1 or more, or --eval_only to evaluate "
                          "the model without training it")
    if script_args.dataset_name is None:
        script_args.dataset_name, script_args.dataset_config = DEFAULT_DATASET
    return parsed


def complete_config(config, name: str):
    """RecipeConfig's derived settings: the precision the hardware supports, CPU-only settings, and the run's folder:
    outputs/<this script's file name>/<time> (`name` where there is no file, as in a notebook), or the folder of the
    checkpoint it resumes. A fork (grpo_sql.py) so writes to outputs/grpo_sql, not to its original's folder."""
    cuda = torch.cuda.is_available()
    if config.bf16 is None and config.fp16 is None:
        config.bf16 = cuda and torch.cuda.is_bf16_supported(including_emulation=False)  # T4: emulated
        config.fp16 = cuda and not config.bf16
    config.bf16, config.fp16 = bool(config.bf16), bool(config.fp16)
    if not cuda:
        config.dataloader_pin_memory = False  # pinning only helps copies to a GPU
        # torchrun without GPUs: one gloo group on CPU, not N unaware copies of a one-process run
        config.use_cpu = config.use_cpu or int(os.environ.get("WORLD_SIZE", "1")) > 1
    if config.output_dir is None:  # a new run's own folder, or the folder of the checkpoint it continues
        resumed = config.resume_from_checkpoint not in (None, "last")
        config.output_dir = (str(Path(config.resume_from_checkpoint).resolve().parent) if resumed
                             else time.strftime(f"outputs/{script_name(name)}/%Y%m%d-%H%M%S"))


def script_name(default: str) -> str:
    """This file's name without .py (a copy renamed grpo_sql.py says grpo_sql); `default` in a notebook."""
    return Path(globals()["__file__"]).stem if "__file__" in globals() else default


# %% [markdown]
# ## Model and tokenizer
# What GRPOTrainer loads (a PEFT adapter folder merged into its base model), and a tokenizer with a chat template.
# %%
def load_model(model_args, training_args):
    """What GRPOTrainer gets as its model: the id or folder itself (loaded with the model flags), except for a PEFT
    adapter folder (what --use_peft saves), which becomes its base model with the adapter merged in."""
    training_args.model_init_kwargs = {**(training_args.model_init_kwargs or {}), "dtype": model_args.dtype,
                                       "revision": model_args.model_revision,
                                       "attn_implementation": model_args.attn_implementation}
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

    name = model_args.model_name_or_path
    if Path(name).is_dir() and not any((Path(name) / f).exists() for f in ("config.json", "adapter_config.json")):
        raise RecipeError(f"--model_name_or_path {name} is a folder with no model in it (no config.json): pass a "
                          "folder a run saved (its output folder, or a checkpoint-N in it) or a Hub id")
    try:
        tokenizer = AutoTokenizer.from_pretrained(name, revision=model_args.model_revision,
                                                  trust_remote_code=training_args.trust_remote_code)
    except OSError:
        raise RecipeError(f"cannot load model '{name}': not a local folder, and not reachable on the Hugging Face "
                          "Hub. Check the id and your network, or pass a local --model_name_or_path") from None
    problem = instruments.template_problem(tokenizer, name) if instruments else None  # no template, no system turn
    if problem:
        raise RecipeError(problem)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


# %% [markdown]
# ## Reading data
# A dataset from the Hub or a local file, its splits, and held-out rows when it has no test split.
# %%
def read_dataset(name: str, config, flag: str = "--dataset_name"):
    """A Hub dataset, or a local file or folder, as a DatasetDict (datasets infers a file's format from its name)."""
    from datasets import load_dataset

    path = Path(name).expanduser()
    try:  # a single file is its folder with that one data file (HumanEval.jsonl.gz too)
        # the folder made absolute: a bare name's folder is '.', which datasets 5 reads as no dataset at all
        return (load_dataset(str(path.resolve().parent), data_files=path.name) if path.is_file()
                else load_dataset(str(path.resolve()) if path.is_dir() else name, config))
    except (ConnectionError, OSError, ValueError) as error:  # no such file or config, no network, an unknown format
        raise RecipeError(f"cannot load dataset '{name}' ({str(error).splitlines()[0][:150]}): check the id or path "
                          f"given to {flag} and your network, or pass a local file, e.g. {flag} data.jsonl") from None
    except Exception as error:  # datasets' DatasetGenerationError: a file it found but could not parse
        if type(error).__name__ != "DatasetGenerationError":
            raise
        raise RecipeError(f"cannot read dataset '{name}': {first_bad_json_line(path) or str(error).splitlines()[0]}"
                          ": fix or remove that line") from None


def first_bad_json_line(path: Path) -> str | None:
    """'FILE, line N is not JSON (...)' for the first such line of a .jsonl file (or of one in a folder); None."""
    for file in [path] if path.is_file() else sorted(path.rglob("*.jsonl")) if path.is_dir() else []:
        if not file.name.endswith(".jsonl"):
            continue
        with open(file, encoding="utf-8", errors="replace") as lines:
            for number, line in enumerate(lines, 1):
                try:
                    line.strip() and json.loads(line)
                except ValueError as error:
                    return f"{file}, line {number} is not JSON ({error.msg}: {line.strip()[:40]!r})"
    return None


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
    split = train.train_test_split(test_size=size, seed=seed) if size else {"train": train, "test": train.select([])}
    return split["train"], split["test"]


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
    trainer._questions_per_process = gather_object([len(my_rows)])
    by_row = dict(gather_object(answered))  # the padding repeats rows: one answer per row
    model.train(was_training)
    tokenizer.padding_side = padding_side
    return [by_row[row] for row in rows]


# %% [markdown]
# ## main
# Train, evaluate before and after, and report; with instruments.py beside this script, the run instruments too.
# %%
def outcome_reward():
    """RUBRIC's function named OUTCOME_REWARD: the one grader of an answer. load_data keeps the rows it can grade,
    training pays what it says, evaluate's accuracy is its full marks: a fork to a new answer type edits it alone."""
    found = [func for func, _ in RUBRIC if getattr(func, "__name__", None) == OUTCOME_REWARD]
    if not found:
        names = ", ".join(getattr(func, "__name__", repr(func)) for func, _ in RUBRIC)
        raise RecipeError(f"OUTCOME_REWARD is {OUTCOME_REWARD!r}, which is not a reward in RUBRIC ({names}): set it "
                          "to the name of the reward that grades the answer")
    return found[0]


def main(argv=None):
    """Train, evaluate before and after (with --eval_only, only evaluate). `argv` is a list of flags; None reads
    sys.argv."""
    outcome_reward()  # a stale OUTCOME_REWARD is one line, before any flag is read or model loaded
    script_args, training_args, model_args, *instrument_args = parse_args(argv)
    run = instruments.Run(globals(), script_args, training_args, model_args, *instrument_args) if instruments else None
    if run and run.args.replay:  # no model, no data: the recorded completions, scored with RUBRIC as it is now
        return run.replay()
    tokenizer = load_tokenizer(model_args, training_args)
    # grpo_search.py's load_data also returns the corpus, which its build_trainer indexes
    train_dataset, eval_dataset, *recipe_data = load_data(script_args, tokenizer, training_args.seed)
    args, prompts = training_args, len(train_dataset)
    per_batch = args.generation_batch_size // args.num_generations  # prompts one generation batch takes
    if not script_args.eval_only and prompts < per_batch:  # TRL would train 0 steps, and end as if it had trained
        fits = prompts * args.num_generations * args.per_device_train_batch_size // args.generation_batch_size
        raise RecipeError(f"{prompts} training prompts, fewer than one generation batch takes ({per_batch}: "
                          f"{args.generation_batch_size} completions / --num_generations {args.num_generations}): "
                          f"add prompts, or lower --per_device_train_batch_size to {fits} or less")
    training_args.reward_weights = training_args.reward_weights or [weight for _, weight in RUBRIC]
    rewards = [func for func, _ in RUBRIC]
    if run:  # the first reward also prints samples and logs the rows' columns; --skip_zero_signal's prompt index
        rewards, train_dataset, eval_dataset = run.prepare(rewards, train_dataset, eval_dataset)
    trainer = build_trainer(script_args, training_args, model_args, tokenizer, train_dataset, rewards, *recipe_data)

    def held_out(name):  # with the instruments, also the evaluation's trajectory file, its step and its samples
        return evaluate(trainer, eval_dataset, script_args.eval_batch_size,
                        **(run.evaluation(trainer, name) if run else {}))

    if script_args.eval_only:  # no optimizer, no trainer state, no checkpoint
        results = {"eval_only": held_out("eval_only")}
    else:
        results = {"before": held_out("before")}
        if run:  # the signal report, the run monitor, mid-run evaluation, --skip_zero_signal
            run.watch(trainer, results["before"], eval_dataset)
        resume = training_args.resume_from_checkpoint  # a folder, or "last": transformers finds the newest one
        try:
            trainer.train(resume_from_checkpoint=True if resume == "last" else resume)
        except KeyboardInterrupt:  # Ctrl-C: where it stopped, and how to go on, in one line
            raise RecipeError(f"stopped at step {trainer.state.global_step}; the checkpoints are in "
                              f"{training_args.output_dir}: continue with --resume_from_checkpoint last "
                              f"--output_dir {training_args.output_dir}") from None
        except RunStopped as why:  # nothing trained is lost: a checkpoint of the steps done, optimizer and all
            trainer._save_checkpoint(trainer.model, trial=None)
            raise RecipeError(f"stopped at step {trainer.state.global_step}: {why}; saved in "
                              f"{training_args.output_dir}/checkpoint-{trainer.state.global_step}: when it is back, "
                              f"continue with --resume_from_checkpoint last --output_dir {training_args.output_dir}"
                              ) from None
        trainer.save_model(training_args.output_dir)
        trainer.save_state()  # trainer_state.json: the full log history, next to the final model
        results["after"] = held_out("after")
    if run:  # eval.json, training_curves.png, the before/after table and the monitor's warnings
        run.report(trainer, results)
    elif trainer.accelerator.is_main_process:
        for name, scores in results.items():
            print(f"held-out {name}: " + ", ".join(f"{key} {scores[key]:.2f}" for key in HELD_OUT_TABLE
                                                   if scores.get(key) is not None))
    trainer.accelerator.wait_for_everyone()  # the main process wrote the results: now all leave together
    trainer.end()  # closes trackers and the process group
    return results


# %% active="py"
if __name__ == "__main__":
    try:
        main()
    except RecipeError as error:
        sys.exit(f"{Path(sys.argv[0]).name}: error: {error}")
