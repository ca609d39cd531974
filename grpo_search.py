# %% [markdown]
# ## Imports
# From this project: instruments.py (the run instruments), context_folding.py (--max_context_tokens): optional.
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
    python grpo_search.py                                  # no GPU: offline demo on a tiny model (1.3 min)
    python grpo_search.py --turn_credit                    # the same, with turn-level credit
    python grpo_search.py --config assets/long_search.yaml # no GPU: chains of up to 8 scholars, a context that folds
    python grpo_search.py --max_steps 200                  # one GPU: Qwen2.5-0.5B-Instruct on HotpotQA
    python grpo_search.py --dataset_name questions.jsonl --corpus_name docs.jsonl   # your own data
    accelerate launch --config_file accelerate_configs/ddp.yaml --num_processes 4 grpo_search.py
        # 4 GPUs, data parallel; accelerate_configs/ has ZeRO-2, ZeRO-3 and FSDP files too
    torchrun --nproc_per_node 2 grpo_search.py             # two processes on CPU: tries the launch path
    python grpo_search.py --eval_only --eval_num_samples 8 # no training: will GRPO learn anything?
    python grpo_search.py --help                           # every flag (LoRA, YAML files: as grpo_math.py)
From Python or a notebook: `import grpo_search; grpo_search.main(["--max_steps", "10"])`.

What to expect
    CPU demo (measured, 2 cores): "Where was the mentor of Scholar 318 born?" needs two searches over made-up
    scholars; the tiny model imitated a sloppy teacher that often answers with the scholar's own town. Greedy, it
    answers 0.22 of the held-out questions right; after 80 steps (about 1.3 minutes), 0.78 (docs/grpo_search.md: more).
    GPU (estimates): Qwen2.5-0.5B-Instruct calls the tools from the start but rarely chains two searches; a few
    hundred steps on HotpotQA raise exact match by a few points.
Outputs, in --output_dir: checkpoints and the final model; with instruments.py, eval.json, training_curves.png and
every evaluated rollout in eval_*.jsonl (docs/watching.md).

How this departs from textbook GRPO: as grpo_tools.py (beta = 0, DAPO token-level loss, one optimisation step per
generation batch, a weighted rubric, tool results masked out of the loss); --turn_credit gives per-turn advantages.

