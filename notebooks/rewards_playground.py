# %% [markdown]
# ## The reward catalogue
# Import `rewards.py` from the repository root, and matplotlib for the plots.
# %%
from pathlib import Path

if not Path("rewards.py").exists():
    raise FileNotFoundError("rewards.py is not in the working directory: open this notebook from the repository's "
                            "notebooks/ folder, or in Colab set REPO_URL in the setup cell and run it again")

import matplotlib.pyplot as plt

import rewards


# %% [markdown]
# Completions to score, by name: edit them or add your own (the gold answer is 72, in GSM8K's `#### 72` form).
# %%
GOLD = "Natalia sold 48 / 2 = 24 clips in May and 48 + 24 = 72 clips in all.\n#### 72"
completions = {
    "right, exact format": "<reasoning>\n48 / 2 = 24, 48 + 24 = 72\n</reasoning>\n<answer>\n72\n</answer>",
    "right, loose layout": "<reasoning>48 + 24 = 72</reasoning> <answer>$72 clips</answer>",
    "wrong number": "<reasoning>\n48 + 24 = 73\n</reasoning>\n<answer>\n73\n</answer>",
    "two numbers": "<reasoning>\nnot sure\n</reasoning>\n<answer>\n72 or 73\n</answer>",
    "no answer block": "<reasoning>\n48 + 24 = 72\n</reasoning>\nThe answer is 72.",
    "no tags at all": "The answer is 72.",
}


# %% [markdown]
# ## One reward at a time
# A reward takes the completions and the dataset columns it needs (here `answer`), and returns one score each.
# %%
texts = list(completions.values())
print("correctness:", rewards.correctness_reward(texts, answer=[GOLD] * len(texts)))
print("strict:     ", rewards.strict_format_reward(texts))
print("tag count:  ", rewards.tag_count_reward(texts))


# %% [markdown]
# `score` puts every reward of a rubric side by side with the weighted total; here grpo_math.py's rubric,
# `rewards.GSM8K_RUBRIC`.
# %%
def score(rubric, completions, gold=GOLD):
    """One row per completion: its score under each reward of `rubric`, then the weighted total."""
    texts = list(completions.values())
    names = [func.__name__.removesuffix("_reward") for func, _ in rubric]
    columns = [func(texts, answer=[gold] * len(texts)) for func, _ in rubric]
    weights = [weight for _, weight in rubric]
    return [{"case": case, **dict(zip(names, scores)), "total": sum(w * (s or 0.0) for w, s in zip(weights, scores))}
            for case, *scores in zip(completions, *columns)]


print(rewards.format_audit(score(rewards.GSM8K_RUBRIC, completions)))


# %% [markdown]
# Other rewards of the catalogue; those with settings are factories, called with their settings first.
# %%
overlong = rewards.soft_overlong_penalty(max_completion_len=40, soft_punish_cache=10)  # ~4 characters a token
repetition = rewards.repetition_penalty(ngram_size=3)
samples = ["<answer>72</answer>", "Let me check again. " * 10 + "<answer>72</answer>"]
print("overlong:  ", overlong(samples))
print("repetition:", repetition(samples))
print("symbolic:  ", rewards.symbolic_correctness_reward(
    ["<answer>\\frac{1}{2}</answer>", "<answer>0.5</answer>", "<answer>2/4</answer>", "<answer>1/3</answer>"],
    answer=["1/2"] * 4))


# %% [markdown]
# ## Reward-hacking audit
# Thirty known hacks scored by every reward: none should be paid by a correctness reward or beat an honest total.
# %%
audit = rewards.audit()
print(rewards.format_audit(audit))
honest = min(row["total"] for row in audit if row["case"].startswith("honest"))
best = max((row for row in audit if not row["case"].startswith("honest")), key=lambda row: row["total"])
print(f"\nhonest answer {honest:.2f}, best hack {best['total']:.2f} ({best['case']})")


# %% [markdown]
# ## A rubric on a batch
# `plot_rubric` draws each completion's total as the sum of its rubric terms, here on the audit's completions.
# %%
CASES = rewards.audit_cases()


