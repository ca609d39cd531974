import os
import subprocess
import sys
from pathlib import Path

# This repository's git URL. In Colab, a clone brings the files the notebook reads from the repository:
# rewards.py, and assets/ for the offline demo (the demo runs only without a GPU).
REPO_URL = ""
REQUIREMENTS = []  # the packages of requirements.txt

if "google.colab" in sys.modules:
    def run(command):  # a command whose output shows only when it fails
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{' '.join(command[:4])} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")

    print("installing", " ".join(REQUIREMENTS))
    run([sys.executable, "-m", "pip", "install", "--quiet", *REQUIREMENTS])
    if REPO_URL and not Path("requirements.txt").exists():
        clone = Path(REPO_URL.rstrip("/").rsplit("/", 1)[-1].removesuffix(".git"))
        if not clone.exists():
            run(["git", "clone", "--depth", "1", REPO_URL, str(clone)])
        os.chdir(clone)
if Path.cwd().name == "notebooks" and Path("../requirements.txt").exists():
    os.chdir("..")  # opened from notebooks/: work from the repository root, as the scripts do
print(f"working directory: {Path.cwd()}")
# --- GPU

import torch

if torch.cuda.is_available():
    gpu = torch.cuda.get_device_properties(0)
    precision = "bf16" if torch.cuda.is_bf16_supported(including_emulation=False) else "fp16"  # as the scripts pick
    print(f"GPU: {gpu.name}, {gpu.total_memory / 2**30:.0f} GB: the run at the end trains the default model "
          f"on the default dataset, in {precision}")
else:
    print("No CUDA GPU: the run at the end is the offline demo, a tiny model and toy data from assets/ "
          "(a few minutes on a CPU)")
    if not Path("assets").is_dir():
        print("assets/ is missing: open this notebook from a clone of the repository (in Colab: set REPO_URL "
              "above and run this cell again), or choose a GPU runtime (Runtime > Change runtime type)")
