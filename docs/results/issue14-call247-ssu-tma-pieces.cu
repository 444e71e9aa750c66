// Issue 14, call 247 (H200): the SSU's CUDA kernel as shipped plus entries whose one-warp CTA brings its rows in two
// or four bulk copies, all before PDL's wait, each counted by its own barrier, so that the update of the first rows
// starts before the last have arrived (call 246: two copies in the 32-row CTA, bf16 at 9 1.081 -> 1.099x):
// ssu_tma_<state><act>_r<ROWS>_z<Z>_p<PIECES>, every state / activation dtype, 16 and 32 rows.
#include "../../lib/mambalab/kernels/cuda/ssu_decode_tma.cu"

#define SSU_PIECES_ENTRY(SN, S, AN, A, R, Z, P)                                                       \
    extern "C" __global__ void __launch_bounds__(32)                                                  \
        ssu_tma_##SN##AN##_r##R##_z##Z##_p##P(const __grid_constant__ SsuTmaParams p) {               \
        ssu_tma_body<S, A, R, 1, true, Z, P, P>(p);                                                   \
    }
#define SSU_PIECES_TYPES(SN, S, AN, A)                                                                \
    SSU_PIECES_ENTRY(SN, S, AN, A, 16, 0, 2) SSU_PIECES_ENTRY(SN, S, AN, A, 16, 1, 2)                 \
    SSU_PIECES_ENTRY(SN, S, AN, A, 16, 0, 4) SSU_PIECES_ENTRY(SN, S, AN, A, 16, 1, 4)                 \
    SSU_PIECES_ENTRY(SN, S, AN, A, 32, 0, 2) SSU_PIECES_ENTRY(SN, S, AN, A, 32, 1, 2)                 \
    SSU_PIECES_ENTRY(SN, S, AN, A, 32, 0, 4) SSU_PIECES_ENTRY(SN, S, AN, A, 32, 1, 4)
SSU_PIECES_TYPES(b, bf16_t, b, bf16_t)
SSU_PIECES_TYPES(b, bf16_t, f, float)
SSU_PIECES_TYPES(f, float, b, bf16_t)
SSU_PIECES_TYPES(f, float, f, float)
