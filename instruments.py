"""The run instruments of the grpo_*.py scripts: what a forker watches a run with but does not edit.

Each script imports this module when it lies beside it (`import instruments`) and runs without it: a script copied
alone still trains, checkpoints and evaluates before and after, and a flag below given without this file is one
line naming it. This module imports nothing from the project: what it needs of a recipe (RUBRIC, evaluate,
OUTCOME_REWARD, HELD_OUT_TABLE, ACCURACY_IS, completion_text, extract_answer, RecipeError, and where a recipe has
them, replay_environment and run_facts) it reads from the script's namespace, which the script's main() hands over
as `Run(globals(), ...)`.

What is here, in the order a run meets it:
- InstrumentArguments: the instruments' own flags, parsed beside the script's by TrlParser (as TRL's grpo.py adds
  its own dataclasses), each also a key of a --config YAML file.
- Preflight: the checks that turn bad input into one line naming the fix before anything loads (preflight, explain,
  template_problem).
- Run: what main() calls around the training call: sample printing and saving, the held-out trajectory files,
  the signal report and pass@N, the run monitor, mid-run evaluation, --skip_zero_signal, eval.json, the plot and
  the before/after table.
- Watching: monitor_warnings and its thresholds, RunMonitor, MidRunEval, TrainingSamples (train_samples.jsonl,
  from TRL's own log of each step), with_logging.
- Groups that teach nothing: ZeroSignalSampler and skip_zero_signal.
- Plots: plot_curves (training_curves.png).
- Replay: `--replay RUN_DIR`, the recorded completions scored again with the rubric as it is now, and rewards.py's
  hack battery.
- unsupported_template: the one-line error for a chat template TRL cannot drive tool calls with.
"""

import atexit, dataclasses, difflib, functools, importlib.util, json, math, os, re, tempfile, time  # noqa: E401
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import torch
from transformers import Trainer, TrainerCallback


def arg(default, help):
    """A config field whose comment is also its --help text."""
    return field(default=default, metadata={"help": help})


@dataclass
class InstrumentArguments:
    """The run instruments' flags (instruments.py), beside each script's own."""

    eval_num_samples: int = arg(1, "1 = greedy only. N > 1: also sample N completions per question at the training "
                                   "temperature: pass@1, pass@N and the signal report (will GRPO learn anything?).")
    mid_eval_steps: int = arg(0, "Every this many steps, greedy accuracy on --num_mid_eval_examples held-out "
                                 "questions, logged as eval/accuracy and plotted (0 = never).")
    num_mid_eval_examples: int = arg(64, "Held-out questions scored at each mid-run evaluation (the first ones).")
    print_samples_every: int = arg(25, "Print one sample trajectory every this many steps (0 = never).")
    train_samples_per_log: int = arg(2, "Groups (a prompt with all its rollouts) saved to train_samples.jsonl per "
                                        "logged step (0 = none, -1 = all).")
    replay: str = arg(None, "A finished run's --output_dir: score its completions again with RUBRIC as it is now. Or "
                            "a .jsonl of hand-written conversations: their tool calls run in this script's tools, "
                            "the results are shown and the trajectories scored (docs/forking.md).")
    skip_zero_signal: int = arg(0, "N > 0: a prompt whose last group all scored the same (no signal) sits out its "
                                   "next N turns, others taking its place; acts from the 2nd epoch on (0 = off).")
    loophole: str = arg(None, "The hack lab (hack_lab.py): grade the outcome with a planted loophole, the truth "
                              "beside it: run_tests or exit_status (grpo_code.py), any_number (grpo_math/tools), "
                              "format_bias or self_assessment (grpo_judge.py).")
    hack_mitigation: str = arg(None, "With --loophole: penalize or drop the rollouts the detector flags, rename "
                                     "the run_tests grader per task, strip what a judge reads, or closed (the loophole "
                                     "fixed, same prompts).")
    hack_penalty: float = arg(None, "With --hack_mitigation penalize: what a flagged rollout scores (default -1, "
                                    "below any honest failure; 0 scores it as a failure: docs/hack_lab.md).")

    def __post_init__(self):  # a ValueError here is the script's one-line error
        if self.eval_num_samples < 1 or self.mid_eval_steps < 0 or self.train_samples_per_log < -1:
            raise ValueError("--eval_num_samples must be 1 or more, --mid_eval_steps 0 or more (0 turns it off), "
                             "--train_samples_per_log 0 or more, or -1 for every group")
        if self.skip_zero_signal < 0:
            raise ValueError("--skip_zero_signal is the turns a prompt with no signal sits out: 0 (off) or more")
        if self.print_samples_every < 0 or self.num_mid_eval_examples < 0:
            raise ValueError("--print_samples_every and --num_mid_eval_examples must be 0 or more")


