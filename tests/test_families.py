"""The chat-template family matrix (benchmarks/bench_families.py), run family by family: each family TRL ships with
tool calling trains and evaluates through grpo_tools.py with the trained ids equal to the sampled ones, the others
are refused before training in one line that names the family, and the documentation's table (docs/grpo_tools.md)
is the committed results."""

import json
import sys

import pytest
from conftest import REPO, docs_text

sys.path.insert(0, str(REPO / "benchmarks"))
import bench_families  # noqa: E402

RESULTS = json.loads((REPO / "benchmarks" / "results" / "families.json").read_text())
RECORDED = {r["family"]: r for r in RESULTS["families"]}


def test_every_text_template_trl_ships_is_in_the_matrix():
    shipped = {path.stem for path in bench_families.TEMPLATES.glob("*.jinja") if not path.stem.endswith("_training")}
    assert shipped == set(bench_families.FAMILIES) | set(bench_families.LEFT_OUT)
    assert set(RECORDED) == set(bench_families.FAMILIES)


@pytest.mark.parametrize("family", [f for f, r in RECORDED.items() if r["accepted"]])
def test_family_trains_and_evaluates_with_the_sampled_ids(family, tmp_path):
    result = bench_families.check_family(family, tmp_path)
    assert result["accepted"], result.get("error")
    assert result["training"] and result["evaluation"] and result["tokens_agree"], result["failed_checks"]
    # train: 4 rollouts in the step; eval: 2 before, 2 after, 2 with --eval_only, each checked
    assert result["rollouts"] == {"train": 4, "eval": 6} and result["eval_only_tool_calls"] == 1.0
    # the last column of docs/grpo_tools.md's table is what happens
    assert result["as_rendered"] == RECORDED[family]["as_rendered"]


@pytest.mark.parametrize("family", [f for f, r in RECORDED.items() if not r["accepted"]])
def test_family_without_tool_calls_is_refused_in_one_line(family, tmp_path):
    result = bench_families.check_family(family, tmp_path)
    assert not result["accepted"]
    assert f"the {family} chat template" in result["error"] and "\n" not in result["error"]


def test_the_check_sees_ids_that_differ_from_the_sampled_ones(tmp_path, monkeypatch):
    """A trainer that re-encoded a turn (here: one id changed) must fail the tokens check."""
    original = bench_families.grpo_tools.GRPOTrainer._generate

    def drifting(self, prompts):
        output = list(original(self, prompts))
        output[1] = [[self.processing_class.pad_token_id] + ids[1:] for ids in output[1]]
        return tuple(output)

    monkeypatch.setattr(bench_families.grpo_tools.GRPOTrainer, "_generate", drifting)
    result = bench_families.check_family("qwen2_5", tmp_path)
    assert result["accepted"] and not result["tokens_agree"]


def test_the_readme_table_is_the_measured_one():
    assert bench_families.table(RESULTS["families"]) in docs_text(), \
        "README.md or docs/ does not hold the families table of benchmarks/results/families.json"


def test_evaluation_conversations_share_the_training_budget(tmp_path):
    """A tool result that would take the conversation past --max_completion_length ends it, in evaluation as in
    training: no rollout holds more ids than the budget, and none gets to answer."""
    probe = bench_families.check_family("qwen2_5", tmp_path / "probe")
    budget = probe["call_ids"] + 4  # room for the call, not for the tool result after it
    result = bench_families.check_family("qwen2_5", tmp_path / "tight", ("--max_completion_length", str(budget)))
    assert probe["longest_rollout_ids"]["eval"] > budget  # with room, the conversation goes on past it
    assert 0 < max(result["longest_rollout_ids"].values()) <= budget
    assert {"train:ran", "train:answered", "eval:ran", "eval:answered"} <= set(result["failed_checks"])
    assert result["eval_only_accuracy"] == 0.0 and result["tokens_agree"]
