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
