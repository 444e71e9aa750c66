"""A tiny hybrid language model: one Mamba2 mixer and one gated-delta-net mixer.

Small enough to run every decode step through the three Triton kernels under
the CPU interpreter, yet shaped like the real thing so the state-management
bugs show up exactly as they do in vLLM:

* :class:`Mamba2Mixer` mirrors ``vllm/model_executor/layers/mamba/mamba_mixer2.py``
  (``in_proj`` -> ``[z, xBC, dt]``, a causal conv over the ``xBC`` channels
  with SiLU, ``selective_state_update`` with ``dt_softplus``, ``dt_bias``,
  ``D`` and ``z`` gating, ``out_proj``);
* :class:`GatedDeltaNetMixer` mirrors the gated-delta-net layer of
  ``vllm/model_executor/models/qwen3_next.py`` (``in_proj`` -> ``q, k, v, a, b``,
  a causal conv over ``qkv`` with SiLU, ``g = -exp(A_log) softplus(a + dt_bias)``,
  ``beta = sigmoid(b)``, ``fused_recurrent_gated_delta_rule`` with the
  in-kernel L2 norm, ``out_proj``);
* :class:`TinyHybridModel` stacks them pre-norm with residuals (RMSNorm, as in
  ``Qwen3NextDecoderLayer``) between an embedding and an ``lm_head``.

Every request's recurrent memory lives in :class:`ModelState`: four pools
(Mamba conv, Mamba SSM, GDN conv, GDN recurrent) indexed by *block id*, the
way vLLM's Mamba KV-cache group stores states in blocks. Block 0 is the null
block: it starts as zeros and a correct engine never reads or writes it.

Three ways to run the model, and why there are three:

* :meth:`TinyHybridModel.forward_ref`: one request alone, token by token, pure
  torch (the kernels' ``*_ref`` functions). The yardstick.
* :meth:`TinyHybridModel.prefill`: a chunk of one request's prompt, eager, with
  the references run over the whole chunk at once (the "parallel" form), from
  and to pool slots.
* :meth:`TinyHybridModel.forward_decode`: the batched decode through the
  Triton kernels, the body vLLM captures in a FULL CUDA graph: no host
  synchronisation, no value-dependent Python control flow, allocations by
  shape only. This is where padded rows, null blocks and speculative columns
  meet the kernels' guards.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from mambalab.lab.bugs import BugConfig
from mambalab.constants import NULL_BLOCK_ID
from mambalab.device import DEVICE
from mambalab.kernels.causal_conv1d import causal_conv1d_update, make_conv_state
from mambalab.kernels.causal_conv1d_ref import causal_conv1d_update_ref
from mambalab.kernels.gated_delta_rule import fused_recurrent_gated_delta_rule
from mambalab.kernels.gated_delta_rule_ref import fused_recurrent_gated_delta_rule_ref
from mambalab.kernels.mamba_ssm import selective_state_update
from mambalab.kernels.mamba_ssm_ref import selective_state_update_ref

STATE_KEYS: tuple[str, ...] = ("mamba_conv", "mamba_ssm", "gdn_conv", "gdn_recurrent")
RMS_EPS = 1e-6


# ---------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class TinyHybridConfig:
    """Sizes of the tiny hybrid model (defaults: the workbook's model).

    ``num_speculative_tokens`` only widens the conv state: under speculative
    decoding a conv slot keeps ``width - 1 + num_spec`` inputs so the next step
    can start its window at whichever draft token was last accepted.
    """

    vocab_size: int = 32
    d_model: int = 16
    # Mamba2 mixer
    mamba_nheads: int = 2
    mamba_headdim: int = 4
    mamba_dstate: int = 4
    mamba_ngroups: int = 1
    conv_width: int = 4
    # gated delta net mixer
    gdn_num_k_heads: int = 1  # H
    gdn_num_v_heads: int = 2  # HV
    gdn_head_k_dim: int = 4  # K
    gdn_head_v_dim: int = 4  # V
    # model
    tie_word_embeddings: bool = False
    num_speculative_tokens: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.num_speculative_tokens <= 3:
            raise ValueError(f"num_speculative_tokens must be in 0..3, got {self.num_speculative_tokens}")
        if self.mamba_nheads % self.mamba_ngroups:
            raise ValueError("mamba_nheads must be a multiple of mamba_ngroups")
        if self.gdn_num_v_heads % self.gdn_num_k_heads:
            raise ValueError("gdn_num_v_heads must be a multiple of gdn_num_k_heads")
        if self.conv_width < 2:
            raise ValueError("conv_width must be >= 2")

    # -- derived sizes ---------------------------------------------------
    @property
    def mamba_d_inner(self) -> int:
        return self.mamba_nheads * self.mamba_headdim

    @property
    def mamba_conv_dim(self) -> int:
        """Channels of the Mamba conv: ``x`` plus ``B`` and ``C`` (the ``xBC`` of mamba_mixer2)."""
        return self.mamba_d_inner + 2 * self.mamba_ngroups * self.mamba_dstate

    @property
    def gdn_key_dim(self) -> int:
        return self.gdn_num_k_heads * self.gdn_head_k_dim

    @property
    def gdn_value_dim(self) -> int:
        return self.gdn_num_v_heads * self.gdn_head_v_dim

    @property
    def gdn_conv_dim(self) -> int:
        """Channels of the GDN conv: ``q``, ``k`` and ``v``."""
        return 2 * self.gdn_key_dim + self.gdn_value_dim

    @property
    def conv_state_len(self) -> int:
        return self.conv_width - 1 + self.num_speculative_tokens

    @property
    def decode_query_len(self) -> int:
        """Tokens per request in a decode step: ``1 + num_speculative_tokens``."""
        return 1 + self.num_speculative_tokens

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        """Per-slot logical shape of each state (conv states are ``(dim, state_len)``)."""
        return {
            "mamba_conv": (self.mamba_conv_dim, self.conv_state_len),
            "mamba_ssm": (self.mamba_nheads, self.mamba_headdim, self.mamba_dstate),
            "gdn_conv": (self.gdn_conv_dim, self.conv_state_len),
            "gdn_recurrent": (
                self.gdn_num_v_heads, self.gdn_head_v_dim, self.gdn_head_k_dim
            ),  # [HV, V, K], K innermost
        }


# ---------------------------------------------------------------------------
# State pools
# ---------------------------------------------------------------------------
class ModelState:
    """The per-layer state pools, indexed by block id (slot); block 0 is the null block.

    Mirrors the Mamba KV-cache group's tensors (``MambaSpec`` in
    ``vllm/v1/kv_cache_interface.py``; one block holds one request's conv and
    SSM state of every Mamba-like layer). Conv pools are stored
    dim-contiguous (:func:`~mambalab.kernels.causal_conv1d.make_conv_state`),
    the GDN pool ``[slots, HV, V, K]``. Everything starts as zeros.
    """

    def __init__(self, cfg: TinyHybridConfig, pools: dict[str, torch.Tensor]) -> None:
        if set(pools) != set(STATE_KEYS):
            raise ValueError(f"pools must have the keys {STATE_KEYS}, got {sorted(pools)}")
        self.cfg = cfg
        self.pools = pools
        self.num_blocks = next(iter(pools.values())).shape[0]

    @classmethod
    def allocate(
        cls,
        cfg: TinyHybridConfig,
        num_blocks: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> "ModelState":
        """Zeroed pools of ``num_blocks`` slots (block 0 included)."""
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1 (block 0 is the null block), got {num_blocks}")
        device = DEVICE if device is None else torch.device(device)
        shapes = cfg.state_shapes()
        pools = {
            "mamba_conv": make_conv_state(num_blocks, *shapes["mamba_conv"], dtype=dtype, device=device),
            "mamba_ssm": torch.zeros((num_blocks, *shapes["mamba_ssm"]), dtype=dtype, device=device),
            "gdn_conv": make_conv_state(num_blocks, *shapes["gdn_conv"], dtype=dtype, device=device),
            "gdn_recurrent": torch.zeros((num_blocks, *shapes["gdn_recurrent"]), dtype=dtype, device=device),
        }
        return cls(cfg, pools)

    # -- convenient attribute access ----------------------------------------
    @property
    def mamba_conv(self) -> torch.Tensor:
        return self.pools["mamba_conv"]

    @property
    def mamba_ssm(self) -> torch.Tensor:
        return self.pools["mamba_ssm"]

    @property
    def gdn_conv(self) -> torch.Tensor:
        return self.pools["gdn_conv"]

    @property
    def gdn_recurrent(self) -> torch.Tensor:
        return self.pools["gdn_recurrent"]

    @property
    def dtype(self) -> torch.dtype:
        return self.pools["mamba_ssm"].dtype

    @property
    def device(self) -> torch.device:
        return self.pools["mamba_ssm"].device

    # -- slot helpers (host side, for the engine and the tests) -------------
    def _check(self, slot: int) -> int:
        slot = int(slot)
        if not 0 <= slot < self.num_blocks:
            raise IndexError(f"slot {slot} is outside the pool [0, {self.num_blocks})")
        return slot

    def read_slot(self, slot: int) -> dict[str, torch.Tensor]:
        """A copy of every state in ``slot`` (contiguous, the pool's dtype)."""
        slot = self._check(slot)
        return {k: p[slot].clone(memory_format=torch.contiguous_format) for k, p in self.pools.items()}

    def write_slot(self, slot: int, state: dict[str, torch.Tensor]) -> None:
        """Copy ``state`` (all four keys) into ``slot``."""
        slot = self._check(slot)
        if set(state) != set(STATE_KEYS):
            raise ValueError(f"state must have the keys {STATE_KEYS}, got {sorted(state)}")
        for k, p in self.pools.items():
            p[slot].copy_(state[k])

    def copy_slot(self, src: int, dst: int) -> None:
        """Copy every state of slot ``src`` into slot ``dst``."""
        src, dst = self._check(src), self._check(dst)
        for p in self.pools.values():
            p[dst].copy_(p[src])

    def poison_slot(self, slot: int) -> None:
        """Fill ``slot`` with NaN: a freed block, so that a stale read shows."""
        slot = self._check(slot)
        for p in self.pools.values():
            p[slot].fill_(float("nan"))

    def zero_slot(self, slot: int) -> None:
        slot = self._check(slot)
        for p in self.pools.values():
            p[slot].zero_()

    def snapshot(self) -> dict[str, torch.Tensor]:
        """A copy of every whole pool (for bit-identity checks)."""
        return {k: p.clone() for k, p in self.pools.items()}

    def slot_is_zero(self, slot: int) -> bool:
        """True when every state of ``slot`` is exactly zero (the null block's invariant)."""
        slot = self._check(slot)
        return all(bool((p[slot] == 0).all()) for p in self.pools.values())


def zero_state(cfg: TinyHybridConfig, device: torch.device | str | None = None) -> dict[str, torch.Tensor]:
    """The state of a request that has seen no token (float32)."""
    device = DEVICE if device is None else torch.device(device)
    return {k: torch.zeros(s, dtype=torch.float32, device=device) for k, s in cfg.state_shapes().items()}


# ---------------------------------------------------------------------------
# Helpers shared by both mixers
# ---------------------------------------------------------------------------
def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + RMS_EPS) * weight


