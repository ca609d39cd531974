# %% [markdown]
# ## Imports
# From this project: sandbox.py (runs the model's code and hidden tests; required), instruments.py (optional).
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
"""Agentic coding GRPO in one file: a small model writes a Python function, may run it, fixes it,
and is scored by hidden tests.

Each rollout is a conversation: the task is a function to write (a signature and docstring, or a
description and one example test), or in the other layouts a LeetCode class or a program that
reads stdin. The model may call `run_python` to try its code and read the output or the
traceback, and ends with its solution in one ```python block. Hidden tests, never
shown to the model, decide the reward: they run in the same sandbox, each test case scored on its
own, through a harness the code under test cannot fool (exiting early, objects that equal anything,
patched builtins, printed "passed" lines and reading the tests all score 0). Small terms pay for a
well-formed final block and for code runs that worked.

Run it
    python grpo_code.py                                  # no GPU: offline demo on a tiny model (1.3 min)
    python grpo_code.py --max_steps 200                  # one GPU: Qwen2.5-0.5B-Instruct, MBPP -> HumanEval
    python grpo_code.py --use_peft --learning_rate 2e-5  # LoRA
    python grpo_code.py --dataset_name tasks.jsonl       # your own tasks: a prompt, an entry point, tests
    python grpo_code.py --dataset_name tasks.jsonl --layout stdio  # programs and input/output pairs (docs/grpo_code.md)
    python grpo_code.py --config my_run.yaml             # any flag, from a YAML file
    accelerate launch --config_file accelerate_configs/ddp.yaml --num_processes 4 grpo_code.py
        # 4 GPUs, data parallel; accelerate_configs/ has ZeRO-2, ZeRO-3 and FSDP files too
    torchrun --nproc_per_node 2 grpo_code.py             # two processes on CPU: tries the launch path
    python grpo_code.py --eval_only --eval_num_samples 8 # no training: will GRPO learn anything?
    python grpo_code.py --help                           # every flag
From Python or a notebook: `import grpo_code; grpo_code.main(["--max_steps", "10"])`.

What to expect
    CPU demo (measured, 2 cores): the tiny model imitated a sloppy teacher that often hands in
    an off-by-one constant without trying its code. Before training, greedy, it passes the
    hidden tests of 0.41 of the held-out toy tasks and runs code on 0.02 of them; after 80
    steps it runs its code on every task, fixes it, and passes 0.99. About 1.3 minutes.
    GPU (estimates): Qwen2.5-0.5B-Instruct solves a share of HumanEval from the start; training
    on MBPP raises pass@1 on HumanEval's hidden tests by a few points over a few hundred steps.
Outputs, in --output_dir: checkpoints and the final model; with instruments.py, eval.json, training_curves.png and
every evaluated rollout in eval_*.jsonl (docs/watching.md).

How this departs from textbook GRPO: as grpo_tools.py (beta = 0, DAPO token-level loss, one
optimisation step per generation batch, a weighted rubric, tool results masked out of the loss).

Model support: TRL drives tool calls only for chat templates it recognises (Qwen2.5, Qwen3,
Llama 3.1/3.2, GLM-4, gpt-oss, Gemma 4, LFM2, Nemotron 3, ...); other models get a clear error.
"""

import ast, builtins, concurrent.futures, copy, inspect, json, os, re, sys, time  # noqa: E401
from dataclasses import dataclass, field
from pathlib import Path

import torch
from trl import GRPOConfig, GRPOTrainer, ModelConfig, TrlParser, get_peft_config, get_quantization_config

try:  # the sandbox that runs the model's code and the hidden tests, one copy for every script
    from sandbox import SCORING_THREADS, STDIN_PROGRAM, run_hidden_tests, run_hidden_tests_batch, run_python
except ImportError:
    sys.exit("grpo_code.py needs sandbox.py, which runs the model's code and the hidden tests: copy it from the "
             "repository beside this script")

try:  # the run instruments: the monitor, mid-run evaluation, replay, plots, eval.json (optional: docs/how_it_works.md)
    import instruments
except ImportError:
    instruments = None


def arg(default, help):
    """A config field whose comment is also its --help text."""
    return field(default=default, metadata={"help": help})


# %% [markdown]
# ## Config
# The system prompt the model must follow, the model to train and the data: change `DEFAULT_MODEL` to train another
# one (its chat template must be one TRL can drive tool calls with).
# %%
SYSTEM_PROMPT = """Write the Python function the user asks for. You may test code with run_python first. End with the whole function in one ```python block."""
# The same for the other task layouts (--layout): LeetCode's class, or a program that reads stdin
LAYOUT_SYSTEM_PROMPTS = {
    "function": SYSTEM_PROMPT,
    "class": """Write the Python class the user asks for. You may test code with run_python first. End with the whole class in one ```python block.""",
    "stdio": """Write the Python program the user asks for: it reads its input from stdin and prints the answer. You may test code with run_python first. End with the whole program in one ```python block.""",
}

DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"  # native tool calls in a template TRL recognises; fits a T4
DEFAULT_DATASET = ("google-research-datasets/mbpp", "sanitized")  # train; evaluate on HumanEval (below)


# %% [markdown]
# Data, test and evaluation settings, each also a flag of `main([...])`, e.g. `main(["--num_eval_examples", "50"])`.
# %%
@dataclass
class ScriptArguments:
    dataset_name: str = arg(None, "Tasks to train on: a Hub dataset id, or a local .json/.jsonl/.parquet file or "
                                  "folder. Default: MBPP (the toy tasks in assets/ for the offline demo).")
    dataset_config: str = arg(None, "Dataset configuration, e.g. 'sanitized' for MBPP.")
    dataset_train_split: str = arg(None, "Split(s) to train on, joined with '+'. Default: all of MBPP "
                                         "(train+validation+test: evaluation is on HumanEval), else 'train'.")
    dataset_test_split: str = arg("test", "Split of --eval_dataset_name to evaluate on (of the training data when "
                                          "that is not set; if it has no such split, held-out training tasks).")
    eval_dataset_name: str = arg("openai/openai_humaneval", "Tasks to evaluate on (hidden tests, greedy); 'none' to "
                                                            "hold out training tasks instead.")
    eval_dataset_config: str = arg(None, "Configuration of --eval_dataset_name.")
    layout: str = arg("auto", "How tasks are solved and tested: 'function' (a function, asserts: HumanEval, MBPP), "
                              "'class' (class Solution with a method, tests call Solution().method: LeetCode), "
                              "'stdio' (a program reading stdin, tests are input/output pairs: CodeContests, APPS), "
                              "or 'auto': from the columns (docs/grpo_code.md: Task layouts).")
    prompt_column: str = arg(None, "Column with the task: code to complete (a signature and docstring) or a "
                                   "description. Default: 'prompt', else 'text' (class: 'query', 'question', ...).")
    tests_column: str = arg(None, "Column with the hidden tests: Python source (asserts, or a check(candidate) "
                                  "function as in HumanEval) or a list of assert lines; stdio: input/output pairs, "
                                  "several columns joined with '+'. Default: 'test', else 'test_list' (docs/grpo_code.md).")
    entry_point_column: str = arg(None, "Column with the function's name (class: 'Solution().method' or the "
                                        "method). Default: 'entry_point', else found from the reference solution "
                                        "and the tests (class: 'entry_point', else 'func_name').")
    solution_column: str = arg(None, "Column with a reference solution, checked against the tests at load time "
                                     "(a task it fails is dropped). Default: 'canonical_solution', else 'code' "
                                     "(class: 'completion' first; stdio: 'solution' first).")
    setup_column: str = arg(None, "Column with code the solution and the tests run after: imports, helper classes "
                                  "(ListNode, TreeNode). Default: the prompt when it is code (function), "
                                  "'setup_code' (class, stdio; class also 'prompt' when that is not the task).")
    float_tolerance: float = arg(0.0, "stdio: numbers in a program's output may differ from the expected ones by "
                                      "this much (relative, for numbers above 1); 0: the same words exactly.")
    max_prompt_tokens: int = arg(1024, "Prompts longer than this (tool descriptions included) are dropped.")
    num_eval_examples: int = arg(200, "Held-out tasks scored before and after training (0 = skip).")
    eval_batch_size: int = arg(32, "Tasks per generate() call during evaluation.")
    eval_only: bool = arg(False, "Evaluate --model_name_or_path (a Hub id, a folder, a checkpoint, a PEFT adapter "
                                 "folder) on the held-out tasks and write eval.json; no training.")


