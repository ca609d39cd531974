# %% [markdown]
# ## Imports
# From this project: instruments.py (the run instruments) and sandbox.py (run_python's sandbox), both optional.
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
# ]
# ///
"""Multi-turn tool-use GRPO in one file: a small model learns to call a calculator, read the
result, and answer.

Each rollout is a conversation: the model may call tools (`calculator`, `run_python`) in its chat template's native
tool-call format, TRL runs them and appends the results, and the model goes on until it writes a final
`<answer>...</answer>`. The reward is on the outcome (is the answer right?) plus small terms for tool calls that ran,
and a penalty for calls beyond a budget. Tool results are shown to the model but never trained on.

Run it
    python grpo_tools.py                                  # no GPU: offline demo on a tiny model (1.4 min)
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
    question, every call runs, and accuracy is 0.85. About 1.4 minutes in all. See docs/grpo_tools.md.
    GPU (estimates): Qwen2.5-0.5B-Instruct calls the calculator on most GSM8K questions from the
    start; training raises the share of calls that run and the accuracy over a few hundred steps.
Outputs, in --output_dir: checkpoints and the final model; with instruments.py, eval.json, training_curves.png and
every evaluated rollout in eval_*.jsonl (docs/watching.md).

How this departs from textbook GRPO: as grpo_math.py (beta = 0, DAPO token-level loss, one
optimisation step per generation batch, a weighted rubric), plus multi-turn rollouts whose tool
results are masked out of the loss.

Model support: TRL drives tool calls only for chat templates it recognises (Qwen2.5, Qwen3,
Llama 3.1/3.2, GLM-4, gpt-oss, Gemma 4, LFM2, Nemotron 3, ...); other models get a clear error.
"""

import ast, copy, inspect, json, math, operator, os, re, sys, time, warnings  # noqa: E401
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

import torch
from trl import GRPOConfig, GRPOTrainer, ModelConfig, TrlParser, get_peft_config, get_quantization_config

try:  # the sandbox behind the run_python tool, one copy for every script (without it: the calculator alone)
    import sandbox
except ImportError:
    sandbox = None

try:  # the run instruments: the monitor, mid-run evaluation, replay, plots, eval.json (optional: docs/how_it_works.md)
    import instruments
except ImportError:
    instruments = None


def arg(default, help):
    """A config field whose comment is also its --help text."""
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
    eval_only: bool = arg(False, "Evaluate --model_name_or_path (a Hub id, a folder, a checkpoint, a PEFT adapter "
                                 "folder) on the held-out questions, write eval.json and the trajectories, and exit.")


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
        complete_config(self, "grpo_tools")  # precision for the hardware; outputs/<this file's name>/<time>
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

    def fits(row):  # the tools' descriptions are part of the prompt
        ids = tokenizer.apply_chat_template(row["prompt"], tools=tools_of(ToolEnvironment()),
                                            add_generation_prompt=True, tokenize=True, return_dict=False)
        return len(ids) <= script_args.max_prompt_tokens

    splits, grade = [], outcome_reward()
    for rows in (train, test):
        rows = rows.map(to_prompt, remove_columns=[c for c in rows.column_names if c != "answer"])
        # The rows the outcome reward can grade (None: a gold it cannot read), so that one function decides
        gradable = [grade([""], **{key: [value] for key, value in row.items()})[0] is not None for row in rows]
        dropped = [row["answer"] for row, ok in zip(rows, gradable) if not ok]
        if dropped:  # ungradable golds teach nothing: say so, and train on the rest
            if len(dropped) == len(rows):
                raise RecipeError(f"{OUTCOME_REWARD} can grade no answer of dataset '{name}' (e.g. "
                                  f"{dropped[0][-40:]!r}, not a single number): check --answer_column")
            print(f"dropped {len(dropped)} of {len(rows)} rows whose answer {OUTCOME_REWARD} cannot grade (e.g. "
                  f"{dropped[0][-40:]!r}, not a single number): check --answer_column")
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
# `calculator` evaluates an expression, e.g. "(12 + 30) * 3 / 7", and returns the result ("42", "3.5"), or any failure
# as an `Error: ...` text for the model to read; change how results are written here.
# %%
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression.

    Args:
        expression: Arithmetic with + - * / ** and parentheses, e.g. "23 * 47".
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
# `run_python` runs a program in the sandbox of sandbox.py, which says what it contains and holds its limits
# (`sandbox.PYTHON_*`). `TOOLS` is what the model is offered: delete an entry (and its function) to withdraw a tool,
# append a function like these (type hints, a docstring with `Args:`, text back, "Error: ..." on failure) to add one.
# %%
def run_python(code: str) -> str:
    """Run a short Python program and return what it prints.

    Args:
        code: Python source code; use print() to show results.
    """
    return sandbox.run_python(code)