def _carry_state(pool: torch.Tensor, src: torch.Tensor, dst: torch.Tensor) -> None:
    """``pool[dst[r]] = pool[src[r]]`` for rows where both are live blocks (``> 0``).

    Used when a decode reads one slot and writes another (``mamba_cache_mode=
    "all"``) but the kernel takes a single index (conv, GDN): the state is
    moved first and the kernel then works in place on ``dst``. Rows with a
    null (or negative) index copy block 0 onto itself, a no-op, so the
    kernel's own guard still decides what padding does. Tensor ops only:
    nothing here reads an index value on the host.
    """
    src = src.to(torch.int64)
    dst = dst.to(torch.int64)
    live = (src > NULL_BLOCK_ID) & (dst > NULL_BLOCK_ID)
    src = torch.where(live, src, torch.zeros_like(src))
    dst = torch.where(live, dst, torch.zeros_like(dst))
    pool.index_copy_(0, dst, pool.index_select(0, src))


def _read_column(indices: torch.Tensor, num_accepted: torch.Tensor | None) -> torch.Tensor:
    """Column ``num_accepted - 1`` (clamped) of 2-D indices, or column 0: the slot a row starts from."""
    if num_accepted is None:
        return indices[:, 0]
    col = (num_accepted.to(torch.int64) - 1).clamp(0, indices.shape[1] - 1)
    return indices.gather(1, col[:, None])[:, 0]


