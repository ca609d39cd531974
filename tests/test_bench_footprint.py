"""benchmarks/bench_footprint.py's building blocks, on the meta device or the tiny demo model: seconds, not minutes."""

import subprocess
import sys

import pytest
import torch
from conftest import REPO, TINY_MODEL, offline_env
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

sys.path.insert(0, str(REPO / "benchmarks"))
import bench_footprint as bench  # noqa: E402

import grpo_math  # noqa: E402


def test_config_values_give_the_published_parameter_count():
    counts = bench.parameter_counts(bench.qwen_config())  # meta device: no weights are allocated
    # Model card: 0.49B parameters, 0.36B of them outside the (tied) embedding.
    assert abs(counts["total"] - bench.PUBLISHED_PARAMETERS) / bench.PUBLISHED_PARAMETERS < 0.01
    assert abs(counts["non_embedding"] - bench.PUBLISHED_NON_EMBEDDING_PARAMETERS) \
        / bench.PUBLISHED_NON_EMBEDDING_PARAMETERS < 0.01
    config = bench.qwen_config()
    assert (config.vocab_size, config.num_hidden_layers, config.num_key_value_heads) == (151936, 24, 2)
    assert config.tie_word_embeddings and config.rope_parameters["rope_theta"] == 1e6


def test_random_model_folder_loads_with_a_chat_template_and_the_tokenizers_eos(tmp_path):
    small = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                 num_key_value_heads=1)  # the published vocabulary, a tiny body
    folder = bench.save_random_model(tmp_path / "a", seed=0, **small)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    shipped = AutoTokenizer.from_pretrained(TINY_MODEL)
    assert tokenizer.chat_template == shipped.chat_template  # grpo_math.py refuses a model without one
    generation = GenerationConfig.from_pretrained(folder)
    assert generation.eos_token_id == tokenizer.eos_token_id == shipped.eos_token_id
    assert generation.pad_token_id == tokenizer.pad_token_id
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert model.config.vocab_size == 151936 and len(tokenizer) <= model.config.vocab_size
    # Seeded: the same seed gives the same weights, another seed others.
    again = load_file(bench.save_random_model(tmp_path / "b", seed=0, **small) / "model.safetensors")
    other = load_file(bench.save_random_model(tmp_path / "c", seed=1, **small) / "model.safetensors")
    first = load_file(folder / "model.safetensors")
    name = "model.layers.0.mlp.up_proj.weight"
    assert torch.equal(first[name], again[name]) and not torch.equal(first[name], other[name])


@pytest.mark.parametrize("variant", list(bench.VARIANTS))
def test_flags_are_ones_grpo_math_accepts(tmp_path, variant):
    argv = bench.grpo_math_argv(tmp_path / "model", tmp_path / "out", variant, steps=3, max_completion_length=48,
                                gradient_accumulation_steps=2)
    script_args, training_args, model_args, *_ = grpo_math.parse_args(argv)  # a typo in a flag raises here
    assert training_args.max_steps == 3 and training_args.max_completion_length == 48
    assert training_args.gradient_accumulation_steps == 2 and training_args.per_device_train_batch_size == 8
    assert training_args.save_strategy == "no" and training_args.logging_steps == 1
    assert script_args.num_eval_examples == 0
    assert model_args.model_name_or_path == str(tmp_path / "model")  # not the demo's tiny model
    assert model_args.use_peft == (variant == "lora")
    if variant == "lora":
        assert (model_args.lora_r, model_args.lora_alpha) == (16, 32)


def test_one_variant_reports_memory_steps_and_parameters(tmp_path):
    settings = {"steps": 2, "max_completion_length": 8, "gradient_accumulation_steps": 1}
    result = bench.run_variant("lora", TINY_MODEL, tmp_path, settings)
    total = sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(TINY_MODEL).parameters())
    assert 0 < result["trainable_parameters"] < total < result["total_parameters"]  # adapters added and trained
    assert len(result["step_seconds"]) == 2 and result["warmup_steps_excluded"] == 1
    assert result["seconds_per_step"] == result["step_seconds"][1]
    assert result["cpu_seconds_per_step"] == result["step_cpu_seconds"][1] > 0
    assert len(result["trl_step_time_seconds"]) == 2
    assert result["peak_rss_bytes"] >= result["peak_rss_before_training_bytes"] > 50 * 2**20
    assert result["flags"][:2] == ["--use_peft", "--lora_r"]


def test_help_and_a_bad_variant():
    script = [sys.executable, str(REPO / "benchmarks" / "bench_footprint.py")]
    result = subprocess.run([*script, "--help"], capture_output=True, text=True, env=offline_env(), timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    for flag in ("--steps", "--max_completion_length", "--variants", "--out"):
        assert flag in result.stdout
    result = subprocess.run([*script, "--variants", "full,qlora", "--out", "/nonexistent/x.json"],
                            capture_output=True, text=True, env=offline_env(), timeout=120)
    assert result.returncode == 2 and "qlora" in result.stderr


@pytest.mark.parametrize("run", list(bench.SCRIPT_RUNS))
def test_tool_script_flags_are_ones_the_scripts_accept(tmp_path, run):
    script, flags = bench.SCRIPT_RUNS[run]
    recipe = __import__(script)
    argv = bench.grpo_math_argv(tmp_path / "model", tmp_path / "out", run, steps=3, max_completion_length=48,
                                gradient_accumulation_steps=1, script=script)
    argv = [a for a in argv if a != "--use_vllm"]  # vLLM is not installed here: the rest must parse
    script_args, training_args, model_args, *_ = recipe.parse_args(argv)
    assert training_args.max_steps == 3 and script_args.dataset_name == str(bench.DATASETS[script])
    assert training_args.vllm_mode == "colocate" and ("--use_vllm" in flags) == ("vllm" in run)


def test_a_tool_script_run_reports_tokens_per_second(tmp_path):
    settings = {"steps": 2, "max_completion_length": 8, "gradient_accumulation_steps": 1}
    result = bench.run_variant("grpo_tools", REPO / "assets" / "tiny-qwen-tools", tmp_path, settings)
    assert result["script"] == "grpo_tools.py" and len(result["step_seconds"]) == 2
    # step 2 trained on 8 prompts of the toy data plus their completions, in the time it took
    assert result["tokens_per_second"] * result["seconds_per_step"] > 8 * 8
