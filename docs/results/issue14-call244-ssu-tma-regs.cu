// Issue 14, call 244 (H200): the SSU's CUDA kernel as shipped plus bf16 entries whose register count is capped by
// __launch_bounds__' minimum CTAs an SM (28: 72 registers; 32: 64, with a few spilled to the stack), so that more
// one-warp CTAs are resident at once: at 16 requests x 128 heads the 32-row form launches 4,096 CTAs, and at 80-88
// registers an H200 holds some 3,000.
#include "../../lib/mambalab/kernels/cuda/ssu_decode_tma.cu"

#define SSU_TMA_CAP_ENTRY(R, Z, MINB)                                                                 \
    extern "C" __global__ void __launch_bounds__(32, MINB)                                            \
        ssu_tma_bb_r##R##_z##Z##_mb##MINB(const __grid_constant__ SsuTmaParams p) {                   \
        ssu_tma_body<bf16_t, bf16_t, R, 1, true, Z, 1, 1>(p);                                         \
    }

SSU_TMA_CAP_ENTRY(32, 0, 28)
SSU_TMA_CAP_ENTRY(32, 1, 28)
SSU_TMA_CAP_ENTRY(32, 0, 32)
SSU_TMA_CAP_ENTRY(32, 1, 32)
SSU_TMA_CAP_ENTRY(16, 0, 32)
SSU_TMA_CAP_ENTRY(16, 1, 32)