# ---- Run: what a script's main() calls around its training call ----
class Run:
    """The instruments around one run. `recipe`: the script's globals(), read when a method needs them, so that a
    notebook's edited RUBRIC counts."""

    EVAL_FILES = ("eval_only.jsonl", "eval_before.jsonl", "eval_after.jsonl")  # each run writes its own

    def __init__(self, recipe: dict, script_args, training_args, model_args, args: InstrumentArguments):
        self.recipe, self.args, self.started = recipe, args, time.time()
        self.script_args, self.training_args, self.model_args = script_args, training_args, model_args
        self.output_dir = Path(training_args.output_dir)
        self.monitor, self.fresh_files, self.lab = None, False, None
        if not args.replay:
            problem = preflight([getattr(func, "__name__", repr(func)) for func, _ in self.recipe["RUBRIC"]], script_args,
                                training_args, model_args)
            if problem:
                raise self.error(problem)
        if args.loophole or args.hack_mitigation or args.hack_penalty is not None:  # the hack lab: off unless asked
            try:
                import hack_lab
            except ImportError:
                raise self.error("--loophole, --hack_mitigation and --hack_penalty need hack_lab.py: copy it beside "
                                 "this script")
            problem = hack_lab.problem(args.loophole, args.hack_mitigation, self.recipe["OUTCOME_REWARD"],
                                       args.hack_penalty)
            if not problem and args.loophole in hack_lab.JUDGE_BIASES and \
                    getattr(script_args, "judge_mode", "explicit") != "explicit":
                problem = (f"--loophole {args.loophole} plants a bias in the judge's verdict on each criterion: it "
                           f"needs --judge_mode explicit, not {script_args.judge_mode}")
            if problem:
                raise self.error(problem)
            self.lab = hack_lab.Lab(args.loophole, args.hack_mitigation, self.recipe, args.hack_penalty)

    @property
    def r(self):
        """The recipe's names as attributes (r.RUBRIC, r.evaluate, ...)."""
        return SimpleNamespace(**self.recipe)

    def error(self, message: str) -> Exception:
        return self.recipe["RecipeError"](message)

    def replay(self) -> dict:
        """--replay RUN_DIR: no model, no data; the recorded completions scored with RUBRIC as it is now. --replay
        FILE.jsonl: hand-written conversations, their tool calls run in the script's tools, then scored."""
        if Path(self.args.replay).is_file():
            return replay_conversations(Path(self.args.replay), self.r, self.script_args, self.output_dir)
        return replay(Path(self.args.replay), self.r, self.script_args, self.output_dir)

    def prepare(self, rewards: list, train_dataset, eval_dataset):
        """Before the trainer is built: the first reward also prints samples and logs each row's columns (for
        train_samples.jsonl), and each training row carries its index when --skip_zero_signal needs it. With
        --loophole, the outcome reward is the loophole's grader and the prompts state it. Returns (rewards,
        train_dataset, eval_dataset)."""
        rewards = list(rewards)
        if self.lab:
            outcome = self.recipe["OUTCOME_REWARD"]
            rewards = [self.lab.reward() if func.__name__ == outcome else func for func in rewards]
            train_dataset, eval_dataset = (data.map(lambda row: {"prompt": self.lab.hint(row["prompt"])})
                                           for data in (train_dataset, eval_dataset))
        rewards[0] = with_logging(rewards[0], self.args.print_samples_every)
        rewards[0] = with_columns_logged(rewards[0])  # the rows' columns, for train_samples.jsonl and --replay
        if self.args.skip_zero_signal:  # each row carries its index to the scoring step
            if "prompt_index" in train_dataset.column_names:
                raise self.error("the training data has a 'prompt_index' column, which --skip_zero_signal writes "
                                 "itself: rename that column, or drop --skip_zero_signal")
            train_dataset = train_dataset.add_column("prompt_index", list(range(len(train_dataset))))
        return rewards, train_dataset, eval_dataset

    def evaluation(self, trainer, name: str) -> dict:
        """evaluate()'s keyword arguments for the held-out evaluation `name` (eval_only, before, after): its
        trajectory file, its step, and --eval_num_samples samples per question (not after training)."""
        if not self.fresh_files:  # this run's files, not an earlier one's
            self.fresh_files = True
            if trainer.accelerator.is_main_process:
                self.output_dir.mkdir(parents=True, exist_ok=True)
                for file in self.EVAL_FILES:
                    (self.output_dir / file).unlink(missing_ok=True)
        samples = 1 if name == "after" else self.args.eval_num_samples
        step = None if name == "eval_only" else trainer.state.global_step
        return dict(num_samples=samples, trajectories=self.eval_file(name), step=step)

    def eval_file(self, name: str) -> Path:
        return self.output_dir / ("eval_only.jsonl" if name == "eval_only" else f"eval_{name}.jsonl")

    def watch(self, trainer, before: dict, eval_dataset):
        """After the evaluation before training: the signal report, the run monitor, mid-run evaluation and
        --skip_zero_signal's sampler."""
        if (self.args.train_samples_per_log or self.args.skip_zero_signal) and not hasattr(trainer, "_logs"):
            import trl  # both read TRL's own log of each step, a GRPOTrainer internal: say so before training

            raise self.error(f"TRL {trl.__version__}'s GRPOTrainer keeps no _logs, which train_samples.jsonl and "
                             "--skip_zero_signal read: install the tested TRL (pip install 'trl==1.16.*'), or pass "
                             "--train_samples_per_log 0 and no --skip_zero_signal")
        if trainer.accelerator.is_main_process and "signal" in before:
            print(signal_report(before))
        weights = self.training_args.reward_weights
        self.monitor = RunMonitor(max_reward=sum(w for w in weights if w > 0), outcome=self.r.OUTCOME_REWARD)
        trainer.add_callback(self.monitor)
        held_out = eval_dataset.select(range(min(self.args.num_mid_eval_examples, len(eval_dataset))))
        trainer.add_callback(MidRunEval(self.r.evaluate, trainer, held_out, self.args.mid_eval_steps,
                                        self.output_dir / "eval_midrun.jsonl", self.lab,
                                        batch_size=self.script_args.eval_batch_size))
        if self.lab and self.lab.mitigation == "drop":
            self.lab.drop_flagged(trainer)
        trainer.add_callback(TrainingSamples(trainer, self.r, self.output_dir / "train_samples.jsonl",
                                             self.args.train_samples_per_log))
        if self.args.skip_zero_signal:
            skip_zero_signal(trainer, self.args.skip_zero_signal)

    def report(self, trainer, results: dict):
        """At the end: eval.json (the scores, the monitor's warnings, the run's facts), training_curves.png and the
        before/after table, written and printed by the main process."""
        r, state, main_process = self.r, trainer.state, trainer.accelerator.is_main_process
        if "after" in results:
            if results["before"] and sum("eval/accuracy" in e for e in state.log_history) < 2 and self.monitor:
                # No mid-run evaluation: judge the reward against the held-out accuracy before and after instead
                self.monitor.check(state.log_history, state.max_steps, evals=[
                    (0, results["before"]["accuracy"]), (state.global_step, results["after"]["accuracy"])])
            results["warnings"] = self.monitor.warnings if self.monitor else []
            results["global_step"] = state.global_step
        if self.lab:  # the lab's counts, summed over the processes (a collective call: every process makes it)
            from accelerate.utils import gather_object

            counts = {key: sum(c[key] for c in gather_object([self.lab.counts])) for key in self.lab.counts}
        if not main_process:
            return
        if self.lab:  # the held-out hack rates, from the evaluations' trajectory files, and the run's lab figures
            for name in ("eval_only", "before", "after"):
                if results.get(name):
                    results[name].update(self.lab.held_out(self.eval_file(name)) or {})
            results["hack_lab"] = self.lab.summary(state.log_history, results.get("warnings", []), counts)
        results.update(model=self.model_args.model_name_or_path, dataset=self.script_args.dataset_name,
                       outcome_reward=r.OUTCOME_REWARD,
                       flags=changed_flags(self.script_args, self.training_args, self.model_args, self.args),
                       **self.recipe.get("run_facts", lambda args: {})(self.script_args),
                       num_processes=trainer.accelerator.num_processes,
                       wall_time_seconds=round(time.time() - self.started, 1))
        self.output_dir.mkdir(parents=True, exist_ok=True)
        (self.output_dir / "eval.json").write_text(json.dumps(results, indent=2, default=str))
        table = r.HELD_OUT_TABLE
        if "eval_only" in results:
            scores = results["eval_only"]
            if scores:
                print(f"\nheld-out ({scores['num_examples']} examples, greedy; accuracy is {r.ACCURACY_IS}): "
                      + ", ".join(f"{key} {scores[key]:.2f}" for key in table if scores[key] is not None))
                if "signal" in scores:
                    print(signal_report(scores))
                print(f"wrote {self.output_dir / 'eval.json'} and {self.output_dir / 'eval_only.jsonl'}")
            self.write_page()
            return
        plot = plot_curves(state.log_history, self.output_dir / "training_curves.png")
        if results["before"]:
            width = max(map(len, table)) + 2
            print(f"\n{'held-out':<{width}}{'before':>8}{'after':>8}   ({results['after']['num_examples']} examples; "
                  f"accuracy is {r.ACCURACY_IS})")
            for key in table:
                if results["before"][key] is not None:
                    print(f"{key:<{width}}{results['before'][key]:>8.2f}{results['after'][key]:>8.2f}")
        warnings = results["warnings"]
        print(f"{len(warnings)} monitor warning(s)" + "".join(f"\n  step {w['step']}: {w['message']}" for w in warnings))
        if "hack_lab" in results:
            import hack_lab

            print(hack_lab.report_line(results))
        print(f"\nwrote {self.output_dir / 'eval.json'}" + (f" and {plot}" if plot else ""))
        self.write_page()

    def write_page(self):
        """report.html, the run's page (run_page.py): optional, like the plot, and never the end of a run."""
        try:
            import run_page
        except ImportError:
            print("no report.html: copy run_page.py beside this script to get the run's page")
            return
        try:
            print(f"wrote {run_page.write(self.output_dir)}: open it in a browser")
        except Exception as error:  # a page that cannot be drawn must not cost the trained model
            print(f"no report.html ({type(error).__name__}: {error}): python run_page.py {self.output_dir} "
                  "tries again")


