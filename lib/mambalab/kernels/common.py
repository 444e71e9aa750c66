"""Pieces shared by the decode-state kernels: the state-index guard (below), the request rows' order on the grid
(:func:`program_row`), whether a launch takes programmatic dependent launch (:func:`use_pdl`) and the GPU's name that
launch rules measured on one card are keyed by (:func:`device_name`).

Which indices a kernel skips is the whole of bugs #35431 and #39064, and each
upstream kernel family has its own rule (as in vLLM 0.33): the Mamba kernels
(``mamba_ssm.py``, ``causal_conv1d.py``) skip only ``== null_block_id``, so a
negative index reaches address arithmetic; the FLA / gated-delta-net kernels
skip ``<= 0`` on load and store only ``> 0``. The rule is one ``tl.constexpr``
(:class:`mambalab.lab.bugs.GuardMode`) chosen at launch from the bug
configuration and the kernel's :class:`~mambalab.lab.bugs.KernelFamily` by
:meth:`mambalab.lab.bugs.BugConfig.kernel_guard_for` (the one place that
decides), never by editing a kernel.
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

from mambalab.device import INTERPRET
from mambalab.lab.bugs import BugConfig, GuardMode, KernelFamily, resolve

@triton.jit
def is_live_slot(idx, null_block_id, GUARD: tl.constexpr):
    """True where the kernel may read/write state slot ``idx``.

    ``GUARD`` is a :class:`GuardMode` value (the twin of ``GuardMode.is_live``).
    NULL (0, the FLA kernels' fixed guard): the null block and anything below
    it are skipped (the ``<= 0`` of #39064). NEGATIVE (1, FLA before #39064):
    only ``< 0`` is skipped, so index 0 reads and writes the null block. NONE
    (2, the ``pad-minus-one`` world's trusting consumer): nothing is skipped.
    EQ_NULL (3, the Mamba SSU's and conv's guard): only the null block itself
    is skipped; a ``-1`` is used (an illegal access, as upstream).
    """
    if GUARD == 0:
        live = idx > null_block_id
    elif GUARD == 1:
        live = idx >= 0
    elif GUARD == 3:
        live = idx != null_block_id
    else:
        live = idx == idx
    return live


@triton.jit
def prefetch_rows_l2(base, rows, s_row, s_col, NCOLS: tl.constexpr, EVICT_LAST: tl.constexpr):
    """A hint, on a GPU only: ask L2 for the 128-byte lines of ``base``'s rows ``rows`` (each row's first
    ``NCOLS`` elements, ``s_col == 1`` for the lines to be that row's). Nothing is read into registers and
    nothing is written; launched before PDL's wait it overlaps a state tile's DRAM fetch with the previous
    kernel's tail. ``rows`` must be addresses inside the tensor (clamp them: a hint takes no mask)."""
    ELEMS: tl.constexpr = 1024 // base.dtype.element_ty.primitive_bitwidth
    LINES: tl.constexpr = (NCOLS + ELEMS - 1) // ELEMS
    ptrs = base + rows[:, None] * s_row + (tl.arange(0, LINES) * ELEMS)[None, :] * s_col
    if EVICT_LAST:
        tl.inline_asm_elementwise("prefetch.global.L2::evict_last [$1];\n\tmov.u32 $0, 0;", "=r,l", [ptrs],
                                  dtype=tl.int32, is_pure=False, pack=1)
    else:
        tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [ptrs],
                                  dtype=tl.int32, is_pure=False, pack=1)


#: Under the interpreter a one-token decode launch runs all its requests in one program (the ``*_requests``
#: kernels: a launch costs programs x operations there). ``MAMBALAB_INTERPRETER_REQUESTS=0`` (or this set to
#: False) keeps one request a program; results and the sanitizer's reports are the same either way.
REQUESTS_A_PROGRAM = os.environ.get("MAMBALAB_INTERPRETER_REQUESTS", "1").strip().lower() not in ("0", "off",
                                                                                              "false", "no")


@triton.jit
def program_row(AXIS: tl.constexpr, ZIGZAG: tl.constexpr = False):
    """The request row of this program: its id on grid axis ``AXIS``, or with ``ZIGZAG`` the rows in the order ``0,
    n-1, 1, n-2, ...`` (``n`` programs on the axis). A CUDA graph's padding rows are the batch's last: where the
    rows' axis is the grid's slowest, in order they run as a tail after every live row, zigzagged among the first
    live ones. (Nothing else here depends on the rows' order: each reads its own slot.) GPU launches only: the
    interpreter's sanitizer takes a program's row to be its id on ``row_axis``."""
    pid = tl.program_id(AXIS)
    if ZIGZAG:
        half = pid // 2
        pid = tl.where(pid % 2 == 0, half, tl.num_programs(AXIS) - 1 - half)
    return pid


def requests_a_program(num_requests: int, guard: int, null_block_id: int, *indices, live_test=None) -> int:
    """How many requests one program of an interpreted one-token launch takes: all of them where there are a
    power of two of them (at least 2), every slot they read and write through is live under ``guard`` and no
    two requests share one; else 0, one a program. ``indices``: the index tensors the kernel reads its slots
    from (column 0 of a 2-D one; None: request r uses slot r). Only CPU tensors are read (no device to wait
    for: this is the interpreter's choice); any other gives 0. ``live_test``: the ``is_live_slot`` the
    one-request kernel would call; one that is not this module's (a guard planted by the workbook,
    ``workbook/fix_it.py``) decides per index inside that kernel, so the launch keeps it.

    Every request live: a padded request's program in the one-request kernels leaves after its index test (a
    few operations), while a program of several requests would pay every operation for it; these launches
    keep one request a program, as do those where two requests share a slot (the null block under
    ``guard-lt-zero`` or ``pad-minus-one``: #39064's race). The interpreter runs one-request programs one
    after the other, so there the second reads what the first wrote, the outcome the recorded replays show;
    one program for both would read the slot before either writes."""
    if not REQUESTS_A_PROGRAM or num_requests < 2 or num_requests & (num_requests - 1):
        return 0
    if live_test is not None and live_test is not is_live_slot:
        return 0
    cols = [t if t.dim() == 1 else t[:, 0] for t in indices if t is not None]
    if any(c.device.type != "cpu" for c in cols):
        return 0
    mode = GuardMode(guard)
    owner: dict[int, int] = {}
    for row, slots in enumerate(zip(*(c[:num_requests].tolist() for c in cols))):
        for slot in slots:
            if not mode.is_live(slot, null_block_id) or (slot >= 0 and owner.setdefault(slot, row) != row):
                return 0
    return num_requests


def guard_for(bugs: BugConfig | None, family: KernelFamily = KernelFamily.FLA) -> int:
    """The guard constexpr for a launch of a ``family`` kernel: from ``bugs``, else the active config."""
    return int(resolve(bugs).kernel_guard_for(family))


def bound_accepted_for(bugs: BugConfig | None) -> bool:
    """Whether the GDN kernels bound the state column ``num_accepted - 1`` (#50021's masked load)."""
    return resolve(bugs).bound_accepted


def use_pdl(device: torch.device) -> bool:
    """Programmatic dependent launch, for every kernel family: on a CUDA GPU of compute capability 9.0 or later,
    never on the interpreter; ``MAMBALAB_PDL=0`` turns it off, ``=1`` on (where the GPU has it)."""
    if INTERPRET or device.type != "cuda":
        return False
    flag = os.environ.get("MAMBALAB_PDL", "1")
    return flag != "0" and _capability(device.index if device.index is not None
                                       else torch.cuda.current_device()) >= 90


@functools.lru_cache(maxsize=None)
def _capability(device_index: int) -> int:
    major, minor = torch.cuda.get_device_capability(device_index)
    return 10 * major + minor


@functools.lru_cache(maxsize=None)
def _cuda_device_name(index: int) -> str:
    return torch.cuda.get_device_name(index)


def device_name(device: torch.device) -> str | None:
    """The GPU's name as torch reports it (what vLLM keys its tuned configs by); None off a GPU (the interpreter)."""
    if device.type != "cuda":
        return None
    return _cuda_device_name(device.index if device.index is not None else torch.cuda.current_device())


__all__ = ["is_live_slot", "prefetch_rows_l2", "program_row", "guard_for", "bound_accepted_for", "KernelFamily",
           "REQUESTS_A_PROGRAM", "requests_a_program", "use_pdl", "device_name"]