TOOLS = [calculator, run_python]  # a tool's name, arguments and docstring are what the model reads, in every prompt
if sandbox is None:  # sandbox.py is not beside this script: offer the other tools, and say so
    TOOLS = [tool for tool in TOOLS if tool.__name__ != "run_python"]
    print("run_python is off: sandbox.py is not beside this script, so it is not offered")


# %% [markdown]
# `ToolEnvironment`, one per rollout: each tool in `TOOLS` becomes one of its methods, as TRL wants them, which also
# counts calls and failures for the rewards (their `environments` argument).
# %%
class ToolEnvironment:
    """One per rollout (TRL's environment_factory); rewards read its tally through their `environments` argument."""

    budget = 3  # calls before tool_budget_penalty starts to cost; build_trainer sets --tool_call_budget

    def reset(self, **row):
        self.calls, self.failures = 0, 0
        return None  # nothing to add to the question

    def _tally(self, result: str) -> str:
        self.calls += 1
        self.failures += str(result).startswith("Error")
        return result


def as_method(tool):
    """`tool` as a ToolEnvironment method that tallies its result; TRL reads its name, arguments and docstring."""
    def method(self, *args, **kwargs):
        return self._tally(tool(*args, **kwargs))

    signature, receiver = inspect.signature(tool), inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    method.__signature__ = signature.replace(parameters=[receiver, *signature.parameters.values()])
    method.__name__, method.__doc__, method.__annotations__ = tool.__name__, tool.__doc__, dict(tool.__annotations__)
    return method


for _tool in TOOLS:  # TRL offers the environment's public methods, listed by name
    setattr(ToolEnvironment, _tool.__name__, as_method(_tool))


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
            model=load_model(model_args, training_args),
            reward_funcs=rewards,
            args=training_args,
            train_dataset=train_dataset,
            processing_class=tokenizer,
            environment_factory=ToolEnvironment,
            peft_config=get_peft_config(model_args),
            quantization_config=get_quantization_config(model_args),
        )
    except ValueError as error:  # TRL drives tool calls only for the chat templates it knows
        why = instruments and instruments.unsupported_template(error, model_args.model_name_or_path,
                                                            tokenizer.chat_template)
        raise (RecipeError(why) if why else error) from None


def replay_environment(script_args, row: dict):
    """--replay: a fresh ToolEnvironment, reset with a recorded row, for the rollout's recorded tool calls to run in
    again; the rewards that read `environments` are scored on it (--tool_call_budget as the replay passes it)."""
    ToolEnvironment.budget = script_args.tool_call_budget
    environment = ToolEnvironment()
    environment.reset(**row)
    return environment


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
    # Accuracy is the outcome reward's full marks (OUTCOME_REWARD), whatever else RUBRIC holds
    correct = [float(score is not None and score >= 1.0)
               for score in outcome_reward()(flat, answer=answers, environments=envs)]
    greedy = list(range(0, len(flat), 1 + samples))
    calls = sum(envs[i].calls for i in greedy)
    failures = sum(envs[i].failures for i in greedy)
    metrics = {"accuracy": sum(correct[i] for i in greedy) / len(greedy),
               "tool_call_success": (calls - failures) / calls if calls else 0.0,
               "mean_tool_calls": calls / len(greedy), "num_examples": len(greedy),
               "questions_per_process": trainer._questions_per_process, "sample_trajectory": flat[0]}
    if samples:
        metrics.update(instruments.sample_metrics([sum(correct[i + 1:i + 1 + samples]) for i in greedy], samples))
    if trajectories is not None and trainer.accelerator.is_main_process:  # given with instruments.py
        scores = instruments.score(RUBRIC, flat, answer=answers, environments=envs)
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
# ## Multi-turn rollouts
# Held-out conversations generated the way training generates them: by TRL's own generation step
# (`GRPOTrainer._generate`). So TRL's parser for the model's chat template finds the tool calls, all turns share
# `max_completion_length`, `max_tool_calling_iterations` caps the rounds, a tool result that would overflow the
# budget ends the conversation, the ids kept are the ids sampled, and vLLM generates when --use_vllm is on. Only
# the decoding differs: greedy, or the training temperature for the sampled copies.
# %%
TESTED_TRL = "1.16"  # _generate and the tool dicts are TRL's internals: requirements.txt bounds trl to this release
GREEDY = dict(do_sample=False, temperature=None, top_p=None, top_k=None, min_p=None)