# %% [markdown]
# Training settings: TRL's `GRPOConfig` with this recipe's defaults, tool-call rounds included; change one here, or
# pass it as a flag.
# %%
@dataclass
class RecipeConfig(GRPOConfig):
    """TRL's GRPOConfig with this recipe's defaults. Every other GRPOConfig field is a flag too."""

    output_dir: str = arg(None, "Where checkpoints, eval.json and plots go. Default: outputs/grpo_code/<time>.")
    learning_rate: float = arg(5e-6, "Full fine-tuning of a 0.5B model; with --use_peft try 2e-5.")
    lr_scheduler_type: str = arg("cosine", "Learning-rate schedule.")
    warmup_steps: int = arg(10, "Linear warm-up steps.")
    max_grad_norm: float = arg(0.1, "Aggressive clipping keeps early, noisy RL updates small.")
    per_device_train_batch_size: int = arg(8, "Rollouts per device per step (not prompts).")
    gradient_accumulation_steps: int = arg(4, "Generation batch = batch x accumulation x GPUs = 32 rollouts.")
    num_generations: int = arg(8, "Rollouts per prompt; GRPO compares them. Must divide the generation batch.")
    max_completion_length: int = arg(512, "Tokens per rollout, all turns and tool results included.")
    max_tool_calling_iterations: int = arg(3, "run_python rounds per rollout; ends loops that never answer.")
    max_steps: int = arg(300, "Optimizer steps (overrides num_train_epochs).")
    logging_steps: int = arg(5, "Log (and plot) every this many steps.")
    save_steps: int = arg(50, "Checkpoint every this many steps; --resume_from_checkpoint continues from one.")
    gradient_checkpointing: bool = arg(True, "Trade compute for memory; needed for full fine-tuning on a T4.")
    bf16: bool = arg(None, "Default: on where the GPU supports bf16, off on T4s (fp16 is used) and on CPU (fp32).")
    fp16: bool = arg(None, "Default: on for GPUs without bf16 (e.g. a T4), off otherwise.")
    report_to: str = arg("none", "Experiment tracker: none, trackio, wandb, tensorboard.")
    resume_from_checkpoint: str = arg(None, "A checkpoint folder, or 'last' for the newest one in --output_dir.")

    def __post_init__(self):
        complete_config(self, "grpo_code")  # precision for the hardware; outputs/<this file's name>/<time>
        super().__post_init__()


# %% [markdown]
# The offline demo's settings, used when there is no CUDA GPU: a tiny model and toy coding tasks from `assets/`,
# which need no network.
# %%
# These replace the defaults above (flags and YAML still win).
ASSETS = Path(__file__).resolve().parent / "assets" if "__file__" in globals() else Path("assets").resolve()
DEMO_SETTINGS = dict(
    model_name_or_path=str(ASSETS / "tiny-qwen-code"),  # made by assets/make_demo_assets.py
    dataset_name=str(ASSETS / "toy_code"),               # train.jsonl / test.jsonl: small functions, hidden tests
    eval_dataset_name="none",                            # the toy set's own test split
    learning_rate=2e-4,
    lr_scheduler_type="constant",
    warmup_steps=0,
    max_grad_norm=1.0,
    per_device_train_batch_size=32,
    gradient_accumulation_steps=1,
    num_generations=8,
    max_completion_length=128,
    max_tool_calling_iterations=2,
    max_steps=80,
    save_steps=40,
    gradient_checkpointing=False,
    eval_batch_size=100,
    num_eval_examples=100,
    mid_eval_steps=20,  # held-out pass@1 at 5 points of the run, plotted beside the reward
    num_mid_eval_examples=64,
)


# %% [markdown]
# ## Data
# Each task becomes a chat prompt under the system prompt, with its hidden tests kept for the rewards; any dataset
# with a prompt, tests and an entry point works (see the column flags). Tasks whose own reference solution fails
# their tests are reported and dropped.
# %%
def layout_of(entry_point: str) -> str:
    """A task's layout, told by its entry point: 'Solution().twoSum' (class), STDIN_PROGRAM (stdio), or a name."""
    return "stdio" if entry_point == STDIN_PROGRAM else "class" if "()." in entry_point else "function"


def task_message(prompt: str, tests: str, entry_point: str, setup: str, starter: str = "") -> str:
    """What the model reads: code to complete (HumanEval), a description and the first test (MBPP), a problem and
    the class's starter code (LeetCode), or a problem whose answer is a program that reads stdin."""
    if layout_of(entry_point) == "stdio":
        return f"{prompt.strip()}\nWrite a Python program that reads the input from stdin and prints the answer."
    if layout_of(entry_point) == "class":
        owner, method = entry_point.split("().")
        shown = starter.strip() in prompt if starter.strip() else True  # the problem text often holds it already
        return (f"{prompt.strip()}\nWrite it as the method `{method}` of `class {owner}`" +
                ("." if shown else f", starting from:\n```python\n{starter.strip()}\n```"))
    if setup:  # the prompt is code: a signature and a docstring
        return f"Complete this Python function:\n```python\n{prompt.strip()}\n```"
    example = next((ast.get_source_segment(tests, node) for node in ast.parse(tests).body
                    if any(isinstance(n, ast.Assert) for n in ast.walk(node))), "")
    return f"{prompt.strip()}\nWrite it as `{entry_point}`; it must pass tests such as:\n```python\n{example}\n```"


def defines(code: str, name: str) -> bool:
    """Whether `code` parses and defines a top-level function `name`, for 'Solution().twoSum' a class Solution with
    a method twoSum, and for a program (STDIN_PROGRAM) whether it parses."""
    owner, _, method = name.partition("().")
    try:
        body = ast.parse(code).body
    except (SyntaxError, ValueError):
        return False
    if method:
        return any(isinstance(n, ast.ClassDef) and n.name == owner and defines(ast.unparse(ast.Module(n.body, [])),
                                                                               method) for n in body)
    return name == STDIN_PROGRAM or any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name
                                        for n in body)


