"""Pure-torch reference for Mamba2's decode step, ``selective_state_update``.

The Triton kernel in :mod:`mambalab.kernels.mamba_ssm` mirrors
vLLM's ``vllm/model_executor/layers/mamba/ops/mamba_ssm.py``. This file is its
``naive.py``: one request at a time, one token at a time, written to be read,
not to be fast. It imports no Triton. It also holds the host-side input check
(:func:`prepare_ssu_inputs`) that the kernel's wrapper shares, so both refuse
the same inputs with the same messages.

Shapes (the head-ful forms; ``P`` = head dim, ``N`` = dstate)::

    state            (slots, nheads, P, N)      updated in place
    x, dt, z, out    (tokens, nheads, P)
    A                (nheads, P, N)
    B, C             (tokens, ngroups, N)       head h uses group h // (nheads // ngroups)
    D, dt_bias       (nheads, P)

vLLM's head-less forms (``state (slots, P, N)``, ``x (batch, P)``, ``A (P, N)``,
``B (batch, N)``, ``D (P,)``...) and a batched speculative form (``x (R, T,
nheads, P)``, ``B (R, T, ngroups, N)`` with 2-D indices) are accepted too.

The recurrence, per token, in float32 whatever the stored dtypes::

    dt     <- dt + dt_bias                      (if dt_bias)
    dt     <- softplus(dt)  (dt if dt > 20)     (if dt_softplus)
    dA     <- exp(A * dt)                       (nheads, P, N)
    state  <- state * dA + (B * dt) * x         state[h,p,n] * dA[h,p,n] + B[g,n] dt[h,p] x[h,p]
    out    <- sum_n state * C  +  D * x
    out    <- out * z * sigmoid(z)              (if z)

The running state stays in float32 between the tokens of one request; only
what is stored is rounded to ``state.dtype``.

Where the state lives (the part that is about vLLM, not about maths):

* ``state_batch_indices is None``: request ``r`` (one token) reads and writes
  slot ``r``.
* 1-D ``(R,)``: request ``r`` reads slot ``state_batch_indices[r]`` and writes
  ``dst_state_batch_indices[r]`` (the same slot when ``dst`` is None).
* 2-D ``(R, C)`` (speculative decoding, ``cu_seqlens`` varlen): request ``r``
  owns tokens ``cu_seqlens[r] : cu_seqlens[r + 1]`` (without ``cu_seqlens``:
  one token each, or ``T`` each in the batched form). It starts from slot
  ``state_batch_indices[r, num_accepted_tokens[r] - 1]`` (column 0 without
  ``num_accepted_tokens``; the column is clamped to ``[0, C - 1]`` like
  upstream's ``max(num_accepted - 1, 0)``), and the state after its token
  ``t`` is stored to ``dst_state_batch_indices[r, t]``. Tokens ``t >= C``
  have no column: their state is not stored anywhere (``C >= max T`` is the
  caller's contract; checking it would need the values of ``cu_seqlens``).

The guard (bugs #35431 and #39064) decides which slots may be touched; a
*skipped* request reads nothing, stores nothing and gets **zero output rows**
(the documented "a padded row's output is zeros"):

* ``GuardMode.EQ_NULL`` (fixed, the SSU's own guard as in vLLM 0.33, which
  masks ``!= null_block_id``): a request whose source index is the null block
  is skipped; a store column equal to it skips that one store (the output is
  still computed). A *negative* index is not skipped: the reference refuses it
  with ``IndexError``, the kernel on the interpreter raises
  ``IllegalMemoryAccess`` (upstream: an illegal address).
* ``GuardMode.NULL`` (the FLA kernels' fixed guard): ``<= null_block_id`` is skipped.
* ``GuardMode.NEGATIVE`` (the FLA kernels before #39064): only ``< 0`` is skipped, so a padded
  row (index 0) loads the null block as its initial state and stores its
  result into it (the null block stops being zeros). Several such rows race on
  block 0 on a GPU; here they run one after another, in request order.
* ``GuardMode.NONE`` (the ``pad-minus-one`` world's consumer that trusts every
  index): nothing is skipped. A ``-1`` would reach address arithmetic; the
  reference refuses with ``IndexError`` (torch would silently wrap ``-1`` to
  the last slot), the kernel on the interpreter raises
  ``mambalab.lab.sanitizer.IllegalMemoryAccess``.

Rows of ``out`` past ``cu_seqlens[-1]`` belong to no request and are not
written.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mambalab.lab.bugs import GuardMode
from mambalab.constants import NULL_BLOCK_ID
from mambalab.kernels.ref_common import state_slot

STATE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
INDEX_DTYPES = (torch.int32, torch.int64)
SOFTPLUS_THRESHOLD = 20.0


@dataclass
class SSUProblem:
    """Inputs brought to one canonical form: what the kernel and the reference iterate over.

    Token tensors are ``(tokens, nheads, P)`` (views of the caller's tensors
    where possible), index tensors are 2-D ``(R, C)`` views. Built from
    shapes, dtypes and devices only: index values are never read.
    """

    state: torch.Tensor  # (slots, nheads, P, N)
    x: torch.Tensor  # (tokens, nheads, P)
    dt: torch.Tensor
    A: torch.Tensor  # (nheads, P, N)
    B: torch.Tensor  # (tokens, ngroups, N)
    C: torch.Tensor
    D: torch.Tensor | None  # (nheads, P)
    dt_bias: torch.Tensor | None
    z: torch.Tensor | None
    out: torch.Tensor  # (tokens, nheads, P): where results go
    src: torch.Tensor | None  # (R, Cs)
    dst: torch.Tensor | None  # (R, Cd)
    num_accepted_tokens: torch.Tensor | None  # (R,)
    cu_seqlens: torch.Tensor | None  # (R + 1,)
    num_requests: int  # R: the grid's row axis
    tokens_per_request: int  # T without cu_seqlens (1, or T of the batched form); 0 with it
    nheads: int
    dim: int
    dstate: int
    ngroups: int
    result: torch.Tensor  # what the caller gets back (``out`` in the caller's shape)
    writeback: torch.Tensor | None = None  # caller's ``out`` when ``out`` is a temporary

    def finish(self) -> torch.Tensor:
        """Copy a temporary ``out`` into the caller's tensor (rarely needed); return the result."""
        if self.writeback is not None:
            self.writeback.copy_(self.out.view(self.writeback.shape))
        return self.result


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def _shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(t.shape)


