"""Pieces shared by the decode-state kernels: the state-index guard.

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

import triton
import triton.language as tl

from mambalab.lab.bugs import BugConfig, KernelFamily, resolve

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


def guard_for(bugs: BugConfig | None, family: KernelFamily = KernelFamily.FLA) -> int:
    """The guard constexpr for a launch of a ``family`` kernel: from ``bugs``, else the active config."""
    return int(resolve(bugs).kernel_guard_for(family))


def bound_accepted_for(bugs: BugConfig | None) -> bool:
    """Whether the GDN kernels bound the state column ``num_accepted - 1`` (#50021's masked load)."""
    return resolve(bugs).bound_accepted


__all__ = ["is_live_slot", "prefetch_rows_l2", "guard_for", "bound_accepted_for", "KernelFamily"]