def load_data(script_args, tokenizer, seed):
    """(train, eval) datasets of chat prompts with the columns the rewards read."""
    from datasets import Dataset

    name = script_args.dataset_name
    dataset = read_dataset(name, script_args.dataset_config)
    default_split = "train+validation+test" if (name, script_args.dataset_config) == DEFAULT_DATASET else "train"
    train = split_of(dataset, script_args.dataset_train_split or default_split, name, "--dataset_train_split")
    eval_name = script_args.eval_dataset_name
    if eval_name and eval_name.lower() != "none":
        tasks = read_dataset(eval_name, script_args.eval_dataset_config, "--eval_dataset_name")
        split = next(iter(tasks)) if len(tasks) == 1 else script_args.dataset_test_split  # one file: its only split
        test = split_of(tasks, split, eval_name, "--dataset_test_split")
    elif script_args.dataset_test_split in dataset:
        eval_name, test = name, dataset[script_args.dataset_test_split]
    else:  # hold some training tasks out for evaluation
        train, test = hold_out(train, script_args.num_eval_examples, seed)
        eval_name = name
    test = test.select(range(min(script_args.num_eval_examples, len(test))))

    def fits(row):
        ids = tokenizer.apply_chat_template(row["prompt"], tools=tools_of(ToolEnvironment()),
                                            add_generation_prompt=True, tokenize=True, return_dict=False)
        return len(ids) <= script_args.max_prompt_tokens

    splits = []
    for rows, source in ((train, name), (test, eval_name)):
        tasks = check_tasks(to_tasks(rows, script_args, source, flags_must_match=source == name), source)
        if not tasks and not splits:  # the training split
            raise RecipeError(f"no task of '{name}' is usable (each was dropped, the line above says why): check the "
                              f"columns (--prompt_column, --tests_column, --solution_column) and --layout "
                              f"({script_args.layout})")
        for task in tasks:
            task["prompt"] = [{"role": "system", "content": LAYOUT_SYSTEM_PROMPTS[layout_of(task["entry_point"])]},
                              {"role": "user", "content": task_message(**{k: task[k] for k in (
                                  "prompt", "tests", "entry_point", "setup", "starter")})}]
        rows = Dataset.from_list(tasks) if tasks else Dataset.from_dict({"prompt": []})
        before = len(rows)
        rows = rows.filter(fits) if before else rows
        if len(rows) < before:
            print(f"dropped {before - len(rows)} of {before} prompts longer than {script_args.max_prompt_tokens} "
                  "tokens (--max_prompt_tokens)")
        splits.append(rows)
    if len(splits[0]) == 0:
        raise RecipeError(f"no usable training task in '{name}' fits in {script_args.max_prompt_tokens} tokens: "
                          "check the columns (--prompt_column, --tests_column) or raise --max_prompt_tokens")
    return splits[0], splits[1]


# %% [markdown]
# ## Tools
# `run_python`, the one tool the model may call. It and the hidden tests run in the sandbox of sandbox.py, which
# says what it contains and what not, and holds the limits (`sandbox.PYTHON_*` for a call, `sandbox.TEST_*` for the
# hidden tests; set one before training to change it): read it before you train on them.
#
# `ToolEnvironment`, one per rollout: its public methods are the tools the model is offered (their docstrings are
# what it reads) and it counts calls and failures for the rewards; add a method to offer another tool.
# %%
class ToolEnvironment:
    """One per rollout (TRL's environment_factory); rewards read its tally through their `environments` argument."""

    def reset(self, **row):
        self.calls, self.failures = 0, 0
        return None  # nothing to add to the task

    def run_python(self, code: str) -> str:
        """Run a short Python program and return what it prints.

        Args:
            code: Python source code; use print() to show results.
        """
        result = run_python(code)
        self.calls += 1
        self.failures += result.startswith("Error")
        return result


# %% [markdown]
# ## Rubric
# Helpers the rewards share: the final message of a trajectory and the code in its ```python block.
# %%
def completion_text(completion) -> str:
    """A completion is a string, or a list of chat messages: take the last assistant message."""
    if isinstance(completion, str):
        return completion
    for message in reversed(completion or []):
        if isinstance(message, dict) and message.get("role") == "assistant":
            return str(message.get("content") or "")
    return ""


CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def extract_answer(text: str):
    """The code in the final message's last ```python block (a bare ``` block counts too), or None."""
    blocks = CODE_BLOCK.findall(text)
    return blocks[-1] if blocks else None


# %% [markdown]
# The reward that matters most, decided by the hidden tests: 0.2 for the share of test cases passed (partial
# progress shows) plus 0.8 when all of them pass. Edit it, then run it and every cell below again.
# %%
PARTIAL_CREDIT = 0.2  # for the share of test cases passed; the rest only when every case passes


