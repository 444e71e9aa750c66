"""Every notebook runs on a GPU, unchanged: each code cell executes without an error under nbval's lax mode
(the stored outputs are the CPU's; on a GPU the replays use real CUDA graphs and chapter 06 measures live, so
outputs are not compared). Marked ``cuda``: run on the GPU machine with ``MAMBALAB_DEVICE=cuda`` (nbval and a
Jupyter kernel importable there). What it found the first time (docs/results/gpu-session-notes.md, call 95): a
one-launch demo that refused a negative index on a GPU (now run on the CPU interpreter in a helper process), the
guard grid's verdict without a summary, and chapter 03 asserting the CPU's zero-accepted verdict."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mambalab.lab.worker_process import child_env

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.cuda


@pytest.mark.parametrize("notebook", sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")))
def test_notebook_runs_on_cuda(notebook):
    pytest.importorskip("nbval", reason="nbval runs the notebooks")
    pytest.importorskip("ipykernel", reason="a Jupyter kernel runs the notebooks")
    env = child_env(MAMBALAB_DEVICE="cuda")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                        "--nbval-lax", "--nbval-current-env", "--nbval-sanitize-with",
                        str(ROOT / "tests" / "nbval_sanitize.cfg"), str(ROOT / "notebooks" / notebook)],
                       cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stdout[-4000:]
