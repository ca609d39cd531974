"""The accelerate configs in accelerate_configs/: each one loads with accelerate's own loader, is what its name says
(DDP, ZeRO-2, ZeRO-3, FSDP2 on one machine), has no option the launcher would silently ignore, resolves to the
launch its header promises (flags on the command line win), and every accelerate_configs/ path the docs mention
exists. No GPU and no launch: accelerate's config and argument code only, a few seconds."""

import re
import shlex
from pathlib import Path

import pytest
from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file
from accelerate.commands.launch import _validate_launch_command, launch_command_parser
from accelerate.utils import DistributedType

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "accelerate_configs"
SCRIPTS = ("grpo_math.py", "grpo_tools.py")
# Where a user reads about the configs; every accelerate_configs/... path in them must exist.
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *(REPO / script for script in SCRIPTS),
        *sorted(CONFIGS.glob("*.yaml"))]

# What makes each file what its name says. `deepspeed`/`fsdp` entries are checked inside the nested sections.
EXPECTED = {
    "ddp": {"distributed_type": DistributedType.MULTI_GPU},
    "zero2": {"distributed_type": DistributedType.DEEPSPEED,
              "deepspeed": {"zero_stage": 2, "zero3_init_flag": False}},
    "zero3": {"distributed_type": DistributedType.DEEPSPEED,
              # 16-bit save: save_model must write an ordinary model, not only ZeRO shards
              "deepspeed": {"zero_stage": 3, "zero3_init_flag": True, "zero3_save_16bit_model": True}},
    "fsdp": {"distributed_type": DistributedType.FSDP,
             # FSDP's own activation checkpointing together with the scripts' --gradient_checkpointing (on by
             # default) is refused by transformers' Trainer
             "fsdp": {"fsdp_version": 2, "fsdp_activation_checkpointing": False}},
}
MENTION = re.compile(r"(?<![\w./-])accelerate_configs/[\w.-]+\.ya?ml")  # ours, not e.g. trl/accelerate_configs/...


def header(path: Path) -> str:
    """The comment block at the top of a YAML file, '#' markers removed."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[1:].strip())
    return "\n".join(lines)


def launcher_option_names() -> set:
    return {action.dest for action in launch_command_parser()._actions}


def unknown_nested_keys(config: ClusterConfig) -> list:
    """Keys of deepspeed_config / fsdp_config that `accelerate launch` has no option for. The loader only checks
    top-level keys; the launcher copies nested ones onto its arguments (fsdp_config keys with an `fsdp_` prefix),
    so a misspelt one is dropped without a word."""
    names = launcher_option_names()
    nested = list(config.deepspeed_config) + [key if key.startswith("fsdp") else f"fsdp_{key}"
                                               for key in config.fsdp_config]
    return [key for key in nested if key not in names]


def resolve(*launch_args):
    """The launcher's view of `accelerate launch <launch_args> grpo_math.py`, without launching anything."""
    args = launch_command_parser().parse_args([*launch_args, "grpo_math.py"])
    args, _, _ = _validate_launch_command(args)
    return args


def missing_mentions(text: str) -> list:
    return [path for path in sorted(set(MENTION.findall(text))) if not (REPO / path).is_file()]


def test_the_folder_holds_exactly_the_expected_configs():
    assert sorted(path.stem for path in CONFIGS.glob("*.yaml")) == sorted(EXPECTED)
    assert not list(CONFIGS.glob("*.yml")), "use the .yaml extension, as the docs do"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_config_loads_with_accelerates_loader_and_is_what_its_name_says(name):
    path = CONFIGS / f"{name}.yaml"
    config = load_config_from_file(str(path))  # raises ValueError on an unknown top-level key
    assert isinstance(config, ClusterConfig)
    assert ClusterConfig.from_yaml_file(str(path)) == config
    expected = EXPECTED[name]
    assert config.distributed_type == expected["distributed_type"]
    assert config.compute_environment.value == "LOCAL_MACHINE"
    assert (config.num_machines, config.machine_rank) == (1, 0)
    assert config.num_processes >= 2, "one process is not a multi-GPU launch"
    assert config.mixed_precision == "bf16"
    assert config.use_cpu is False
    for key, value in expected.get("deepspeed", {}).items():
        assert config.deepspeed_config.get(key) == value, f"deepspeed_config.{key}"
    for key, value in expected.get("fsdp", {}).items():
        assert config.fsdp_config.get(key) == value, f"fsdp_config.{key}"
    if "deepspeed" not in expected:
        assert config.deepspeed_config == {}
    if "fsdp" not in expected:
        assert config.fsdp_config == {}
    # FSDP2 raises at start-up on these FSDP1-only options (accelerate's FullyShardedDataParallelPlugin)
    assert "fsdp_forward_prefetch" not in config.fsdp_config
    # set here, it would override --gradient_accumulation_steps of the scripts
    assert "gradient_accumulation_steps" not in config.deepspeed_config


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_config_has_no_option_the_launcher_would_ignore(name):
    assert unknown_nested_keys(load_config_from_file(str(CONFIGS / f"{name}.yaml"))) == []