def timed_out(result: dict) -> bool:
    """Whether a time limit, not the code, failed one of a solution's hidden test cases."""
    return any(str(e).startswith("timed out") for e in result["errors"])


def tests_passed_reward(completions, tests, entry_point, setup, log_metric=None, **kwargs) -> list[float]:
    """0.2 x the share of hidden test cases the final code passes, + 0.8 if it passes them all; 0.0 without code."""
    codes = [extract_answer(completion_text(c)) for c in completions]
    results = run_hidden_tests_batch(codes, tests, entry_point, setup)
    if log_metric:  # the rollouts a time limit, not the code, decided (sandbox.TEST_*): the run monitor watches it
        log_metric("tests/timed_out", sum(map(timed_out, results)) / len(results))
    return [PARTIAL_CREDIT * sum(r["passed"]) / len(r["passed"]) + (1 - PARTIAL_CREDIT) * all(r["passed"])
            if r["passed"] else 0.0 for r in results]


# %% [markdown]
# Format: 1.0 when the final message has exactly one ```python block, and its code compiles and defines the function.
# %%
def code_format_reward(completions, entry_point, **kwargs) -> list[float]:
    """1.0 for exactly one ```python block in the final message, compiling and defining the entry point."""
    scores = []
    for completion, name in zip(completions, entry_point):
        blocks = CODE_BLOCK.findall(completion_text(completion))
        scores.append(1.0 if len(blocks) == 1 and defines(blocks[0], name) else 0.0)
    return scores


# %% [markdown]
# Turn-level credit, 0.5 per run_python call that ran without error, capped at 1.0, for trying the code.
# %%
def successful_run_credit(environments, **kwargs) -> list[float]:
    """0.5 per run_python call that ran without error, capped at 1.0: turn-level credit for trying code."""
    return [min(1.0, 0.5 * (env.calls - env.failures)) for env in environments]


# %% [markdown]
# The rubric of (reward, weight) pairs: add your own reward here, and run this cell again after editing any reward
# above; keep the format and tool terms together well below passing the tests.
# %%
# (reward function, weight). Passing every hidden test pays 1.0; format and tool use together pay
# at most 0.2 (tests/test_grpo_code.py checks the cap), so neither outweighs working code.
RUBRIC = [
    (tests_passed_reward, 1.0),
    (code_format_reward, 0.1),
    (successful_run_credit, 0.1),
]


# %% [markdown]
# ## Training
# The call that trains: the tool and the rubric wired into TRL's `GRPOTrainer`. Then how a run is judged: the
# held-out metrics `evaluate` reports before and after training, and the reward the run monitor watches.
# %%
OUTCOME_REWARD = "tests_passed_reward"  # the reward the run monitor compares the others with
HELD_OUT_TABLE = ("accuracy", "tests_passed", "compiles", "timed_out", "tool_call_success", "mean_tool_calls")  # printed
ACCURACY_IS = "pass@1 on the hidden tests"


def build_trainer(script_args, training_args, model_args, tokenizer, train_dataset, rewards):
    """TRL's GRPOTrainer with run_python (one ToolEnvironment per rollout) and `rewards`, RUBRIC's functions."""
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
    """--replay: a fresh ToolEnvironment, reset with a recorded row, for the rollout's recorded run_python calls to
    run in again (in the sandbox); the rewards that read `environments` are scored on it."""
    environment = ToolEnvironment()
    environment.reset(**row)
    return environment


def run_facts(script_args) -> dict:
    """What eval.json records about the run besides the model, the dataset and the scores."""
    import sandbox  # the hidden tests' time limits: a verdict a limit decided depends on them

    return {"eval_dataset": script_args.eval_dataset_name, "test_limits": {
        "case_cpu_s": sandbox.TEST_CASE_CPU_S, "solution_cpu_s": sandbox.TESTS_CPU_S, "wall_factor": sandbox.TEST_WALL_FACTOR}}


