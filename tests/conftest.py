"""Shared helpers: run the scripts the way a user does, offline, on the tiny demo assets."""

import os
import subprocess
import sys
from pathlib import Path

from hypothesis import settings

# The whole suite runs offline, as on a machine with no network: set before any HF library loads.
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
os.environ.update(OFFLINE)

REPO = Path(__file__).resolve().parent.parent
TINY_MODEL = REPO / "assets" / "tiny-qwen-math"
TOY_DATA = REPO / "assets" / "toy_math"

sys.path.insert(0, str(REPO))  # so tests can `import grpo_math` like a notebook does

# Same examples on every run; no per-example deadline (the first call of a reward compiles regexes).
settings.register_profile("repo", derandomize=True, deadline=None, max_examples=2000)
settings.load_profile("repo")

# A few fast steps on the tiny model, with every path explicit (no demo fallback involved).
FAST_RUN = ["--model_name_or_path", str(TINY_MODEL), "--dataset_name", str(TOY_DATA),
            "--learning_rate", "2e-4", "--per_device_train_batch_size", "16", "--num_generations", "8",
            "--max_completion_length", "40", "--gradient_checkpointing", "false", "--logging_steps", "1",
            "--num_eval_examples", "16", "--eval_batch_size", "16", "--warmup_steps", "0"]


def offline_env(**extra) -> dict:
    """The user's environment with the Hub switched off (fails fast instead of retrying)."""
    env = dict(os.environ, **OFFLINE)
    env.update(extra)
    return env


def run_script(args, timeout=600, env=None, cwd=None, script="grpo_math.py") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / script), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env or offline_env(), cwd=cwd or REPO)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, asked directly (0: none), independently of the code under test."""
    import ctypes
    import platform
    if platform.machine() not in ("x86_64", "aarch64"):
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return max(0, libc.syscall(444, None, 0, 1))
