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
#     "bm25s>=0.3.12",
#     "matplotlib>=3.8",
#     "pyyaml>=6.0",
# ]
# ///
"""Deep-research GRPO in one file: a small model searches a corpus over several turns, reads what it
found, searches again, and answers multi-hop questions; with credit for the turns that got it closer.

Each rollout is a conversation. The model calls `search(query)` (BM25 over a local corpus: ids, titles and short
snippets) and `open(doc_id, page)` (one page of a document), over as many turns as it needs, and ends with
<answer>...</answer>. The questions are multi-hop (HotpotQA): the second search needs what the first one found. The
rubric pays exact match of the answer (HotpotQA's official normalisation), a smaller F1 term and a format term,
charges for searching past a budget, and credits each search that brought in a supporting document not seen before.
With --turn_credit, that credit goes to the turn that earned it (MT-GRPO). With --max_context_tokens, older turns fold
out of view, so the agent can make more tool calls than its context holds (FoldGRPO, MEM1).

Run it
    python grpo_search.py                                  # no GPU: offline demo on a tiny model (~2.5 min)
    python grpo_search.py --turn_credit                    # the same, with turn-level credit
    python grpo_search.py --config assets/long_search.yaml # no GPU: chains of up to 8 scholars, a context that folds
    python grpo_search.py --max_steps 200                  # one GPU: Qwen2.5-0.5B-Instruct on HotpotQA
    python grpo_search.py --use_peft --learning_rate 2e-5  # LoRA
    python grpo_search.py --dataset_name questions.jsonl --corpus_name docs.jsonl   # your own data
    python grpo_search.py --config my_run.yaml             # any flag, from a YAML file
    accelerate launch --config_file accelerate_configs/ddp.yaml --num_processes 4 grpo_search.py
        # 4 GPUs, data parallel; accelerate_configs/ has ZeRO-2, ZeRO-3 and FSDP files too
    torchrun --nproc_per_node 2 grpo_search.py             # two processes on CPU: tries the launch path
    python grpo_search.py --eval_only --eval_num_samples 8 # no training: will GRPO learn anything?
    python grpo_search.py --help                           # every flag
From Python or a notebook: `import grpo_search; grpo_search.main(["--max_steps", "10"])`.

What to expect
    CPU demo (measured, 2 cores): "Where was the mentor of Scholar 318 born?" needs two searches over made-up
    scholars; the tiny model imitated a sloppy teacher that often answers with the scholar's own town. Greedy, it
    answers 0.22 of the held-out questions right; after 80 steps (about 2.5 minutes), 0.78 (README.md: more figures).
    GPU (estimates): Qwen2.5-0.5B-Instruct calls the tools from the start but rarely chains two searches; a few
    hundred steps on HotpotQA raise exact match by a few points.
Outputs, in --output_dir: checkpoints, the final model, eval.json (held-out scores before and after, the monitor's
warnings), training_curves.png and every evaluated rollout in eval_*.jsonl (README: Watching a run).

How this departs from textbook GRPO: as grpo_tools.py (beta = 0, DAPO token-level loss, one optimisation step per
generation batch, a weighted rubric, tool results masked out of the loss); --turn_credit gives per-turn advantages.

Model support: TRL drives tool calls only for chat templates it recognises (Qwen2.5, Qwen3, Llama 3.1/3.2, GLM-4,
gpt-oss, Gemma 4, LFM2, Nemotron 3, ...); other models get a clear error.
"""

import contextlib, copy, functools, glob, hashlib, importlib.util, inspect, json, math, os, re, shutil  # noqa: E401
import string, sys, tempfile, time  # noqa: E401
from collections import Counter
from dataclasses import dataclass, field
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
# The system prompt the model must follow, the model to train and the data: change `DEFAULT_MODEL` to train another
# one (its chat template must be one TRL can drive tool calls with).
# %%
SYSTEM_PROMPT = """Answer the question using the tools: search finds documents, open reads one. Search again with what you find until you know the answer. End with <answer>short answer</answer>."""

DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"  # native tool calls in a template TRL recognises; fits a T4
DEFAULT_DATASET = ("hotpotqa/hotpot_qa", "distractor")  # multi-hop questions; the corpus is their own paragraphs


# %% [markdown]
# Data, search, test and evaluation settings, each also a flag of `main([...])`, e.g. `main(["--search_top_k", "3"])`.
# %%
@dataclass
class ScriptArguments:
    dataset_name: str = arg(None, "Questions: a Hub dataset id, or a local .json/.jsonl/.parquet file or folder. "
                                  "Default: HotpotQA, distractor setting (the demo: the toy questions in assets/).")
    dataset_config: str = arg(None, "Dataset configuration, e.g. 'distractor' for HotpotQA.")
    dataset_train_split: str = arg("train", "Split(s) to train on, joined with '+'.")
    dataset_test_split: str = arg(None, "Split to evaluate on. Default: 'validation', else 'test', else held out.")
    corpus_name: str = arg(None, "Documents to search: a .jsonl/.json/.parquet file or a Hub id, with an id (or "
                                 "title) and a text column. Default: the paragraphs of every used split's context.")
    question_column: str = arg("question", "Column with the question.")
    answer_column: str = arg("answer", "Column with the gold answer: a string, or a list of accepted answers.")
    supporting_column: str = arg(None, "Column with the ids of the documents the answer rests on (search credit, "
                                       "metrics). Default: 'supporting_docs', else HotpotQA's 'supporting_facts'.")
    search_top_k: int = arg(5, "Results per search.")
    snippet_chars: int = arg(200, "Characters of each result's text that search shows.")
    page_chars: int = arg(1000, "Characters per page that open shows; long documents never flood the context.")
    search_budget: int = arg(4, "Tool calls per question before search_budget_penalty starts to cost.")
    max_hops: int = arg(0, "Keep only questions of at most this many hops (the data's 'hops' column; 0 = all).")
    max_context_tokens: int = arg(0, "Fold older turns away: the model never sees more tokens than this (0 = off).")
    fold_notes: bool = arg(False, "Offer a `note` tool whose text stays in view when the context folds.")
    turn_credit: bool = arg(False, "Turn-level credit (MT-GRPO): each turn's tokens also get its own search credit.")
    turn_credit_weight: float = arg(1.0, "Weight of the turn's own advantage with --turn_credit.")
    max_prompt_tokens: int = arg(1024, "Prompts longer than this (tool descriptions included) are dropped.")
    num_eval_examples: int = arg(200, "Held-out questions scored before and after training (0 = skip).")
    eval_batch_size: int = arg(32, "Questions per generate() call during evaluation.")
    print_samples_every: int = arg(25, "Print one sample trajectory every this many steps (0 = never).")
    eval_only: bool = arg(False, "Evaluate --model_name_or_path (any model, checkpoint or adapter) and exit.")
    eval_num_samples: int = arg(1, "1 = greedy only; N > 1 also samples N rollouts a question: pass@N, signal report.")
    mid_eval_steps: int = arg(0, "Every this many steps, held-out exact match, logged and plotted (0 = off).")
    num_mid_eval_examples: int = arg(64, "Held-out questions scored at each mid-run evaluation (the first ones).")
    train_samples_per_log: int = arg(2, "Rollouts saved to train_samples.jsonl per logged step (0 = none, -1 = all).")
    replay: str = arg(None, "A finished run's --output_dir: score its completions again with RUBRIC as it is now.")
    skip_zero_signal: int = arg(0, "N > 0: a prompt whose last group all scored the same (no signal) sits out its "
                                   "next N turns, others taking its place; acts from the 2nd epoch on (0 = off).")