Model support: as grpo_tools.py (the chat templates TRL drives tool calls with; docs/grpo_tools.md, Models).
"""

import copy, functools, hashlib, inspect, json, os, re, shutil, string, sys, tempfile, time  # noqa: E401
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch
from trl import GRPOConfig, GRPOTrainer, ModelConfig, TrlParser, get_peft_config, get_quantization_config

try:  # --max_context_tokens: the tool loop that folds, one copy (without it the flag is refused)
    import context_folding
except ImportError:
    context_folding = None
try:  # the run instruments: the monitor, mid-run evaluation, replay, plots, eval.json (optional: docs/how_it_works.md)
    import instruments
except ImportError:
    instruments = None


def arg(default, help):
    """A config field whose comment is also its --help text."""
    return field(default=default, metadata={"help": help})


# %% [markdown]
# ## Config
# The system prompt, the model to train (its chat template one TRL drives tool calls with) and the data.
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
    turn_credit: bool = arg(False, "Turn-level credit (MT-GRPO): a turn gets +1 (new evidence), -1 (unshown id opened).")
    turn_credit_weight: float = arg(1.0, "Weight of the turn's own advantage with --turn_credit.")
    max_prompt_tokens: int = arg(1024, "Prompts longer than this (tool descriptions included) are dropped.")
    num_eval_examples: int = arg(200, "Held-out questions scored before and after training (0 = skip).")
    eval_batch_size: int = arg(32, "Questions per generate() call during evaluation.")
    eval_only: bool = arg(False, "Evaluate --model_name_or_path (any model, checkpoint or adapter) and exit.")


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
        complete_config(self, "grpo_search")  # precision for the hardware; outputs/<this file's name>/<time>
        super().__post_init__()


# %% [markdown]
# The offline demo's settings, used with no CUDA GPU: a tiny model, toy two-hop questions, their corpus (`assets/`).
# They replace the defaults above (flags and YAML still win).
# %%
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
# Each question becomes a chat prompt, its gold answers and supporting documents kept for the rewards. The corpus is
# `--corpus_name` (a file of documents) or HotpotQA's own paragraphs; its BM25 index is built once, cached beside it.
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

    splits, grade = [], outcome_reward()
    for rows in (train, test):
        questions = to_questions(rows, script_args, name)
        gradable = [q for q in questions if grade([""], **{key: [value] for key, value in q.items()})[0] is not None]
        if len(gradable) < len(questions):  # the questions OUTCOME_REWARD cannot grade (no gold answer) teach nothing
            print(f"dropped {len(questions) - len(gradable)} of {len(questions)} questions whose answer "
                  f"{OUTCOME_REWARD} cannot grade (empty): check --answer_column")
        questions = gradable
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

    index, index_corpus = None, None  # the SearchIndex all rollouts share (build_trainer builds it), its --corpus_name
    top_k, snippet_chars, page_chars, budget = 5, 200, 1000, 4  # build_trainer sets them from the flags

    def reset(self, supporting_docs=None, **row):
        self.calls, self.failures, self.searches = 0, 0, 0
        self.supporting = set(supporting_docs or [])  # the documents the answer rests on ([]: unknown)
        self.chain = list(dict.fromkeys(supporting_docs or []))  # the same, in the data's order: for chain_progress
        self.seen = set()    # ids this rollout has been shown, by search or open
        self.question = str(row.get("question") or "")  # ids it names count as shown to an open (turn credit)
        self.credited = 0    # searches that brought in a supporting document not seen before
        self.results = []    # (tool result, its turn credit: 1.0 credited, -1.0 an open of an unshown id, else 0.0)
        self.folds, self.peak_context = [], 0  # with --max_context_tokens: each fold, the most tokens in view,
        self.cost = {}                         # and the seconds and tokens the episode took (context_folding.py)
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
        # else a miscopied or made-up id that happens to exist: neither a result nor the question showed it
        shown = doc_id in self.seen or re.search(rf"(?<!\w){re.escape(doc_id)}(?!\w)", self.question) is not None
        self.seen.add(doc_id)
        return self._tally(f"[{doc_id}] page {page} of {len(pages)}\n{pages[page - 1]}", ungrounded=not shown)

    def _tally(self, result: str, credited: bool = False, ungrounded: bool = False) -> str:
        self.calls += 1
        self.failures += result.startswith("Error")
        self.credited += credited
        self.results.append((result, 1.0 if credited else -1.0 if ungrounded else 0.0))
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
def delivered(completion: list, env) -> list[tuple[int, float]]:
    """(assistant turn, credit: 1.0 search credit, -1.0 an open of an unshown id, else 0.0) per environment result in
    the trajectory, matched by its text, in order; a failed call TRL answered itself ({'error': ...}) matches none."""
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
    return [min(1.0, 0.5 * sum(credit > 0 for _, credit in delivered(c, env))) if env.supporting else None
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
# Progress along a chain of supporting documents that each name the next (the long levels' mentors): how far along
# the line the searches got, checked against the question, where search_credit stops paying after two. Weight 0 in
# RUBRIC (logged as rewards/chain_progress); --reward_weights turns it on (docs/grpo_search.md, "Credit per link").
# %%
def chain_progress(completions, environments, **kwargs) -> list:
    """k / n when the first k of the n supporting documents, in the data's order, were shown ([id]) in the
    trajectory's tool results (one TRL dropped shows nothing); None (no say) without supporting documents."""
    scores = []
    for completion, env in zip(completions, environments):
        results = "\n".join(str(m.get("content")) for m in completion if m.get("role") == "tool")
        shown = set(re.findall(r"^\[([^\[\]\n]{1,100})\]", results, re.MULTILINE))
        reached = next((k for k, doc_id in enumerate(env.chain) if doc_id not in shown), len(env.chain))
        scores.append(reached / len(env.chain) if env.chain else None)
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
    (chain_progress, 0.0),  # logged only: how far along a chain of links the rollouts got
]