def evaluate(trainer, dataset, batch_size: int, num_samples: int = 1, trajectories: Path | None = None,
             step: int | None = None) -> dict:
    """Greedy multi-turn rollouts on held-out tasks, run_python enabled, scored by their hidden tests: accuracy
    (pass@1: every test passes), the mean share of tests passed, the share of compiling solutions, run_python
    success and calls per task; with num_samples > 1 also pass@1, pass@N and the signal report. Every rollout,
    its rewards and why its tests failed go to `trajectories` (one JSON line per task)."""
    if len(dataset) == 0:
        return {}
    samples = num_samples if num_samples > 1 else 0
    found = rollouts(trainer, dataset, batch_size, samples)
    flat = [rollout.messages for row in found for rollout in row]
    envs = [rollout.env for row in found for rollout in row]
    columns = {key: [value for value, row in zip(dataset[key], found) for _ in row]
               for key in ("answer", "tests", "entry_point", "setup")}
    codes = [extract_answer(completion_text(c)) for c in flat]
    results = run_hidden_tests_batch(codes, columns["tests"], columns["entry_point"], columns["setup"])  # the reasons
    correct = [float(score is not None and score >= 1.0)  # the outcome reward's full marks: OUTCOME_REWARD
               for score in outcome_reward()(flat, environments=envs, **columns)]
    greedy = list(range(0, len(flat), 1 + samples))
    calls = sum(envs[i].calls for i in greedy)
    failures = sum(envs[i].failures for i in greedy)
    metrics = {"accuracy": sum(correct[i] for i in greedy) / len(greedy),
               "tests_passed": sum(sum(results[i]["passed"]) / max(1, len(results[i]["passed"])) for i in greedy)
               / len(greedy),
               "compiles": sum(codes[i] is not None and defines(codes[i], columns["entry_point"][i])
                               for i in greedy) / len(greedy),
               # a time limit, not the code, decided these: many means the limits (sandbox.TEST_*) are too tight
               "timed_out": sum(timed_out(results[i]) for i in greedy) / len(greedy),
               "tool_call_success": (calls - failures) / calls if calls else 0.0,
               "mean_tool_calls": calls / len(greedy), "num_examples": len(greedy),
               "questions_per_process": trainer._questions_per_process, "sample_trajectory": flat[0]}
    if samples:
        metrics.update(instruments.sample_metrics([sum(correct[i + 1:i + 1 + samples]) for i in greedy], samples))
        metrics["rollouts_timed_out"] = sum(map(timed_out, results)) / len(results)  # the signal report counts them
    if trajectories is not None and trainer.accelerator.is_main_process:  # given with instruments.py
        scores = instruments.score(RUBRIC, flat, environments=envs, **columns)
        with open(trajectories, "a", encoding="utf-8") as f:
            for n, (prompt, reference, first) in enumerate(zip(dataset["prompt"], dataset["answer"], greedy)):
                f.write(json.dumps({"step": step, "prompt": prompt, "answer": reference, "columns": {
                    key: columns[key][first] for key in ("tests", "entry_point", "setup")}, "completions": [
                    {"text": flat[i], "greedy": i == first, "parsed_answer": codes[i], **scores[i],
                     "tests": {key: results[i][key] for key in ("passed", "errors", "harness_error")}}
                    for i in range(first, first + 1 + samples)]}, default=str) + "\n")
    return metrics


# %% [markdown]
# # Machinery
# ---- machinery: the same in every script, held identical by tests; you rarely need to edit below ----
#
# What the script needs to run on its own. What a forker does not edit is imported, one copy for every script: the
# run instruments (instruments.py), the sandbox (sandbox.py). docs/how_it_works.md: "Which file holds what".
# %% [markdown]
# ## Task layouts
# Rows of HumanEval, MBPP, LeetCode (a class), stdin/stdout sets (CodeContests, APPS) or your own columns become
# tasks (prompt, tests, entry point, setup, reference, starter code); tasks whose reference solution fails its own
# tests are reported and dropped.
# %%
def called_names(code: str) -> list:
    """Names of the functions a piece of code calls, in order."""
    return [n.func.id for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]


LAYOUTS = ("function", "class", "stdio")
# The columns each layout looks for when no flag names one, in order: HumanEval and MBPP; LeetCodeDataset and the
# reward-hacking study's LeetCode tasks; CodeContests, APPS/TACO, LiveCodeBench and one's own input/output pairs.
LAYOUT_COLUMNS = {
    "function": dict(prompt=["prompt", "text"], tests=["test", "test_list"], entry_point=["entry_point"],
                     solution=["canonical_solution", "code"], setup=[]),
    "class": dict(prompt=["query", "question", "problem_description", "prompt"], tests=["test", "gt_answer", "test_list"],
                  entry_point=["entry_point", "func_name"], solution=["completion", "canonical_solution", "solution"],
                  setup=["setup_code", "prompt"]),
    "stdio": dict(prompt=["prompt", "question", "description", "problem", "text"],
                  tests=["tests", "input_output", "test", "private_tests"], entry_point=[],
                  solution=["solution", "canonical_solution", "code", "solutions"], setup=["setup_code"]),
}