# %% [markdown]
# Training settings: TRL's `GRPOConfig` with this recipe's defaults (tool-call rounds too); change one, or pass a flag.
# %%
@dataclass
class RecipeConfig(GRPOConfig):
    """TRL's GRPOConfig with this recipe's defaults. Every other GRPOConfig field is a flag too."""

    output_dir: str = arg(None, "Where checkpoints, eval.json and plots go. Default: outputs/grpo_search/<time>.")
    learning_rate: float = arg(5e-6, "Full fine-tuning of a 0.5B model; with --use_peft try 2e-5.")
    lr_scheduler_type: str = arg("cosine", "Learning-rate schedule.")
    warmup_steps: int = arg(10, "Linear warm-up steps.")
    max_grad_norm: float = arg(0.1, "Aggressive clipping keeps early, noisy RL updates small.")
    per_device_train_batch_size: int = arg(8, "Rollouts per device per step (not prompts).")
    gradient_accumulation_steps: int = arg(4, "Generation batch = batch x accumulation x GPUs = 32 rollouts.")
    num_generations: int = arg(8, "Rollouts per prompt; GRPO compares them. Must divide the generation batch.")
    max_completion_length: int = arg(1024, "Tokens per rollout, all turns and tool results included.")
    max_tool_calling_iterations: int = arg(6, "Tool-call rounds per rollout; ends loops that never answer.")
    max_steps: int = arg(300, "Optimizer steps (overrides num_train_epochs).")
    logging_steps: int = arg(5, "Log (and plot) every this many steps.")
    save_steps: int = arg(50, "Checkpoint every this many steps; --resume_from_checkpoint continues from one.")
    gradient_checkpointing: bool = arg(True, "Trade compute for memory; needed for full fine-tuning on a T4.")
    bf16: bool = arg(None, "Default: on where the GPU supports bf16, off on T4s (fp16 is used) and on CPU (fp32).")
    fp16: bool = arg(None, "Default: on for GPUs without bf16 (e.g. a T4), off otherwise.")
    report_to: str = arg("none", "Experiment tracker: none, trackio, wandb, tensorboard.")
    resume_from_checkpoint: str = arg(None, "A checkpoint folder, or 'last' for the newest one in --output_dir.")

    def __post_init__(self):
        apply_hardware_defaults(self, "outputs/grpo_search")  # precision for the hardware, the run's folder
        super().__post_init__()


# %% [markdown]
# The offline demo's settings, used with no CUDA GPU: a tiny model, toy two-hop questions, their corpus (`assets/`).
# %%
# These replace the defaults above (flags and YAML still win).
ASSETS = Path(__file__).resolve().parent / "assets" if "__file__" in globals() else Path("assets").resolve()
DEMO_SETTINGS = dict(
    model_name_or_path=str(ASSETS / "tiny-qwen-search"),      # made by assets/make_demo_assets.py
    dataset_name=str(ASSETS / "toy_search"),                  # train.jsonl / test.jsonl: two-hop questions
    corpus_name=str(ASSETS / "toy_search" / "corpus.jsonl"),  # one short document per made-up scholar (300)
    search_top_k=2,
    search_budget=3,
    learning_rate=2e-4,
    lr_scheduler_type="constant",
    warmup_steps=0,
    max_grad_norm=1.0,
    per_device_train_batch_size=32,
    gradient_accumulation_steps=1,
    num_generations=8,
    max_completion_length=256,
    max_tool_calling_iterations=3,
    max_steps=80,
    save_steps=40,
    gradient_checkpointing=False,
    eval_batch_size=50,
    num_eval_examples=50,
    mid_eval_steps=20,  # held-out exact match at 5 points of the run, plotted beside the reward
    num_mid_eval_examples=50,
)


# %% [markdown]
# ## Data
# Each question becomes a chat prompt under the system prompt, with its gold answers and supporting documents kept
# for the rewards. The corpus is a file of documents (`--corpus_name`), or, for HotpotQA, the questions' own
# paragraphs; its BM25 index is built once and cached next to it.
# %%
def load_data(script_args, tokenizer, seed):
    """(train, eval, corpus): datasets of chat prompts with the columns the rewards read, and the documents."""
    from datasets import Dataset

    if min(script_args.search_top_k, script_args.snippet_chars, script_args.page_chars, script_args.search_budget) < 1:
        raise RecipeError("--search_top_k, --snippet_chars, --page_chars and --search_budget must be 1 or more")
    name = script_args.dataset_name
    dataset = read_dataset(name, script_args.dataset_config)
    train = split_of(dataset, script_args.dataset_train_split, name, "--dataset_train_split")
    test_split = script_args.dataset_test_split or next((s for s in ("validation", "test") if s in dataset), None)
    if test_split is not None:
        test = split_of(dataset, test_split, name, "--dataset_test_split")
    else:  # hold some training questions out for evaluation
        train, test = hold_out(train, script_args.num_eval_examples, seed)
    test = test.select(range(min(script_args.num_eval_examples, len(test))))
    corpus = load_corpus(script_args, [train, test])
    known = {doc["id"] for doc in corpus}

    def fits(row):
        ids = tokenizer.apply_chat_template(row["prompt"], tools=tools_of(environment_class(script_args)()),
                                            add_generation_prompt=True, tokenize=True, return_dict=False)
        return len(ids) <= script_args.max_prompt_tokens

    splits = []
    for rows in (train, test):
        questions = to_questions(rows, script_args, name)
        missing = sum(doc not in known for q in questions for doc in q["supporting_docs"])
        if missing:
            print(f"{missing} supporting document id(s) of '{name}' are not in the corpus: they cannot be found "
                  "(check that the ids match the corpus's id column)")
        for question in questions:
            question["prompt"] = [{"role": "system", "content": SYSTEM_PROMPT},
                                  {"role": "user", "content": question["question"]}]
        rows = Dataset.from_list(questions) if questions else Dataset.from_dict({"prompt": []})
        before = len(rows)
        rows = rows.filter(fits) if before else rows
        if len(rows) < before:
            print(f"dropped {before - len(rows)} of {before} prompts longer than {script_args.max_prompt_tokens} "
                  "tokens (--max_prompt_tokens)")
        splits.append(rows)
    if len(splits[0]) == 0:
        raise RecipeError(f"no training question in '{name}' fits in {script_args.max_prompt_tokens} tokens: raise "
                          "--max_prompt_tokens")
    return splits[0], splits[1], corpus


# %% [markdown]
# ## Tools
# `search` and `open` over a BM25 index of the corpus (built below the line). `ToolEnvironment`, one per rollout: its
# public methods are the tools the model is offered (their docstrings are what it reads); it keeps a tally for the
# rewards: calls, failures, the documents seen, and which searches brought in a supporting document not seen before.
# %%
SEARCH_MAX_QUERY_CHARS = 300  # a query is a few keywords: longer ones are refused, not searched
INDEX_STOPWORDS = "en"        # bm25s's English stop words, dropped from documents and queries alike


