// Issue 14, call 233: the TMA kernel with the token floor's fastest shape (call 228: a slot copy whose stores wait on a
// token read after PDL's wait loses nothing when its odd blocks read their state after the wait). The shipped body in
// one-warp CTAs of 16 or 32 rows; the odd CTAs (blockIdx.x, the row block) read their state after the wait, the even
// ones before it, so state bytes move while the even CTAs wait on their token.
#include "../../lib/mambalab/kernels/cuda/gdn_packed_decode_tma.cu"

GDN_TMA_ENTRY(16, 1, 1, 0, 1)

#define GDN_TMA_ENTRY_ODD(R)                                                                        \
    extern "C" __global__ void __launch_bounds__(32) gdn_tma_r##R##_w1_odd(                          \
        const __grid_constant__ GdnTmaParams p) {                                                   \
        if (blockIdx.x & 1)                                                                         \
            gdn_tma_body<R, 1, false, false, 1>(p);                                                 \
        else                                                                                        \
            gdn_tma_body<R, 1, true, false, 1>(p);                                                  \
    }

GDN_TMA_ENTRY_ODD(16)
GDN_TMA_ENTRY_ODD(32)