def _randn(gen: torch.Generator, *shape: int, std: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=gen, dtype=torch.float32) * std


def _uniform(gen: torch.Generator, *shape: int, lo: float, hi: float) -> torch.Tensor:
    return lo + (hi - lo) * torch.rand(*shape, generator=gen, dtype=torch.float32)


@dataclass
class _DecodeArgs:
    """The slot bookkeeping of one decode step, shared by both mixers."""

    src: torch.Tensor  # (N,) or (N, C)
    dst: torch.Tensor  # (N,) or (N, C)
    num_accepted_tokens: torch.Tensor | None
    query_start_loc: torch.Tensor | None
    max_query_len: int
    bugs: BugConfig | None

    @property
    def spec(self) -> bool:
        return self.src.dim() == 2

    @property
    def carry(self) -> bool:
        """Whether the read slots differ from the written ones (decided by identity, not values)."""
        return self.src is not self.dst

    def single_index(self, pool: torch.Tensor) -> torch.Tensor:
        """Index for a kernel that reads and writes one array (conv, GDN); carries the state first.

        1-D: ``dst``. 2-D: ``dst`` itself (GDN reads column ``num_accepted - 1``,
        conv uses column 0), after moving the state the kernel will read from
        ``src``'s starting column to the same column of ``dst``.
        """
        if not self.carry:
            return self.dst
        if not self.spec:
            _carry_state(pool, self.src, self.dst)
        return self.dst

    def gdn_index(self, pool: torch.Tensor) -> torch.Tensor:
        if self.carry and self.spec:
            _carry_state(pool, _read_column(self.src, self.num_accepted_tokens),
                         _read_column(self.dst, self.num_accepted_tokens))
        return self.single_index(pool)

    def conv_index(self, pool: torch.Tensor) -> torch.Tensor:
        if self.carry and self.spec:
            # Conv history lives in column 0's block only (the offset is inside the slot).
            _carry_state(pool, self.src[:, 0], self.dst[:, 0])
        return self.single_index(pool)