class ToolEnvironment:
    """One per rollout (TRL's environment_factory); rewards read its tally through their `environments` argument."""

    index = None  # the SearchIndex all rollouts share; build_trainer builds it
    top_k, snippet_chars, page_chars, budget = 5, 200, 1000, 4  # build_trainer sets them from the flags

    def reset(self, supporting_docs=None, **row):
        self.calls, self.failures, self.searches = 0, 0, 0
        self.supporting = set(supporting_docs or [])  # the documents the answer rests on ([]: unknown)
        self.seen = set()    # ids this rollout has been shown, by search or open
        self.credited = 0    # searches that brought in a supporting document not seen before
        self.results = []    # (tool result, whether it earned that credit), in call order: for turn credit
        self.folds, self.peak_context = [], 0  # with --max_context_tokens: each fold, the most tokens in view
        return None  # nothing to add to the question

    def search(self, query: str) -> str:
        """Search the documents; returns the best matches, one per line: [id] the start of the text.

        Args:
            query: A few words to look for, e.g. a name from the question or from an earlier result.
        """
        query = str(query).strip()
        if not query:
            return self._tally("Error: empty query. Search for a few words, e.g. a name from the question.")
        if len(query) > SEARCH_MAX_QUERY_CHARS:
            return self._tally(f"Error: the query has {len(query)} characters. Search for a few words "
                               f"(at most {SEARCH_MAX_QUERY_CHARS} characters).")
        self.searches += 1
        hits = self.index.search(query, self.top_k)
        if not hits:
            return self._tally(f"No results for {query!r}. Try other words, e.g. a name from the question.")
        new_supporting = (set(hits) - self.seen) & self.supporting
        self.seen.update(hits)
        return self._tally("\n".join(self.index.entry(doc_id, self.snippet_chars) for doc_id in hits),
                           credited=bool(new_supporting))

    def open(self, doc_id: str, page: int = 1) -> str:
        """Read one page of a document.

        Args:
            doc_id: A document id, as shown in [brackets] by search.
            page: The page to read, from 1.
        """
        doc_id = str(doc_id).strip()
        if doc_id not in self.index.documents:
            return self._tally(f"Error: no document with id {doc_id!r}. Use an id that search showed in [brackets].")
        try:
            page = int(page)
        except (TypeError, ValueError):
            return self._tally(f"Error: page must be a number, e.g. 1 (got {page!r}).")
        pages = self.index.pages(doc_id, self.page_chars)
        if not 1 <= page <= len(pages):
            return self._tally(f"Error: page {page} is out of range: {doc_id!r} has {len(pages)} page(s).")
        self.seen.add(doc_id)
        return self._tally(f"[{doc_id}] page {page} of {len(pages)}\n{pages[page - 1]}")

    def _tally(self, result: str, credited: bool = False) -> str:
        self.calls += 1
        self.failures += result.startswith("Error")
        self.credited += credited
        self.results.append((result, credited))
        return result


# %% [markdown]
# ## Rubric
# Helpers the rewards share: the final message of a trajectory, the answer in its <answer> block, and HotpotQA's
# official answer normalisation (lower case, no punctuation, no articles, single spaces).
# %%
def completion_text(completion) -> str:
    """A completion is a string, or a list of chat messages: take the last assistant message."""
    if isinstance(completion, str):
        return completion
    for message in reversed(completion or []):
        if isinstance(message, dict) and message.get("role") == "assistant":
            return str(message.get("content") or "")
    return ""


ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
ANSWER_MAX_WORDS = 10  # HotpotQA's answers are names, dates, yes/no: a longer one is a paragraph, not an answer


def extract_answer(text: str):
    """The text of the last <answer>...</answer> block, stripped, or None."""
    blocks = ANSWER.findall(text)
    return blocks[-1].strip() if blocks else None