def io_pairs(value):
    """A stdio task's tests, as {"inputs": [...], "outputs": [...]}, from {"inputs", "outputs"} (APPS, TACO),
    {"input", "output"} lists (CodeContests), a list of {"input", "output"} (LiveCodeBench) or of pairs, or the
    JSON text of any of these; None for anything else (APPS's call-based tasks, Python asserts)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if isinstance(value, dict) and "fn_name" not in value:
        inputs, outputs = value.get("inputs", value.get("input")), value.get("outputs", value.get("output"))
    elif isinstance(value, list) and all(isinstance(case, dict) and "input" in case for case in value):
        inputs, outputs = [case["input"] for case in value], [case.get("output") for case in value]
    elif isinstance(value, list) and all(isinstance(case, (list, tuple)) and len(case) == 2 for case in value):
        inputs, outputs = [case[0] for case in value], [case[1] for case in value]
    else:
        return None
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
        return None
    text = lambda x: "\n".join(map(str, x)) if isinstance(x, list) else str(x)  # noqa: E731 (lines -> text)
    return {"inputs": [text(x) for x in inputs], "outputs": [text(x) for x in outputs]}


def detect_layout(rows) -> str:
    """'class' when an entry point reads like 'Solution().twoSum', 'stdio' when a tests column holds input/output
    pairs, else 'function'."""
    first = rows[0] if len(rows) else {}
    if any(re.fullmatch(r"\w+\(\)\.\w+", str(first.get(c))) for c in LAYOUT_COLUMNS["class"]["entry_point"]):
        return "class"
    return "stdio" if any(io_pairs(first.get(c)) for c in LAYOUT_COLUMNS["stdio"]["tests"] if c in first) else "function"


def starter_of(row, reference: str, owner: str, method: str) -> str:
    """The class's starter code: a 'starter_code' column (LeetCodeDataset, LiveCodeBench; the study's
    prompt_metadata), else the reference's class and method signature."""
    given = row.get("starter_code") or (row.get("prompt_metadata") or {}).get("starter_code")
    if given:
        return str(given)
    try:
        cls = next(n for n in ast.parse(reference).body if isinstance(n, ast.ClassDef) and n.name == owner)
        function = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == method)
    except (StopIteration, SyntaxError, ValueError):
        return ""
    returns = f" -> {ast.unparse(function.returns)}" if function.returns else ""
    return f"class {owner}:\n    def {method}({ast.unparse(function.args)}){returns}:\n        "


def one_solution(value) -> str:
    """A reference solution: text, the first of a list, or CodeContests' {"language", "solution"} (Python 3's)."""
    if isinstance(value, dict) and isinstance(value.get("solution"), list):
        pairs = list(zip(value.get("language") or [3] * len(value["solution"]), value["solution"]))
        value = [code for language, code in pairs if language in (3, "PYTHON3", "python3", "python")]
    if isinstance(value, list):
        value = value[0] if value else ""
    return str(value or "")