@dataclass
class Rollout:
    messages: list  # after the prompt: the assistant's turns (with their tool calls) and the tool results, in order
    env: "ToolEnvironment"  # the rollout's own environment, as the rewards see it
    completion_ids: list  # the token ids after the prompt, as training would score them


@torch.no_grad()
def rollouts(trainer, dataset, batch_size: int, num_samples: int = 0) -> list[list[Rollout]]:
    """For each row: [its greedy rollout, then `num_samples` sampled at the training temperature]."""
    import trl
    from accelerate.utils import gather_object

    if not trl.__version__.startswith(TESTED_TRL + "."):
        raise RecipeError(f"TRL {trl.__version__} is installed, but evaluation drives GRPOTrainer internals tested "
                          f"with TRL {TESTED_TRL} only: pip install 'trl=={TESTED_TRL}.*'")
    names = ("generation_config", "generation_kwargs", "num_generations_eval", "environments", "_batch_environments",
             "_sync_tool_dicts", "_async_tool_dicts")
    saved, vllm = {name: getattr(trainer, name, None) for name in names}, getattr(trainer, "vllm_generation", None)
    temperature, was_training = getattr(vllm, "temperature", None), trainer.model.training
    make_environment = next(iter(trainer.environment_factories.values()))  # ToolEnvironment, or what it was given
    trainer.model.eval()  # TRL generates in its eval mode: nothing counted as training tokens
    results, rows = [], list(range(len(dataset)))
    try:  # each process answers an equal share (padded with repeats): all call TRL's generation step equally often
        with trainer.accelerator.split_between_processes(rows, apply_padding=True) as my_rows:
            for start in range(0, len(my_rows), batch_size):
                batch = [dataset[i] for i in my_rows[start:start + batch_size]]
                found = [[] for _ in batch]
                for sample, copies in ((False, 1), (True, num_samples)) if num_samples else ((False, 1),):
                    # decoding: greedy, or as in training; vLLM server mode answers each prompt `copies` times
                    trainer.generation_config = saved["generation_config"]
                    trainer.generation_kwargs = saved["generation_kwargs"]
                    trainer.num_generations_eval = copies
                    if not sample and trainer.generation_config is not None:  # transformers' generate()
                        trainer.generation_config = copy.deepcopy(trainer.generation_config)
                        trainer.generation_config.update(**GREEDY)
                        trainer.generation_kwargs = {**trainer.generation_kwargs, **GREEDY}
                    if vllm is not None:
                        vllm.temperature = temperature if sample else 0.0
                    # a fresh environment per rollout, reset with its row, and its tools, as TRL sets them in training
                    inputs = [row for row in batch for _ in range(copies)]
                    envs, prompts = [make_environment() for _ in inputs], []
                    for env, row in zip(envs, inputs):
                        observation = env.reset(**row)  # text it returns ends the prompt, as in training
                        prompts.append(row["prompt"][:-1] + [{**row["prompt"][-1], "content": row["prompt"][-1][
                            "content"] + (observation if isinstance(observation, str) else "")}])
                    tools = [trainer._standalone_tools + tools_of(env) for env in envs]
                    trainer.environments, trainer._batch_environments = envs, [None] * len(envs)
                    trainer._sync_tool_dicts = [{t.__name__: t for t in ts if not inspect.iscoroutinefunction(t)}
                                                for ts in tools]
                    trainer._async_tool_dicts = [{t.__name__: t for t in ts if inspect.iscoroutinefunction(t)}
                                                 for ts in tools]
                    _, completion_ids, _, completions, *_ = trainer._generate(prompts)
                    for i, env in enumerate(envs):
                        found[i // copies].append(Rollout(completions[i], env, completion_ids[i]))
                results += zip(my_rows[start:start + batch_size], found)
    finally:
        for name, value in saved.items():
            setattr(trainer, name, value)
        if vllm is not None:
            vllm.temperature = temperature
        trainer.model.train(was_training)
    trainer._metrics["eval"].clear()  # what TRL logged about these calls belongs to no training step
    trainer._questions_per_process = gather_object([len(my_rows)])
    by_row = dict(gather_object(results))  # the padding repeats rows: one result per row
    return [by_row[row] for row in rows]


def tools_of(env: ToolEnvironment) -> list:
    """The environment's tools, as TRL offers them: its public methods but reset() and get_reward(), by name."""
    return [getattr(env, name) for name, _ in inspect.getmembers(type(env), inspect.isfunction)
            if not name.startswith("_") and name not in ("reset", "get_reward")]


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
