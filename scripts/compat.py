"""Run the interpreter-facing tests under the oldest supported Triton (3.6).

The sanitizer hooks into Triton's interpreter, whose internals change between
releases; the GPU machines run Triton 3.6 while a fresh CPU install gets the
newest. ``make compat`` (called by ``.ci/run`` after ``make test``) runs this:
it keeps ``.venv-triton36`` beside ``.venv`` with torch (``$MAMBALAB_TORCH``,
default ``torch==2.13.0``, the CPU wheel on this workplace's machines),
``triton==3.6.0``, the newest numpy (kernels avoid ``range()`` over a runtime
bound, which that interpreter cannot take under NumPy >= 2.4), pytest,
hypothesis and mambalab itself (editable, no dependencies), then runs ``tests/test_sanitizer.py`` and every
``tests/test_kernel_*.py`` on the CPU interpreter. Extra arguments go to
pytest. The exit status is pytest's. A venv whose recorded requirements match
(and whose links below still resolve) is reused without touching pip.

Where ``.venv`` already holds the pinned torch, its packages (``torch``,
``torchgen``, ``functorch`` and the dist-info) are linked into this venv
instead of installed a second time: that saves about 0.8 GB of disk, which a
CI machine may not have. pip then sees torch as installed and adds only its
small dependencies. Otherwise torch is installed here as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-triton36"
TRITON = "triton==3.6.0"


def requirements() -> list[str]:
    torch = os.environ.get("MAMBALAB_TORCH", "torch==2.13.0")
    # The newest numpy on purpose: Triton 3.6's interpreter calls int() on 1-element
    # arrays, which numpy >= 2.4 rejects; the kernels must not depend on that.
    return [torch, TRITON, "numpy", "pytest", "hypothesis"]


def fingerprint(reqs: list[str]) -> str:
    """What the venv was built from: the requirements and the project's metadata."""
    h = hashlib.sha256("\n".join(reqs).encode())
    h.update((ROOT / "pyproject.toml").read_bytes())
    return h.hexdigest()


def run(*cmd: str, **kwargs) -> subprocess.CompletedProcess:
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, **kwargs)


MAIN_PY = ROOT / ".venv" / "bin" / "python"
# Where the main venv's torch lives, its version and the top-level entries its distribution owns.
_PROBE = """
import importlib.metadata as m, json, torch
d = m.distribution("torch")
tops = sorted({f.parts[0] for f in d.files if f.parts[0] != ".."})
print(json.dumps({"version": d.version, "site": str(d.locate_file("")), "tops": tops}))
"""


def main_venv_torch(pin: str) -> tuple[Path, list[str]] | None:
    """The main venv's site-packages and torch's top-level entries there, if it holds the pinned version."""
    name, _, version = pin.partition("==")
    if name.strip() != "torch" or not version or not MAIN_PY.exists():
        return None
    probe = subprocess.run([str(MAIN_PY), "-c", _PROBE], capture_output=True, text=True)
    if probe.returncode != 0:
        return None
    found = json.loads(probe.stdout)
    if found["version"].split("+")[0] != version.strip():
        return None
    site = Path(found["site"])
    tops = [t for t in found["tops"] if (site / t).exists()]
    return (site, tops) if any(t.startswith("torch-") for t in tops) else None


def site_packages(py: Path) -> Path:
    out = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def links_resolve() -> bool:
    """False when a linked package has gone (``.venv`` removed or rebuilt with another torch)."""
    return all(p.exists() for p in VENV.glob("lib/python*/site-packages/*") if p.is_symlink())


def ensure_venv() -> Path:
    py = VENV / "bin" / "python"
    marker = VENV / ".installed"
    reqs = requirements()
    want = fingerprint(reqs)
    if py.exists() and marker.exists() and marker.read_text().strip() == want and links_resolve():
        print(f"reusing {VENV.name} ({TRITON})", flush=True)
        return py
    if VENV.exists():
        # rebuilt from scratch, so pip never uninstalls through a link into .venv
        shutil.rmtree(VENV)
    print(f"creating {VENV}", flush=True)
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(VENV)
    shared = main_venv_torch(reqs[0])
    if shared is not None:
        src, tops = shared
        dst = site_packages(py)
        for top in tops:
            (dst / top).symlink_to(src / top, target_is_directory=(src / top).is_dir())
        print(f"linked {', '.join(tops)} from {src}", flush=True)
    pip = [str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    run(*pip, *reqs, check=True)
    run(*pip, "--no-deps", "-e", str(ROOT), check=True)
    marker.write_text(want + "\n")
    return py


def main(argv: list[str]) -> int:
    py = ensure_venv()
    tests = ["tests/test_sanitizer.py"] + sorted(
        str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_kernel_*.py")
    )
    tests = [t for t in tests if (ROOT / t).exists()]
    if not tests:
        print("no interpreter-facing tests found", flush=True)
        return 1
    env = dict(os.environ)
    env["MAMBALAB_DEVICE"] = "cpu"
    probe = subprocess.run(
        [str(py), "-c", "import triton, torch; print(f'triton {triton.__version__}, torch {torch.__version__}')"],
        capture_output=True, text=True, env=env,
    )
    print(f"compat environment: {probe.stdout.strip() or probe.stderr.strip()}", flush=True)
    # The numpy deprecation that Triton 3.6's interpreter trips on every tensor index.
    quiet = ["-W", "ignore:Conversion of an array with ndim > 0 to a scalar:DeprecationWarning"]
    return run(str(py), "-m", "pytest", "-q", *quiet, *tests, *argv, cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