def plot_rubric(rubric, cases=CASES, gold=rewards.AUDIT_GOLD, title="GSM8K_RUBRIC"):
    """One bar per completion, split into the weighted score of each reward of `rubric`."""
    names = [name for name, _ in cases]
    completions = [completion for _, completion in cases]
    fig, ax = plt.subplots(figsize=(10, 0.26 * len(cases) + 1.5))
    left = [0.0] * len(cases)
    for func, weight in rubric:
        terms = [weight * (s or 0.0) for s in func(completions, answer=[gold] * len(completions))]
        ax.barh(names, terms, left=left, label=f"{func.__name__} x {weight}")
        left = [a + b for a, b in zip(left, terms)]
    ax.axvline(max(left[i] for i, name in enumerate(names) if name.startswith("honest")), color="black", ls="--")
    ax.invert_yaxis()
    ax.set_xlabel("weighted reward (dashed: the honest answers' total)")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    plt.show()


plot_rubric(rewards.GSM8K_RUBRIC)


# %% [markdown]
# ## Edit a reward
# A looser copy of `correctness_reward`, paying for the last number anywhere: edit it, then run it and the cells below.
# %%
import re


def my_correctness_reward(completions, answer, **kwargs):
    """1.0 when the last number of the completion is the gold number, wherever it is; else 0.0."""
    scores = []
    for completion, gold in zip(completions, answer):
        text = completion if isinstance(completion, str) else str(completion[-1].get("content") or "")
        numbers = re.findall(r"\d+(?:\.\d+)?", text.replace(",", ""))
        scores.append(1.0 if numbers and float(numbers[-1]) == float(rewards.extract_gsm8k_gold(gold)) else 0.0)
    return scores


# %% [markdown]
# Your copy against the original on the audit's completions, where they disagree: the score, and the rubric's total.
# %%
my_rubric = [(my_correctness_reward, 2.0), *rewards.GSM8K_RUBRIC[1:]]
mine = my_correctness_reward([completion for _, completion in CASES], answer=[rewards.AUDIT_GOLD] * len(CASES))
print(f"{'case':<34}{'score':>8}{'yours':>7}{'total':>8}{'yours':>7}")
for original, yours, my_score in zip(rewards.audit(), rewards.audit(my_rubric), mine):
    if my_score != original["correct"]:
        print(f"{original['case']:<34}{original['correct']:>8.2f}{my_score:>7.2f}{original['total']:>8.2f}"
              f"{yours['total']:>7.2f}")


# %% [markdown]
# The rubric with your reward in place of `correctness_reward`: the longer a hack's bar, the more it pays to learn.
# %%
plot_rubric(my_rubric, title="GSM8K_RUBRIC with my_correctness_reward")


# %% [markdown]
# ## LLM judges
# `llm_judge_reward` grades each completion on its own (one call each); `group_judge_reward` shows the judge all the
# completions of one prompt side by side and scores them against each other (one call per prompt, RULER-style).
# Both need an OpenAI-compatible server: start one in a terminal, e.g.
# `transformers serve Qwen/Qwen2.5-1.5B-Instruct --port 8000` (`pip install "transformers[serving]"`), and set
# `JUDGE_URL` and `JUDGE_MODEL` below. Without a server this cell says so and scores nothing.
# %%
import os
import urllib.request

JUDGE_URL = os.environ.get("JUDGE_URL", "http://127.0.0.1:8000/v1")
JUDGE_MODEL = os.environ.get("JUDGE_MODEL", "Qwen/Qwen2.5-1.5B-Instruct")


def judge_server_is_up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/models", timeout=3):
            return True
    except OSError:
        return False


if not judge_server_is_up(JUDGE_URL):
    print(f"Skipped: no judge server at {JUDGE_URL}. Start one (e.g. `transformers serve {JUDGE_MODEL} --port 8000` "
          "in a terminal), or set JUDGE_URL and JUDGE_MODEL, then run this cell again.")
else:
    question = [{"role": "user", "content": rewards.AUDIT_QUESTION}]
    judge = rewards.llm_judge_reward(JUDGE_URL, JUDGE_MODEL, "Grade the answer to the math question: 10 for the "
                                     "right number with sound reasoning, 0 for a wrong or missing answer.")
    group_judge = rewards.group_judge_reward(JUDGE_URL, JUDGE_MODEL)
    columns = {"judge": judge, "group judge": group_judge}
    judged = {name: func(texts, prompts=[question] * len(texts), answer=[GOLD] * len(texts))
              for name, func in columns.items()}
    print(f"{'completion':<22}{'judge':>7}{'group':>7}")
    for case, one, relative in zip(completions, judged["judge"], judged["group judge"]):
        print(f"{case:<22}{one:>7.2f}{relative:>7.2f}")
    print(f"calls: judge {len(texts)}, group judge 1; failures (scored {judge.fallback_score}): "
          f"{judge.failures} and {group_judge.failures}")
