"""Several requests a program, checked and reported as one request a program.

Under Triton's interpreter a launch costs programs x operations, whatever a tile's size, so the one-token
decode kernels run every request of a launch in one program there (``mamba_ssm_requests``,
``gated_delta_rule_requests``, ``causal_conv1d_requests``). The sanitizer's reports name a request row and the
program that touched it, as a GPU's one-row programs would (``kernel, row, program``: what notebook 01 holds
beside compute-sanitizer's block). This module keeps those reports as they were:

* a launch says how many rows a program covers (``sanitizer.launch(..., rows_per_program=R)``): program ``i``
  along ``row_axis`` runs rows ``i * R ... i * R + R - 1``, and every load and store of it has those rows on
  its pointer block's leading axis, in order, each row owning ``leading / R`` consecutive positions (a 0-d
  access, or a leading axis that ``R`` does not divide, is refused: :class:`SanitizerUnsupported`);
* each row's lanes are checked, recorded and reported under the program id its one-row program would have
  had (``row_axis`` set to the row): the same :class:`~mambalab.lab.sanitizer_report.Access` and
  :class:`~mambalab.lab.sanitizer_report.Violation` records, lane counts included;
* at the end of the launch its records are put in the order the one-row programs would have made them (the
  interpreter runs programs in grid order, ``x``, then ``y``, then ``z``; a program's own records in the
  order it made them), and the detailed violations are capped after that.
"""

from __future__ import annotations

from operator import attrgetter

import numpy as np

from mambalab.lab.sanitizer_report import AccessLog, SanitizerUnsupported, Violation


def require_rows(shape: tuple, rows: int) -> None:
    """Refuse an access of ``shape`` whose leading axis cannot hold ``rows`` rows (checked on every access)."""
    if not shape or shape[0] % rows:
        raise SanitizerUnsupported(
            f"an access of shape {tuple(shape)} in a launch of {rows} rows a program: every load and store "
            f"must lead with the program's rows")


def lane_rows(shape: tuple, program: int, rows: int) -> np.ndarray:
    """The request row of every lane of an access of ``shape`` made by program ``program`` (``rows`` a program)."""
    require_rows(shape, rows)
    lead = program * rows + np.arange(shape[0]) // (shape[0] // rows)
    return np.broadcast_to(lead.reshape((-1,) + (1,) * (len(shape) - 1)), shape)


def virtual_pid(pid: tuple, row_axis: int, row: int) -> tuple:
    """The program id of ``row``'s one-row program: ``pid`` with ``row`` on ``row_axis``."""
    v = list(pid)
    v[row_axis] = row
    return tuple(v)


def marks(logs: tuple[AccessLog, ...]) -> list[tuple[AccessLog, int, int]]:
    """Where each open log stands before a launch (its records from then on are the launch's)."""
    return [(log, len(log.accesses), len(log.violations)) for log in logs]


def in_program_order(violations: list[Violation], marks: list[tuple[AccessLog, int, int]],
                     cap: int) -> list[Violation]:
    """The launch's records in one-row program order (a stable sort by program id), violations capped at
    ``cap`` as a launch of one-row programs caps them; returns the launch's own list of violations so."""
    _pid = attrgetter("pid")
    for log, a, v in marks:
        log.accesses[a:] = sorted(log.accesses[a:], key=_pid)
        log.violations[v:] = sorted(log.violations[v:], key=_pid)[:cap]
    return sorted(violations, key=_pid)[:cap]


__all__ = ["require_rows", "lane_rows", "virtual_pid", "marks", "in_program_order"]