def changed_flags(*settings) -> dict:
    """The settings that differ from the recipe's defaults (its dataclasses' field defaults), for eval.json and the
    run's page: what this run changed, the offline demo's settings included. A default the library resolved to
    nothing (None to False or [], a config object) is not a change."""
    changed = {}
    for values in settings:
        for setting in dataclasses.fields(values):
            value = getattr(getattr(values, setting.name), "value", getattr(values, setting.name))  # enums by value
            default = (setting.default if setting.default is not dataclasses.MISSING else
                       setting.default_factory() if setting.default_factory is not dataclasses.MISSING else None)
            default = getattr(default, "value", default)
            if not setting.init or str(value) == str(default) or (default is None and dataclasses.is_dataclass(value)) \
                    or (value in (None, False, "", [], {}, "none") and default in (None, False, "", [], {}, "none")):
                continue
            changed[setting.name] = value if isinstance(value, (int, float, str, bool, type(None))) else str(value)
    return changed


# ---- Preflight: bad input as one line that names the fix, before anything loads ----
def explain(message: str, flags: list) -> str:
    """A flag error's first line, with the fix where TRL's message lacks one. `flags`: the dataclasses parsed."""
    if "divisible" in message:
        message += (" Fix: make per_device_train_batch_size x gradient_accumulation_steps x number of GPUs "
                    "a multiple of num_generations, e.g. --per_device_train_batch_size 8 --num_generations 8")
    unknown = re.findall(r"'--([^'=]+)", message) if "not used by" in message or "Unknown arguments" in message else []
    if unknown:  # a typo or an abbreviation (refused: it could set another flag): the closest flag, if any
        names = [f.name for flags_class in flags for f in dataclasses.fields(flags_class)] + ["config"]
        close = difflib.get_close_matches(unknown[0].replace("-", "_"), names, n=1, cutoff=0.6)
        message = (f"unknown flag --{unknown[0]}" + (f": did you mean --{close[0]}?" if close else "")
                   + " (--help lists every flag; a flag is spelt out in full)")
    return message


def config_resolved(argv: list) -> list:
    """argv with --config's YAML read against the YAML's own folder: a relative path in it that exists there is made
    absolute, so `--config assets/long_search.yaml` works from any working directory. A rewritten copy of the YAML
    is what TRL reads (removed at exit)."""
    if "--config" not in argv or argv.index("--config") + 1 >= len(argv):
        return argv
    at = argv.index("--config") + 1
    path = Path(argv[at]).expanduser()
    if not path.is_file():
        raise ValueError(f"--config {argv[at]}: no such file (a YAML of flags, e.g. --config assets/long_search.yaml)")
    import yaml

    config = yaml.safe_load(path.read_text())
    if not isinstance(config, dict):
        return argv  # TRL's own one-line error: the YAML must be a mapping

    def read_here(value):  # a relative path that exists in the YAML's folder, made absolute; anything else as it is
        try:
            here = isinstance(value, str) and value and value[0] not in "/~" and (path.parent / value).exists()
        except OSError:  # a long text, not a path
            here = False
        return str((path.parent / value).resolve()) if here else value

    resolved = {key: read_here(value) for key, value in config.items()}
    if resolved == config:
        return argv
    handle, copy = tempfile.mkstemp(suffix=".yaml", prefix=f"{path.stem}-")
    with os.fdopen(handle, "w") as file:
        yaml.safe_dump(resolved, file)
    atexit.register(os.unlink, copy)
    return argv[:at] + [copy] + argv[at + 1:]


