"""Triton decode-state kernels (and two CUDA kernels, for the GDN and SSU decode), each with a pure-torch reference
beside it.

The functions are exported at package level, as ``fla.ops.gated_delta_rule``
does, so a user swapping vLLM's kernel for ours imports the function:

    from mambalab.kernels import selective_state_update

| ours | vLLM |
|---|---|
| ``mamba_ssm.py`` / ``mamba_ssm_ref.py`` | ``vllm/model_executor/layers/mamba/ops/mamba_ssm.py`` |
| ``causal_conv1d.py`` / ``causal_conv1d_ref.py`` | ``vllm/model_executor/layers/mamba/ops/causal_conv1d.py`` |
| ``gated_delta_rule.py`` / ``gated_delta_rule_ref.py`` | ``vllm/third_party/flash_linear_attention/ops/fused_recurrent.py`` |
| ``gated_delta_rule_packed.py`` | its ``fused_recurrent_gated_delta_rule_packed_decode`` (Qwen3-Next's decode) |
| ``gated_delta_rule_tma.py`` / ``cuda/gdn_packed_decode_tma.cu`` | (ours) that decode step in CUDA with TMA bulk copies: the H200's from 4 to 16 requests |
| ``mamba_ssm_tma.py`` / ``cuda/ssu_decode_tma.cu`` | (ours) the SSU's one-token step in CUDA with TMA bulk copies: the H200's at 1-12 requests (bf16; fp32 at 1) |
| ``cuda_driver.py`` / ``cuda/tma_ptx.cuh`` | (ours) building and launching those two (nvcc, the driver API), and their shared PTX |
| ``common.py`` | (ours) the guard every kernel shares, one per ``GuardMode`` |
| ``*_requests.py`` | (ours) the CPU interpreter's one-token launches: every live request in one program |
| ``testing.py`` | (ours) poison, slot indices and tolerances for proving a kernel correct |
"""

from mambalab.kernels.causal_conv1d import causal_conv1d_update, make_conv_state
from mambalab.kernels.causal_conv1d_ref import causal_conv1d_update_ref
from mambalab.kernels.gated_delta_rule import fused_recurrent_gated_delta_rule, fused_sigmoid_gating_delta_rule_update
from mambalab.kernels.gated_delta_rule_packed import (fused_recurrent_gated_delta_rule_packed_decode,
                                                      fused_recurrent_gated_delta_rule_packed_decode_ref)
from mambalab.kernels.gated_delta_rule_ref import (fused_recurrent_gated_delta_rule_ref,
                                                   fused_sigmoid_gating_delta_rule_update_ref)
from mambalab.kernels.mamba_ssm import selective_state_update
from mambalab.kernels.mamba_ssm_ref import selective_state_update_ref

__all__ = [
    "causal_conv1d_update", "causal_conv1d_update_ref", "make_conv_state",
    "fused_recurrent_gated_delta_rule", "fused_recurrent_gated_delta_rule_ref",
    "fused_sigmoid_gating_delta_rule_update", "fused_sigmoid_gating_delta_rule_update_ref",
    "fused_recurrent_gated_delta_rule_packed_decode", "fused_recurrent_gated_delta_rule_packed_decode_ref",
    "selective_state_update", "selective_state_update_ref",
]