# %% [markdown]
# ## Turn-level credit
# TRL gives every token of a rollout the same advantage. With `--turn_credit`, this subclass gives the tokens of each
# assistant turn the rollout's advantage plus `--turn_credit_weight` x that turn's own reward (1.0 when a search it
# made brought in a new supporting document, -1.0 when it opened an id no result had shown: a miscopied number),
# normalised within the group at the same turn index (MT-GRPO, arXiv 2505.11821). Tool results stay masked: their
# tokens carry no advantage.
# %%
def turn_rewards(completion: list, env) -> list[float]:
    """One reward per assistant turn of a trajectory: 1.0 when a tool result that turn got earned search credit (a
    new supporting document), -1.0 when it opened a document that neither an earlier result nor the question had
    shown, else 0.0."""
    rewards = [0.0] * sum(1 for m in completion if m.get("role") == "assistant")
    for turn, credit in delivered(completion, env):  # a turn's miscopied open outweighs its credited search
        rewards[turn] = min(rewards[turn], credit) if credit < 0 or rewards[turn] < 0 else max(rewards[turn], credit)
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
        self._metrics["train"]["turn_credit/credited_turns"].append((rewards > 0).sum(1).float().mean().item())
        self._metrics["train"]["turn_credit/ungrounded_opens"].append((rewards < 0).sum(1).float().mean().item())
        # Groups can span processes: normalise over all of them, then keep this process's rows
        turns = turn_advantages(self.accelerator.gather(rewards), self.num_generations, self.scale_rewards != "none")
        return turns[self.accelerator.process_index * local:(self.accelerator.process_index + 1) * local]


# %% [markdown]
# ## Context folding
# With `--max_context_tokens N`, what the model sees never passes N tokens, however many tools it calls: before a
# turn that would not fit, older turns leave the context, one line each staying in the user's message (a `note` the
# model wrote, with `--fold_notes`, stays in full). FoldGRPO (arXiv 2510.11967), MEM1 (arXiv 2506.15841): a bounded
# working context, each fold a training segment with the rollout's advantage. The loop, and what a fold keeps
# (`fold_context`), are context_folding.py's.
# %%
class NotingEnvironment(ToolEnvironment):
    """ToolEnvironment with a third tool, `note` (--fold_notes): what the model writes stays when its context folds."""

    def note(self, text: str) -> str:
        """Write a short note to yourself: it stays in view when older turns are folded away.

        Args:
            text: What to remember, e.g. the name you must look up next.
        """
        return self._tally("Noted." if str(text).strip() else "Error: empty note. Write what to remember.")


# TurnCreditGRPOTrainer with context_folding.py's tool loop; None without that file (--max_context_tokens refused)
FoldingGRPOTrainer = (context_folding.trainer_class(TurnCreditGRPOTrainer, per_token_advantages) if context_folding
                      else None)


# %% [markdown]
# ## Training
# The call that trains: the index, the tools and the rubric wired into TRL's `GRPOTrainer` (or a trainer above).
# Then how a run is judged: the held-out metrics of `evaluate`, and the reward the run monitor watches.
# %%
OUTCOME_REWARD = "exact_match_reward"  # the reward the run monitor compares the others with
HELD_OUT_TABLE = ("accuracy", "f1", "supporting_found", "supporting_searches", "searches", "tool_call_success")
ACCURACY_IS = "exact match"


def set_up_search(script_args, corpus: list | None):
    """The index every rollout searches (None: keep the one built from the same --corpus_name), and the search
    flags, set on the environment class."""
    if corpus is not None:
        ToolEnvironment.index = SearchIndex(corpus, index_folder(script_args))
        ToolEnvironment.index_corpus = script_args.corpus_name  # None: built from the questions' context column
    ToolEnvironment.top_k, ToolEnvironment.snippet_chars = script_args.search_top_k, script_args.snippet_chars
    ToolEnvironment.page_chars, ToolEnvironment.budget = script_args.page_chars, script_args.search_budget


