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
"""Multi-turn tool-use GRPO in one file: a small model learns to call a calculator, read the
result, and answer.

Each rollout is a conversation: the model may call tools (`calculator`, `run_python`) in its chat template's native
tool-call format, TRL runs them and appends the results, and the model goes on until it writes a final
`<answer>...</answer>`. The reward is on the outcome (is the answer right?) plus small terms for tool calls that ran,
and a penalty for calls beyond a budget. Tool results are shown to the model but never trained on.

Run it
    python grpo_tools.py                                  # no GPU: offline demo on a tiny model (~2.5 min)
    python grpo_tools.py --max_steps 200                  # one GPU: Qwen2.5-0.5B-Instruct on GSM8K with tools
    python grpo_tools.py --use_peft --learning_rate 2e-5  # LoRA
    python grpo_tools.py --config my_run.yaml             # any flag, from a YAML file
    accelerate launch --config_file accelerate_configs/ddp.yaml --num_processes 4 grpo_tools.py
        # 4 GPUs, data parallel; accelerate_configs/ has ZeRO-2, ZeRO-3 and FSDP files too
    torchrun --nproc_per_node 2 grpo_tools.py             # two processes on CPU: tries the launch path
    python grpo_tools.py --eval_only --eval_num_samples 8 # no training: will GRPO learn anything?
    python grpo_tools.py --help                           # every flag
From Python or a notebook: `import grpo_tools; grpo_tools.main(["--max_steps", "10"])`.

What to expect
    CPU demo (measured, 2 cores): the tiny model starts out guessing (held-out accuracy 0.00,
    no tool calls under greedy decoding); after 200 steps it calls the calculator on every
    question, every call runs, and accuracy is 0.85. About 2.5 minutes in all. See README.md.
    GPU (estimates): Qwen2.5-0.5B-Instruct calls the calculator on most GSM8K questions from the
    start; training raises the share of calls that run and the accuracy over a few hundred steps.
Outputs, in --output_dir: checkpoints, the final model, eval.json (held-out scores before and after, the monitor's
warnings), training_curves.png and every evaluated answer in eval_*.jsonl (README: Watching a run).

How this departs from textbook GRPO: as grpo_math.py (beta = 0, DAPO token-level loss, one
optimisation step per generation batch, a weighted rubric), plus multi-turn rollouts whose tool
results are masked out of the loss.

Model support: TRL drives tool calls only for chat templates it recognises (Qwen2.5, Qwen3,
Llama 3.1/3.2, GLM-4, gpt-oss, Gemma 4, LFM2, Nemotron 3, ...); other models get a clear error.
"""

import array, ast, contextlib, copy, functools, glob, importlib.util, inspect, json, math, operator  # noqa: E401
import os, re, shutil, signal, socket, subprocess, sys, sysconfig, tempfile, threading, time, warnings  # noqa: E401
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import torch
from transformers import Trainer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer, ModelConfig, TrlParser, get_peft_config, get_quantization_config


