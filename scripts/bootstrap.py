"""Create the project's virtual environment and install mambalab into it.

Used by ``make lab`` and ``make test``. An installed torch is reused (the venv
sees the system site-packages), so a GPU machine keeps its CUDA build; where
no torch is importable, ``$MAMBALAB_TORCH`` (default ``torch==2.13.0``, the
CPU build on this workplace's machines) is installed first so that the
unpinned ``torch`` requirement never pulls a multi-GB CUDA build.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(*cmd: str) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def base_has_torch() -> bool:
    probe = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True)
    return probe.returncode == 0


def main() -> int:
    target = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / ".venv").resolve()
    reuse = base_has_torch()
    if not (target / "bin" / "python").exists():
        print(f"creating {target} (system torch {'reused' if reuse else 'absent'})", flush=True)
        venv.EnvBuilder(with_pip=True, system_site_packages=reuse).create(target)
    py = str(target / "bin" / "python")
    pip = [py, "-m", "pip", "install", "--quiet"]
    has_torch = subprocess.run([py, "-c", "import torch"], capture_output=True).returncode == 0
    if not has_torch:
        run(*pip, os.environ.get("MAMBALAB_TORCH", "torch==2.13.0"))
    run(*pip, "-e", str(ROOT))
    (target / ".installed").write_text("ok\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
