"""The decode kernels' shapes in models people serve, one tensor-parallel rank's share of them.

The bench times the kernels at one shape each (:mod:`mambalab.gpu.bench_cases`: NemotronH-8B's Mamba2 head,
Qwen3-Next's gated delta net, both whole on one GPU). A served model may differ in two ways the kernels' launch rules
see: its head (``headdim``, ``dstate``) and, under tensor parallelism, the heads a rank holds. vLLM shards both
layers by heads: ``mamba_mixer2.py`` gives each rank ``nheads / tp`` heads and ``n_groups / tp`` groups (a single
group is repeated on every rank, ``extra_groups_for_head_shards``); ``qwen3_next.py`` gives each rank ``num_k_heads
/ tp`` key and ``num_v_heads / tp`` value heads. The conv's channels are the rank's ``x``, ``B`` and ``C`` (Mamba2)
or ``q``, ``k`` and ``v`` (GDN). Not a mirror of an upstream file.

Sources (each model's ``config.json`` on the Hugging Face hub): NemotronH-8B ``nvidia/Nemotron-H-8B-Base-8K``
(``mamba_num_heads`` 128, ``mamba_head_dim`` 64, ``ssm_state_size`` 128, ``n_groups`` 8); Nemotron Nano 2
``nvidia/NVIDIA-Nemotron-Nano-9B-v2`` (128, 80, 128, 8); Falcon-H1 ``tiiuae/Falcon-H1-1.5B-Base`` (``mamba_n_heads``
48, ``mamba_d_head`` 64, ``mamba_d_state`` 256, ``mamba_n_groups`` 1) and ``tiiuae/Falcon-H1-7B-Base`` (24, 128,
256, 1); Qwen3-Next ``Qwen/Qwen3-Next-80B-A3B-Instruct`` (``linear_num_key_heads`` 16, ``linear_num_value_heads`` 32,
key and value head dims 128).
"""

from __future__ import annotations

from typing import NamedTuple


class MambaModel(NamedTuple):
    """A Mamba2 mixer's shape, the whole model's."""

    nheads: int
    headdim: int
    dstate: int
    ngroups: int


class GDNModel(NamedTuple):
    """A gated delta net's shape, the whole model's: ``H`` key heads, ``HV`` value heads of ``K`` x ``V``."""

    H: int
    HV: int
    K: int
    V: int


MAMBA_MODELS: dict[str, MambaModel] = {
    "NemotronH-8B": MambaModel(128, 64, 128, 8),
    "Nemotron-Nano-9B-v2": MambaModel(128, 80, 128, 8),
    "Falcon-H1-1.5B": MambaModel(48, 64, 256, 1),
    "Falcon-H1-7B": MambaModel(24, 128, 256, 1),
}
GDN_MODELS: dict[str, GDNModel] = {"Qwen3-Next-80B-A3B": GDNModel(16, 32, 128, 128)}
CONV_WIDTH = 4  # every model above: conv_kernel / mamba_d_conv / linear_conv_kernel_dim


def _share(n: int, tp: int, what: str) -> int:
    if tp < 1 or n % tp:
        raise ValueError(f"{what}={n} does not split over tp={tp}")
    return n // tp


def ssu_shape(model: str, tp: int = 1) -> dict:
    """One rank's ``selective_state_update`` shape (``nheads``, ``headdim``, ``dstate``, ``ngroups``), as
    :data:`mambalab.gpu.bench_cases.SSU` spells it."""
    m = MAMBA_MODELS[model]
    groups = 1 if m.ngroups == 1 else _share(m.ngroups, tp, f"{model}'s n_groups")
    return dict(nheads=_share(m.nheads, tp, f"{model}'s nheads"), headdim=m.headdim, dstate=m.dstate, ngroups=groups)


def gdn_shape(model: str, tp: int = 1) -> dict:
    """One rank's GDN shape (``H``, ``HV``, ``K``, ``V``), as :data:`mambalab.gpu.bench_cases.GDN` spells it."""
    m = GDN_MODELS[model]
    return dict(H=_share(m.H, tp, f"{model}'s key heads"), HV=_share(m.HV, tp, f"{model}'s value heads"), K=m.K, V=m.V)


def conv_shape(model: str, tp: int = 1) -> dict:
    """One rank's ``causal_conv1d_update`` shape (``dim`` channels, ``width``) before the SSU or the GDN of
    ``model``, as :data:`mambalab.gpu.bench_cases.CONV` spells it."""
    if model in GDN_MODELS:
        s = gdn_shape(model, tp)
        return dict(dim=2 * s["H"] * s["K"] + s["HV"] * s["V"], width=CONV_WIDTH)
    s = ssu_shape(model, tp)
    return dict(dim=s["nheads"] * s["headdim"] + 2 * s["ngroups"] * s["dstate"], width=CONV_WIDTH)


__all__ = ["MambaModel", "GDNModel", "MAMBA_MODELS", "GDN_MODELS", "ssu_shape", "gdn_shape", "conv_shape"]