def to_tasks(rows, script_args, name: str, flags_must_match: bool = True) -> list[dict]:
    """Rows of any supported layout -> {prompt, tests, entry_point, setup, answer (the reference, or ''), starter
    (the class layout's starter code, or '')}. The column flags name the training data's columns; a separate
    evaluation set (flags_must_match=False) uses a flag only where it has that column, finds the others by name
    (HumanEval's, by default), and has its layout found from its columns."""
    columns = rows.column_names
    layout = script_args.layout if flags_must_match else "auto"
    if layout not in ("auto", *LAYOUTS):
        raise RecipeError(f"--layout {layout}: use one of auto, {', '.join(LAYOUTS)}")
    if not script_args.float_tolerance >= 0:
        raise RecipeError(f"--float_tolerance {script_args.float_tolerance}: use 0 (the same words exactly) or more")
    layout = detect_layout(rows) if layout == "auto" else layout
    defaults = LAYOUT_COLUMNS[layout]

    def column(flag, chosen, defaults, required=True):
        if chosen is not None and chosen not in columns and not flags_must_match:
            chosen = None
        if chosen is not None and chosen not in columns:
            raise RecipeError(f"dataset '{name}' has no column '{chosen}' (it has {columns}): pass --{flag} NAME")
        found = chosen or next((c for c in defaults if c in columns), None)
        if found is None and required:
            raise RecipeError(f"dataset '{name}' has none of the columns {defaults} (it has {columns}): "
                              f"pass --{flag} NAME" + ("" if script_args.layout != "auto" else
                                                       f" (or --layout: these are the {layout} layout's)"))
        return found

    prompt_col = column("prompt_column", script_args.prompt_column, defaults["prompt"])
    tests_flag = script_args.tests_column if layout == "stdio" and script_args.tests_column else None
    tests_cols = ([column("tests_column", part, []) for part in tests_flag.split("+")] if tests_flag else
                  [column("tests_column", script_args.tests_column, defaults["tests"])])
    entry_col = column("entry_point_column", script_args.entry_point_column, defaults["entry_point"],
                       required=layout == "class")
    solution_col = column("solution_column", script_args.solution_column, defaults["solution"], False)
    setup_col = column("setup_column", script_args.setup_column, [c for c in defaults["setup"] if c != prompt_col],
                       False)
    tasks = []
    for row in rows:
        prompt, reference = str(row[prompt_col]), one_solution(row[solution_col]) if solution_col else ""
        setup, starter = str(row[setup_col] or "") if setup_col else "", ""
        if layout == "stdio":  # input/output pairs, from one column or several
            found = [io_pairs(row[c]) for c in tests_cols]
            tests = {"inputs": sum((f["inputs"] for f in found if f), []),
                     "outputs": sum((f["outputs"] for f in found if f), [])}
            if script_args.float_tolerance:
                tests["float_tolerance"] = script_args.float_tolerance
            tasks.append({"prompt": prompt, "tests": json.dumps(tests) if all(found) else "", "entry_point": STDIN_PROGRAM,
                          "setup": setup, "answer": reference, "starter": ""})
            continue
        tests = row[tests_cols[0]]
        tests = "\n".join(map(str, tests)) if isinstance(tests, list) else str(tests)
        tests = "\n".join([*map(str, row.get("test_imports") or []), str(row.get("test_setup_code") or ""),
                           tests])  # MBPP keeps its imports and setup apart
        if layout == "class":  # 'Solution().twoSum', or the method's name alone
            entry_point = str(row[entry_col]).strip()
            if not re.fullmatch(r"\w+\(\)\.\w+", entry_point):
                method = entry_point.rpartition(".")[2].strip("()")
                owner = next((c for c in re.findall(r"^class (\w+)", reference, re.MULTILINE)
                              if defines(reference, f"{c}().{method}")), "Solution")
                entry_point = f"{owner}().{method}"
            starter = starter_of(row, reference, *entry_point.split("()."))
            tasks.append({"prompt": prompt, "tests": tests, "entry_point": entry_point, "setup": setup,
                          "answer": reference, "starter": starter})
            continue
        try:
            entry_point = str(row[entry_col]) if entry_col else next(
                (n for n in called_names(tests) if defines(reference, n)),
                next((n for n in called_names(tests) if not hasattr(builtins, n)), ""))
        except (SyntaxError, ValueError):
            entry_point = ""
        if not setup_col:
            setup = prompt if defines(prompt, entry_point) else ""  # code the solution continues (helpers too)
        if reference and not defines(reference, entry_point):  # HumanEval: the body that completes the prompt
            reference = prompt + reference
        tasks.append({"prompt": prompt, "tests": tests, "entry_point": entry_point, "setup": setup,
                      "answer": reference, "starter": ""})
    if layout == "stdio" and tasks and not any(task["tests"] for task in tasks):
        raise RecipeError(f"dataset '{name}': column {'+'.join(tests_cols)!r} holds no input/output pairs (e.g. "
                          "{\"inputs\": [...], \"outputs\": [...]}): pass --tests_column NAME, or --layout function "
                          "or class for tests written as asserts")
    return tasks


def check_tasks(tasks: list[dict], name: str) -> list[dict]:
    """Drop, and report, tasks that cannot score anything: tests that do not parse or hold no assert, no entry
    point, or a reference solution that fails its own tests."""
    from tqdm.auto import tqdm

    def usable(task):
        try:
            if task["entry_point"] == STDIN_PROGRAM:  # input/output pairs
                return bool(json.loads(task["tests"])["inputs"])
            return task["entry_point"] and any(isinstance(n, ast.Assert) for n in ast.walk(ast.parse(task["tests"])))
        except (SyntaxError, ValueError, KeyError):
            return False

    kept = [task for task in tasks if usable(task)]
    unusable = len(tasks) - len(kept)
    referenced = [task for task in kept if task["answer"]]
    try:  # a sandbox that cannot start (GRPO_SANDBOX naming a mode it cannot run in, say) stops here, in one line
        with concurrent.futures.ThreadPoolExecutor(SCORING_THREADS) as pool:
            results = list(tqdm(pool.map(lambda t: run_hidden_tests(t["answer"], t["tests"], t["entry_point"],
                                                                    t["setup"]), referenced), total=len(referenced),
                                desc=f"checking {name}'s reference solutions",
                                disable=not referenced or int(os.environ.get("RANK", "0")) != 0))
    except RuntimeError as error:
        raise RecipeError(str(error)) from None
    failing = {id(task): result for task, result in zip(referenced, results)
               if not result["passed"] or not all(result["passed"])}
    kept = [task for task in kept if id(task) not in failing]
    if unusable or failing:
        examples = "; ".join(f"{task['entry_point'] or '?'}: {next((e for e in result['errors'] if e), None) or result['harness_error']}"
                             for task, result in ((t, failing[id(t)]) for t in referenced if id(t) in failing))
        print(f"dropped {unusable + len(failing)} of {len(tasks)} tasks of {name}: {unusable} without usable tests "
              f"or entry point, {len(failing)} whose reference solution fails its own tests"
              + (f" ({examples[:300]})" if examples else ""))
    return kept


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