def arg(default, help):
    """A config field whose comment is also its --help text."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: default, metadata={"help": help})
    return field(default=default, metadata={"help": help})


# %% [markdown]
# ## Config
# The system prompt the model must follow and the model to train: change `DEFAULT_MODEL` to train another one
# (its chat template must be one TRL can drive tool calls with).
# %%
SYSTEM_PROMPT = """Use the tools for arithmetic. Give the final answer as <answer>number</answer>."""

DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"  # native tool calls in a template TRL recognises; fits a T4
DEFAULT_DATASET = ("openai/gsm8k", "main")  # what --dataset_name means when it is not given


# %% [markdown]
# Data, tool and evaluation settings, each also a flag of `main([...])`, e.g. `main(["--tool_call_budget", "2"])`.
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
    max_prompt_tokens: int = arg(1024, "Prompts longer than this (tool descriptions included) are dropped.")
    tool_call_budget: int = arg(3, "Calls per rollout before tool_budget_penalty starts to cost.")
    num_eval_examples: int = arg(200, "Held-out questions scored before and after training (0 = skip).")
    eval_batch_size: int = arg(32, "Questions per generate() call during evaluation.")
    print_samples_every: int = arg(25, "Print one sample trajectory every this many steps (0 = never).")
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
# Training settings: TRL's `GRPOConfig` with this recipe's defaults, tool-call rounds included (change one or pass it).
# %%
@dataclass
class RecipeConfig(GRPOConfig):
    """TRL's GRPOConfig with this recipe's defaults. Every other GRPOConfig field is a flag too."""

    output_dir: str = arg(None, "Where checkpoints, eval.json and plots go. Default: outputs/grpo_tools/<time>.")
    learning_rate: float = arg(5e-6, "Full fine-tuning of a 0.5B model; with --use_peft try 2e-5.")
    lr_scheduler_type: str = arg("cosine", "Learning-rate schedule.")
    warmup_steps: int = arg(10, "Linear warm-up steps.")
    max_grad_norm: float = arg(0.1, "Aggressive clipping keeps early, noisy RL updates small.")
    per_device_train_batch_size: int = arg(8, "Rollouts per device per step (not prompts).")
    gradient_accumulation_steps: int = arg(4, "Generation batch = batch x accumulation x GPUs = 32 rollouts.")
    num_generations: int = arg(8, "Rollouts per prompt; GRPO compares them. Must divide the generation batch.")
    max_completion_length: int = arg(512, "Tokens per rollout, all turns and tool results included.")
    max_tool_calling_iterations: int = arg(4, "Tool-call rounds per rollout; ends loops that never answer.")
    max_steps: int = arg(300, "Optimizer steps (overrides num_train_epochs).")
    logging_steps: int = arg(5, "Log (and plot) every this many steps.")
    save_steps: int = arg(50, "Checkpoint every this many steps; --resume_from_checkpoint continues from one.")
    gradient_checkpointing: bool = arg(True, "Trade compute for memory; needed for full fine-tuning on a T4.")
    bf16: bool = arg(None, "Default: on where the GPU supports bf16, off on T4s (fp16 is used) and on CPU (fp32).")
    fp16: bool = arg(None, "Default: on for GPUs without bf16 (e.g. a T4), off otherwise.")
    report_to: str = arg("none", "Experiment tracker: none, trackio, wandb, tensorboard.")
    resume_from_checkpoint: str = arg(None, "A checkpoint folder, or 'last' for the newest one in --output_dir.")

    def __post_init__(self):
        apply_hardware_defaults(self, "outputs/grpo_tools")  # precision for the hardware, the run's folder
        super().__post_init__()


# %% [markdown]
# The offline demo's settings, used when there is no CUDA GPU: a tiny model and toy data from `assets/` (no network).
# %%
# These replace the defaults above (flags and YAML still win).
ASSETS = Path(__file__).resolve().parent / "assets" if "__file__" in globals() else Path("assets").resolve()
DEMO_SETTINGS = dict(
    model_name_or_path=str(ASSETS / "tiny-qwen-tools"),  # made by assets/make_demo_assets.py
    dataset_name=str(ASSETS / "toy_tools"),               # train.jsonl / test.jsonl: products of 2-digit numbers
    learning_rate=2e-4,
    lr_scheduler_type="constant",
    warmup_steps=0,
    max_grad_norm=1.0,
    per_device_train_batch_size=32,
    gradient_accumulation_steps=1,
    num_generations=8,
    max_completion_length=96,
    max_steps=200,
    save_steps=50,
    gradient_checkpointing=False,
    eval_batch_size=200,
    mid_eval_steps=40,  # held-out accuracy at 6 points of the run, plotted beside the reward
    num_mid_eval_examples=64,
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
# ## Tools
# The calculator's limits and the syntax-tree walk behind it, which allows numbers and arithmetic and nothing else:
# raise a limit here, or add an operator to `_CALC_OPS`.
# %%
# Tools are plain functions the model may call during a rollout. TRL builds each tool's JSON schema from the type
# hints and the Google-style docstring: its text before `Args:` is the description the model reads in every prompt,
# so it stays short. Tools return text and never raise: a failure comes back as "Error: ..." for the model to read.
CALCULATOR_MAX_CHARS = 200        # longer input is refused before it is parsed
CALCULATOR_MAX_ABS = 10**100      # bound on every number and intermediate result
CALCULATOR_MAX_EXPONENT = 10_000  # bound on |b| in a ** b, checked before computing
_CALC_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
             ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_CALC_REFUSED = {ast.Name: "names", ast.Attribute: "attribute access", ast.Call: "function calls",
                 ast.Lambda: "lambdas", ast.Subscript: "indexing", ast.Compare: "comparisons",
                 ast.BoolOp: "and/or", ast.ListComp: "comprehensions", ast.GeneratorExp: "comprehensions"}


def _calc_check(x):
    if isinstance(x, complex):
        raise ValueError("the result is not a real number")
    if (isinstance(x, float) and not math.isfinite(x)) or abs(x) > CALCULATOR_MAX_ABS:
        raise ValueError("a number or intermediate result is too large (limit 1e100)")
    return x


def _calc_eval(node):
    """Walk the syntax tree, allowing only numbers and arithmetic: no names, calls or attributes exist here."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):  # not bool, complex or str
        return _calc_check(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _calc_eval(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _CALC_OPS:
        a, b = _calc_eval(node.left), _calc_eval(node.right)
        if isinstance(node.op, ast.Pow):  # refuse before computing: 9**9**9 would take minutes and gigabytes
            if abs(b) > CALCULATOR_MAX_EXPONENT:
                raise ValueError(f"exponent {b} is too large (limit {CALCULATOR_MAX_EXPONENT})")
            if b > 0 and abs(a) > 1 and b * math.log10(abs(a)) > math.log10(CALCULATOR_MAX_ABS):
                raise ValueError("the power is too large (limit 1e100)")
        return _calc_check(_CALC_OPS[type(node.op)](a, b))
    what = _CALC_REFUSED.get(type(node), type(node).__name__)
    if isinstance(node, ast.Constant):
        what = "text" if isinstance(node.value, (str, bytes)) else f"{type(node.value).__name__} values"
    raise ValueError(f"{what} not allowed: use numbers, + - * / // % ** and parentheses")


# %% [markdown]
# `calculator` evaluates an expression and returns the result, or any failure as an `Error: ...` text for the model
# to read; change how results are written here.
# %%
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression, e.g. "(12 + 30) * 3 / 7", with numbers, + - * / // % ** and parentheses.

    Args:
        expression: The arithmetic expression to evaluate, at most 200 characters.

    Returns:
        The result as text, e.g. "42" or "3.5", or a message starting with "Error: ".
    """
    expression = str(expression).strip()
    if len(expression) > CALCULATOR_MAX_CHARS:  # also keeps the parser and the tree walk shallow
        return f"Error: expression too long ({len(expression)} characters, limit {CALCULATOR_MAX_CHARS})"
    try:
        with warnings.catch_warnings():  # "43x36" would also print a SyntaxWarning
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(expression, mode="eval")
        value = _calc_eval(tree.body)
    except SyntaxError as e:
        return f"Error: not a valid arithmetic expression ({e.msg})"
    except ZeroDivisionError:
        return "Error: division by zero"
    except OverflowError:
        return "Error: a result is too large"
    except (RecursionError, MemoryError):
        return "Error: expression too deeply nested"
    except Exception as e:  # the refusals raised above, and anything unforeseen: never raise to the trainer
        return f"Error: {e}"
    if isinstance(value, float):  # 5.0 -> "5", 1/3 -> "0.3333333333"
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.10g}"
    return str(value)


# %% [markdown]
# The limits of `run_python`'s sandbox (time, memory, file size, output): tighten or loosen one here. What the
# sandbox contains, and what not, is written above `run_python` below the machinery line: read it before you
# offer this tool to a model.
# %%
PYTHON_WALL_S = 5                 # wall-clock limit of one run_python call
PYTHON_CPU_S = 5                  # CPU seconds (SIGXCPU)
PYTHON_MEMORY_BYTES = 512 * 2**20  # address space (RLIMIT_AS): large allocations raise MemoryError
PYTHON_FILE_BYTES = 2**20         # any one file, its captured output included (RLIMIT_FSIZE)
PYTHON_TMP_BYTES = 64 * 2**20     # the call's whole /tmp (its working directory); /dev/shm gets a quarter
PYTHON_MAX_PROCESSES = 64         # processes of "nobody", all calls together (only set when dropping root)
PYTHON_MAX_CODE_CHARS = 100_000   # longer code is refused
PYTHON_OUTPUT_CHARS = 2000        # returned to the model: the start and the end of longer output


# %% [markdown]
# `ToolEnvironment`, one per rollout: its public methods are the tools the model is offered (their docstrings are
# what it reads) and it counts calls and failures for the rewards; add a method to offer another tool.
# %%
class ToolEnvironment:
    """One per rollout (TRL's environment_factory); rewards read its tally through their `environments` argument."""

    budget = 3  # calls before tool_budget_penalty starts to cost; build_trainer sets --tool_call_budget

    def reset(self, **row):
        self.calls, self.failures = 0, 0
        return None  # nothing to add to the question

    def calculator(self, expression: str) -> str:
        """Evaluate an arithmetic expression.

        Args:
            expression: Arithmetic with + - * / ** and parentheses, e.g. "23 * 47".
        """
        return self._tally(calculator(expression))

    def run_python(self, code: str) -> str:
        """Run a short Python program and return what it prints.

        Args:
            code: Python source code; use print() to show results.
        """
        return self._tally(run_python(code))

    def _tally(self, result: str) -> str:
        self.calls += 1
        self.failures += result.startswith("Error")
        return result


# %% [markdown]
# ## Rubric
# Helpers the rewards share: the final answer of a trajectory, its one `<answer>` block and the number in it.
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
# The reward that matters most, 1.0 for the gold number in the final answer block: edit it, then run it and every
# cell below again.
# %%
def correctness_reward(completions, answer, **kwargs) -> list:
    """1.0 when the final <answer> block states the gold number, else 0.0; None when the gold states none."""
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
# The share of a rollout's tool calls that ran without error; a rollout that made no call has no say (`None`).
# %%
def tool_success_reward(environments, **kwargs) -> list:
    """Share of this rollout's tool calls that ran without error; None (no say) when it made none."""
    return [(env.calls - env.failures) / env.calls if env.calls else None for env in environments]


# %% [markdown]
# A penalty for calls beyond `--tool_call_budget`, down to -1.0, so that calling tools in a loop does not pay.
# %%
def tool_budget_penalty(environments, **kwargs) -> list[float]:
    """0.0 up to the budget (--tool_call_budget), then -1/budget per extra call, down to -1.0."""
    return [-min(1.0, max(0, env.calls - env.budget) / max(1, env.budget)) for env in environments]


# %% [markdown]
# Turn-level credit, 0.5 per tool call that ran, capped at 1.0, for using the tools at all.
# %%
def successful_call_credit(environments, **kwargs) -> list[float]:
    """0.5 per tool call that ran, capped at 1.0: turn-level credit for using tools well."""
    return [min(1.0, 0.5 * (env.calls - env.failures)) for env in environments]


# %% [markdown]
# The rubric of (reward, weight) pairs: add your own reward here, and run this cell again after editing any reward
# above; keep the tool terms together below a correct answer.
# %%
# (reward function, weight). A correct answer pays 1.0; every tool term together pays at most
# 0.4 (tests/test_grpo_tools.py checks the cap), so tool use never outweighs being right.
RUBRIC = [
    (correctness_reward, 1.0),
    (tool_success_reward, 0.2),
    (successful_call_credit, 0.2),
    (tool_budget_penalty, 0.2),
]


# %% [markdown]
# ## Training
# The call that trains: the tools and the rubric wired into TRL's `GRPOTrainer`. Then how a run is judged: the
# held-out metrics `evaluate` reports before and after training, and the reward the run monitor watches.
# %%
OUTCOME_REWARD = "correctness_reward"  # the reward the run monitor compares the others with
HELD_OUT_TABLE = ("accuracy", "tool_call_success", "mean_tool_calls")  # the before/after table printed at the end
ACCURACY_IS = "the gold number in the final answer block"


def build_trainer(script_args, training_args, model_args, tokenizer, train_dataset, rewards):
    """TRL's GRPOTrainer with the tools (one ToolEnvironment per rollout) and `rewards`, RUBRIC's functions."""
    ToolEnvironment.budget = script_args.tool_call_budget
    try:
        return GRPOTrainer(
            model=load_model(model_args),
            reward_funcs=rewards,
            args=training_args,
            train_dataset=train_dataset,
            processing_class=tokenizer,
            environment_factory=ToolEnvironment,
            peft_config=get_peft_config(model_args),
            quantization_config=get_quantization_config(model_args),
        )
    except ValueError as error:  # TRL drives tool calls only for the chat templates it knows
        raise template_error(error, model_args.model_name_or_path, tokenizer.chat_template) from None


def replay_environment(script_args, row: dict):
    """--replay: a fresh ToolEnvironment, reset with a recorded row, for the rollout's recorded tool calls to run in
    again; the rewards that read `environments` are scored on it (--tool_call_budget as the replay passes it)."""
    ToolEnvironment.budget = script_args.tool_call_budget
    environment = ToolEnvironment()
    environment.reset(**row)
    return environment


def run_facts(script_args) -> dict:
    """What eval.json records about the run besides the model, the dataset and the scores."""
    return {}


def evaluate(trainer, dataset, batch_size: int, num_samples: int = 1, trajectories: Path | None = None,
             step: int | None = None) -> dict:
    """Greedy multi-turn rollouts on held-out questions, tools enabled: accuracy, tool-call success (share of calls
    that parsed and ran) and tool calls per question; with num_samples > 1 also pass@1, pass@N and the signal
    report. Every rollout and its rewards go to `trajectories` (one JSON line per question)."""
    if len(dataset) == 0:
        return {}
    samples = num_samples if num_samples > 1 else 0
    found = rollouts(trainer, dataset, batch_size, samples)
    golds = list(dataset["answer"])
    flat = [rollout.messages for row in found for rollout in row]
    envs = [rollout.env for row in found for rollout in row]
    answers = [gold for gold, row in zip(golds, found) for _ in row]
    scores = score(flat, answer=answers, environments=envs)
    correct = correctness_reward(flat, answers)  # whatever RUBRIC holds: a rubric under test must not grade itself
    greedy = list(range(0, len(flat), 1 + samples))
    calls = sum(envs[i].calls for i in greedy)
    failures = sum(envs[i].failures for i in greedy)
    metrics = {"accuracy": sum(correct[i] for i in greedy) / len(greedy),
               "tool_call_success": (calls - failures) / calls if calls else 0.0,
               "mean_tool_calls": calls / len(greedy), "num_examples": len(greedy),
               "questions_per_process": trainer._questions_per_process, "sample_trajectory": flat[0]}
    if samples:
        metrics.update(sample_metrics([sum(correct[i + 1:i + 1 + samples]) for i in greedy], samples))
    if trajectories is not None and trainer.accelerator.is_main_process:
        with open(trajectories, "a", encoding="utf-8") as f:
            for n, (prompt, gold, first) in enumerate(zip(dataset["prompt"], golds, greedy)):
                f.write(json.dumps({"step": step, "prompt": prompt, "answer": gold, "completions": [
                    {"text": flat[i], "greedy": i == first, "parsed_answer": extract_answer(completion_text(flat[i])),
                     **scores[i]} for i in range(first, first + 1 + samples)]}, default=str) + "\n")
    return metrics


# %% [markdown]
# # Machinery
# ---- machinery: the same in every script, held identical by tests; you rarely need to edit below ----
#
# Above: this recipe's settings, data, tools, rubric and the call that trains. Below: how every script runs. Each
# part is written out in every script that needs it, word for word, and tests/test_shared_blocks.py holds the
# copies equal, so that a fix goes into every copy.
# %% [markdown]
# ## The sandbox behind `run_python`
# The code that sets up namespaces and drops privileges; its limits (`PYTHON_*`) are set above the line.
# %%
_SANDBOX, _SANDBOX_LOCK = None, threading.Lock()

# The zygote: one Python process started once, inside its own mount and PID namespaces. It builds a read-only root
# that holds only the interpreter, its standard library and the libraries they load, moves into it (pivot_root)
# and waits. For each call it forks a child that takes fresh mount, PID, network, IPC and UTS namespaces and a
# fresh /tmp, reads the code from the call's own socket, and runs it in a grandchild as "nobody". A fork of a
# waiting interpreter costs far less than starting one, and every call starts from the same clean state: the
# zygote never reads code itself, so nothing of one call can reach another through it.
_SANDBOX_ZYGOTE = r"""
import array, ctypes, json, os, resource, shutil, signal, socket, stat, struct, sys, traceback, types
cfg, libc = json.loads(sys.argv[1]), ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
control = socket.socket(fileno=cfg["control"])
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_NOATIME, MS_NODIRATIME = 1, 2, 4, 8, 32, 1024, 2048
MS_BIND, MS_MOVE, MS_REC, MS_RELATIME, MNT_DETACH = 4096, 8192, 16384, 1 << 21, 2
NEW_MOUNT, NEW_UTS, NEW_IPC, NEW_PID, NEW_NET = 0x20000, 0x4000000, 0x8000000, 0x20000000, 0x40000000
PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_SET_KEEPCAPS, PR_CAP_AMBIENT, NOBODY = 4, 24, 38, 8, 47, 65534
prctl = getattr(libc, "prctl", lambda *args: -1)

# Landlock + seccomp, for where namespaces are refused (Docker's default seccomp profile, Ubuntu 24.04's AppArmor):
# both need no privileges. Landlock (ABI 1+) lets this process open only the interpreter's read-only paths and its
# own folder; from ABI 4 it refuses TCP bind/connect, from ABI 6 signals and abstract sockets leaving the process
# tree. The seccomp filter refuses what Landlock does not cover: any new socket (socketpair and pipes still work),
# tracing other processes, mounts and namespaces, leaving the process group (so every process of the call is killed
# with it), and kernel-facing calls no program of this kind needs. Syscall numbers: (x86_64, aarch64).
SYSCALLS = dict(socket=(41, 198), setsid=(112, 157), setpgid=(109, 154), ptrace=(101, 117),
                process_vm_readv=(310, 270), process_vm_writev=(311, 271), mount=(165, 40), umount2=(166, 39),
                pivot_root=(155, 41), chroot=(161, 51), unshare=(272, 97), setns=(308, 268), kexec_load=(246, 104),
                kexec_file_load=(320, 294), bpf=(321, 280), perf_event_open=(298, 241), keyctl=(250, 219),
                add_key=(248, 217), request_key=(249, 218), userfaultfd=(323, 282), io_uring_setup=(425, 425),
                io_uring_enter=(426, 426), io_uring_register=(427, 427), init_module=(175, 105),
                finit_module=(313, 273), delete_module=(176, 106), personality=(135, 92), open_tree=(428, 428),
                move_mount=(429, 429), fsopen=(430, 430), fsconfig=(431, 431), fsmount=(432, 432),
                fspick=(433, 433), mount_setattr=(442, 442), open_by_handle_at=(304, 265),
                name_to_handle_at=(303, 264))
CLONE, CLONE3, CLONE_NEW_ANY = (56, 220), (435, 435), 0x7E020080  # any CLONE_NEW* flag
ARCH = {"x86_64": (0, 0xC000003E), "aarch64": (1, 0xC00000B7)}.get(os.uname().machine)

def landlock_abi():
    return libc.syscall(444, None, 0, 1) if ARCH else -1  # landlock_create_ruleset(NULL, 0, VERSION)

def prepare_containment(read_only, read_write):  # once, in the zygote: the parts contain() hands the kernel
    # in each call: the Landlock ruleset's attribute, a rule per path (opened here), and the seccomp program
    global LANDLOCK
    abi = landlock_abi()
    ok(0 if abi >= 1 else -1, "Landlock")
    fs = (1 << 13) - 1 | (abi >= 2 and 1 << 13) | (abi >= 3 and 1 << 14) | (abi >= 5 and 1 << 15)  # all it knows
    attr = struct.pack("<QQQ", fs, 3 if abi >= 4 else 0, 3 if abi >= 6 else 0)[:8 if abi < 4 else 16 if abi < 6 else 24]
    reading, file_rights = 1 | 4 | 8, 1 | 2 | 4 | (abi >= 3 and 1 << 14) | (abi >= 5 and 1 << 15)
    rules = []
    for path, rights in [(p, reading) for p in read_only] + [(p, 2 | 4) for p in read_write]:
        try:
            fd = os.open(path, os.O_PATH)
        except OSError:
            continue
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= file_rights  # a file takes only file rights
        rules.append(ctypes.create_string_buffer(struct.pack("<Qi", rights & fs, fd), 12))  # packed: u64, s32
    LANDLOCK = (ctypes.create_string_buffer(attr, len(attr)), fs, rules, seccomp_program())

def contain(work):  # in a call's own process: Landlock (the prepared paths, `work` with every right), seccomp
    attr, fs, rules, (program, length) = LANDLOCK
    ruleset = libc.syscall(444, attr, ctypes.c_size_t(len(attr)), 0)
    ok(0 if ruleset >= 0 else -1, "landlock_create_ruleset")  # net and scope handled with no rule: refused
    fd = os.open(work, os.O_PATH)
    for rule in rules + [ctypes.create_string_buffer(struct.pack("<Qi", fs, fd), 12)]:
        ok(0 if libc.syscall(445, ruleset, 1, rule, 0) == 0 else -1, "landlock_add_rule")
    ok(0 if libc.syscall(446, ruleset, 0) == 0 else -1, "landlock_restrict_self")
    os.close(ruleset); os.close(fd)
    fprog = struct.pack("HxxxxxxQ", length, ctypes.addressof(program))  # struct sock_fprog
    ok(prctl(22, 2, ctypes.c_char_p(fprog), 0, 0), "seccomp")  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER

def seccomp_program():
    which, audit_arch = ARCH
    LD, JEQ, JGE, JSET, RET, ALLOW, EPERM, ENOSYS, KILL = 0x20, 0x15, 0x35, 0x45, 0x06, 0x7FFF0000, 0x50001, 0x50026, 0x80000000
    program = [(LD, 4), ("jump", JEQ, audit_arch, None, "kill"), (LD, 0)]  # the architecture, then the number
    program += [("jump", JGE, 0x40000000, "kill", None)] if which == 0 else []  # x32 calls
    program += [("jump", JEQ, numbers[which], "eperm", None) for numbers in SYSCALLS.values()]
    program += [("jump", JEQ, CLONE[which], "clone", None), ("jump", JEQ, CLONE3[which], "enosys", None),
                (RET, ALLOW), "clone", (LD, 16), ("jump", JSET, CLONE_NEW_ANY, "eperm", None), (RET, ALLOW),
                "eperm", (RET, EPERM), "enosys", (RET, ENOSYS), "kill", (RET, KILL)]  # clone3: glibc falls back
    labels, code = {}, [step for step in program if not isinstance(step, str)]
    for step in program:
        if isinstance(step, str):
            labels[step] = sum(not isinstance(s, str) for s in program[:program.index(step)])
    def offset(label, pc):
        return 0 if label is None else labels[label] - pc - 1
    data = b"".join(struct.pack("<HBBI", s[1], offset(s[3], pc), offset(s[4], pc), s[2]) if s[0] == "jump"
                    else struct.pack("<HBBI", s[0], 0, 0, s[1]) for pc, s in enumerate(code))
    return ctypes.create_string_buffer(data, len(data)), len(code)

def ok(result, what):
    if result != 0:
        raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")

def mount(src, dst, fstype=None, flags=0, data=None):
    ok(libc.mount(src and src.encode(), dst.encode(), fstype and fstype.encode(), flags, data and data.encode()),
       f"mount {dst}")

def bind_read_only(path, inside, device):
    mount(path, inside, None, MS_BIND | MS_REC)
    f = os.statvfs(path).f_flag  # keep the source's flags: a user namespace may not clear them
    kept = (f & 15) | (f & 1024 and MS_NOATIME) | (f & 2048 and MS_NODIRATIME) | (f & 4096 and MS_RELATIME)
    mount(None, inside, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | kept | (0 if device else MS_NODEV))

def add(stage, path, device=False):  # `path` at its own place inside, with the symlinks on the way to it
    parts = path.strip("/").split("/")
    for i in range(1, len(parts) + 1):
        host = "/" + "/".join(parts[:i])
        if os.path.islink(host):  # e.g. /lib -> usr/lib: the same link inside, then what it points to
            if not os.path.lexists(stage + host):
                os.symlink(os.readlink(host), stage + host)
            return add(stage, os.path.join(os.path.realpath(host), *parts[i:]), device)
        if i < len(parts):
            os.makedirs(stage + host, exist_ok=True)
    if not os.path.lexists(stage + path):
        os.mkdir(stage + path) if os.path.isdir(path) else open(stage + path, "w").close()
        bind_read_only(path, stage + path, device)

def build_root(stage):
    mount("tmpfs", stage, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755")
    for path in cfg["paths"]:
        add(stage, path)
    for path in ("/dev/null", "/dev/zero", "/dev/urandom"):
        add(stage, path, device=True)
    for path in cfg["hidden"]:  # site-packages inside the standard library: an empty folder
        mount("tmpfs", stage + path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=755")
    for name in ("stdin", "stdout", "stderr"):
        os.symlink(f"/proc/self/fd/{('stdin', 'stdout', 'stderr').index(name)}", f"{stage}/dev/{name}")
    os.symlink("/proc/self/fd", f"{stage}/dev/fd")
    for path in ("/proc", "/tmp", "/dev/shm"):
        os.makedirs(stage + path, exist_ok=True)
    mount("/proc", stage + "/proc", None, MS_BIND | MS_REC)  # under each call's own /proc: user namespaces need it
    mount(None, stage, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir(stage)
    pivot_root = {"x86_64": 155, "aarch64": 41}.get(os.uname().machine)  # syscall numbers; glibc has no wrapper
    if pivot_root and libc.syscall(pivot_root, b".", b".") == 0:
        ok(libc.umount2(b".", MNT_DETACH), "detach the old root")  # the host's tree is gone from this namespace
    else:
        mount(stage, "/", None, MS_MOVE)
        ok(libc.chroot(b"."), "chroot")
    os.chdir("/")

def run_code(path, source, stdin, output, work):  # the code's own process: give up everything, then run it as `python -I`
    for number, fd in ((0, os.open("/dev/null", os.O_RDONLY) if stdin is None else stdin), (1, output), (2, output)):
        os.dup2(fd, number)
    os.setsid()  # its own process group, which seccomp then keeps it in: the call's end kills the whole group
    if cfg["landlock"]:  # Landlock + seccomp, while the prepared rules' descriptors are still open
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        contain(work)
    os.closerange(3, 1 << 16)  # no control socket, no result channel: the code cannot forge its own result
    os.chdir(work)
    for name, value in cfg["limits"].items():
        limit, hard = getattr(resource, name), resource.getrlimit(getattr(resource, name))[1]
        soft, new_hard = value, value + (name == "RLIMIT_CPU")  # CPU: SIGXCPU at soft, SIGKILL a second later
        if hard != resource.RLIM_INFINITY:
            soft, new_hard = min(soft, hard), min(new_hard, hard)
        resource.setrlimit(limit, (soft, new_hard))
    if cfg["drop"]:  # root -> nobody: cannot write the caller's files, read its secrets or raise its limits
        prctl(PR_SET_KEEPCAPS, int(cfg["landlock"]), 0, 0, 0)
        os.setgroups([]); os.setgid(NOBODY); os.setuid(NOBODY)
        if cfg["landlock"]:  # keep one right, through exec too: to read the interpreter wherever it is installed
            read_search = 1 << 2  # (/root/...); Landlock still decides what may be read at all
            libc.capset(ctypes.byref((ctypes.c_uint32 * 2)(0x20080522, 0)),
                        ctypes.byref((ctypes.c_uint32 * 6)(read_search, read_search, read_search, 0, 0, 0)))
            prctl(PR_CAP_AMBIENT, 2, 2, 0, 0)  # PR_CAP_AMBIENT_RAISE CAP_DAC_READ_SEARCH
    elif hasattr(libc, "capset"):  # root of a user namespace: give up every capability, for good
        for cap in range(64):
            prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
        libc.capset(ctypes.byref((ctypes.c_uint32 * 2)(0x20080522, 0)), ctypes.byref((ctypes.c_uint32 * 6)()))
    prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # setuid programs (su, sudo) cannot give privileges back
    os.environ.clear()
    os.environ.update(PATH="/usr/local/bin:/usr/bin:/bin", LANG="C.UTF-8", HOME=work, TMPDIR=work)  # tempfile
    for number in (signal.SIGALRM, signal.SIGCHLD):
        signal.signal(number, signal.SIG_DFL)
    import builtins, site
    site.setquit(); site.sethelper()  # exit(), quit() and help(), as in `python -I`
    main = types.ModuleType("__main__")
    main.__file__, main.__builtins__ = path, builtins
    sys.modules["__main__"], sys.argv, sys.dont_write_bytecode = main, [path], True
    rc = 0
    try:
        exec(compile(source, path, "exec"), main.__dict__)
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 0 if e.code is None else (print(e.code, file=sys.stderr), 1)[1]
    except BaseException as e:
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)  # from the code's own frames on
        rc = 1
    for finish in (lambda: sys.modules["threading"]._shutdown() if "threading" in sys.modules else None,
                   lambda: sys.modules["atexit"]._run_exitfuncs() if "atexit" in sys.modules else None,
                   sys.stdout.flush, sys.stderr.flush):
        try:
            finish()
        except BaseException:
            pass
    os._exit(rc & 255)

def serve(connection, stdin):  # one call, in a child of the zygote; `stdin`: a descriptor for the code, or None
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    if cfg["namespaces"]:
        ok(libc.unshare(NEW_MOUNT | NEW_PID | NEW_NET | NEW_IPC | NEW_UTS), "unshare")
        if os.fork():
            os._exit(0)  # the child is PID 1 of the new PID namespace: when it exits, all of the call's processes die
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        # The captured output: a file without a name on a tmpfs of its own, detached before the code runs, so the
        # code can neither open it again nor crowd it out by filling /tmp.
        mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={cfg['output'] + 2**16},nr_inodes=8,mode=700")
        output = os.open("/tmp", os.O_TMPFILE | os.O_RDWR, 0o600)
        ok(libc.umount2(b"/tmp", MNT_DETACH), "detach the output's tmpfs")
        for path, size in (("/tmp", cfg["tmp_bytes"]), ("/dev/shm", cfg["tmp_bytes"] // 4)):
            mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},nr_inodes=4096,mode=1777")
        work = "/tmp"
    else:
        work = os.path.join(cfg["scratch"], os.urandom(8).hex())
        os.mkdir(work, 0o700)
        if cfg["drop"]:
            os.chown(work, NOBODY, NOBODY)
        output = os.open(os.path.join(work, ".output"), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        os.unlink(os.path.join(work, ".output"))  # a file without a name: the code cannot open it again
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # the code may not trace this process or open its files
    chunks = []
    while chunk := connection.recv(1 << 16):
        chunks.append(chunk)
    source, path = b"".join(chunks), os.path.join(work, "main.py")
    with open(path, "wb") as f:
        f.write(source)
    fd = connection.detach()
    pid = os.fork()
    if pid == 0:
        try:
            run_code(path, source, stdin, output, work)
        finally:
            os._exit(1)  # run_code ends with os._exit itself: this is only reached if it failed before the code ran
    timed_out = []
    signal.signal(signal.SIGALRM, lambda *_: (timed_out.append(1), os.kill(pid, signal.SIGKILL)))
    signal.alarm(cfg["wall"])
    status = os.waitpid(pid, 0)[1]
    signal.alarm(0)
    rc = 124 if timed_out else os.waitstatus_to_exitcode(status)
    if not cfg["namespaces"]:  # no PID namespace: kill what is left of the code's process group, remove its folder
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        import shutil
        shutil.rmtree(work, ignore_errors=True)
    socket.socket(fileno=fd).sendall(b"%d\n" % (128 - rc if rc < 0 else rc) + os.pread(output, cfg["output"], 0))

try:
    if cfg["namespaces"]:
        build_root(cfg["stage"])
    elif cfg["landlock"]:
        prepare_containment(cfg["paths"] + ["/dev/zero", "/dev/urandom"], ["/dev/null"])
    control.send(b"ready")
except Exception as e:
    control.send(f"{type(e).__name__}: {e}".encode())
    sys.exit(1)
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # finished calls are reaped by the kernel
if not cfg["namespaces"]:  # a call's orphans come here when they end, and are reaped too (no PID 1 of their own)
    prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
while True:
    message, ancillary, _, _ = control.recvmsg(16, socket.CMSG_SPACE(8))
    if not message:
        break  # the caller is gone: so is this process, and with it (PID 1 of its namespace) every call
    fds = [fd for _, kind, data in ancillary if kind == socket.SCM_RIGHTS
           for fd in array.array("i", data[:len(data) - len(data) % 4])]  # the call's socket, then its stdin
    try:
        if fds and os.fork() == 0:
            control.close()
            try:
                serve(socket.socket(fileno=fds[0]), fds[1] if len(fds) > 1 else None)
            finally:
                os._exit(0)
    finally:
        for fd in fds:
            os.close(fd)
"""


def _sandbox_files():
    """What the sandbox's root holds besides devices: the interpreter, its standard library and the shared libraries
    they load (found by ldd), and the folders inside the standard library to show empty (site-packages)."""
    python = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    stdlib, dynload = os.path.dirname(os.__file__), sysconfig.get_config_var("DESTSHARED")
    objects = [python, *glob.glob(os.path.join(dynload or stdlib, "*.so"))]
    try:
        ldd = subprocess.run(["ldd", *objects], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        ldd = ""
    paths = {python, stdlib, dynload, "/etc/ld.so.cache", *re.findall(r"(?:=> |^\s+)(/\S+) \(0x", ldd, re.MULTILINE)}
    libc = [os.path.dirname(p) for p in paths if p and "/libc.so" in p]
    paths |= {os.path.join(d, "libgcc_s.so.1") for d in libc}  # loaded by glibc when a thread exits
    hidden = [os.path.join(stdlib, d) for d in ("site-packages", "dist-packages")]
    return python, sorted(p for p in paths if p and os.path.exists(p)), [d for d in hidden if os.path.isdir(d)]


class _Sandbox:
    """A running zygote (see _SANDBOX_ZYGOTE) in one containment mode, and the socket that asks it for calls."""

    def __init__(self, prefix, namespaces, drop, landlock=False):
        self.namespaces, self.drop, self.landlock = namespaces, drop, landlock
        self.mode = "namespaces" if namespaces else "landlock" if landlock else "plain"
        python, paths, hidden = _sandbox_files()
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.scratch = tempfile.mkdtemp(prefix="run_python_")  # the root's mount point; call folders without namespaces
        os.chmod(self.scratch, 0o711)
        limits = {"RLIMIT_AS": PYTHON_MEMORY_BYTES, "RLIMIT_CPU": PYTHON_CPU_S, "RLIMIT_FSIZE": PYTHON_FILE_BYTES,
                  "RLIMIT_CORE": 0, **({"RLIMIT_NPROC": PYTHON_MAX_PROCESSES} if drop else {})}
        cfg = {"control": theirs.fileno(), "namespaces": namespaces, "landlock": landlock, "drop": drop,
               "stage": self.scratch,
               "scratch": self.scratch, "paths": paths, "hidden": hidden, "limits": limits, "wall": PYTHON_WALL_S,
               "tmp_bytes": PYTHON_TMP_BYTES, "output": PYTHON_FILE_BYTES}
        self.process = subprocess.Popen(  # -S: no site-packages; -u: output reaches the file as it is printed
            [*prefix, python, "-I", "-S", "-u", "-c", _SANDBOX_ZYGOTE, json.dumps(cfg)], pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}, start_new_session=True)
        theirs.close()
        self.control.settimeout(60)
        try:
            self.status = self.control.recv(4096).decode("utf-8", "replace") or "the zygote exited"
        except OSError as e:
            self.status = f"no answer from the zygote ({e})"
        self.control.settimeout(None)

    def run(self, code, stdin=b""):
        """(exit status, output, whether the output hit the file-size limit) of one call; `stdin` is what the
        code reads from standard input (bytes, at most PYTHON_FILE_BYTES)."""
        if len(stdin) > PYTHON_FILE_BYTES:
            raise ValueError(f"stdin too long ({len(stdin)} bytes, limit {PYTHON_FILE_BYTES})")
        ours, theirs = socket.socketpair()  # this call's own channel: code in, status and output back
        # stdin travels as a descriptor of an in-memory file: the sandbox's processes never hold it in their memory,
        # so a process the code forks before reading its stdin has none of it
        stdin_file = os.fdopen(os.memfd_create("stdin"), "w+b") if stdin else None
        with ours:
            try:
                if stdin_file:
                    stdin_file.write(stdin)
                    stdin_file.flush()
                    stdin_file.seek(0)
                fds = [theirs.fileno(), *([stdin_file.fileno()] if stdin_file else [])]
                self.control.sendmsg([b"run"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
            finally:
                theirs.close()
                if stdin_file:
                    stdin_file.close()
            ours.settimeout(PYTHON_WALL_S + 10)  # a backstop: the sandbox enforces the limit itself
            try:
                ours.sendall(code.encode("utf-8", "surrogatepass"))
                ours.shutdown(socket.SHUT_WR)
                reply = bytearray()
                while len(reply) < PYTHON_FILE_BYTES + 16 and (chunk := ours.recv(1 << 16)):
                    reply += chunk
            except socket.timeout:
                return 124, "", False
        header, newline, output = bytes(reply).partition(b"\n")
        if not newline:
            raise RuntimeError("the sandbox ended the call without a result")
        return int(header), output.decode("utf-8", "replace"), len(output) >= PYTHON_FILE_BYTES

    def close(self):
        self.control.close()  # the zygote exits when its socket closes
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.scratch, ignore_errors=True)


SANDBOX_MODES = ("namespaces", "landlock", "plain")  # strongest first; GRPO_SANDBOX=<mode> forces one


def _start_sandbox(mode: str, failures: list):
    """A started sandbox in `mode` that can import a module and print, or None (the reasons go to `failures`)."""
    root, unshare = os.geteuid() == 0, shutil.which("unshare")
    ns = ["--mount", "--pid", "--fork", "--kill-child", "--mount-proc"]
    candidates = {"namespaces": [([unshare, *ns], True, root), ([unshare, "--user", "--map-root-user", *ns], True,
                                                                 False)] if unshare else [],
                  "landlock": [([], False, root, True)], "plain": [([], False, root)]}[mode]
    for candidate in candidates:
        sandbox = _Sandbox(*candidate)
        try:
            # plain mode as nobody may not reach the standard library (an interpreter under /root): it still
            # starts, as it always did, with its warning
            probe = "print('ok')" if mode == "plain" else "import ast\nprint('ok')"
            if sandbox.status == "ready" and sandbox.run(probe)[:2] == (0, "ok\n"):
                return sandbox
            failures.append(sandbox.status if sandbox.status != "ready" else f"{mode}: the probe call failed")
        except (OSError, RuntimeError, ValueError) as error:
            failures.append(f"{mode}: {error}")
        sandbox.close()
    return None


def _sandbox_mode():
    """The running sandbox, started on first use in the strongest mode that works here (SANDBOX_MODES, in order),
    or in the mode the GRPO_SANDBOX environment variable names (an error if that mode cannot start here)."""
    global _SANDBOX
    with _SANDBOX_LOCK:
        if _SANDBOX is None or _SANDBOX.process.poll() is not None:
            forced = os.environ.get("GRPO_SANDBOX", "").strip().lower()
            if forced and forced not in SANDBOX_MODES:
                raise RuntimeError(f"GRPO_SANDBOX={forced!r}: use one of {', '.join(SANDBOX_MODES)}, or unset it")
            sandbox, failures = None, []
            for mode in [forced] if forced else SANDBOX_MODES:
                sandbox = _start_sandbox(mode, failures)
                if sandbox is not None:
                    break
            if sandbox is None:
                raise RuntimeError((f"GRPO_SANDBOX={forced}: that mode cannot start here" if forced else
                                    "run_python: no sandbox mode can start here") + f" ({'; '.join(failures)[:300]})")
            _SANDBOX = sandbox
            print(f"run_python: sandbox mode {sandbox.mode}{' (forced by GRPO_SANDBOX)' if forced else ''}"
                  + (": Landlock + seccomp, no namespaces here (the code reads only the interpreter's files, "
                     "writes only its own folder, opens no socket)" if sandbox.mode == "landlock" else ""),
                  file=sys.stderr)
            if sandbox.mode == "plain":
                warnings.warn("run_python: no mount, PID or network namespace here: the code can read this machine's "
                              "files, reach the network, and background processes that call setsid() can outlive "
                              "the call" + ("; it runs as root" if os.geteuid() == 0 and not sandbox.drop else ""))
    return _SANDBOX


def _run_in_sandbox(code, stdin=b""):
    """Run `code` once, reading `stdin`: (exit status, output, whether the output hit the file-size limit)."""
    try:
        return _sandbox_mode().run(code, stdin)
    except (BrokenPipeError, ConnectionError):  # the zygote died (killed from outside): start another, once
        return _sandbox_mode().run(code, stdin)


os.register_at_fork(after_in_child=lambda: globals().update(_SANDBOX_LOCK=threading.Lock()))


# %% [markdown]
# ## `run_python`
# Runs a short program in that sandbox and returns what it prints; the comment above it says what the sandbox
# contains and what not: read it before you offer this tool to a model.
# %%
# What run_python contains, and what not (_sandbox_mode picks the strongest mode that works on the machine):
# - Where `unshare` works (as root, or with unprivileged user namespaces), each call gets new mount, PID, network,
#   IPC and UTS namespaces. Its filesystem is a read-only root holding only the interpreter, its standard library
#   (site-packages empty: no installed packages), the shared libraries they load, /dev/null, /dev/zero,
#   /dev/urandom and a private /proc; no repository, data, home or host /tmp. /tmp (its working directory, 64 MB)
#   and /dev/shm (16 MB) are fresh tmpfs mounts of that call alone: nothing written survives it or reaches another
#   call. No network at all (a loopback that is down, its own for each call). The code sees and can signal only
#   its own processes, and all of them die with the call, setsid() daemons and double forks included. Started as
#   root, the code runs as "nobody" with no_new_privs and at most 64 processes; in a user namespace it keeps no
#   capabilities. It has no descriptor of the sandbox's: its output goes to a file with no name, and the status is
#   reported by a process it cannot trace or signal.
# - Always: 5 s wall clock, 5 s CPU, 512 MB address space, 1 MB per file written (its captured output included;
#   2,000 characters come back), no core dumps, an empty environment (PATH and LANG only), `python -I` semantics,
#   and every call a fork of the same clean interpreter (the code never sees another call's code or state).
# - Where namespaces are refused (Docker's default seccomp profile, Ubuntu 24.04's AppArmor) but the kernel has
#   Landlock (Linux 5.13 on): Landlock + seccomp, no privileges needed. The code opens only the interpreter's files
#   (read-only), its own fresh folder (its working directory, removed after the call) and /dev/null; it cannot
#   open a socket (pipes and socketpair work), trace processes, mount, unshare or leave its process group, so
#   every process of the call is killed with it. Started as root, it runs as "nobody" (at most 64 processes),
#   keeping only the right to read the interpreter wherever it is installed. Not contained there: whether a host
#   path exists, and its size and owner (stat works everywhere); system facts (uname, CPU count, load); and before
#   Linux 6.12 (Landlock ABI 6), signals to other processes of the same user, such as a concurrent call's.
# - With neither (with a warning): the code can read this machine's files, the network is reachable, daemons
#   that call setsid() can outlive the call, files written outside the working directory stay (each at most 1 MB),
#   other processes of the same user are visible in /proc, and the code runs as root where "nobody" cannot.
# - GRPO_SANDBOX=namespaces|landlock|plain forces a mode (an error if it cannot start); the mode in use is printed
#   once. benchmarks/bench_sandbox.py measures what each mode contains here, and what a call costs.
# - Never: the kernel is shared (an exploit escapes); disk, memory and CPU bandwidth are not reserved. This is for
#   a model's code with hidden tests and scratch arithmetic, not for hostile code: for untrusted workloads use a
#   real sandbox (gVisor, Firecracker microVMs, nsjail, or a locked-down container per call).
def run_python(code: str) -> str:
    """Run a short Python program in a throwaway sandbox and return what it prints (stdout and stderr).

    Limits: 5 seconds, 512 MB of memory, the standard library only, no network; files it writes are discarded,
    so print what you need.

    Args:
        code: The Python source to run, e.g. "print(sum(range(10)))".

    Returns:
        The printed output (at most 2000 characters), or "Error: " with the reason and any output.
    """
    if not isinstance(code, str):
        return "Error: code must be a string of Python source"
    if len(code) > PYTHON_MAX_CODE_CHARS:
        return f"Error: code too long ({len(code)} characters, limit {PYTHON_MAX_CODE_CHARS})"
    try:
        rc, output, flooded = _run_in_sandbox(code)
    except Exception as e:  # e.g. no space left for the temp dir: report it, never crash the trainer
        return f"Error: could not run the code ({type(e).__name__}: {e})"
    if len(output) > PYTHON_OUTPUT_CHARS:  # keep the start and the end, where a traceback's last line is
        half = PYTHON_OUTPUT_CHARS // 2
        output = f"{output[:half]}\n... [{len(output) - 2 * half} characters cut] ...\n{output[-half:]}"
    if rc == 0 and not flooded:
        return output or "(no output: print the values you need)"
    signals = {int(s): s.name for s in signal.valid_signals() if isinstance(s, signal.Signals)}
    if flooded:  # Python ignores SIGXFSZ: its writes fail instead, and so does printing the traceback
        reason = f"the output exceeded the size limit ({PYTHON_FILE_BYTES // 2**20} MB)"
    elif rc == 124:
        reason = f"timed out after {PYTHON_WALL_S} s"
    elif rc == 128 + signal.SIGXCPU:
        reason = f"CPU time limit ({PYTHON_CPU_S} s) exceeded"
    elif rc - 128 in signals:  # SIGKILL: the hard CPU limit; SIGSEGV: often a C extension out of memory
        reason = f"killed by {signals[rc - 128]}"
    else:
        reason = f"exit status {rc}"
    return f"Error: {reason}\n{output}".rstrip()


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
# ## Multi-turn rollouts
# Held-out conversations generated the way training generates them: by TRL's own generation step
# (`GRPOTrainer._generate`). So TRL's parser for the model's chat template finds the tool calls, all turns share
# `max_completion_length`, `max_tool_calling_iterations` caps the rounds, a tool result that would overflow the
# budget ends the conversation, the ids kept are the ids sampled, and vLLM generates when --use_vllm is on. Only
# the decoding differs: greedy, or the training temperature for the sampled copies.
# %%
@dataclass
class Rollout:
    messages: list  # after the prompt: the assistant's turns (with their tool calls) and the tool results, in order
    env: "ToolEnvironment"  # the rollout's own environment, as the rewards see it
    completion_ids: list  # the token ids after the prompt, as training would score them
    tool_mask: list  # 1 for each id the model generated, 0 for tool results and template tokens


@torch.no_grad()
def rollouts(trainer, dataset, batch_size: int, num_samples: int = 0) -> list[list[Rollout]]:
    """For each row: [its greedy rollout, then `num_samples` sampled at the training temperature]."""
    if not all(hasattr(trainer, name) for name in ("_generate", "_env_tools", "_metrics")):
        import trl

        raise RecipeError(f"TRL {trl.__version__} lacks the GRPOTrainer internals the held-out evaluation runs "
                          "through: install the TRL these scripts were tested with, pip install 'trl==1.16.*'")
    model = trainer.model
    was_training = model.training
    model.eval()  # TRL generates in its eval mode: nothing counted as training tokens
    results, rows = [], list(range(len(dataset)))
    # Each process answers an equal share (short shares padded with repeats), so that all call TRL's generation
    # step equally often; within a call the tool rounds run as in training.
    with trainer.accelerator.split_between_processes(rows, apply_padding=True) as my_rows:
        for start in range(0, len(my_rows), batch_size):
            batch_rows = my_rows[start:start + batch_size]
            batch = dataset.select(batch_rows)
            found = [[] for _ in batch_rows]
            for sample, copies in ((False, 1), (True, num_samples)) if num_samples else ((False, 1),):
                inputs = [batch[i] for i in range(len(batch)) for _ in range(copies)]
                with decoding(trainer, sample, copies), episodes(trainer, inputs) as (prompts, envs):
                    _, completion_ids, tool_mask, completions, *_ = trainer._generate(prompts)
                for i, env in enumerate(envs):
                    found[i // copies].append(Rollout(completions[i], env, completion_ids[i], tool_mask[i]))
            results += zip(batch_rows, found)
    trainer._metrics["eval"].clear()  # what TRL logged about these calls belongs to no training step
    from accelerate.utils import gather_object

    trainer._questions_per_process = gather_object([len(my_rows)])
    by_row = dict(gather_object(results))  # the padding repeats rows: one result per row
    model.train(was_training)
    return [by_row[row] for row in rows]


@contextlib.contextmanager
def decoding(trainer, sample: bool, copies: int):
    """TRL's generation settings for one evaluation call: greedy unless `sample`; put back afterwards."""
    names = ("generation_config", "generation_kwargs", "num_generations_eval")
    saved = {name: getattr(trainer, name) for name in names if hasattr(trainer, name)}
    vllm = getattr(trainer, "vllm_generation", None)
    saved_temperature = getattr(vllm, "temperature", None)
    if not sample:
        greedy = dict(do_sample=False, temperature=None, top_p=None, top_k=None, min_p=None)
        if "generation_config" in saved:  # transformers' generate()
            trainer.generation_config = copy.deepcopy(trainer.generation_config)
            trainer.generation_config.update(**greedy)
            trainer.generation_kwargs = {**trainer.generation_kwargs, **greedy}
        if vllm is not None:
            vllm.temperature = 0.0  # vLLM's greedy decoding
    trainer.num_generations_eval = copies  # vLLM server mode answers each distinct prompt `copies` times
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(trainer, name, value)
        if vllm is not None:
            vllm.temperature = saved_temperature


@contextlib.contextmanager
def episodes(trainer, inputs: list[dict]):
    """(prompts, environments) for one evaluation call: a fresh environment per rollout, reset with its row, and
    the tools TRL's loop calls, set up as GRPOTrainer._generate_and_score_completions does in training."""
    names = ("environments", "_batch_environments", "_sync_tool_dicts", "_async_tool_dicts")
    saved = {name: getattr(trainer, name, None) for name in names}
    make_environment = next(iter(trainer.environment_factories.values()))  # ToolEnvironment, or what it was given
    envs, prompts = [make_environment() for _ in inputs], []
    for env, row in zip(envs, inputs):
        observation = env.reset(**row)  # text it returns ends the prompt, as in training
        prompt = list(row["prompt"])
        if isinstance(observation, str):
            prompt[-1] = {**prompt[-1], "content": prompt[-1]["content"] + observation}
        prompts.append(prompt)
    tools = [trainer._standalone_tools + tools_of(env) for env in envs]
    trainer.environments, trainer._batch_environments = envs, [None] * len(envs)
    trainer._sync_tool_dicts = [{t.__name__: t for t in ts if not inspect.iscoroutinefunction(t)} for ts in tools]
    trainer._async_tool_dicts = [{t.__name__: t for t in ts if inspect.iscoroutinefunction(t)} for ts in tools]
    try:
        yield prompts, envs
    finally:
        for name, value in saved.items():
            setattr(trainer, name, value)


def tools_of(env: ToolEnvironment) -> list:
    """The environment's tools, as TRL offers them: its public methods but reset() and get_reward(), by name."""
    return [getattr(env, name) for name, _ in inspect.getmembers(type(env), inspect.isfunction)
            if not name.startswith("_") and name not in ("reset", "get_reward")]


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
