"""Pieces shared by the decode-state kernels: the state-index guard.

Which indices a kernel skips is the whole of bugs #35431 and #39064, so it is
one ``tl.constexpr`` (:class:`mambalab.lab.bugs.GuardMode`) chosen from the bug
configuration at launch, never by editing a kernel.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mambalab.lab.bugs import BugConfig, resolve

@triton.jit
def is_live_slot(idx, null_block_id, GUARD: tl.constexpr):
    """True where the kernel may read/write state slot ``idx``.

    ``GUARD`` is a :class:`GuardMode` value. NULL (0, fixed): the null block
    and anything below it are skipped (the ``<= 0`` of #39064). NEGATIVE (1,
    pre-#39064): only ``< 0`` is skipped, so index 0 reads and writes the null
    block. NONE (2, the ``pad-minus-one`` world's trusting consumer): nothing
    is skipped.
    """
    if GUARD == 0:
        live = idx > null_block_id
    elif GUARD == 1:
        live = idx >= 0
    else:
        live = idx == idx
    return live


def guard_for(bugs: BugConfig | None) -> int:
    """The guard constexpr for a launch: from ``bugs``, else the active config."""
    return int(resolve(bugs).kernel_guard)


def clamp_for(bugs: BugConfig | None) -> bool:
    """Whether kernels bound the state column ``num_accepted - 1`` (fixed #48475)."""
    return resolve(bugs).clamp_accepted


__all__ = ["is_live_slot", "guard_for", "clamp_for"]