def test_a_misspelt_option_is_caught(tmp_path):
    """The two checks above fail on a typo: accelerate's loader for a top-level key, ours for a nested one."""
    top = tmp_path / "top.yaml"
    top.write_text("distributed_type: MULTI_GPU\nnum_process: 2\n")
    with pytest.raises(ValueError, match="unknown keys"):
        load_config_from_file(str(top))
    nested = tmp_path / "nested.yaml"
    nested.write_text("distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_verison: 2\n"
                      "  reshard_after_forward: true\n")
    assert unknown_nested_keys(load_config_from_file(str(nested))) == ["fsdp_verison"]  # reshard_after_forward: valid once prefixed


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_launcher_resolves_the_config_and_command_line_flags_win(name):
    args = resolve("--config_file", str(CONFIGS / f"{name}.yaml"))
    kind = EXPECTED[name]["distributed_type"]
    assert (args.multi_gpu, args.use_deepspeed, args.use_fsdp) == (
        kind == DistributedType.MULTI_GPU, kind == DistributedType.DEEPSPEED, kind == DistributedType.FSDP)
    assert (args.num_processes, args.mixed_precision) == (8, "bf16")
    if kind == DistributedType.DEEPSPEED:
        assert args.zero_stage == EXPECTED[name]["deepspeed"]["zero_stage"]
    if kind == DistributedType.FSDP:
        assert int(args.fsdp_version) == 2
    # what each header tells a user with 4 GPUs, or with T4s
    args = resolve("--config_file", str(CONFIGS / f"{name}.yaml"), "--num_processes", "4", "--mixed_precision", "fp16")
    assert (args.num_processes, args.mixed_precision) == (4, "fp16")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_header_gives_the_launch_command_for_both_scripts(name):
    text = header(CONFIGS / f"{name}.yaml")
    assert text, "the file starts with a comment saying what it is for"
    prefix = f"accelerate launch --config_file accelerate_configs/{name}.yaml"
    commands = [line for line in text.splitlines() if line.startswith("accelerate launch")]
    for script in SCRIPTS:
        assert any(command.startswith(prefix) and f" {script}" in command for command in commands), (
            f"no `{prefix} ... {script}` line in the header")
    for command in commands:  # the launcher accepts every flag shown before the script, and the script exists
        words = shlex.split(command)[2:]
        script_index = next(i for i, word in enumerate(words) if word.endswith(".py"))
        args, unknown = launch_command_parser().parse_known_args(words[:script_index + 1])
        assert unknown == [] and args.training_script == words[script_index], command
        assert (REPO / words[script_index]).is_file(), command
    assert "--num_processes" in text and "--mixed_precision fp16" in text, "say how to change GPUs and precision"


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.name)
def test_every_mentioned_config_exists(doc):
    assert missing_mentions(doc.read_text()) == []


def test_a_missing_config_is_reported():
    text = ("accelerate launch --config_file accelerate_configs/zero3.yaml grpo_math.py\n"
            "`accelerate launch --config_file accelerate_configs/zero4.yaml grpo_math.py`\n"
            "TRL's own: trl/accelerate_configs/fsdp1.yaml")
    assert missing_mentions(text) == ["accelerate_configs/zero4.yaml"]