def normalize_answer(text: str) -> str:
    """HotpotQA's (and SQuAD's) normalisation: lower case, punctuation and articles removed, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def answer_f1(prediction: str, gold: str) -> float:
    """HotpotQA's official F1 over normalised words; yes/no/noanswer must match exactly."""
    prediction, gold = normalize_answer(prediction), normalize_answer(gold)
    if prediction != gold and (prediction in ("yes", "no", "noanswer") or gold in ("yes", "no", "noanswer")):
        return 0.0
    common = sum((Counter(prediction.split()) & Counter(gold.split())).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(prediction.split()), common / len(gold.split())
    return 2 * precision * recall / (precision + recall)


def golds(answer) -> list[str]:
    """The accepted answers: a string, or a list of them; those that normalise to nothing are dropped."""
    return [a for a in ([answer] if isinstance(answer, str) else list(answer or [])) if normalize_answer(str(a))]


# %% [markdown]
# The outcome: 1.0 when the answer matches a gold answer after normalisation. Edit it, then rerun the cells below.
# %%
def exact_match_reward(completions, answer, **kwargs) -> list:
    """1.0 when the final <answer> block equals a gold answer after HotpotQA's normalisation, else 0.0; None (no
    say) when the gold answer is empty, a data error the model cannot be right or wrong about."""
    scores = []
    for completion, gold in zip(completions, answer):
        predicted, accepted = extract_answer(completion_text(completion)), golds(gold)
        scores.append(None if not accepted else float(predicted is not None and any(
            normalize_answer(predicted) == normalize_answer(a) for a in accepted)))
    return scores


# %% [markdown]
# Partial credit: HotpotQA's F1 of the answer's words against the gold answer's (the best over accepted answers).
# %%
def f1_reward(completions, answer, **kwargs) -> list:
    """HotpotQA's answer F1 (0-1, the best over accepted answers); 0.0 without an answer, None without a gold."""
    scores = []
    for completion, gold in zip(completions, answer):
        predicted, accepted = extract_answer(completion_text(completion)), golds(gold)
        scores.append(None if not accepted else max(answer_f1(predicted, a) for a in accepted)
                      if predicted is not None else 0.0)
    return scores


# %% [markdown]
# Format: 1.0 when the final message has exactly one <answer> block holding a short answer.
# %%
def answer_format_reward(completions, **kwargs) -> list[float]:
    """1.0 for exactly one <answer> block in the final message, holding 1 to ANSWER_MAX_WORDS words."""
    scores = []
    for completion in completions:
        blocks = ANSWER.findall(completion_text(completion))
        scores.append(float(len(blocks) == 1 and 1 <= len(blocks[0].split()) <= ANSWER_MAX_WORDS))
    return scores


# %% [markdown]
# Turn-level credit: 0.5 per search that brought in a supporting document not seen before, capped at 1.0. The same
# query twice, or a search that only finds what an earlier one showed, earns nothing. Only results that reached the
# trajectory count: TRL drops a tool result that would overflow `max_completion_length`, unread.
# %%
def delivered(completion: list, env) -> list[tuple[int, bool]]:
    """(assistant turn, whether it earned search credit) for each of the environment's tool results that is in the
    trajectory, matched by its text, in order; a failed call TRL answered itself ({'error': ...}) matches none."""
    pending, found, turn = list(env.results), [], -1
    for message in completion if isinstance(completion, list) else []:
        if message.get("role") == "assistant":
            turn += 1
        elif message.get("role") == "tool" and turn >= 0:
            match = next((n for n, (result, _) in enumerate(pending) if result == message.get("content")), None)
            if match is not None:
                found.append((turn, pending[match][1]))
                del pending[:match + 1]
    return found


def search_credit(completions, environments, **kwargs) -> list:
    """0.5 per search whose results brought in a supporting document not seen before, capped at 1.0; None (no say)
    for a question without supporting documents."""
    return [min(1.0, 0.5 * sum(credited for _, credited in delivered(c, env))) if env.supporting else None
            for c, env in zip(completions, environments)]


# %% [markdown]
# A penalty for tool calls beyond `--search_budget`, down to -1.0, so that searching in a loop does not pay.
# %%
def search_budget_penalty(completions, environments, **kwargs) -> list[float]:
    """0.0 up to the budget (--search_budget), then -1/budget per extra call, down to -1.0. Calls are counted in the
    trajectory, so that a malformed one (which never reaches the tools) counts too."""
    scores = []
    for completion, env in zip(completions, environments):
        calls = sum(len(m.get("tool_calls") or []) for m in completion if m.get("role") == "assistant") \
            if isinstance(completion, list) else env.calls
        scores.append(-min(1.0, max(0, calls - env.budget) / max(1, env.budget)))
    return scores


# %% [markdown]
# The rubric of (reward, weight) pairs: add your own reward here, and run this cell again after editing any reward
# above; keep the partial, format and search terms together well below a right answer.
# %%
# (reward function, weight). A right answer pays 1.0 (and its F1 0.2); a wrong one collects at most
# 0.2 x F1 + 0.1 + 0.2 <= 0.5 from the other terms (F1 is 1 for the right words in another order,
# e.g. "Tower Eiffel"); tests/test_grpo_search.py checks the cap.
RUBRIC = [
    (exact_match_reward, 1.0),
    (f1_reward, 0.2),
    (answer_format_reward, 0.1),
    (search_credit, 0.2),
    (search_budget_penalty, 0.1),
]


# %% [markdown]
# ## Turn-level credit
# TRL gives every token of a rollout the same advantage. With `--turn_credit`, this subclass gives the tokens of each
# assistant turn the rollout's advantage plus `--turn_credit_weight` x that turn's own reward (1.0 when a search it
# made brought in a new supporting document), normalised within the group at the same turn index (MT-GRPO,
# arXiv 2505.11821). Tool results stay masked: their tokens carry no advantage.
# %%
def turn_rewards(completion: list, env) -> list[float]:
    """One reward per assistant turn of a trajectory: 1.0 when a tool result that turn got earned search credit (a
    new supporting document), else 0.0."""
    rewards = [0.0] * sum(1 for m in completion if m.get("role") == "assistant")
    for turn, credited in delivered(completion, env):
        rewards[turn] = max(rewards[turn], float(credited))
    return rewards


def turn_advantages(rewards: torch.Tensor, group_size: int, scale: bool = True) -> torch.Tensor:
    """(rollouts, turns) rewards -> each one minus its group's mean at the same turn index (over std, if scale);
    a rollout with fewer turns counts as 0 at the turns it did not take."""
    grouped = rewards.view(-1, group_size, rewards.shape[1])
    advantages = grouped - grouped.mean(dim=1, keepdim=True)
    if scale:
        advantages = advantages / (grouped.std(dim=1, keepdim=True) + 1e-4)
    return advantages.view_as(rewards)


def per_token_advantages(advantages: torch.Tensor, turns: torch.Tensor, mask: torch.Tensor, weight: float):
    """(B,) rollout advantages + weight x (B, turns) turn advantages -> (B, T) per token. A turn is a run of 1s in
    `mask` (the model's own tokens); tool results and padding (0s) get 0."""
    starts = mask.bool() & ~torch.nn.functional.pad(mask.bool()[:, :-1], (1, 0))  # first token of each turn
    turn_of_token = (torch.cumsum(starts.long(), dim=1) - 1).clamp(0, turns.shape[1] - 1)
    return (advantages.unsqueeze(1) + weight * turns.gather(1, turn_of_token)) * mask


class TurnCreditGRPOTrainer(GRPOTrainer):
    """GRPOTrainer with per-turn advantages (B, T); TRL's loss accepts them as they are (see _compute_loss)."""

    turn_credit_weight = 1.0  # build_trainer sets it from --turn_credit_weight

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # The trajectories as messages, with their environments: the turns are counted here
        self._turn_rewards = [turn_rewards(c, env) for c, env in zip(completions, self.environments)]
        return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        mask = output["completion_mask"] * output["tool_mask"] if "tool_mask" in output else output["completion_mask"]
        output["advantages"] = per_token_advantages(output["advantages"], self._turn_table(), mask,
                                                    self.turn_credit_weight)
        return output

    def _turn_table(self) -> torch.Tensor:
        """(this process's rollouts, turns): each turn's reward, normalised within its group at its turn index."""
        device, local = self.accelerator.device, len(self._turn_rewards)
        width = max([1] + [len(turn) for turn in self._turn_rewards])  # the most turns, on every process:
        width = int(self.accelerator.gather(torch.tensor([width], device=device)).max())  # gathers need one shape
        rewards = torch.zeros(local, width, device=device)
        for i, turn in enumerate(self._turn_rewards):
            rewards[i, :min(len(turn), width)] = torch.tensor(turn[:width], device=device)
        self._metrics["train"]["turn_credit/credited_turns"].append(rewards.sum(1).mean().item())
        # Groups can span processes: normalise over all of them, then keep this process's rows
        turns = turn_advantages(self.accelerator.gather(rewards), self.num_generations, self.scale_rewards != "none")
        return turns[self.accelerator.process_index * local:(self.accelerator.process_index + 1) * local]


# %% [markdown]
# ## Context folding
# With `--max_context_tokens N`, what the model sees never passes N tokens, however many tools it calls. Before a
# turn that would not fit, older turns are folded: they leave the context, and one line each stays in the user's
# message (the call, and the ids its result showed; a `note` the model wrote, with `--fold_notes`, stays in full).
# The last `FOLD_KEEP_TURNS` turns stay whole, so nothing of the current turn is lost. The idea of FoldGRPO
# (arXiv 2510.11967) and MEM1 (arXiv 2506.15841): a bounded working context, trained like any other.
# How a fold happens (FoldingGRPOTrainer, below the line): each fold starts a new training segment, trained with the
# rollout's advantage; rewards see the whole episode, and the trajectory files list each fold.
# %%
class NotingEnvironment(ToolEnvironment):
    """ToolEnvironment with a third tool, `note` (--fold_notes): what the model writes stays when its context folds."""

    def note(self, text: str) -> str:
        """Write a short note to yourself: it stays in view when older turns are folded away.

        Args:
            text: What to remember, e.g. the name you must look up next.
        """
        return self._tally("Noted." if str(text).strip() else "Error: empty note. Write what to remember.")


FOLD_KEEP_TURNS = 2    # the latest turns (each a tool call and its results) a fold keeps whole
TURN_ROOM = 0.25       # fold when less than this share of --max_context_tokens is left for the next turn
FOLD_MAX_LINES = 6     # folded calls listed in the user's message; older ones are only counted (notes stay longest)
FOLDED = "Earlier turns, folded to save context:"  # heads the lines a fold leaves in the user's message
HIDDEN_CALLS = "- {} earlier tool calls not listed"


def fold_line(call: dict, result: str) -> str:
    """One folded tool call as a line: a note in full; else the call and the [ids] its result showed."""
    function = call.get("function", call)
    name, arguments = function.get("name"), function.get("arguments") or {}
    if name == "note":
        return f"- note: {arguments.get('text', '')}"
    shown = " ".join(dict.fromkeys(re.findall(r"\[([^\[\]\n]{1,40})\]", str(result)))) or "no ids"
    return f"- {name}({', '.join(json.dumps(v) for v in arguments.values())}) showed: {shown}"


def fold_context(messages: list, question: str, keep: int = FOLD_KEEP_TURNS) -> tuple[list, list]:
    """(folded messages, the lines added): every turn but the last `keep` leaves, one line each (fold_line) in the
    user's message, after the lines of earlier folds; past FOLD_MAX_LINES the oldest lines that are not notes give
    way to a count. `messages` = [system, user, then turns: an assistant message and the tool results that follow
    it]; `question` is the user's message as first asked."""
    head, turns = messages[:2], []
    for message in messages[2:]:
        if message.get("role") == "assistant" or not turns:
            turns.append([])
        turns[-1].append(message)
    dropped, kept = turns[:max(0, len(turns) - keep)], turns[max(0, len(turns) - keep):]
    lines = []
    for turn in dropped:
        calls, results = turn[0].get("tool_calls") or [], [m.get("content") for m in turn[1:]]
        lines += [fold_line(call, results[n] if n < len(results) else "") for n, call in enumerate(calls)]
    earlier = head[1]["content"][len(question):].split(FOLDED, 1)[-1].strip().splitlines()
    counted = re.fullmatch(HIDDEN_CALLS.format(r"(\d+)"), earlier[0]) if earlier else None
    hidden = int(counted.group(1)) if counted else 0
    earlier = earlier[1:] if counted else earlier
    shown = earlier + lines
    while len(shown) > FOLD_MAX_LINES:  # the oldest call that is not a note goes first; notes go last
        shown.pop(next((n for n, line in enumerate(shown) if not line.startswith("- note:")), 0))
        hidden += 1
    block = ([HIDDEN_CALLS.format(hidden)] if hidden else []) + shown
    user = {**head[1], "content": f"{question}\n\n{FOLDED}\n" + "\n".join(block)}
    return [head[0], user] + [m for turn in kept for m in turn], lines


# %% [markdown]
# ## Training
# The call that trains: the index, the tools and the rubric wired into TRL's `GRPOTrainer` (or, with `--turn_credit`,
# the trainer above). Then how a run is judged: the held-out metrics `evaluate` reports before and after training,
# and the reward the run monitor watches.
# %%
OUTCOME_REWARD = "exact_match_reward"  # the reward the run monitor compares the others with
HELD_OUT_TABLE = ("accuracy", "f1", "supporting_found", "supporting_searches", "searches", "tool_call_success")
ACCURACY_IS = "exact match"


def set_up_search(script_args, corpus: list):
    """The index every rollout searches, and the search flags, set on the environment class."""
    ToolEnvironment.index = SearchIndex(corpus, index_folder(script_args))
    ToolEnvironment.top_k, ToolEnvironment.snippet_chars = script_args.search_top_k, script_args.snippet_chars
    ToolEnvironment.page_chars, ToolEnvironment.budget = script_args.page_chars, script_args.search_budget


def build_trainer(script_args, training_args, model_args, tokenizer, train_dataset, rewards, corpus):
    """GRPOTrainer (TurnCreditGRPOTrainer with --turn_credit) with the search tools over `corpus`, and `rewards`."""
    set_up_search(script_args, corpus)
    TurnCreditGRPOTrainer.turn_credit_weight = script_args.turn_credit_weight
    FoldingGRPOTrainer.max_context_tokens = script_args.max_context_tokens
    FoldingGRPOTrainer.turn_credit = script_args.turn_credit
    check_folding(script_args, training_args)
    trainer_class = (FoldingGRPOTrainer if script_args.max_context_tokens else
                     TurnCreditGRPOTrainer if script_args.turn_credit else GRPOTrainer)
    try:
        return trainer_class(
            model=load_model(model_args),
            reward_funcs=rewards,
            args=training_args,
            train_dataset=train_dataset,
            processing_class=tokenizer,
            environment_factory=environment_class(script_args),
            peft_config=get_peft_config(model_args),
            quantization_config=get_quantization_config(model_args),
        )
    except ValueError as error:  # TRL drives tool calls only for the chat templates it knows
        raise template_error(error, model_args.model_name_or_path, tokenizer.chat_template) from None


def check_folding(script_args, training_args):
    """--max_context_tokens: a window with room for the prompt and a turn, and settings the folded segments fit."""
    window = script_args.max_context_tokens
    if not window:
        return
    if window <= script_args.max_prompt_tokens:
        raise RecipeError(f"--max_context_tokens {window} leaves no room after the prompt: make it larger than "
                          f"--max_prompt_tokens ({script_args.max_prompt_tokens}), or 0 to turn folding off")
    if training_args.use_vllm or training_args.beta or training_args.num_iterations > 1 or \
            training_args.gradient_accumulation_steps % training_args.steps_per_generation:
        raise RecipeError("--max_context_tokens trains folded segments without reference or old log-probs: use "
                          "--beta 0 --num_iterations 1, no --use_vllm, and the default --steps_per_generation")


def environment_class(script_args):
    """The tools each rollout gets: search and open, and note with --fold_notes."""
    return NotingEnvironment if script_args.fold_notes else ToolEnvironment


def replay_environment(script_args, row: dict):
    """--replay: a fresh environment, reset with a recorded row (its supporting documents), for the rollout's recorded
    searches to run in again over --corpus_name with the replay's search flags (pass the run's own). None when the
    corpus was the questions' context column: the recording cannot rebuild it."""
    if ToolEnvironment.index is None:
        if script_args.corpus_name is None:
            return None
        set_up_search(script_args, load_corpus(script_args, []))
    environment = environment_class(script_args)()
    environment.reset(**row)
    return environment


def run_facts(script_args) -> dict:
    """What eval.json records about the run besides the model, the dataset and the scores."""
    return {"corpus": script_args.corpus_name or script_args.dataset_name,
            "corpus_size": len(ToolEnvironment.index.documents), "turn_credit": script_args.turn_credit,
            "max_context_tokens": script_args.max_context_tokens, "fold_notes": script_args.fold_notes}


def evaluate(trainer, dataset, batch_size: int, num_samples: int = 1, trajectories: Path | None = None,
             step: int | None = None) -> dict:
    """Greedy multi-turn rollouts on held-out questions, both tools enabled: accuracy (exact match, HotpotQA's
    normalisation), F1, the share of supporting documents found, searches per question and those that found a new
    supporting document, tool-call success; with num_samples > 1 also pass@1, pass@N and the signal report. Every
    rollout, its rewards and the documents it saw go to `trajectories` (one JSON line per question)."""
    if len(dataset) == 0:
        return {}
    samples = num_samples if num_samples > 1 else 0
    found = rollouts(trainer, dataset, batch_size, samples)
    flat = [rollout.messages for row in found for rollout in row]
    envs = [rollout.env for row in found for rollout in row]
    answers = [value for value, row in zip(dataset["answer"], found) for _ in row]
    scores = score(flat, answer=answers, environments=envs)
    # Straight from the answers, whatever RUBRIC holds: a rubric under test must not grade itself
    predicted = [extract_answer(completion_text(c)) for c in flat]
    correct = [float(p is not None and any(normalize_answer(p) == normalize_answer(a) for a in golds(gold)))
               for p, gold in zip(predicted, answers)]
    f1 = [max((answer_f1(p, a) for a in golds(gold)), default=0.0) if p is not None else 0.0
          for p, gold in zip(predicted, answers)]
    greedy = list(range(0, len(flat), 1 + samples))
    for i in greedy:  # without folding, the model saw its whole conversation: prompt and completion
        if not envs[i].peak_context:
            prompt = trainer.processing_class.apply_chat_template(
                dataset[i // (1 + samples)]["prompt"], tools=tools_of(envs[i]), add_generation_prompt=True,
                tokenize=True, return_dict=False)
            envs[i].peak_context = len(prompt) + len(found[i // (1 + samples)][0].completion_ids)
    supported = [i for i in greedy if envs[i].supporting]
    calls = sum(envs[i].calls for i in greedy)
    failures = sum(envs[i].failures for i in greedy)
    metrics = {"accuracy": sum(correct[i] for i in greedy) / len(greedy),
               "f1": sum(f1[i] for i in greedy) / len(greedy),
               "supporting_found": sum(len(envs[i].seen & envs[i].supporting) / len(envs[i].supporting)
                                       for i in supported) / len(supported) if supported else None,
               "supporting_searches": sum(envs[i].credited for i in greedy) / len(greedy),
               "searches": sum(envs[i].searches for i in greedy) / len(greedy),
               "tool_call_success": (calls - failures) / calls if calls else 0.0,
               "mean_tool_calls": calls / len(greedy), "num_examples": len(greedy),
               "folds": sum(len(envs[i].folds) for i in greedy) / len(greedy),
               "peak_context_tokens": max(envs[i].peak_context for i in greedy),
               "questions_per_process": trainer._questions_per_process, "sample_trajectory": flat[0]}
    if samples:
        metrics.update(sample_metrics([sum(correct[i + 1:i + 1 + samples]) for i in greedy], samples))
    if trajectories is not None and trainer.accelerator.is_main_process:
        with open(trajectories, "a", encoding="utf-8") as f:
            for n, (prompt, gold, first) in enumerate(zip(dataset["prompt"], dataset["answer"], greedy)):
                f.write(json.dumps({"step": step, "prompt": prompt, "answer": gold, "columns": {
                    "supporting_docs": sorted(envs[first].supporting)}, "completions": [
                    {"text": flat[i], "greedy": i == first, "parsed_answer": predicted[i], **scores[i],
                     "documents_seen": sorted(envs[i].seen), "supporting_docs": sorted(envs[i].supporting),
                     "tool_calls": envs[i].calls, "folds": envs[i].folds, "peak_context_tokens": envs[i].peak_context}
                    for i in range(first, first + 1 + samples)]}, default=str) + "\n")
    return metrics


# %% [markdown]
# # Machinery
# ---- machinery: the same in every script, held identical by tests; you rarely need to edit below ----
#
# Above: this recipe's settings, data, tools, rubric and the call that trains. Below: how every script runs. Each
# part is written out in every script that needs it, word for word, and tests/test_shared_blocks.py holds the
# copies equal, so that a fix goes into every copy.
# %% [markdown]
# ## The search index
# BM25 over the corpus with bm25s, built once and cached on disk beside a local corpus (else in the Hugging Face
# cache folder), named after a hash of the documents.
# %%
class SearchIndex:
    """BM25 over documents {id, title, text} with bm25s, built once and cached on disk: a folder named after a hash
    of the documents and the settings, so that a changed corpus is indexed again."""

    def __init__(self, documents: list[dict], cache_dir: Path):
        import bm25s

        self.documents = {doc["id"]: doc for doc in documents}
        self.ids = list(self.documents)
        digest = hashlib.sha256(f"{bm25s.__version__}|{INDEX_STOPWORDS}".encode())
        for doc in self.documents.values():
            digest.update(f"{doc['id']}\0{doc['title']}\0{doc['text']}\0".encode())
        self.path = Path(cache_dir) / f"bm25s-{digest.hexdigest()[:16]}"
        self._cache = {}
        if (self.path / "params.index.json").exists():
            self.retriever = bm25s.BM25.load(self.path, show_progress=False)
            return
        texts = [f"{doc['title']}\n{doc['text']}" for doc in self.documents.values()]
        self.retriever = bm25s.BM25()
        self.retriever.index(bm25s.tokenize(texts, stopwords=INDEX_STOPWORDS, show_progress=len(texts) > 10_000),
                             show_progress=len(texts) > 10_000)
        staging = None
        try:  # written aside, then renamed: a reader (another process) never sees half an index
            self.path.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(dir=self.path.parent, prefix=".bm25s-"))
            self.retriever.save(staging, show_progress=False)
            os.replace(staging, self.path)
        except OSError:  # a read-only folder, or another process saved the same index first: use this one
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)

    def search(self, query: str, k: int) -> list[str]:
        """Ids of the (at most) k best-matching documents, best first; none when no query word is in the corpus."""
        import bm25s

        if (query, k) not in self._cache:
            tokens = bm25s.tokenize([query], stopwords=INDEX_STOPWORDS, return_ids=False, show_progress=False)
            hits = []
            if tokens[0]:
                found, scores = self.retriever.retrieve(tokens, k=min(k, len(self.ids)), show_progress=False,
                                                        n_threads=1)
                hits = [self.ids[i] for i, s in zip(found[0], scores[0]) if s > 0]
            if len(self._cache) > 100_000:
                self._cache.clear()
            self._cache[(query, k)] = hits
        return self._cache[(query, k)]

    def pages(self, doc_id: str, page_chars: int) -> list[str]:
        """A document's text cut into pages of about page_chars characters, at spaces."""
        text, pages = self.documents[doc_id]["text"], []
        while len(text) > page_chars:
            cut = text.rfind(" ", 0, page_chars + 1)
            cut = cut if cut > 0 else page_chars
            pages.append(text[:cut])
            text = text[cut:].lstrip()
        return pages + [text]

    def entry(self, doc_id: str, snippet_chars: int) -> str:
        """One search result: [id] title: the start of the text (the title only where it differs from the id)."""
        doc = self.documents[doc_id]
        snippet = doc["text"].strip()
        if len(snippet) > snippet_chars:
            snippet = snippet[:snippet.rfind(" ", 0, snippet_chars) if " " in snippet[:snippet_chars]
                              else snippet_chars] + " ..."
        return f"[{doc_id}] " + (f"{doc['title']}: " if doc["title"] != doc_id else "") + snippet


def index_folder(script_args) -> Path:
    """Where the index is cached: beside a local corpus file, else in the Hugging Face cache folder."""
    corpus = Path(script_args.corpus_name or "")
    if script_args.corpus_name and corpus.is_file() and os.access(corpus.parent, os.W_OK):
        return corpus.parent / f"{corpus.name}.bm25s-index"
    return Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "grpo_search"


# %% [markdown]
# ## Folding rollouts
# `--max_context_tokens` in training and evaluation alike. Where it plugs in: TRL 1.16's `environment_factory`
# supplies the tools and `rollout_func` returns one token sequence per rollout; neither can change what earlier turns
# the model sees. So this subclass runs the tool loop itself (`_tool_call_loop`, TRL's loop for text-only models,
# plus the fold), and each fold starts a new training segment: the folded context is that segment's prompt, its turns
# are the segment's completion. Every segment is trained with the rollout's advantage (as FoldGRPO does), so each
# token is scored in the context it was sampled in, and the evaluation, which runs the same loop, folds alike.
# %%
class FoldingGRPOTrainer(TurnCreditGRPOTrainer):
    """GRPOTrainer whose tool loop keeps the context under max_context_tokens by folding, and trains every segment
    of a folded rollout with the rollout's advantage (with turn_credit, per turn, as TurnCreditGRPOTrainer does)."""

    max_context_tokens, turn_credit = 0, False  # build_trainer sets them from --max_context_tokens, --turn_credit

    def _tool_call_loop(self, prompts, prompt_ids, completion_ids, completions, logprobs, images, multimodal_fields):
        """TRL's tool loop (text only), folding the context before a turn that would not fit. On return,
        prompt_ids/completion_ids hold each rollout's last segment; the earlier ones are in self._segments."""
        from trl.chat_template_utils import parse_response  # what TRL's own loop parses with

        limit, room = self.max_context_tokens, int(TURN_ROOM * self.max_context_tokens)
        count = len(completion_ids)
        tool_mask = [[1] * len(ids) for ids in completion_ids]
        envs = self.environments or [None] * count
        self._segments = [[] for _ in range(count)]
        active = [list(prompts[i]) + list(completions[i]) for i in range(count)]
        questions = [prompts[i][1]["content"] for i in range(count)]
        calls = failures = rounds = 0
        for i in range(count):  # the first turn: its prompt and tokens are within the window
            completion_ids[i] = completion_ids[i][:max(0, limit - len(prompt_ids[i]))]
            tool_mask[i] = tool_mask[i][:len(completion_ids[i])]
            if logprobs is not None:
                logprobs[i] = logprobs[i][:len(completion_ids[i])]
            self._note_context(envs[i], len(prompt_ids[i]) + len(completion_ids[i]))
        pending = [i for i in range(count) if completions[i] and completions[i][-1].get("tool_calls")]
        while pending and rounds < self.max_tool_calling_iterations:
            contexts, going = [], []
            for i in pending:
                results = []
                for call in completions[i][-1]["tool_calls"]:
                    calls += 1
                    function = call.get("function", {})
                    tool = self._sync_tool_dicts[i].get(function.get("name"))
                    try:
                        result = tool(**function.get("arguments", {})) if tool else \
                            {"error": f"Tool {function.get('name')} not found."}
                    except Exception as error:
                        result = {"error": str(error)}
                    failures += isinstance(result, dict) and "error" in result
                    results.append({"role": "tool", "name": function.get("name"), "content": str(result)})
                completions[i] += results
                active[i] += results
                suffix = self._get_tool_suffix_ids(results)
                context = prompt_ids[i] + completion_ids[i] + suffix
                folded, lines = fold_context(active[i], questions[i]) if len(context) > limit - room else (None, [])
                ids = self.processing_class.apply_chat_template(
                    folded, tools=self._env_tools[self._batch_environments[i]], add_generation_prompt=True,
                    tokenize=True, return_dict=False, **self.chat_template_kwargs) if lines else context
                if len(ids) < len(context):  # fold: this segment ends here, a new one starts
                    self._segments[i].append((prompt_ids[i], completion_ids[i], tool_mask[i],
                                              logprobs[i] if logprobs is not None else None))
                    if envs[i] is not None and hasattr(envs[i], "folds"):
                        envs[i].folds.append({"after_tool_calls": sum(len(m.get("tool_calls") or []) for m in
                                                                      completions[i]), "tokens_before": len(context),
                                              "tokens_after": len(ids), "dropped": lines})
                    active[i], prompt_ids[i], completion_ids[i], tool_mask[i] = folded, ids, [], []
                    if logprobs is not None:
                        logprobs[i] = []
                    context, suffix = ids, []
                if len(context) >= limit:  # not even folding leaves room for another turn: the episode ends here
                    continue
                tool_mask[i] += [0] * len(suffix)
                if logprobs is not None:
                    logprobs[i] += [0.0] * len(suffix)
                completion_ids[i] = completion_ids[i] + suffix
                contexts.append(context)
                going.append(i)
            if not going:
                break
            new_ids, new_logprobs = self._generate_single_turn(contexts, None, {}, num_generations=1)
            pending = []
            for n, i in enumerate(going):
                ids = new_ids[n][:max(0, min(limit - len(contexts[n]),
                                            self.max_completion_length - len(completion_ids[i])))]
                completion_ids[i] = completion_ids[i] + ids
                tool_mask[i] += [1] * len(ids)
                if logprobs is not None:
                    logprobs[i] += new_logprobs[n][:len(ids)]
                self._note_context(envs[i], len(contexts[n]) + len(ids))
                if ids:
                    message = parse_response(self._tokenizer, ids, prefix=contexts[n],
                                             tools=self._env_tools[self._batch_environments[i]])
                    completions[i].append(message)
                    active[i].append(message)
                    if message.get("tool_calls"):
                        pending.append(i)
            rounds += 1
        return tool_mask, completions, completion_ids, logprobs, calls, failures, [[] for _ in range(count)]

    @staticmethod
    def _note_context(env, tokens: int):
        if env is not None and hasattr(env, "peak_context"):
            env.peak_context = max(env.peak_context, tokens)

    def _generate_and_score_completions(self, inputs):
        output = GRPOTrainer._generate_and_score_completions(self, inputs)  # advantages per rollout; turns below
        if "old_per_token_logps" in output or "ref_per_token_logps" in output or "sampling_per_token_logps" in output:
            raise RecipeError("--max_context_tokens trains folded segments without per-token reference or old "
                              "log-probs: use --beta 0, --num_iterations 1, no --use_vllm, and gradient_accumulation"
                              "_steps a multiple of steps_per_generation")
        rows = [(p, c, m, n) for n, segments in enumerate(self._segments) for p, c, m, _ in segments]
        self._metrics["train"]["context/folds_per_rollout"].append(len(rows) / max(1, len(self._segments)))
        chunks = self.args.steps_per_generation  # TRL splits the batch into this many equal parts
        rows += [([self._tokenizer.pad_token_id], [self._tokenizer.pad_token_id], [0], None)] * \
            (-(len(rows) + len(output["prompt_ids"])) % chunks)  # empty rows (nothing trained) to split evenly
        if rows:
            self._add_segment_rows(output, rows)
        if self.turn_credit:  # each row's turns are the episode's turns from the row's first one on
            table, owners, first, seen = self._turn_table(), [], [], Counter()
            for n, segments in enumerate(self._segments):  # a rollout's own row holds its last segment
                owners.append(n)
                first.append(sum(turns_in(m) for _, _, m, _ in segments))
            for *_, n in rows:  # then its earlier segments, in order
                owners.append(n)
                first.append(sum(turns_in(m) for _, _, m, _ in self._segments[n][:seen[n]]) if n is not None else 0)
                seen[n] += 1
            shifted = torch.zeros(len(owners), table.shape[1], device=table.device)
            for r, (n, start) in enumerate(zip(owners, first)):
                if n is not None and start < table.shape[1]:
                    shifted[r, :table.shape[1] - start] = table[n, start:]
            mask = output["completion_mask"] * output["tool_mask"]
            output["advantages"] = per_token_advantages(output["advantages"], shifted, mask, self.turn_credit_weight)
        return output

    def _add_segment_rows(self, output, rows):
        """Append the earlier segments (prompt ids, completion ids, tool mask, rollout) as rows of their own."""
        device, pad_id = self.accelerator.device, self._tokenizer.pad_token_id
        width_p = max(output["prompt_ids"].shape[1], max(len(p) for p, *_ in rows))
        width_c = max(output["completion_ids"].shape[1], max(len(c) for _, c, *_ in rows))

        def block(values, width, left, fill):
            return torch.tensor([[fill] * (width - len(v)) + list(v) if left else list(v) + [fill] * (width - len(v))
                                 for v in values], device=device, dtype=torch.long)

        def widen(tensor, width, left, fill):
            extra = torch.full((tensor.shape[0], width - tensor.shape[1]), fill, device=device, dtype=tensor.dtype)
            return torch.cat([extra, tensor] if left else [tensor, extra], dim=1)

        output["prompt_ids"] = torch.cat([widen(output["prompt_ids"], width_p, True, pad_id),
                                          block([p for p, *_ in rows], width_p, True, pad_id)])
        output["prompt_mask"] = torch.cat([widen(output["prompt_mask"], width_p, True, 0),
                                           block([[1] * len(p) for p, *_ in rows], width_p, True, 0)])
        output["completion_ids"] = torch.cat([widen(output["completion_ids"], width_c, False, pad_id),
                                              block([c for _, c, *_ in rows], width_c, False, pad_id)])
        output["completion_mask"] = torch.cat([widen(output["completion_mask"], width_c, False, 0),
                                               block([[1] * len(c) for _, c, *_ in rows], width_c, False, 0)])
        output["tool_mask"] = torch.cat([widen(output["tool_mask"], width_c, False, 1),
                                         block([m for _, _, m, _ in rows], width_c, False, 0)])
        advantages = [output["advantages"][n] if n is not None else 0.0 * output["advantages"][0] for *_, n in rows]
        output["advantages"] = torch.cat([output["advantages"], torch.stack(advantages)])
        loss_mask = output["completion_mask"] * output["tool_mask"]
        output["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()


def turns_in(mask: list) -> int:
    """Assistant turns in a segment: runs of 1s in its tool mask."""
    return sum(1 for j, bit in enumerate(mask) if bit and (j == 0 or not mask[j - 1]))


# %% [markdown]
# ## Question layouts and the corpus
# Rows of HotpotQA (the Hub's layout or the original json) or your own layout become questions with their
# accepted answers and supporting document ids; the corpus comes from --corpus_name or the questions' contexts.
# %%
def paragraphs_of(context) -> list[dict]:
    """HotpotQA's context as documents {id, title, text}, the Wikipedia title as the id: {title: [...], sentences:
    [[...]]} as on the Hub, or [[title, [sentences]], ...] as in the original json files."""
    pairs = zip(context["title"], context["sentences"]) if isinstance(context, dict) else context or []
    return [{"id": str(title), "title": str(title), "text": "".join(map(str, sentences)).strip()}
            for title, sentences in pairs]


def supporting_ids(value) -> list[str]:
    """Supporting document ids from a list of ids, or from HotpotQA's supporting_facts ({title: [...], sent_id:
    [...]}, or [[title, sent_id], ...]), without repeats."""
    if isinstance(value, dict):
        value = value.get("title", [])
    if isinstance(value, str):  # one id, not a list of them
        value = [value]
    return list(dict.fromkeys(str(v[0] if isinstance(v, (list, tuple)) else v) for v in value or []))


def to_questions(rows, script_args, name: str) -> list[dict]:
    """Rows -> {question, answer (a list of accepted answers), supporting_docs (ids; [] when unknown)}, those of
    more than --max_hops hops left out."""
    columns = rows.column_names
    for flag, column in (("question_column", script_args.question_column), ("answer_column", script_args.answer_column)):
        if column not in columns:
            raise RecipeError(f"dataset '{name}' has no column '{column}' (it has {columns}): pass --{flag} NAME")
    supporting = script_args.supporting_column
    if supporting is not None and supporting not in columns:
        raise RecipeError(f"dataset '{name}' has no column '{supporting}' (it has {columns}): pass "
                          "--supporting_column NAME, or leave it out (no search credit)")
    supporting = supporting or next((c for c in ("supporting_docs", "supporting_facts") if c in columns), None)
    if script_args.max_hops and "hops" not in columns:
        raise RecipeError(f"--max_hops needs a 'hops' column in '{name}' (it has {columns}): add one, or leave "
                          "--max_hops out")
    questions = []
    for row in rows:
        if script_args.max_hops and row["hops"] > script_args.max_hops:
            continue
        answer = row[script_args.answer_column]
        answers = [str(a) for a in (answer if isinstance(answer, (list, tuple)) else [answer]) if a is not None]
        questions.append({"question": str(row[script_args.question_column]).strip(), "answer": answers,
                          "supporting_docs": supporting_ids(row[supporting]) if supporting else []})
    return questions


def load_corpus(script_args, splits: list) -> list[dict]:
    """Documents {id, title, text}: from --corpus_name, or the paragraphs in the questions' context column."""
    if script_args.corpus_name is None:
        if "context" not in splits[0].column_names:
            raise RecipeError(f"'{script_args.dataset_name}' has no context column to build a corpus from: pass "
                              "--corpus_name docs.jsonl (one document per line: id, title, text)")
        documents = [doc for rows in splits if len(rows) for context in rows["context"] for doc in paragraphs_of(context)]
    else:
        name = script_args.corpus_name
        corpus = read_dataset(name, None, "--corpus_name")
        rows = corpus[next(iter(corpus))] if len(corpus) == 1 else split_of(corpus, "train", name, "a corpus with")
        columns = rows.column_names
        id_column = next((c for c in ("id", "doc_id", "title") if c in columns), None)
        text_column = next((c for c in ("text", "contents", "content", "paragraph_text") if c in columns), None)
        if id_column is None or text_column is None:
            raise RecipeError(f"corpus '{name}' needs an id (or title) and a text column (it has {columns}): "
                              "write one document per line as {\"id\": ..., \"title\": ..., \"text\": ...}")
        titles = rows["title"] if "title" in columns else rows[id_column]
        documents = [{"id": str(i), "title": str(t), "text": str(x or "")}
                     for i, t, x in zip(rows[id_column], titles, rows[text_column])]
    unique = {}
    for doc in documents:  # one document per id: the first (HotpotQA repeats a paragraph across questions)
        unique.setdefault(doc["id"], doc)
    documents = list(unique.values())
    if not documents:
        raise RecipeError(f"the corpus of '{script_args.corpus_name or script_args.dataset_name}' holds no document")
    return documents


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