# ---------------------------------------------------------------------------
# Mamba2 mixer
# ---------------------------------------------------------------------------
class Mamba2Mixer:
    """Mamba2 in miniature (``vllm/model_executor/layers/mamba/mamba_mixer2.py``).

    ``in_proj`` gives ``[z, xBC, dt]``; the conv runs over the ``xBC``
    channels; ``x`` is split into heads, ``B``/``C`` into groups; ``dt``,
    ``A``, ``dt_bias`` and ``D`` are one number per head, broadcast along the
    head dim (stride 0, as upstream's decode path passes them).
    """

    def __init__(self, cfg: TinyHybridConfig, gen: torch.Generator, device: torch.device) -> None:
        self.cfg = cfg
        d, nh, hd = cfg.d_model, cfg.mamba_nheads, cfg.mamba_headdim
        proj_out = cfg.mamba_d_inner + cfg.mamba_conv_dim + nh
        w = {
            "in_proj": _randn(gen, proj_out, d, std=d ** -0.5),
            "conv_weight": _randn(gen, cfg.mamba_conv_dim, cfg.conv_width, std=0.5),
            "conv_bias": _randn(gen, cfg.mamba_conv_dim, std=0.1),
            "A_log": torch.log(_uniform(gen, nh, lo=1.0, hi=4.0)),
            "dt_bias": _uniform(gen, nh, lo=-2.5, hi=-0.5),
            "D": _uniform(gen, nh, lo=0.5, hi=1.5),
            "out_proj": _randn(gen, d, cfg.mamba_d_inner, std=1.5 * cfg.mamba_d_inner ** -0.5),
        }
        for k, v in w.items():
            setattr(self, k, v.to(device))

    # -- pieces shared by the reference and the kernel path -----------------
    def split_projection(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``u (T, d_model)`` -> ``z (T, d_inner)``, ``xBC (T, conv_dim)``, ``dt (T, nheads)``."""
        cfg = self.cfg
        proj = u @ self.in_proj.t()
        return torch.split(proj, [cfg.mamba_d_inner, cfg.mamba_conv_dim, cfg.mamba_nheads], dim=-1)

    def ssu_args(self, xBC: torch.Tensor, z: torch.Tensor, dt: torch.Tensor) -> dict:
        """Keyword arguments of ``selective_state_update`` for tokens ``xBC`` (after the conv)."""
        cfg = self.cfg
        T = xBC.shape[0]
        nh, hd, ds, ng = cfg.mamba_nheads, cfg.mamba_headdim, cfg.mamba_dstate, cfg.mamba_ngroups
        x, B, C = torch.split(xBC, [cfg.mamba_d_inner, ng * ds, ng * ds], dim=-1)
        A = -torch.exp(self.A_log)
        return dict(
            x=x.reshape(T, nh, hd),
            dt=dt[:, :, None].expand(T, nh, hd),
            A=A[:, None, None].expand(nh, hd, ds),
            B=B.reshape(T, ng, ds),
            C=C.reshape(T, ng, ds),
            D=self.D[:, None].expand(nh, hd),
            dt_bias=self.dt_bias[:, None].expand(nh, hd),
            z=z.reshape(T, nh, hd),
            dt_softplus=True,
        )

    def finish(self, y: torch.Tensor) -> torch.Tensor:
        """``y (T, nheads, headdim)`` -> ``(T, d_model)``."""
        return y.reshape(y.shape[0], -1) @ self.out_proj.t()

    # -- reference: one request, a chunk of tokens, in place on slot ``slot`` --
    def forward_ref(self, u: torch.Tensor, state: ModelState, slot: int) -> torch.Tensor:
        T = u.shape[0]
        idx = torch.tensor([slot], dtype=torch.int32, device=u.device)
        z, xBC, dt = self.split_projection(u)
        xBC = causal_conv1d_update_ref(
            xBC, state.mamba_conv, self.conv_weight, self.conv_bias, "silu",
            conv_state_indices=idx,
            query_start_loc=torch.tensor([0, T], dtype=torch.int32, device=u.device),
            max_query_len=T,
        )
        a = self.ssu_args(xBC, z, dt)
        y = torch.zeros_like(a["x"])
        for t in range(T):  # the recurrence, one token at a time
            one = {k: (v[t : t + 1] if k in ("x", "dt", "B", "C", "z") else v) for k, v in a.items()}
            selective_state_update_ref(state.mamba_ssm, **one, state_batch_indices=idx, out=y[t : t + 1])
        return self.finish(y)

    # -- the batched decode through the kernels --------------------------------
    def forward_decode(self, u: torch.Tensor, state: ModelState, d: _DecodeArgs) -> torch.Tensor:
        z, xBC, dt = self.split_projection(u)
        conv_idx = d.conv_index(state.mamba_conv)
        xBC = causal_conv1d_update(
            xBC, state.mamba_conv, self.conv_weight, self.conv_bias, "silu",
            conv_state_indices=conv_idx,
            num_accepted_tokens=d.num_accepted_tokens,
            query_start_loc=d.query_start_loc,
            max_query_len=d.max_query_len,
            out=torch.zeros_like(xBC),
            bugs=d.bugs,
        )
        a = self.ssu_args(xBC, z, dt)
        y = selective_state_update(
            state.mamba_ssm, **a,
            state_batch_indices=d.src,
            dst_state_batch_indices=d.dst,
            out=torch.zeros_like(a["x"]),
            num_accepted_tokens=d.num_accepted_tokens,
            cu_seqlens=d.query_start_loc if d.spec else None,
            bugs=d.bugs,
        )
        return self.finish(y)


# ---------------------------------------------------------------------------
# Gated delta net mixer
# ---------------------------------------------------------------------------
class GatedDeltaNetMixer:
    """Qwen3-Next's gated delta net in miniature (``vllm/model_executor/models/qwen3_next.py``).

    ``in_proj`` gives ``q, k, v, a, b``; the conv runs over ``qkv``; the gates
    are ``g = -exp(A_log) * softplus(a + dt_bias)`` (a log-decay) and
    ``beta = sigmoid(b)``; the kernel L2-normalises ``q`` and ``k``. Grouped
    value attention: ``HV`` value heads share ``H`` query/key heads.
    """

    def __init__(self, cfg: TinyHybridConfig, gen: torch.Generator, device: torch.device) -> None:
        self.cfg = cfg
        d, HV = cfg.d_model, cfg.gdn_num_v_heads
        proj_out = cfg.gdn_conv_dim + 2 * HV
        w = {
            "in_proj": _randn(gen, proj_out, d, std=d ** -0.5),
            "conv_weight": _randn(gen, cfg.gdn_conv_dim, cfg.conv_width, std=0.5),
            "conv_bias": _randn(gen, cfg.gdn_conv_dim, std=0.1),
            "A_log": torch.log(_uniform(gen, HV, lo=0.5, hi=2.0)),
            "dt_bias": _uniform(gen, HV, lo=-1.5, hi=0.0),
            "out_proj": _randn(gen, d, cfg.gdn_value_dim, std=2.0 * cfg.gdn_value_dim ** -0.5),
        }
        for k, v in w.items():
            setattr(self, k, v.to(device))

    def split_projection(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``u (T, d_model)`` -> ``qkv (T, conv_dim)``, ``a (T, HV)``, ``b (T, HV)``."""
        cfg = self.cfg
        proj = u @ self.in_proj.t()
        HV = cfg.gdn_num_v_heads
        return torch.split(proj, [cfg.gdn_conv_dim, HV, HV], dim=-1)

    def gates(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``g = -exp(A_log) * softplus(a + dt_bias)``, ``beta = sigmoid(b)``."""
        g = -torch.exp(self.A_log) * F.softplus(a + self.dt_bias)
        return g, torch.sigmoid(b)

    def heads(self, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Token-major ``q, k (T, H, K)``, ``v (T, HV, V)`` from the conv output."""
        cfg = self.cfg
        T = qkv.shape[0]
        q, k, v = torch.split(qkv, [cfg.gdn_key_dim, cfg.gdn_key_dim, cfg.gdn_value_dim], dim=-1)
        H, HV = cfg.gdn_num_k_heads, cfg.gdn_num_v_heads
        return (q.reshape(T, H, cfg.gdn_head_k_dim), k.reshape(T, H, cfg.gdn_head_k_dim),
                v.reshape(T, HV, cfg.gdn_head_v_dim))

    def finish(self, o: torch.Tensor) -> torch.Tensor:
        return o.reshape(o.shape[0], -1) @ self.out_proj.t()

    def forward_ref(self, u: torch.Tensor, state: ModelState, slot: int) -> torch.Tensor:
        T = u.shape[0]
        idx = torch.tensor([slot], dtype=torch.int32, device=u.device)
        cu = torch.tensor([0, T], dtype=torch.int32, device=u.device)
        qkv, a, b = self.split_projection(u)
        qkv = causal_conv1d_update_ref(
            qkv, state.gdn_conv, self.conv_weight, self.conv_bias, "silu",
            conv_state_indices=idx, query_start_loc=cu, max_query_len=T,
        )
        q, k, v = self.heads(qkv)
        g, beta = self.gates(a, b)
        o, _ = fused_recurrent_gated_delta_rule_ref(
            q[None], k[None], v[None], g[None], beta[None],
            initial_state=state.gdn_recurrent, inplace_final_state=True,
            cu_seqlens=cu, ssm_state_indices=idx, use_qk_l2norm_in_kernel=True,
        )
        return self.finish(o[0])

    def forward_decode(self, u: torch.Tensor, state: ModelState, d: _DecodeArgs) -> torch.Tensor:
        qkv, a, b = self.split_projection(u)
        conv_idx = d.conv_index(state.gdn_conv)
        qkv = causal_conv1d_update(
            qkv, state.gdn_conv, self.conv_weight, self.conv_bias, "silu",
            conv_state_indices=conv_idx,
            num_accepted_tokens=d.num_accepted_tokens,
            query_start_loc=d.query_start_loc,
            max_query_len=d.max_query_len,
            out=torch.zeros_like(qkv),
            bugs=d.bugs,
        )
        q, k, v = self.heads(qkv)
        g, beta = self.gates(a, b)
        idx = d.gdn_index(state.gdn_recurrent)
        if d.spec:  # varlen: one packed sequence axis, 2-D indices, one slot per token
            o, _ = fused_recurrent_gated_delta_rule(
                q[None], k[None], v[None], g[None], beta[None],
                initial_state=state.gdn_recurrent, inplace_final_state=True,
                cu_seqlens=d.query_start_loc, ssm_state_indices=idx,
                num_accepted_tokens=d.num_accepted_tokens, use_qk_l2norm_in_kernel=True,
                bugs=d.bugs,
            )
            o = o[0]
            # Tokens past query_start_loc[-1] (CUDA-graph padding) belong to no
            # sequence and are left unwritten by the kernel: make them zeros.
            T = o.shape[0]
            valid = torch.arange(T, device=o.device) < d.query_start_loc[-1]
            o = torch.where(valid[:, None, None], o, torch.zeros_like(o))
        else:  # one token per row: B = N, T = 1
            o, _ = fused_recurrent_gated_delta_rule(
                q[:, None], k[:, None], v[:, None], g[:, None], beta[:, None],
                initial_state=state.gdn_recurrent, inplace_final_state=True,
                ssm_state_indices=idx, use_qk_l2norm_in_kernel=True, bugs=d.bugs,
            )
            o = o[:, 0]
        return self.finish(o)


# ---------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------
class TinyHybridModel:
    """Embedding -> [RMSNorm -> Mamba2 mixer] + residual -> [RMSNorm -> GDN mixer] + residual
    -> RMSNorm -> lm_head.

    Weights are drawn from ``torch.Generator().manual_seed(cfg.seed)`` on the
    CPU and then moved, so one seed gives the same model on every device.
    The scales keep greedy decoding robust: logits spread over several units,
    mixers strong enough against the residual that a prompt does not
    collapse into one repeated token.
    """

    def __init__(self, cfg: TinyHybridConfig | None = None, device: torch.device | str | None = None) -> None:
        self.cfg = cfg = cfg if cfg is not None else TinyHybridConfig()
        self.device = DEVICE if device is None else torch.device(device)
        gen = torch.Generator().manual_seed(cfg.seed)
        d = cfg.d_model
        self.embed = _randn(gen, cfg.vocab_size, d).to(self.device)
        self.mamba = Mamba2Mixer(cfg, gen, self.device)
        self.gdn = GatedDeltaNetMixer(cfg, gen, self.device)
        self.norm_mamba = (1.0 + _randn(gen, d, std=0.1)).to(self.device)
        self.norm_gdn = (1.0 + _randn(gen, d, std=0.1)).to(self.device)
        self.norm_final = (1.0 + _randn(gen, d, std=0.1)).to(self.device)
        if cfg.tie_word_embeddings:
            self.lm_head = self.embed
        else:
            self.lm_head = _randn(gen, cfg.vocab_size, d, std=1.0).to(self.device)

    # -- pieces ---------------------------------------------------------------
    def _embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(token_ids.to(torch.int64), self.embed)

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        return rms_norm(h, self.norm_final) @ self.lm_head.t()

    def _ids(self, token_ids) -> torch.Tensor:
        if isinstance(token_ids, torch.Tensor):
            return token_ids.to(self.device, torch.int64).reshape(-1)
        return torch.tensor(list(token_ids), dtype=torch.int64, device=self.device)

    def _chunk_ref(self, ids: torch.Tensor, state: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        """Run a chunk of one request with the references, layer by layer over the whole chunk."""
        pool = ModelState.allocate(self.cfg, 2, torch.float32, self.device)  # 0: null, 1: this request
        pool.write_slot(1, state)
        h = self._embed(ids)
        h = h + self.mamba.forward_ref(rms_norm(h, self.norm_mamba), pool, 1)
        h = h + self.gdn.forward_ref(rms_norm(h, self.norm_gdn), pool, 1)
        return self._logits(h), pool.read_slot(1)

    # -- the three ways to run --------------------------------------------------
    def forward_ref(
        self, token_ids, state: dict[str, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One request alone, one token at a time, pure torch: ``(logits [T, vocab], final state)``.

        ``state`` is a dict with the keys of :data:`STATE_KEYS` (as returned by
        this method or :meth:`ModelState.read_slot`); None means zeros.
        The per-request yardstick every engine run is compared with.
        """
        ids = self._ids(token_ids)
        st = zero_state(self.cfg, self.device) if state is None else {
            k: v.to(self.device, torch.float32) for k, v in state.items()
        }
        rows = []
        for t in range(ids.shape[0]):
            logits, st = self._chunk_ref(ids[t : t + 1], st)
            rows.append(logits)
        logits = torch.cat(rows) if rows else torch.empty(0, self.cfg.vocab_size, device=self.device)
        return logits, st

    def prefill(
        self,
        token_ids,
        state_slot_src: int,
        state_slot_dst: int,
        pools: ModelState,
        has_initial_state: bool,
    ) -> torch.Tensor:
        """A chunk of one request's prompt (eager, references): logits of its last token ``[vocab]``.

        Reads the initial state from pool slot ``state_slot_src`` when
        ``has_initial_state`` (a later chunk of a chunked prefill, or a prefix
        cache hit), else starts from zeros (``has_initial_states_p`` of
        ``mamba_attn.py``), and writes the final state to ``state_slot_dst``.
        The whole chunk goes through each layer at once: "the parallel form".
        """
        ids = self._ids(token_ids)
        if ids.numel() == 0:
            raise ValueError("prefill needs at least one token")
        if has_initial_state:
            st = {k: v.float() for k, v in pools.read_slot(state_slot_src).items()}
        else:
            st = zero_state(self.cfg, self.device)
        logits, st = self._chunk_ref(ids, st)
        pools.write_slot(state_slot_dst, st)
        return logits[-1]

    def forward_decode(
        self,
        input_ids: torch.Tensor,
        pools: ModelState,
        src_indices: torch.Tensor,
        dst_indices: torch.Tensor | None = None,
        num_accepted_tokens: torch.Tensor | None = None,
        query_start_loc: torch.Tensor | None = None,
        bugs: BugConfig | None = None,
    ) -> torch.Tensor:
        """The batched decode through the Triton kernels: ``logits [num_tokens, vocab]``.

        * Plain decode: ``src_indices``/``dst_indices`` 1-D ``(N,)``, one token per
          row (``num_tokens == N``).
        * Speculative decode: 2-D ``(N, C)`` indices with ``query_start_loc
          (N + 1,)`` (rows of up to ``1 + num_spec`` tokens) and
          ``num_accepted_tokens (N,)``: each row starts from its column
          ``num_accepted - 1`` and the state after its token ``t`` goes to
          column ``t``; the conv keeps its history in column 0's block.

        ``dst_indices`` None or the very same tensor: read and write in place
        ("none" mode). A different tensor ("all" mode): the SSU kernel reads
        ``src`` and writes ``dst``; conv and GDN states are first moved from
        ``src`` to ``dst`` by a guarded tensor copy (those kernels take one
        index array). Null rows (index 0) get zero mixer output; their logits
        mean nothing. ``bugs`` goes to every kernel (default: the active
        configuration).

        CUDA-graph safe: shapes decide everything, no value is read on the
        host, allocations depend on shapes only.
        """
        cfg = self.cfg
        if dst_indices is None:
            dst_indices = src_indices
        if src_indices.dim() not in (1, 2) or dst_indices.dim() != src_indices.dim():
            raise ValueError(
                f"src_indices/dst_indices must both be 1-D (N,) or 2-D (N, C), got "
                f"{tuple(src_indices.shape)} and {tuple(dst_indices.shape)}"
            )
        if src_indices.shape[0] != dst_indices.shape[0]:
            raise ValueError("src_indices and dst_indices must have one row per request each")
        num_tokens = input_ids.shape[0]
        if src_indices.dim() == 1:
            if num_accepted_tokens is not None or query_start_loc is not None:
                raise ValueError("num_accepted_tokens/query_start_loc need 2-D (N, C) indices")
            if num_tokens != src_indices.shape[0]:
                raise ValueError(
                    f"plain decode is one token per row: {num_tokens} tokens for {src_indices.shape[0]} rows"
                )
        else:
            if query_start_loc is None or query_start_loc.shape != (src_indices.shape[0] + 1,):
                raise ValueError("2-D indices need query_start_loc of shape (N + 1,)")
        d = _DecodeArgs(
            src=src_indices, dst=dst_indices, num_accepted_tokens=num_accepted_tokens,
            query_start_loc=query_start_loc if src_indices.dim() == 2 else None,
            max_query_len=cfg.decode_query_len, bugs=bugs,
        )
        h = self._embed(input_ids)
        h = h + self.mamba.forward_decode(rms_norm(h, self.norm_mamba), pools, d)
        h = h + self.gdn.forward_decode(rms_norm(h, self.norm_gdn), pools, d)
        return self._logits(h)

    # -- conveniences for the workbook -------------------------------------------
    def greedy_ref(self, prompt, max_new_tokens: int) -> list[int]:
        """Greedy continuation of ``prompt`` with :meth:`forward_ref` (the expected tokens)."""
        logits, st = self.forward_ref(prompt)
        out = []
        nxt = int(logits[-1].argmax())
        for _ in range(max_new_tokens):
            out.append(nxt)
            logits, st = self.forward_ref([nxt], st)
            nxt = int(logits[-1].argmax())
        return out


__all__ = [
    "STATE_KEYS",
    "TinyHybridConfig",
    "ModelState",
    "TinyHybridModel",
    "Mamba2Mixer",
    "GatedDeltaNetMixer",
    "zero_state",
    "rms_norm",
]
