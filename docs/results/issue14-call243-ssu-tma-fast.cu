// Issue 14, call 243 (H200): the SSU's CUDA kernel as shipped (its entries' SASS unchanged by the FAST switch), plus
// entries with FAST: the softplus, exp(A dt) and the gate's sigmoid on the approximate exp / log (one MUFU
// instruction each, as the Triton kernel's FAST_SOFTPLUS and Triton's own exp), to shorten the chain from the token's
// dt to the first state update.
#include "../../lib/mambalab/kernels/cuda/ssu_decode_tma.cu"

#define SSU_TMA_FAST_ENTRY(SN, S, AN, A, R, Z)                                                        \
    extern "C" __global__ void __launch_bounds__(32)                                                  \
        ssu_tma_##SN##AN##_r##R##_z##Z##_fast(const __grid_constant__ SsuTmaParams p) {               \
        ssu_tma_body<S, A, R, 1, true, Z, 1, 1, true>(p);                                             \
    }
#define SSU_TMA_FAST_TYPES(SN, S, AN, A)                                                              \
    SSU_TMA_FAST_ENTRY(SN, S, AN, A, 16, 0)                                                           \
    SSU_TMA_FAST_ENTRY(SN, S, AN, A, 16, 1)                                                           \
    SSU_TMA_FAST_ENTRY(SN, S, AN, A, 32, 0)                                                           \
    SSU_TMA_FAST_ENTRY(SN, S, AN, A, 32, 1)

SSU_TMA_FAST_TYPES(b, bf16_t, b, bf16_t)
SSU_TMA_FAST_TYPES(b, bf16_t, f, float)
SSU_TMA_FAST_TYPES(f, float, b, bf16_t)
SSU_TMA_FAST_TYPES(f, float, f, float)
