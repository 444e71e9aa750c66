#!/usr/bin/env python3
"""Re-execute the workbook's notebooks in place, from a fresh kernel, so committed outputs are reproducible.

    .venv/bin/python scripts/run_notebooks.py                      # every notebooks/*.ipynb
    .venv/bin/python scripts/run_notebooks.py notebooks/02_stale_rows.ipynb

Each notebook runs top to bottom in a new ``python3`` kernel whose working
directory is the notebook's folder (as in JupyterLab and under nbval). Then
the file is normalised so that a re-run changes nothing but real results:

* kernelspec ``python3`` (a private kernel name breaks on a fresh machine),
  ``language_info`` without the Python version;
* no execution timing metadata, no stored widget state;
* a widget's output (an interactive panel: its model exists only in a live
  kernel) is replaced by a plain-text note saying to run the cell;
* cell ids kept as they are.

A cell that raises stops the run and leaves the notebook untouched (exit 1).
Prints the wall time of each notebook (the workbook's budget is 60 s each).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parent.parent
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
WIDGET_NOTE = "(an interactive panel: run this cell in Jupyter to open it)"


def normalise(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Strip what changes between runs or machines (see the module docstring)."""
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    info = nb.metadata.get("language_info")
    if info is not None:
        info.pop("version", None)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type != "code":
            continue
        for out in cell.get("outputs", []):
            data = out.get("data")
            if data is not None and WIDGET_MIME in data:
                out["data"] = {"text/plain": WIDGET_NOTE}
                out.get("metadata", {}).clear()
    return nb


def run(path: Path, timeout: int) -> float:
    nb = nbformat.read(path, as_version=4)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=timeout,
        resources={"metadata": {"path": str(path.parent)}},
        record_timing=False,
        store_widget_state=False,
    )
    t0 = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - t0
    nbformat.validate(normalise(nb))
    nbformat.write(nb, path)
    return elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/*.ipynb")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    args = ap.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    status = 0
    for path in paths:
        try:
            elapsed = run(path, args.timeout)
        except CellExecutionError as e:
            print(f"{path}: FAILED (left unchanged)\n{e}", file=sys.stderr)
            status = 1
            continue
        print(f"{path.relative_to(ROOT) if path.is_absolute() and ROOT in path.parents else path}: "
              f"{elapsed:.1f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
