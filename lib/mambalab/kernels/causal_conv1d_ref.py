"""Pure-torch reference for :func:`mambalab.kernels.causal_conv1d.causal_conv1d_update`.

Clear, not fast: one Python loop over rows and one over tokens, every step
spelled out. It works on a conv-state pool of any layout (it only indexes
``conv_state[slot, :, position]``), models the state-index guards of
:class:`mambalab.lab.bugs.GuardMode` (its own fixed one being EQ_NULL: skip only
``== null_block_id``, as upstream's conv returns on), and never imports Triton, so it runs
anywhere and is the yardstick the kernel's tests compare against.

The semantics (and the speculative-decoding convention) are documented once,
in the kernel module's docstring; this file follows them line by line:

* the request's history is the ``width - 1`` inputs at state columns
  ``[off, off + width - 1)``, ``off = max(num_accepted - 1, 0)`` under
  speculative decoding, ``0`` without;
* ``u = history ++ new tokens``; token ``t``'s window is ``u[t : t + width]``
  and ``out[t] = act(bias + sum_j weight[:, j] * window[j])`` in fp32;
* afterwards columns ``[0, L)`` of the slot hold ``u[s : s + L]`` with
  ``s = seqlen, L = width - 1`` (no spec) or ``s = 1, L = width - 2 + seqlen``
  (spec); other columns are left as they were;
* inputs are rounded to the state's dtype before use, so what the state keeps
  and what the output saw are the same numbers.
"""

from __future__ import annotations

import torch

from mambalab.lab.bugs import BugConfig, GuardMode, KernelFamily
from mambalab.constants import NULL_BLOCK_ID


def parse_activation(activation) -> bool:
    """``True`` for SiLU. Accepts None/False (identity), True, "silu", "swish"."""
    if activation is None or activation is False:
        return False
    if activation is True:
        return True
    if isinstance(activation, str) and activation in ("silu", "swish"):
        return True
    raise ValueError(
        f"activation={activation!r}: expected None, 'silu' or 'swish' (swish is silu), or a bool"
    )


def causal_conv1d_update_ref(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation=None,
    conv_state_indices: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    query_start_loc: torch.Tensor | None = None,
    max_query_len: int = -1,
    null_block_id: int = NULL_BLOCK_ID,
    out: torch.Tensor | None = None,
    *,
    guard: GuardMode = GuardMode.EQ_NULL,
    bugs: BugConfig | None = None,
) -> torch.Tensor:
    """Decode-time causal depthwise conv update, in plain torch.

    Same arguments as the kernel's wrapper. ``guard`` picks which state
    indices are skipped (default: the conv's fixed rule, skip ``== null_block_id``
    only, as vLLM 0.33); ``bugs``, when given, overrides it with
    ``bugs.kernel_guard_for(KernelFamily.MAMBA)``. Unlike the
    kernel, the reference does not consult the active bug configuration: it
    models exactly the guard it is told.

    A skipped row's output is its input (upstream works in place over ``x``
    and returns before writing) and its state is neither read nor
    written. Without ``conv_state_indices`` row ``b`` owns slot ``b`` and no
    row is skipped (there is no index to guard). With ``GuardMode.NONE`` an index outside ``[0, num_slots)``
    raises ``IndexError`` (on a GPU it would be an illegal memory access;
    Python's negative indexing would silently pick the last slot instead).

    ``max_query_len`` is accepted for signature compatibility and unused: the
    reference reads each row's length from ``query_start_loc``.
    """
    silu = parse_activation(activation)
    if bugs is not None:
        guard = bugs.kernel_guard_for(KernelFamily.MAMBA)
    guard = GuardMode(guard)

    num_slots, dim, state_len = conv_state.shape
    width = weight.shape[1]
    hist = width - 1

    # --- one (tokens, dim) view per row, for x and for out ----------------
    if out is None:
        out = torch.empty_like(x)
    if query_start_loc is not None:
        starts = [int(v) for v in query_start_loc.tolist()]
        batch = len(starts) - 1
        x_rows = [x[starts[b] : starts[b + 1]] for b in range(batch)]
        out_rows = [out[starts[b] : starts[b + 1]] for b in range(batch)]
    elif x.dim() == 2:
        batch = x.shape[0]
        x_rows = [x[b : b + 1] for b in range(batch)]
        out_rows = [out[b : b + 1] for b in range(batch)]
    else:
        batch = x.shape[0]
        x_rows = [x[b].transpose(0, 1) for b in range(batch)]  # (seqlen, dim) views
        out_rows = [out[b].transpose(0, 1) for b in range(batch)]

    if conv_state_indices is None:
        slots = list(range(batch))  # a dense batch: row b owns slot b, nothing is padding
        guard = GuardMode.NONE
    else:
        idx = conv_state_indices if conv_state_indices.dim() == 1 else conv_state_indices[:, 0]
        slots = [int(v) for v in idx.tolist()]
    accepted = None if num_accepted_tokens is None else [int(v) for v in num_accepted_tokens.tolist()]

    w = weight.float().transpose(0, 1)  # (width, dim): w[j] is tap j of every channel
    b_vec = bias.float() if bias is not None else torch.zeros(dim, dtype=torch.float32, device=x.device)

    for b in range(batch):
        slot = slots[b]
        x_b = x_rows[b]
        seqlen = x_b.shape[0]
        if not GuardMode(guard).is_live(slot, null_block_id):
            out_rows[b].copy_(x_b)  # a padded row's output is its input; its state is untouched
            continue
        if not 0 <= slot < num_slots:
            raise IndexError(
                f"row {b}: state index {slot} is outside the pool [0, {num_slots}); "
                "on a GPU this is an illegal memory access"
            )
        if seqlen == 0:
            continue

        if accepted is None:
            off, shift, new_len = 0, seqlen, hist
        else:
            off, shift, new_len = max(accepted[b] - 1, 0), 1, hist - 1 + seqlen
        if off + hist > state_len:
            raise IndexError(
                f"row {b}: num_accepted_tokens={accepted[b]} puts the history at columns "
                f"[{off}, {off + hist}) beyond state_len={state_len}"
            )

        history = conv_state[slot, :, off : off + hist].float().transpose(0, 1)  # (hist, dim)
        new_x = x_b.to(conv_state.dtype).float()  # rounded to the state's dtype, as the kernel does
        u = torch.cat([history, new_x], dim=0)  # (hist + seqlen, dim)

        for t in range(seqlen):
            window = u[t : t + width]  # (width, dim): oldest first, the new token last
            acc = b_vec.clone()
            for j in range(width):
                acc = acc + w[j] * window[j]
            if silu:
                acc = acc * torch.sigmoid(acc)
            out_rows[b][t] = acc.to(out.dtype)

        new_state = u[shift : shift + new_len]  # (new_len, dim)
        conv_state[slot, :, :new_len] = new_state.transpose(0, 1).to(conv_state.dtype)

    return out


__all__ = ["causal_conv1d_update_ref", "parse_activation"]