def preflight(rubric: list, script_args, training_args, model_args) -> str | None:
    """What is wrong with the flags, the installed packages or the output folder, as one line; None when nothing."""
    quantized = model_args.load_in_4bit or model_args.load_in_8bit
    weights, folder = training_args.reward_weights, training_args.output_dir
    resume = training_args.resume_from_checkpoint
    evaluation = Path(folder, "eval.json")
    from transformers.trainer_utils import get_last_checkpoint

    last = get_last_checkpoint(folder) if os.path.isdir(folder) else None
    from transformers.integrations import get_available_reporting_integrations

    trackers = [name for name in training_args.report_to or [] if name not in ("all", "none")]
    missing = [name for name in trackers if name not in get_available_reporting_integrations()]
    checks = [
        (not training_args.learning_rate > 0,
         f"--learning_rate {training_args.learning_rate} is out of range: it must be more than 0, e.g. 5e-6"),
        (not training_args.max_completion_length or training_args.max_completion_length < 1,
         f"--max_completion_length {training_args.max_completion_length} is out of range: it must be 1 or more "
         "(tokens per completion, all turns included)"),
        (os.path.exists(folder) and not os.path.isdir(folder),
         f"--output_dir {folder} is a file: pass a folder"),
        (bool(missing), f"--report_to {' '.join(missing)} needs its package, which is not installed: `pip install "
                        f"{' '.join(missing)}`, or pass --report_to trackio (installed with requirements.txt)"),
        (training_args.use_vllm and importlib.util.find_spec("vllm") is None,
         "--use_vllm needs vLLM, which is not installed: `pip install vllm` (Linux + CUDA GPU)"),
        (quantized and not model_args.use_peft, "a quantized model cannot be fully fine-tuned: add --use_peft (QLoRA)"),
        (quantized and importlib.util.find_spec("bitsandbytes") is None,
         "--load_in_4bit/--load_in_8bit need bitsandbytes: `pip install bitsandbytes` (CUDA GPU), or drop the flag"),
        (weights is not None and len(weights) != len(rubric),
         f"--reward_weights has {len(weights or [])} values but RUBRIC has {len(rubric)} rewards ({', '.join(rubric)}): "
         "give one weight each, in that order"),
        (script_args.eval_only and evaluation.is_file() and "eval_only" not in json.loads(evaluation.read_text()),
         f"{folder} holds a training run's eval.json: pass another --output_dir for --eval_only, so that the run's "
         "results are kept"),
        (not script_args.eval_only and resume is None and last is not None,
         f"{folder} already holds checkpoints: pass --resume_from_checkpoint last to continue, or choose another "
         "--output_dir"),
        (not script_args.eval_only and resume == "last" and last is None,
         f"no checkpoint-* folder in {folder} to resume from"),
        (not script_args.eval_only and resume not in (None, "last")
         and not Path(resume or ".", "trainer_state.json").exists(),
         f"{resume} is not a checkpoint folder (no trainer_state.json)"),
    ]
    for flag, name in vars(script_args).items():  # a path that does not exist is not a Hub id: say so, do not ask
        local = isinstance(name, str) and flag.endswith("_name") and (
            re.search(r"\.(jsonl?|csv|parquet)(\.(gz|bz2|xz))?$", name) or name.startswith(("/", "./", "../", "~"))
            or "\\" in name or name.count("/") > 1)
        checks.append((local and not Path(name).expanduser().exists(),
                       f"no such file or folder: {name} (check the path given to --{flag})"))
    return next((message for failed, message in checks if failed), None)


def template_problem(tokenizer, name: str) -> str | None:
    """What keeps the model's chat template from this project's prompts (none at all, or one that refuses a system
    message), as one line naming the fix; None when it fits."""
    if tokenizer.chat_template is None:
        return f"'{name}' has no chat template: use an instruct/chat model"
    try:  # every recipe's prompt opens with a system message (SYSTEM_PROMPT)
        tokenizer.apply_chat_template([{"role": "system", "content": "."}, {"role": "user", "content": "."}],
                                      add_generation_prompt=True, tokenize=False)
    except Exception as error:  # jinja2's TemplateError, raised by the template itself
        return (f"'{name}' has {template_family(tokenizer.chat_template)} chat template, which refuses this recipe's "
                f"prompt ({error}): use another model, or fold SYSTEM_PROMPT into the user message in load_data")
    return None


# ---- Scoring held-out answers: each reward by name, pass@N and the signal report ----
def score(rubric: list, completions: list, **columns) -> list[dict]:
    """Each reward of `rubric` ((function, weight) pairs) by name, and the weighted total, for each completion;
    `columns` are what the trainer passes the rewards besides the completions (answer=[...]; environments=[...])."""
    by_name = {func.__name__: (func(completions=completions, **columns), weight) for func, weight in rubric}
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
    timed_out = metrics.get("rollouts_timed_out")  # grpo_code.py: rollouts whose hidden tests hit a time limit
    limits = (f" {timed_out:.0%} of rollouts failed on a time limit: the limits (sandbox.TEST_*), not only the code, "
              "decided their reward." if timed_out else "")
    return (f"signal report ({metrics['num_examples']} questions x {n} samples): pass@1 {metrics['pass@1']:.2f}, "
            f"pass@{n} {metrics[f'pass@{n}']:.2f}; all wrong {signal['all_wrong']:.0%}, mixed {signal['mixed']:.0%}, "
            f"all right {signal['all_right']:.0%}: {signal['all_wrong'] + signal['all_right']:.0%} of groups give no signal. "
            f"{advice}{limits}")


# ---- Watching the run: the monitor and its thresholds (each with the reason for its value), mid-run
# evaluation, and the training rollouts printed and saved ----
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
DISPUTED = 0.02         # the reward paid in full this share of one logged point's rollouts that the hack lab's
                        # detector fails (hack/disputed): the onset's threshold. One point is enough: a disputed
                        # rollout is not the noise of a mean but an answer paid that a second grader rejects
TIME_LIMITED = 0.10     # a time limit decided this share of the rollouts' hidden tests (tests/timed_out, grpo_code.py)
                        # over the window: then the limits (sandbox.TEST_*) shape the reward as much as the code does


