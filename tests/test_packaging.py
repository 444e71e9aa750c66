"""The two dependency lists agree, and the set-up files say what the README says."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# conda-forge names that differ from PyPI's
CONDA_TO_PYPI = {"pytorch": "torch"}


def _name_and_spec(req: str) -> tuple[str, str]:
    m = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*)$", req)
    assert m, req
    return m.group(1).lower(), m.group(2).replace(" ", "")


def pyproject_deps() -> dict[str, str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return dict(_name_and_spec(r) for r in data["project"]["dependencies"])


def conda_deps() -> dict[str, str]:
    deps = {}
    in_deps = False
    for line in (ROOT / "environment.yml").read_text().splitlines():
        if line.startswith("dependencies:"):
            in_deps = True
            continue
        m = re.match(r"^  - ([^#]+?)\s*$", line)
        if in_deps and m and not m.group(1).startswith("pip"):
            name, spec = _name_and_spec(m.group(1))
            if name not in ("python",):
                deps[CONDA_TO_PYPI.get(name, name)] = spec
    return deps


def test_environment_yml_agrees_with_pyproject():
    assert conda_deps() == pyproject_deps()


def test_environment_yml_installs_the_package():
    assert "- -e ." in (ROOT / "environment.yml").read_text()


def test_readme_gives_the_make_targets_that_exist():
    readme = (ROOT / "README.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    for target in ("lab", "test"):
        assert f"make {target}" in readme
        assert re.search(rf"^{target}:", makefile, re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_cli_lists_the_catalogue():
    out = subprocess.run([sys.executable, "-m", "mambalab", "bugs"], capture_output=True, text=True,
                         check=True).stdout
    from mambalab.lab.bugs import CATALOGUE

    lines = out.strip().splitlines()
    assert lines[0].split()[:5] == ["id", "PR", "status", "fixed", "in"]  # the header
    rows = [ln for ln in lines[1:] if ln and not ln.startswith(" ") and not ln.startswith("The default")]
    assert [r.split()[0] for r in rows] == [b.id for b in CATALOGUE]  # one row per catalogue entry, in order
    assert rows[0].split()[:4] == ["pad-minus-one", "#35431", "merged", "0.20"]
    assert any(r.split()[:4] == ["zero-accepted", "#48475", "open", "-"] for r in rows)  # in no release


def _compat_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("compat_script", ROOT / "scripts" / "compat.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_compat_links_the_main_venvs_torch_only_at_the_pinned_version(monkeypatch):
    import torch

    compat = _compat_module()
    monkeypatch.setattr(compat, "MAIN_PY", Path(sys.executable))  # this interpreter stands in for .venv's
    version = torch.__version__.split("+")[0]
    site, tops = compat.main_venv_torch(f"torch=={version}")
    assert "torch" in tops and any(t.startswith("torch-") and t.endswith(".dist-info") for t in tops)
    assert all((site / t).exists() for t in tops) and ".." not in tops
    assert (site / "torch" / "__init__.py").exists()
    assert compat.main_venv_torch("torch==0.0.1") is None  # another version: installed, not linked
    assert compat.main_venv_torch("torch>=2") is None  # not a pin
    monkeypatch.setattr(compat, "MAIN_PY", Path("/nonexistent/python"))
    assert compat.main_venv_torch(f"torch=={version}") is None


def test_compat_rebuilds_a_venv_whose_link_dangles(tmp_path, monkeypatch):
    compat = _compat_module()
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (tmp_path / "pkg").mkdir()
    (site / "torch").symlink_to(tmp_path / "pkg")
    monkeypatch.setattr(compat, "VENV", tmp_path)
    assert compat.links_resolve()
    (tmp_path / "pkg").rmdir()  # .venv removed
    assert not compat.links_resolve()
