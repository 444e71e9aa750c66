"""The tiny hybrid model's sizes: :class:`TinyHybridConfig`, the miniature of the model config vLLM
reads from a checkpoint (``Qwen3NextConfig`` with its Mamba2 counterpart's fields, as
``vllm/model_executor/models/qwen3_next.py`` and ``mamba_mixer2.py`` consume them), with the
derived sizes of each state."""

from __future__ import annotations

from dataclasses import dataclass


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