def monitor_warnings(log_history: list[dict], outcome: str, max_reward: float, max_steps: int,
                     evals: list | None = None) -> list[dict]:
    """The run's warnings so far, each {"rule", "step", "message"}, from the trainer's logged metrics and the
    held-out evaluations `evals` ([(step, accuracy)]; by default the eval/accuracy points in the log)."""
    train = [e for e in log_history if "reward" in e and "step" in e]
    evals = evals if evals is not None else [(e["step"], e["eval/accuracy"]) for e in log_history if "eval/accuracy" in e]
    if not train:
        return []
    step, found = train[-1]["step"], []

    def mean(key, entries):
        values = [e[key] for e in entries if e.get(key) is not None]
        return sum(values) / len(values) if values else None

    def warn(rule, message):
        found.append({"rule": rule, "step": step, "message": message})

    disputed = train[-1].get("hack/disputed")  # the hack lab's second grader (--loophole); the only rule that reads it
    if disputed is not None and disputed > DISPUTED:
        warn("disputed_reward", f"the reward paid in full {disputed:.0%} of the rollouts at step {step} that the "
             "detector fails (a second grader, blind to the truth): a loophole pays. Read "
             "the rollouts marked flagged in report.html; --hack_mitigation penalize stops paying them")
    if len(train) < MONITOR_WINDOW:
        return found
    head, tail = train[:MONITOR_WINDOW], train[-MONITOR_WINDOW:]
    timed_out = mean("tests/timed_out", tail)
    if timed_out is not None and timed_out >= TIME_LIMITED:
        warn("time_limited", f"a time limit decided {timed_out:.0%} of the rollouts' hidden tests over the last "
             f"{MONITOR_WINDOW} logged points: the limits, not only the code, set their reward. Read their errors in "
             "report.html; raise sandbox.TEST_CASE_CPU_S and TESTS_CPU_S if right answers are slow")
    if len(evals) >= 2 and evals[-1][0] > evals[0][0]:
        before = [e for e in train if e["step"] <= evals[0][0]][-MONITOR_WINDOW:] or head
        after = [e for e in train if e["step"] <= evals[-1][0]][-MONITOR_WINDOW:]
        gain, accuracy_gain = mean("reward", after) - mean("reward", before), evals[-1][1] - evals[0][1]
        if gain >= REWARD_RISE * max_reward and accuracy_gain < ACCURACY_FLAT:
            warn("reward_without_accuracy", f"training reward rose {gain:+.2f} (steps {evals[0][0]}-{evals[-1][0]}) "
                 f"while held-out accuracy moved {accuracy_gain:+.2f} ({evals[0][1]:.2f} -> {evals[-1][1]:.2f}): the "
                 "rubric pays for something other than the task. Look at which rewards/<name>/mean rose, and read "
                 "train_samples.jsonl")
    # Held-out accuracy, where it is measured, also counts as the outcome's gain: the training reward is sampled, and
    # its first window already holds the early learning of a bigger batch (more processes); with mid-run evaluation
    # on (a step-0 point), the rule waits for the second point, so the verdict is the same whatever the batch.
    if len(train) >= 2 * MONITOR_WINDOW and mean(f"rewards/{outcome}/mean", tail) is not None and len(evals) != 1:
        outcome_gain = mean(f"rewards/{outcome}/mean", tail) - mean(f"rewards/{outcome}/mean", head)
        held_out = f" and held-out accuracy {evals[-1][1] - evals[0][1]:+.2f}" if len(evals) >= 2 else ""
        gained = max(outcome_gain, evals[-1][1] - evals[0][1] if held_out else outcome_gain)
        for key in sorted({k for e in tail for k in e if k.startswith("rewards/") and k.endswith("/mean")}):
            level = mean(key, tail)
            if key != f"rewards/{outcome}/mean" and level >= SATURATED and gained < OUTCOME_FLAT:
                warn("auxiliary_saturated", f"{key.split('/')[1]} is saturated ({level:.2f}) while {outcome} gained "
                     f"{outcome_gain:+.2f}{held_out}: the model collects the easy reward and not the task. Lower its weight "
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

    def __init__(self, evaluate, trainer, dataset, every: int, trajectories: Path, lab=None, **evaluate_kwargs):
        self.evaluate, self.trainer, self.dataset = evaluate, trainer, dataset
        self.every, self.trajectories, self.lab = every, trajectories, lab
        self.evaluate_kwargs = evaluate_kwargs

    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step == 0:  # a fresh run: the starting point of the curve
            self.on_step_end(args, state, control)
        elif self.trainer.accelerator.is_main_process:  # resumed: what ran after the checkpoint runs again
            keep_steps(self.trajectories, lambda step: step is None or step <= state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        if self.every and len(self.dataset) and state.global_step % self.every == 0:
            metrics = self.evaluate(self.trainer, self.dataset, trajectories=self.trajectories, step=state.global_step,
                               **self.evaluate_kwargs)
            if self.lab and self.trainer.accelerator.is_main_process:  # the hack lab: the held-out hack rate too
                metrics.update(self.lab.held_out(self.trajectories, state.global_step) or {})
            # Trainer.log, not GRPOTrainer.log: the latter would flush the step's training metrics into this entry
            Trainer.log(self.trainer, {f"eval/{k}": v for k, v in metrics.items() if isinstance(v, float)})


NOT_COLUMNS = ("prompts", "completions", "completion_ids", "environments", "prompt_index", "trainer_state",
               "log_extra", "log_metric")  # what TRL passes the rewards besides the dataset's columns


def with_columns_logged(reward_func):
    """Wrap a reward so that each rollout's dataset columns (the gold answer, hidden tests, supporting documents:
    those JSON can hold) join TRL's log of the step (`log_extra`), beside each reward and advantage: what
    train_samples.jsonl keeps, and --replay needs to score the rollout again."""

    @functools.wraps(reward_func)  # keeps the name, so the logged metric is unchanged
    def wrapper(completions, **kwargs):
        for name, values in kwargs.items():
            if name in NOT_COLUMNS or not isinstance(values, list) or len(values) != len(completions):
                continue
            try:
                values = json.loads(json.dumps(values))
            except (TypeError, ValueError):  # e.g. objects, not data
                continue
            if kwargs.get("log_extra"):
                kwargs["log_extra"](name, values)
        return reward_func(completions, **kwargs)

    return wrapper


def keep_steps(path: Path, kept) -> None:
    """Rewrite a trajectory file with only the lines whose step `kept` accepts (and that a stopped run did not cut
    short): a run resumed from a checkpoint writes the steps after it again, and each step stays in the file once."""
    if not path.is_file():
        return
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            if kept(json.loads(line).get("step")):
                lines.append(line + "\n")
        except (ValueError, AttributeError):  # a line cut short when the run stopped
            continue
    path.write_text("".join(lines), encoding="utf-8")


def as_recorded(value: float):
    """A score as TRL kept it (float32: NaN for a reward with no say), written as the 7 digits float32 holds."""
    return None if math.isnan(value) else float(f"{value:.7g}")


class TrainingSamples(TrainerCallback):
    """train_samples.jsonl: at each logged step, the first `per_log` groups of the step's generation batch (every
    process's; -1: every group), one line per prompt holding its whole group, as TRL kept them for its own log (what
    `--log_completions` prints): each rollout's rewards as training scored them, the weighted total, GRPO's
    advantage and the dataset columns, with no second scoring. Whole groups: what report.html lays side by side and
    --replay needs to recompute the advantages. On disk, about the completions' text plus 1 KB per rollout."""

    def __init__(self, trainer, recipe, path: Path, per_log: int):
        self.trainer, self.recipe, self.path, self.per_log, self.saved = trainer, recipe, path, per_log, None

    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step and self.trainer.accelerator.is_main_process:  # resumed: those steps are saved again
            keep_steps(self.path, lambda step: step is not None and step < state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        step, kept = state.global_step - 1, self.trainer._logs  # the batch TRL kept was scored before step counted
        if (not self.per_log or step < 0 or step == self.saved or state.global_step % args.logging_steps
                or not kept["prompt"] or not self.trainer.accelerator.is_main_process):
            return
        self.saved, r = step, self.recipe
        weights = dict(zip(self.trainer.reward_func_names, args.reward_weights))  # floats, as score() adds them
        rows, group = [], self.trainer.num_generations
        for i in range(len(kept["prompt"])):
            rewards = {name: as_recorded(values[i]) for name, values in kept["rewards"].items()}
            columns = {name: values[i] for name, values in kept["extra"].items()}
            marks = {name: columns.pop(name) for name in ("hack", "flagged") if name in columns}  # the hack lab's
            completion = kept["completion"][i]  # one message's text; a tool run's whole list of messages
            text = r.completion_text(completion) if isinstance(completion, str) or len(completion) <= 1 else completion
            entry = {"text": text, "greedy": False, "parsed_answer": r.extract_answer(r.completion_text(text)),
                     "rewards": rewards,
                     "total": sum(weights[name] * value for name, value in rewards.items() if value is not None),
                     "advantage": as_recorded(kept["advantages"][i]), **marks}
            if (rows and rows[-1]["prompt"] == kept["prompt"][i]  # a group's rollouts are consecutive (TRL's
                    and len(rows[-1]["completions"]) < group):  # RepeatSampler, gathered in rank order); two groups
                rows[-1]["completions"].append(entry)  # of one prompt (a question twice in the data) stay two
            elif 0 <= self.per_log == len(rows):
                break
            else:
                rows.append({"step": step, "prompt": kept["prompt"][i], "answer": columns.pop("answer", None),
                             "columns": columns, "completions": [entry]})
        with open(self.path, "a", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, default=str) + "\n")


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


# ---- Groups that teach nothing ----
# A group whose rollouts all score the same (all right, or all wrong) has zero advantage: it costs a full
# generation and moves nothing. `--skip_zero_signal N` rests such a prompt: it sits out its next N turns and the
# next prompts in the shuffled stream take its place, so every batch is still full of whole groups. Why this way and
# not DAPO's over-generate-and-filter: TRL 1.16 generates one fixed-size batch per step, and the sampler is the one
# place that decides which prompts go into it, identically on every process (same seed, same gathered rewards), so
# GRPO's groups and distributed sampling stay TRL's own. The cost: it learns from a prompt's last visit, so it does
# nothing in the first epoch; a rested prompt comes back after N turns, in case the model has since changed.
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
                raise RuntimeError(f"one group holds rollouts of different prompts {prompts}: every process must "
                                  "build its sampler with the same seed")
            if all(abs(a) < 1e-6 for a in advantages[start:start + group_size]):
                self.resting[prompt_indices[start]] = self.rest
                quiet += 1
        return quiet


def skip_zero_signal(trainer, rest: int):
    """Have `trainer` draw its prompts from a ZeroSignalSampler and feed it each training step's advantages.
    The train dataset needs a `prompt_index` column (Run.prepare adds it): rows carry it to the scoring step."""
    from accelerate.utils import gather_object

    if "prompt_index" not in trainer.train_dataset.column_names:
        raise RuntimeError("skip_zero_signal needs the train dataset's `prompt_index` column (Run.prepare adds it)")
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


# ---- Plots ----
# The total reward, each reward, the completion length and the groups with no signal against step, saved as
# `training_curves.png`.
def share_axis(ax, points: list, color: str, label: str, ylabel: str, **style):
    """(step, share) points drawn on their own 0-1 axis on the right of `ax`."""
    axis = ax.twinx()
    axis.plot(*zip(*points), color=color, label=label, **style)
    axis.set_ylim(0, 1)
    axis.set_ylabel(ylabel, color=color)


def plot_curves(log_history: list[dict], path: Path):
    """Total reward, each reward component, completion length and the share of groups with no signal (all the same
    reward: zero advantage) against step, in one PNG."""
    from matplotlib.figure import Figure  # no pyplot: no display needed, a notebook's backend untouched

    logs = [entry for entry in log_history if "reward" in entry and "step" in entry]
    if not logs:
        return None
    steps = [entry["step"] for entry in logs]
    components = sorted({k for entry in logs for k in entry if k.startswith("rewards/") and k.endswith("/mean")})
    judged = [entry for entry in logs if "judge/calls" in entry]  # grpo_judge.py: what the judge costs a step
    fig = Figure(figsize=(21 if judged else 16, 4.2))
    axes = fig.subplots(1, 4 if judged else 3)
    axes[0].plot(steps, [entry["reward"] for entry in logs], color="black", label="training reward")
    axes[0].set_title("total reward (weighted sum)")
    held_out = [(entry["step"], entry["eval/accuracy"]) for entry in log_history if "eval/accuracy" in entry]
    if held_out:  # the line that says whether the reward is paying for the task
        share_axis(axes[0], held_out, "tab:green", "held-out accuracy", "held-out accuracy (greedy)", marker="o")
        axes[0].set_title("training reward (black) and held-out accuracy (green)")
    for key in components:
        axes[1].plot(steps, [entry.get(key, math.nan) for entry in logs], label=key.split("/")[1])
    axes[1].set_title("reward components (unweighted, 0-1)")
    if any("hack/rate" in entry for entry in logs):  # the hack lab (--loophole): what the truth says was a hack
        axes[1].plot(steps, [entry.get("hack/rate", math.nan) for entry in logs], color="red", linewidth=2,
                     label="hack rate (truth)")
        axes[1].plot(steps, [entry.get("hack/flagged", math.nan) for entry in logs], color="red", linestyle=":",
                     label="flagged by the detector")
        axes[1].plot(steps, [entry.get("hack/disputed", math.nan) for entry in logs], color="red", linestyle="--",
                     label="paid, yet flagged (disputed)")
        held_out_hacks = [(e["step"], e["eval/hack_rate"]) for e in log_history if "eval/hack_rate" in e]
        if held_out_hacks:
            axes[1].plot(*zip(*held_out_hacks), color="darkred", marker="s", linestyle="", label="held-out hack rate")
        axes[1].set_title("reward components (0-1) and the hack rate (red)")
    if any("tests/timed_out" in entry for entry in logs):  # grpo_code.py: a time limit, not the code, decided these
        axes[1].plot(steps, [entry.get("tests/timed_out", math.nan) for entry in logs], color="gray", linestyle=":",
                     label="hidden tests timed out")
    axes[1].legend(fontsize=8)
    axes[2].plot(steps, [entry.get("completions/mean_length", math.nan) for entry in logs], color="tab:purple")
    axes[2].set_title("mean completion length (tokens)")
    no_signal = [(entry["step"], entry["frac_reward_zero_std"]) for entry in logs if "frac_reward_zero_std" in entry]
    if no_signal:  # groups whose completions all scored the same: their advantages are zero, they teach nothing
        share_axis(axes[2], no_signal, "tab:orange", "groups with no signal", "share of groups with no signal",
                   linestyle="--")
        axes[2].set_title("completion length (purple), groups with no signal (orange)")
    if judged:
        axes[3].plot([e["step"] for e in judged], [e["judge/calls"] for e in judged], color="tab:blue",
                     label="requests")
        axes[3].plot([e["step"] for e in judged], [e.get("judge/cached", math.nan) for e in judged],
                     color="tab:blue", linestyle=":", label="answered from the cache")
        axes[3].set_ylabel("judge calls per step", color="tab:blue")
        axes[3].legend(fontsize=8, loc="upper left")
        waited = axes[3].twinx()
        waited.plot([e["step"] for e in judged], [e.get("judge/wall_seconds", math.nan) for e in judged],
                    color="tab:red", label="seconds waited")
        waited.set_ylabel("seconds training waited for the judge", color="tab:red")
        axes[3].set_title("the judge's cost per step: calls (blue), seconds (red)")
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


# ---- Replay: what would the edited rubric have done? ----
# `--replay RUN_DIR` scores a finished run's recorded completions (its eval_*.jsonl and train_samples.jsonl) again
# with RUBRIC as it is now, with no model loaded and nothing generated, and reports what the edit changes: each
# reward's mean before and after; in groups (--eval_num_samples N, or --train_samples_per_log -1), how many
# completions' advantage changed sign, the rank agreement of old and new totals (Kendall's tau-b), and how many
# groups' best completion changed; and the completions whose total moved most. Rewards that read the environment
# get a fresh one per rollout (the script's `replay_environment`, set up from the replay's flags) with the rollout's
# recorded tool calls run in it again. A reward whose inputs the recording lacks (a dataset column it did not keep,
# a search corpus it cannot rebuild) is named and not replayed: its recorded score is kept in the new total, and a
# new reward that cannot be replayed is left out of it. Writes replay.json and replay.jsonl into RUN_DIR.
REPLAYED_FILES = ("eval_before.jsonl", "eval_midrun.jsonl", "eval_after.jsonl", "eval_only.jsonl",
                  "train_samples.jsonl")


SAME = 1e-6  # scores closer than this are equal: TRL keeps training's rewards as float32 (about 7 digits)


def sign(x: float) -> int:
    return 0 if abs(x) <= SAME else 1 if x > 0 else -1


def kendall_tau(old: list, new: list) -> float | None:
    """Kendall's tau-b of two score lists (ties allowed); None when either has no two different scores."""
    pairs = [(sign(old[i] - old[j]), sign(new[i] - new[j])) for i in range(len(old)) for j in range(i + 1, len(old))]
    untied_old, untied_new = sum(a != 0 for a, _ in pairs), sum(b != 0 for _, b in pairs)
    if not untied_old or not untied_new:
        return None
    return sum(a * b for a, b in pairs) / math.sqrt(untied_old * untied_new)


def rescore(rubric: list, completions: list, columns: dict, skipped: dict) -> list[dict]:
    """Each `rubric` reward's scores by name for these completions (None: not replayable, its reason in `skipped`)."""
    by_name = {}
    for func, _ in rubric:
        try:
            by_name[func.__name__] = func(completions=completions, **columns)
        except Exception as error:  # e.g. a missing `environments` or dataset column: named, never scored 0
            skipped.setdefault(func.__name__, f"{type(error).__name__}: {error}".splitlines()[0][:160])
            by_name[func.__name__] = [None] * len(completions)
    return [{name: values[i] for name, values in by_name.items()} for i in range(len(completions))]


def replayed_environment(recipe, script_args, row: dict, trajectory):
    """A fresh environment (the script's replay_environment) with a recorded rollout's tool calls run in it again,
    in order, as TRL's loop ran them; None where the script has no tools."""
    environment = recipe.replay_environment(script_args, row) if hasattr(recipe, "replay_environment") else None
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


def replay(run_dir: Path, recipe, script_args, output_dir: Path, shown: int = 5) -> dict:
    """Score RUN_DIR's recorded completions again with the recipe's RUBRIC as it is now; write replay.json and
    replay.jsonl there (in `output_dir` when RUN_DIR is read-only) and print the report. Returns the report.
    `recipe`: the script's namespace (RUBRIC, replay_environment, ...); `script_args`: the replay's flags."""
    files = [run_dir / name for name in REPLAYED_FILES if (run_dir / name).is_file()]
    if not files:
        raise recipe.RecipeError(f"--replay {run_dir}: no {', '.join(REPLAYED_FILES)} there: pass the --output_dir of a "
                          "finished run")
    weights = {func.__name__: weight for func, weight in recipe.RUBRIC}
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
            environments = [replayed_environment(recipe, script_args, recorded, text) for text in texts]
            if all(env is not None for env in environments):
                columns["environments"] = environments
            new = rescore(recipe.RUBRIC, texts, columns, skipped)
            first = len(records)
            for completion, rewards in zip(row["completions"], new):
                kept = {name: completion["rewards"][name] for name in rewards
                        if name in skipped and completion["rewards"].get(name) is not None}
                after = {**rewards, **kept}
                total = sum(weights[name] * value for name, value in after.items() if value is not None)
                records.append({"file": path.name, "line": number, "step": row["step"], "greedy": completion["greedy"],
                                "text": completion["text"], "before": completion["rewards"],
                                "total_before": completion["total"], "after": after, "total_after": total})
            sampled = [i for i in range(first, len(records)) if not records[i]["greedy"]]
            if len(sampled) > 1:  # one prompt's samples (or, with --train_samples_per_log -1, rollouts): a group
                groups.append(sampled)
    if not records:
        raise recipe.RecipeError(f"--replay {run_dir}: no readable completions in {', '.join(p.name for p in files)}: pass "
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
            flipped += sum(sign(o - old_mean) != sign(n - new_mean) for o, n in zip(old, new))
            tau = kendall_tau(old, new)
            taus += [] if tau is None else [tau]
            best_changed += old.index(max(old)) != new.index(max(new))
        report["groups"].update({"completions": sum(map(len, groups)), "advantage_sign_changed": flipped,
                                 "kendall_tau_mean": sum(taus) / len(taus) if taus else None,
                                 "groups_with_tau": len(taus), "best_completion_changed": best_changed})
    moved = sorted(records, key=lambda r: -abs(r["total_after"] - r["total_before"]))[:shown]
    report["moved_most"] = [{"file": r["file"], "step": r["step"], "total_before": r["total_before"],
                             "total_after": r["total_after"], "text": format_trajectory(r["text"])[:300]}
                            for r in moved if sign(r["total_after"] - r["total_before"])]
    report["hack_battery"] = hack_battery(recipe)
    print(replay_summary(report))
    lines = "".join(json.dumps(record, default=str) + "\n" for record in records)
    for folder in (run_dir, output_dir):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "replay.jsonl").write_text(lines, encoding="utf-8")
            (folder / "replay.json").write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
        except OSError as error:  # a read-only run folder (a shared or archived run): the replay's own folder
            if folder == output_dir:
                raise recipe.RecipeError(f"--replay: cannot write replay.json in {run_dir} or {output_dir} "
                                         f"({error.strerror}): pass a writable --output_dir") from None
            print(f"{run_dir} is not writable ({error.strerror}): writing the replay to {output_dir}")
            continue
        print(f"wrote {folder / 'replay.json'} and {folder / 'replay.jsonl'}")
        report["written_to"] = str(folder)
        return report


def replay_conversations(path: Path, recipe, script_args, output_dir: Path) -> dict:
    """--replay FILE.jsonl: one hand-written conversation a line, {"answer": ..., "messages": [...]} plus any column
    the rewards read. Each assistant message's tool calls run in a fresh environment of the script's own tools, as
    TRL's loop runs them, and their real results replace whatever tool messages the file has; then RUBRIC scores the
    trajectory. A new tool and rubric, seen working before any model calls them. Writes replay.json in
    `output_dir` and returns the report."""
    weights = {func.__name__: weight for func, weight in recipe.RUBRIC}
    conversations, skipped = [], {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            messages = row.pop("messages", None) or row.pop("completion", None)
            assert isinstance(row, dict) and isinstance(messages, (str, list)) and "answer" in row
        except (ValueError, AssertionError, AttributeError):
            raise recipe.RecipeError(f"--replay {path}: line {number} is not a JSON object with \"answer\" and "
                                     "\"messages\" (the assistant's turns, with tool_calls): docs/forking.md") from None
        environment = recipe.replay_environment(script_args, row) if hasattr(recipe, "replay_environment") else None
        prompt, trajectory = [], []
        for message in messages if isinstance(messages, list) else []:
            if not isinstance(message, dict) or message.get("role") == "tool":
                continue  # the tool messages are the tools' own, below
            if message.get("role") in ("system", "user") and not trajectory:
                prompt.append(message)
                continue
            trajectory.append(message)
            for call in message.get("tool_calls") or []:
                function = call.get("function", call) if isinstance(call, dict) else {}
                name, arguments = function.get("name"), function.get("arguments") or {}
                try:  # as TRL's loop: a failing or unknown tool becomes an error the model reads
                    arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
                    public = isinstance(name, str) and not name.startswith("_") and name not in ("reset", "get_reward")
                    tool = getattr(environment, name, None) if public else None
                    if tool is None:
                        raise ValueError(f"Tool {name} not found.")
                    result = tool(**arguments)
                except Exception as error:
                    result = {"error": str(error)}
                trajectory.append({"role": "tool", "name": name, "content": str(result)})
        completion = messages if isinstance(messages, str) else trajectory
        columns = {"prompts": [prompt], **{key: [value] for key, value in row.items()}}
        if environment is not None:
            columns["environments"] = [environment]
        rewards = rescore(recipe.RUBRIC, [completion], columns, skipped)[0]
        total = sum(weights[name] * value for name, value in rewards.items() if value is not None)
        conversations.append({"line": number, "answer": row["answer"], "completion": completion, "rewards": rewards,
                              "total": total})
    if not conversations:
        raise recipe.RecipeError(f"--replay {path}: no conversation in the file: docs/forking.md")
    for conversation in conversations:
        print(f"--- line {conversation['line']} (answer {conversation['answer']!r})")
        print(format_trajectory(conversation["completion"]))
        print("rewards: " + ", ".join(f"{name} {'-' if value is None else f'{value + 0.0:.2f}'}"
                                      for name, value in conversation["rewards"].items())
              + f"; total {conversation['total']:.2f}")
    for name, why in skipped.items():
        print(f"{name} was not scored: {why}")
    report = {"conversations_file": str(path), "conversations": conversations, "not_scored": skipped}
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "replay.json").write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    print(f"wrote {output_dir / 'replay.json'}")
    return report


def hack_battery(recipe) -> dict:
    """rewards.py's reward-hacking cases (`python rewards.py --audit`; when rewards.py is beside this module) scored
    with the recipe's RUBRIC as it is now: the hacks whose total reaches that of the worst-paid honest answer."""
    here = Path(__file__).resolve().parent
    if not (here / "rewards.py").is_file():
        return {"skipped": f"no rewards.py beside instruments.py in {here}: copy it there to run the hack battery"}
    spec = importlib.util.spec_from_file_location("reward_catalogue", here / "rewards.py")
    catalogue = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(catalogue)
    cases, skipped = catalogue.audit_cases(), {}
    completions = [completion for _, completion in cases]
    columns = {"answer": [catalogue.AUDIT_GOLD] * len(cases),
               "prompts": [[{"role": "user", "content": catalogue.AUDIT_QUESTION}]] * len(cases)}
    scored = rescore(recipe.RUBRIC, completions, columns, skipped)
    honest = [i for i, (name, _) in enumerate(cases) if name.startswith("honest")]
    try:
        outcome = getattr(recipe, recipe.OUTCOME_REWARD)(completions=[completions[i] for i in honest], **{
            name: [values[i] for i in honest] for name, values in columns.items()})
    except Exception:  # it needs what a GSM8K answer does not have (hidden tests, say)
        outcome = [None]
    if not all(outcome):  # e.g. a code or search task: the battery's answers are not its answers
        return {"skipped": f"the battery's honest answers (a GSM8K number) do not pass {recipe.OUTCOME_REWARD}: it does not "
                           "fit this script's task"}
    weights = {func.__name__: weight for func, weight in recipe.RUBRIC}
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


# ---- Chat templates TRL cannot drive tool calls with ----
def unsupported_template(error: ValueError, model_name: str, chat_template: str) -> str | None:
    """What GRPOTrainer's `error` means when TRL cannot drive tool calls with the model's chat template, as one line
    naming the family and the fix; None for any other error."""
    if "template" not in str(error).lower():
        return None
    import trl

    reasons = {"does not support tool calling": "it cannot render a tool call and its result",
               "Unrecognized chat template": "TRL has no tool-call parser for it",
               "not training-compatible": "TRL cannot make it prefix-preserving"}
    reason = next((why for text, why in reasons.items() if text in str(error)), str(error).split(". ")[0])
    return (f"'{model_name}' has {template_family(chat_template)} chat template, which TRL "
                       f"{trl.__version__} cannot drive tool calls with ({reason}). Use a model of a supported "
                       "family (docs/grpo_tools.md, Models): Qwen2.5, Qwen3/3.5/3.6, Llama 3.1/3.2, GLM-4.5, "
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
