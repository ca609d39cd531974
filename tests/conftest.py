"""Shared helpers: run the scripts the way a user does, offline, on the tiny demo assets."""

import json
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from hypothesis import settings

# The whole suite runs offline, as on a machine with no network: set before any HF library loads.
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
os.environ.update(OFFLINE)
# pytest.ini runs the suite in one worker per core (pytest-xdist): each worker, and every process it starts, gets its
# share of the cores for torch's threads. Two workers that each run torch with a thread per core are far slower than
# one (OpenMP's threads spin while they wait): measured on 2 cores, 64 CPU minutes instead of 36.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // WORKERS)))

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


def docs_pages() -> list:
    """The documentation a user reads: README.md (the front door), then every page under docs/."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def docs_text() -> str:
    """README.md and every docs/*.md page, one after the other: where the tests look for a figure, a table or a
    sentence the documentation quotes, whichever page now holds it."""
    return "\n".join(path.read_text() for path in docs_pages())


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


# ---- the browser tests (report.html): Chromium driven by Playwright, the page opened from its file:// URL
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run"]  # no network: the page must need none, and the machine has none
NO_BROWSER = ("the browser tests need Chromium and Playwright: apt-get install chromium (Debian, Ubuntu) or "
              "python -m playwright install chromium, and pip install -r requirements.txt; or set GRPO_CHROMIUM to a "
              "Chrome or Chromium executable")


@contextmanager
def busy_machine(per_core: int = 2):
    """While the block runs, `per_core` busy processes for each core (the machine oversubscribed per_core + 1 times),
    each in a session of its own, as the sandbox's calls are: with the kernel's autogroup scheduling the processes
    of one session share that session's CPU, and would leave a call most of the machine."""
    import fcntl
    import tempfile
    import time

    # One busy machine at a time across the suite's workers (pytest -n): two at once would oversubscribe it past the
    # limits' wall-clock backstops, for these tests and for the other worker's
    with open(Path(tempfile.gettempdir()) / "grpo-tests-busy-machine.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        busy = [subprocess.Popen([sys.executable, "-c", "while True:\n    pass\n"], start_new_session=True)
                for _ in range(per_core * (os.cpu_count() or 1))]
        try:
            time.sleep(0.2)
            yield
        finally:
            for process in busy:
                process.kill()
                process.wait()


@contextmanager
def browser_page(path):
    """A headless Chromium page showing `path` (file://), with every page error and console message of type error
    or warning collected in `page.problems`. Fails in one line where there is no browser: never skipped."""
    import shutil

    import pytest
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail(NO_BROWSER, pytrace=False)
    executable = os.environ.get("GRPO_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    with sync_playwright() as playwright:
        try:
            browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        except Exception as error:  # no executable, or Playwright's own browser not installed
            pytest.fail(f"{NO_BROWSER} ({str(error).splitlines()[0]})", pytrace=False)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.problems = []
            page.on("pageerror", lambda error: page.problems.append(f"page error: {error}"))
            page.on("console", lambda message: page.problems.append(f"console {message.type}: {message.text}")
                    if message.type in ("error", "warning") else None)
            page.goto(Path(path).resolve().as_uri())
            yield page
        finally:
            browser.close()


def read_jsonl(path) -> list:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]


def check_run_page(folder):
    """A run folder's report.html, opened in Chromium: no page or console error, and its training groups and
    rollouts, every one drawn, are those of train_samples.jsonl. Returns the page's counts."""
    samples = Path(folder) / "train_samples.jsonl"
    rows = read_jsonl(samples) if samples.is_file() else []
    with browser_page(Path(folder) / "report.html") as page:
        page.click("#tab-groups")
        while page.is_visible("#g-more"):  # every group drawn, PAGE at a time
            page.click("#g-more")
        counts = {"groups": page.locator("#g-list .group").count(), "rollouts": page.locator("#g-list .rollout").count(),
                  "questions": page.locator("#h-table tr.question").count()}
        assert page.problems == [], page.problems
    assert counts["groups"] == len(rows) and counts["rollouts"] == sum(len(r["completions"]) for r in rows), counts
    assert (Path(folder) / "report.html").stat().st_size < 5_000_000  # a demo's page opens quickly
    return counts
