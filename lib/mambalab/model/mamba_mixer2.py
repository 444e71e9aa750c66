"""The Mamba2 mixer: ``vllm/model_executor/layers/mamba/mamba_mixer2.py`` in miniature (``in_proj``
-> ``[z, xBC, dt]``, a causal conv over ``xBC`` with SiLU, ``selective_state_update`` with
``dt_softplus``, ``dt_bias``, ``D`` and ``z`` gating, ``out_proj``), with a pure-torch reference
path and the batched decode through the Triton kernels."""

from __future__ import annotations

import torch

from mambalab.kernels.causal_conv1d import causal_conv1d_update
from mambalab.kernels.causal_conv1d_ref import causal_conv1d_update_ref
from mambalab.kernels.mamba_ssm import selective_state_update
from mambalab.kernels.mamba_ssm_ref import selective_state_update_ref
from mambalab.model.config import TinyHybridConfig
from mambalab.model.decode_slots import _DecodeArgs
from mambalab.model.layers import _randn, _uniform
from mambalab.model.state import ModelState


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
        cfg = self.cfg
        # The SSU's output buffer is made (zeroed) before the conv, as vLLM's layer preallocates it: nothing
        # runs between the conv and the SSU, so the SSU may start as the conv lets it (PDL).
        y = torch.zeros(xBC.shape[0], cfg.mamba_nheads, cfg.mamba_headdim, dtype=xBC.dtype, device=xBC.device)
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
            out=y,
            num_accepted_tokens=d.num_accepted_tokens,
            cu_seqlens=d.query_start_loc if d.spec else None,
            bugs=d.bugs,
            # The promise holds here: the kernel before the SSU is the conv (this layer's reshapes are views),
            # which writes neither the SSM state pool nor the index tensors, filled by the metadata builder
            # before the forward. The conv lets its dependents start at once (PDL's trigger, to 128 requests),
            # so the SSU's early loads may overlap it; the conv itself started only after the torch ops before
            # it (launched without PDL, they never let it start early) had ended.
            early_state_load=True,
        )
        return self.finish(y)
