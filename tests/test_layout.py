"""The package's layout: every module imports on its own (no import cycle), each file holds one
concept (about 600 lines at most, exceptions named with their reason), and each layer folder
says which vLLM folder it mirrors."""

import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import mambalab

PKG = Path(mambalab.__file__).resolve().parent
MAX_LINES = 600
# Files allowed past MAX_LINES, each because its one concept needs the room.
LONG_FILES: dict[str, str] = {}


def _modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(mambalab.__path__, "mambalab."))


def test_every_module_imports_alone():
    # One interpreter; before each module every mambalab module is dropped from sys.modules, so the
    # module is imported first, as a user's `import` would: a cycle fails here. (torch stays loaded.)
    code = (
        "import importlib, sys, traceback\n"
        f"names = {_modules()!r}\n"
        "bad = []\n"
        "for n in names:\n"
        "    for m in [k for k in sys.modules if k == 'mambalab' or k.startswith('mambalab.')]:\n"
        "        del sys.modules[m]\n"
        "    try:\n"
        "        importlib.import_module(n)\n"
        "    except Exception:\n"
        "        bad.append(n + ': ' + traceback.format_exc().strip().splitlines()[-1])\n"
        "print('\\n'.join(bad))\n"
        "sys.exit(1 if bad else 0)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       env=dict(os.environ, MAMBALAB_DEVICE=os.environ.get("MAMBALAB_DEVICE", "cpu")))
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]


def test_no_module_is_a_grab_bag():
    long = {str(p.relative_to(PKG)): n for p in PKG.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert set(long) <= set(LONG_FILES), f"over {MAX_LINES} lines: {long}"


def test_kernels_are_exported_as_functions():
    from mambalab.kernels import (causal_conv1d_update, fused_recurrent_gated_delta_rule,
                                  selective_state_update)

    for f in (selective_state_update, causal_conv1d_update, fused_recurrent_gated_delta_rule):
        assert callable(f) and f.__module__.startswith("mambalab.kernels."), f


def test_each_layer_folder_names_its_vllm_counterpart():
    for folder, upstream in {"core": "vllm/v1/core", "worker": "vllm/v1/worker", "attention": "vllm/v1/attention",
                             "engine": "vllm/v1/engine", "kernels": "mamba/ops"}.items():
        doc = (PKG / folder / "__init__.py").read_text(encoding="utf-8")
        assert upstream in doc, (folder, upstream)
