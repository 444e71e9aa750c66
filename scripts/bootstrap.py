"""Create the project's virtual environment and install mambalab into it.

Used by ``make lab`` and ``make test``. An installed torch is reused (the venv
sees the system site-packages), so a GPU machine keeps its CUDA build; where
no torch is importable, ``$MAMBALAB_TORCH`` (default ``torch==2.13.0``, the
CPU build on this workplace's machines) is installed first so that the
unpinned ``torch`` requirement never pulls a multi-GB CUDA build.

``bootstrap.py --chromium`` (run by ``make test`` every time; instant when
nothing is missing) installs Debian's ``chromium`` and the DejaVu fonts for
the browser test (``tests/test_browser.py``) with apt-get, as root. Elsewhere
it only says what to install: the browser test then fails with the same
advice, unless ``MAMBALAB_SKIP_BROWSER=1`` skips it on purpose. Playwright's
own browser download is never used.
"""

from __future__ import annotations

import os
import shutil
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


# what the browser test needs from Debian: the browser, and fonts with the panels' symbols (▶ ◀ ⇥ ⟲ ✓ ✗)
BROWSER_PACKAGES = {"chromium": "/usr/bin/chromium",
                    "fonts-dejavu-core": "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"}


def ensure_chromium() -> int:
    """Install what the browser test needs where it is missing (see the module docstring); never fails."""
    if os.environ.get("MAMBALAB_SKIP_BROWSER") == "1":
        print("browser test opted out (MAMBALAB_SKIP_BROWSER=1): chromium not checked", flush=True)
        return 0
    missing = [pkg for pkg, path in BROWSER_PACKAGES.items() if not Path(path).exists()]
    if not missing:
        return 0
    can_apt = shutil.which("apt-get") is not None and hasattr(os, "geteuid") and os.geteuid() == 0
    if not can_apt:
        print(f"the browser test needs {', '.join(missing)} (Debian: sudo apt-get install {' '.join(missing)}); "
              f"without it the test fails, unless MAMBALAB_SKIP_BROWSER=1 skips it", file=sys.stderr, flush=True)
        return 0
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    print(f"+ apt-get install {' '.join(missing)} (for tests/test_browser.py)", flush=True)
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *missing]):
        if subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL).returncode != 0:
            print(f"{' '.join(cmd)} failed: the browser test will say what is missing", file=sys.stderr, flush=True)
            return 0
    return 0


def main() -> int:
    if sys.argv[1:] == ["--chromium"]:
        return ensure_chromium()
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
    run(*pip, "-e", f"{ROOT}[bench]")  # the bench extra: fla-core, whose kernel a test runs on the interpreter
    (target / ".installed").write_text("ok\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