def build_trainer(script_args, training_args, model_args, tokenizer, train_dataset, rewards, corpus):
    """GRPOTrainer (TurnCreditGRPOTrainer with --turn_credit) with the search tools over `corpus`, and `rewards`."""
    if script_args.max_context_tokens and context_folding is None:
        raise RecipeError("--max_context_tokens needs context_folding.py: copy it from the repository beside this "
                          "script")
    problem = context_folding and context_folding.settings_problem(script_args, training_args)
    if problem:  # folding trains segments without old or reference log-probs: only the settings it supports
        raise RecipeError(problem)
    set_up_search(script_args, corpus)
    TurnCreditGRPOTrainer.turn_credit_weight = script_args.turn_credit_weight
    if script_args.max_context_tokens:
        FoldingGRPOTrainer.max_context_tokens = script_args.max_context_tokens
        FoldingGRPOTrainer.turn_credit = script_args.turn_credit
    trainer_class = (FoldingGRPOTrainer if script_args.max_context_tokens else
                     TurnCreditGRPOTrainer if script_args.turn_credit else GRPOTrainer)
    try:
        return trainer_class(
            model=load_model(model_args, training_args),
            reward_funcs=rewards,
            args=training_args,
            train_dataset=train_dataset,
            processing_class=tokenizer,
            environment_factory=environment_class(script_args),
            peft_config=get_peft_config(model_args),
            quantization_config=get_quantization_config(model_args),
        )
    except ValueError as error:  # TRL drives tool calls only for the chat templates it knows
        why = instruments and instruments.unsupported_template(error, model_args.model_name_or_path,
                                                            tokenizer.chat_template)
        raise (RecipeError(why) if why else error) from None


def environment_class(script_args):
    """The tools each rollout gets: search and open, and note with --fold_notes."""
    return NotingEnvironment if script_args.fold_notes else ToolEnvironment


def replay_environment(script_args, row: dict):
    """--replay: a fresh environment, reset with a recorded row (its supporting documents), for the rollout's recorded
    searches to run in again over --corpus_name with the replay's search flags (pass the run's own). None when the
    corpus was the questions' context column: the recording cannot rebuild it."""
    if ToolEnvironment.index is None or ToolEnvironment.index_corpus != script_args.corpus_name:
        if script_args.corpus_name is None:
            return None
        set_up_search(script_args, load_corpus(script_args, []))
    else:  # this process built the index from the same corpus (a notebook that trained): reused, with these flags
        set_up_search(script_args, None)
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
    predicted = [extract_answer(completion_text(c)) for c in flat]
    correct = [float(score is not None and score >= 1.0)  # the outcome reward's full marks: OUTCOME_REWARD
               for score in outcome_reward()(flat, answer=answers, environments=envs)]
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
        metrics.update(instruments.sample_metrics([sum(correct[i + 1:i + 1 + samples]) for i in greedy], samples))
    if trajectories is not None and trainer.accelerator.is_main_process:  # given with instruments.py
        scores = instruments.score(RUBRIC, flat, answer=answers, environments=envs)
        with open(trajectories, "a", encoding="utf-8") as f:
            for n, (prompt, gold, first) in enumerate(zip(dataset["prompt"], dataset["answer"], greedy)):
                f.write(json.dumps({"step": step, "prompt": prompt, "answer": gold, "columns": {
                    "supporting_docs": envs[first].chain}, "completions": [
                    {"text": flat[i], "greedy": i == first, "parsed_answer": predicted[i], **scores[i],
                     "documents_seen": sorted(envs[i].seen), "supporting_docs": sorted(envs[i].supporting),
                     "tool_calls": envs[i].calls, "folds": envs[i].folds, "peak_context_tokens": envs[i].peak_context,
                     "cost": envs[i].cost}
                    for i in range(first, first + 1 + samples)]}, default=str) + "\n")
    return metrics


# %% [markdown]
# # Machinery
# ---- machinery: the same in every script, held identical by tests; you rarely need to edit below ----
#
# What the script needs to run on its own. What a forker does not edit is imported, one copy for every script: the
# run instruments (instruments.py), the sandbox (sandbox.py). docs/how_it_works.md: "Which file holds what".
# %% [markdown]
# ## The search index
# BM25 over the corpus with bm25s, built once and cached on disk (index_folder says where).
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

    @functools.lru_cache(maxsize=100_000)  # a group's rollouts often search the same words
    def search(self, query: str, k: int) -> tuple[str, ...]:
        """Ids of the (at most) k best-matching documents, best first; none when no query word is in the corpus."""
        import bm25s

        tokens = bm25s.tokenize([query], stopwords=INDEX_STOPWORDS, return_ids=False, show_progress=False)
        if not tokens[0]:
            return ()
        found, scores = self.retriever.retrieve(tokens, k=min(k, len(self.ids)), show_progress=False, n_threads=1)
        return tuple(self.ids[i] for i, s in zip(found[0], scores[0]) if s > 0)

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