def _flat_view(t: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor | None:
    try:
        return t.view(shape)
    except RuntimeError:
        return None


def prepare_ssu_inputs(
    state,
    x,
    dt,
    A,
    B,
    C,
    D=None,
    dt_bias=None,
    z=None,
    dt_softplus=False,
    state_batch_indices=None,
    dst_state_batch_indices=None,
    null_block_id=NULL_BLOCK_ID,
    out=None,
    num_accepted_tokens=None,
    cu_seqlens=None,
) -> SSUProblem:
    """Check every argument and bring it to the canonical form (see :class:`SSUProblem`).

    Raises ``TypeError`` (wrong type or dtype) or ``ValueError`` (wrong shape,
    device or combination) naming the argument. Only metadata is inspected:
    index values (slots, ``cu_seqlens``, ``num_accepted_tokens``) are never
    read, so the check costs no device synchronisation and never hides a bad
    index from the kernel's guard.
    """
    # -- types and dtypes ------------------------------------------------------
    floats = {"state": state, "x": x, "dt": dt, "A": A, "B": B, "C": C}
    optional_floats = {"D": D, "dt_bias": dt_bias, "z": z, "out": out}
    indices = {
        "state_batch_indices": state_batch_indices,
        "dst_state_batch_indices": dst_state_batch_indices,
        "num_accepted_tokens": num_accepted_tokens,
        "cu_seqlens": cu_seqlens,
    }
    for name, t in {**floats, **optional_floats, **indices}.items():
        if t is None and name not in floats:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    for name, t in {**floats, **optional_floats}.items():
        if t is not None and not t.dtype.is_floating_point:
            raise TypeError(f"{name} must be a floating-point tensor, got {t.dtype}")
    for name, t in indices.items():
        if t is not None and t.dtype not in INDEX_DTYPES:
            raise TypeError(f"{name} must be int32 or int64, got {t.dtype}")
    if state.dtype not in STATE_DTYPES:
        raise TypeError(f"state must be float32, bfloat16 or float16, got {state.dtype}")
    for name in ("B", "C", "z", "out"):
        t = {**floats, **optional_floats}[name]
        if t is not None and t.dtype != x.dtype:
            raise TypeError(
                f"{name} has dtype {t.dtype} but x has {x.dtype}: x, B, C, z and out must share "
                f"one dtype (state, A, dt, D and dt_bias may differ)"
            )
    if isinstance(dt_softplus, torch.Tensor) or not isinstance(dt_softplus, (bool, int)):
        raise TypeError(f"dt_softplus must be a bool, got {type(dt_softplus).__name__}")
    if isinstance(null_block_id, bool) or not isinstance(null_block_id, int):
        raise TypeError(f"null_block_id must be a Python int, got {type(null_block_id).__name__}")
    for name, t in {**floats, **optional_floats, **indices}.items():
        if t is not None and t.device != state.device:
            raise ValueError(f"{name} is on {t.device} but state is on {state.device}")

    # -- forms: head-less (vLLM's 2-D/3-D), tokens, batched speculative -------
    def ndim_is(name: str, t: torch.Tensor | None, n: int, form: str) -> None:
        if t is not None:
            _need(t.dim() == n, f"{name} must be {n}-D {form}, got shape {_shape(t)}")

    result_shape: tuple[int, ...] | None = None
    batched_T = 0
    caller_out = out
    if state.dim() == 3:  # head-less: add a head axis of 1
        form = "(state is 3-D (slots, dim, dstate): the head-less form)"
        for name, t, n in (("x", x, 2), ("dt", dt, 2), ("A", A, 2), ("B", B, 2), ("C", C, 2),
                           ("D", D, 1), ("dt_bias", dt_bias, 1), ("z", z, 2), ("out", out, 2)):
            ndim_is(name, t, n, form)
        result_shape = _shape(x)
        state, x, dt = state.unsqueeze(1), x.unsqueeze(1), dt.unsqueeze(1)
        B, C, A = B.unsqueeze(1), C.unsqueeze(1), A.unsqueeze(0)
        D = D.unsqueeze(0) if D is not None else None
        dt_bias = dt_bias.unsqueeze(0) if dt_bias is not None else None
        z = z.unsqueeze(1) if z is not None else None
        out = out.unsqueeze(1) if out is not None else None
    elif state.dim() == 4:
        if x.dim() == 4:  # batched speculative form (R, T, nheads, P)
            form = "(x is 4-D (R, T, nheads, dim): the batched speculative form)"
            for name, t, n in (("dt", dt, 4), ("B", B, 4), ("C", C, 4), ("z", z, 4), ("out", out, 4)):
                ndim_is(name, t, n, form)
            for name, t in (("dt", dt), ("B", B), ("C", C), ("z", z)):
                if t is not None:
                    _need(t.shape[:2] == x.shape[:2],
                          f"{name} must share x's (R, T) = {list(x.shape[:2])}, got {_shape(t)}")
            _need(cu_seqlens is None,
                  "cu_seqlens is for the flat tokens form (x 3-D); x is 4-D (R, T, nheads, dim)")
            _need(state_batch_indices is not None and state_batch_indices.dim() == 2,
                  "the batched form x (R, T, nheads, dim) needs 2-D state_batch_indices (R, C)")
            result_shape = _shape(x)
            batched_T = x.shape[1]

            def flat(t):
                return None if t is None else t.reshape(t.shape[0] * t.shape[1], *t.shape[2:])

            x, dt, B, C, z = flat(x), flat(dt), flat(B), flat(C), flat(z)  # out: below
        else:
            form = "(state is 4-D (slots, nheads, dim, dstate))"
            _need(x.dim() == 3, f"x must be 3-D (tokens, nheads, dim) {form}, got shape {_shape(x)}")
            for name, t, n in (("dt", dt, 3), ("B", B, 3), ("C", C, 3), ("z", z, 3), ("out", out, 3)):
                ndim_is(name, t, n, form)
        for name, t, n in (("A", A, 3), ("D", D, 2), ("dt_bias", dt_bias, 2)):
            ndim_is(name, t, n, form)
    else:
        raise ValueError(
            f"state must be 4-D (slots, nheads, dim, dstate) or 3-D (slots, dim, dstate), "
            f"got shape {_shape(state)}"
        )

    # -- shapes in the canonical form -----------------------------------------
    slots, nheads, dim, dstate = state.shape
    _need(nheads > 0 and dim > 0 and dstate > 0, f"state has an empty axis: {_shape(state)}")
    tokens = x.shape[0]
    _need(x.shape[1:] == (nheads, dim),
          f"x must be (tokens, nheads={nheads}, dim={dim}) to match state {_shape(state)}, "
          f"got {_shape(x)}")
    _need(dt.shape == x.shape, f"dt must have x's shape {_shape(x)}, got {_shape(dt)}")
    _need(A.shape == (nheads, dim, dstate),
          f"A must be (nheads, dim, dstate) = {(nheads, dim, dstate)}, got {_shape(A)}")
    _need(B.dim() == 3 and B.shape[0] == tokens and B.shape[2] == dstate and B.shape[1] > 0,
          f"B must be (tokens={tokens}, ngroups, dstate={dstate}), got {_shape(B)}")
    ngroups = B.shape[1]
    _need(nheads % ngroups == 0,
          f"nheads ({nheads}) must be a multiple of ngroups ({ngroups}, B's axis 1): "
          f"head h uses group h // (nheads // ngroups)")
    _need(C.shape == B.shape, f"C must have B's shape {_shape(B)}, got {_shape(C)}")
    for name, t in (("D", D), ("dt_bias", dt_bias)):
        if t is not None:
            _need(t.shape == (nheads, dim),
                  f"{name} must be (nheads, dim) = {(nheads, dim)}, got {_shape(t)}")
    if z is not None:
        _need(z.shape == x.shape, f"z must have x's shape {_shape(x)}, got {_shape(z)}")

    # -- out: the caller's tensor, seen in the canonical form -------------------
    writeback = None
    if out is None:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        result = out if result_shape is None else out.view(result_shape)
    elif batched_T:
        _need(_shape(out) == result_shape, f"out must have x's shape {result_shape}, got {_shape(out)}")
        flat_out = _flat_view(out, _shape(x))
        if flat_out is None:  # not viewable flat: compute into a temporary, copy back
            writeback = out
            flat_out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        out = flat_out
    else:
        _need(out.shape == x.shape, f"out must have x's shape {_shape(x)}, got {_shape(out)}")
    if caller_out is not None:
        result = caller_out

    # -- indices ---------------------------------------------------------------
    src, dst = state_batch_indices, dst_state_batch_indices
    if src is None:
        _need(dst is None, "dst_state_batch_indices needs state_batch_indices")
        _need(num_accepted_tokens is None,
              "num_accepted_tokens (speculative decoding) needs 2-D state_batch_indices (N, C)")
        _need(cu_seqlens is None, "cu_seqlens (varlen speculative decoding) needs 2-D "
              "state_batch_indices (N, C): one slot per token")
        R, T = tokens, 1
        _need(R <= slots,
              f"without state_batch_indices row b uses slot b: x has {R} rows but state has "
              f"only {slots} slots")
    else:
        _need(src.dim() in (1, 2),
              f"state_batch_indices must be 1-D (N,) or 2-D (N, C), got shape {_shape(src)}")
        if dst is not None:
            _need(dst.dim() == src.dim(),
                  f"dst_state_batch_indices must have state_batch_indices' ndim ({src.dim()}), "
                  f"got shape {_shape(dst)}")
        if src.dim() == 1:
            _need(num_accepted_tokens is None,
                  "num_accepted_tokens (speculative decoding) needs 2-D state_batch_indices (N, C), "
                  f"got 1-D {_shape(src)}")
            _need(cu_seqlens is None,
                  "cu_seqlens (varlen speculative decoding) needs 2-D state_batch_indices (N, C), "
                  f"got 1-D {_shape(src)}")
            src = src.unsqueeze(1)
            dst = dst.unsqueeze(1) if dst is not None else None
        if cu_seqlens is not None:
            _need(cu_seqlens.dim() == 1 and cu_seqlens.numel() >= 1,
                  f"cu_seqlens must be 1-D (N + 1,), got shape {_shape(cu_seqlens)}")
            R, T = cu_seqlens.numel() - 1, 0
        elif batched_T:
            R, T = result_shape[0], batched_T
        else:
            R, T = tokens, 1
        _need(src.shape[0] == R and src.shape[1] >= 1,
              f"state_batch_indices must have one row per request (N={R}), got shape "
              f"{_shape(state_batch_indices)}")
        if dst is None:
            dst = src
        else:
            _need(dst.shape[0] == R and dst.shape[1] >= 1,
                  f"dst_state_batch_indices must have one row per request (N={R}), got shape "
                  f"{_shape(dst_state_batch_indices)}")
        if T > 1:
            _need(dst.shape[1] >= T,
                  f"2-D (dst_)state_batch_indices store one slot per token: need >= T={T} columns, "
                  f"got {dst.shape[1]}")
        if num_accepted_tokens is not None:
            _need(num_accepted_tokens.shape == (R,),
                  f"num_accepted_tokens must be (N,) = ({R},), got {_shape(num_accepted_tokens)}")

    return SSUProblem(
        state=state, x=x, dt=dt, A=A, B=B, C=C, D=D, dt_bias=dt_bias, z=z, out=out,
        src=src, dst=dst, num_accepted_tokens=num_accepted_tokens, cu_seqlens=cu_seqlens,
        num_requests=R, tokens_per_request=T, nheads=nheads, dim=dim, dstate=dstate,
        ngroups=ngroups, result=result, writeback=writeback,
    )


def is_tied(A: torch.Tensor, dt: torch.Tensor, dt_bias: torch.Tensor | None) -> bool:
    """vLLM's decode path: A, dt, dt_bias broadcast along dim/dstate (stride 0), one value a head."""
    return (A.stride(1) == 0 and A.stride(2) == 0 and dt.stride(2) == 0
            and (dt_bias is None or dt_bias.stride(1) == 0))


def selective_state_update_ref(
    state,
    x,
    dt,
    A,
    B,
    C,
    D=None,
    dt_bias=None,
    z=None,
    dt_softplus=False,
    state_batch_indices=None,
    dst_state_batch_indices=None,
    null_block_id=NULL_BLOCK_ID,
    out=None,
    num_accepted_tokens=None,
    cu_seqlens=None,
    *,
    guard: GuardMode = GuardMode.EQ_NULL,
) -> torch.Tensor:
    """Reference for :func:`mambalab.kernels.mamba_ssm.selective_state_update`.

    Same arguments and effects (see the module docstring): updates ``state``
    in place, writes and returns ``out``. ``guard`` (a :class:`GuardMode`)
    stands in for the kernel's bug configuration.
    """
    p = prepare_ssu_inputs(state, x, dt, A, B, C, D, dt_bias, z, dt_softplus,
                           state_batch_indices, dst_state_batch_indices, null_block_id, out,
                           num_accepted_tokens, cu_seqlens)
    guard = GuardMode(guard)
    heads_per_group = p.nheads // p.ngroups
    A32 = p.A.float()

    # Request r owns tokens [bounds[r], bounds[r + 1]).
    if p.cu_seqlens is not None:
        bounds = [int(v) for v in p.cu_seqlens.tolist()]
    else:
        bounds = [r * p.tokens_per_request for r in range(p.num_requests + 1)]

    for r in range(p.num_requests):
        bos, eos = bounds[r], bounds[r + 1]
        if eos <= bos:
            continue  # no tokens: nothing read, nothing written

        # -- where this request's state comes from -------------------------------
        if p.src is None:
            load_slot = r
        else:
            col = 0
            if p.num_accepted_tokens is not None:
                col = min(max(int(p.num_accepted_tokens[r]) - 1, 0), p.src.shape[1] - 1)
            load_slot = int(p.src[r, col])
            if not GuardMode(guard).is_live(load_slot, null_block_id):
                p.out[bos:eos] = 0  # a padded row: zero output, nothing read or stored
                continue
        h = state_slot(p.state, load_slot, f"request {r}: load").float().clone()  # (nheads, P, N)

        # -- the recurrence, one token at a time ---------------------------------
        for t in range(eos - bos):
            i = bos + t
            x_i = p.x[i].float()  # (nheads, P)
            dt_i = p.dt[i].float()  # (nheads, P)
            if p.dt_bias is not None:
                dt_i = dt_i + p.dt_bias.float()
            if dt_softplus:
                dt_i = F.softplus(dt_i, threshold=SOFTPLUS_THRESHOLD)
            dA = torch.exp(A32 * dt_i[:, :, None])  # (nheads, P, N)
            B_i = p.B[i].float().repeat_interleave(heads_per_group, dim=0)  # (nheads, N)
            C_i = p.C[i].float().repeat_interleave(heads_per_group, dim=0)
            h = h * dA + (B_i[:, None, :] * dt_i[:, :, None]) * x_i[:, :, None]
            y = (h * C_i[:, None, :]).sum(-1)  # (nheads, P)
            if p.D is not None:
                y = y + p.D.float() * x_i
            if p.z is not None:
                z_i = p.z[i].float()
                y = y * z_i * torch.sigmoid(z_i)
            p.out[i] = y.to(p.out.dtype)

            # -- where the state after token t goes -----------------------------
            if p.src is None:
                store_slot = r
            elif t < p.dst.shape[1]:
                store_slot = int(p.dst[r, t])
                if not GuardMode(guard).is_live(store_slot, null_block_id):
                    continue  # a null column: this token's state is not kept
            else:
                continue  # no column for this token
            state_slot(p.state, store_slot, f"request {r} token {t}: store").copy_(h)

    return p.finish()


__all__ = [
    "SSUProblem",
    "prepare_ssu_inputs",
    "selective_state_update_ref",
    "STATE_DTYPES",
    "INDEX_DTYPES",
]
