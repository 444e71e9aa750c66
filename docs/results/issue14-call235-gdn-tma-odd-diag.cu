// Issue 14, call 235: where the 2.8 us between the GDN bf16's TMA kernel in the floor's shape (one warp, 16 rows, the
// odd row blocks' state after PDL's wait: call 233's "r16o", 37.55 us at 64) and the token floor in that shape (call
// 234: 34.72 us) go. Diagnostic kernels in that shape (the same grid and deferral), each doing less than the decode:
//   ep81 "nomath":     the state in by one bulk copy, back unchanged by the decode's own stores; zero outputs
//   ep82 "nomath_tok": as nomath, with the token's loads (q, k, v, gates: load_token) after the wait
//   ep83 "notoken":    the whole update, on a token made of constants (no loads but the index and the state)
//   ep84 "regs":       as nomath, the rows through registers (plain loads) in place of the bulk copy
// Their results are wrong on purpose (the agreement gate fails for them); only their time is read.
#include "issue14-call233-gdn-tma-odd.cu"

namespace {

constexpr int DIAG_ROWS = 16, DIAG_STEPS = DIAG_ROWS / 4;

__device__ __forceinline__ void rows_to_regs(const bf16_t* rows, uint4* w, int lane) {
    const int c0 = (lane & 7) * 8;
#pragma unroll
    for (int s = 0; s < DIAG_STEPS; ++s) {
        const bf16_t* src = rows + (s * 4 + (lane >> 3)) * K + c0;
        w[2 * s] = *reinterpret_cast<const uint4*>(src);
        w[2 * s + 1] = *reinterpret_cast<const uint4*>(src + 64);
    }
}

template <int MODE>
__device__ __forceinline__ void gdn_odd_diag_body(const GdnTmaParams& p) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) u64 bar;
    const int i_v = blockIdx.x, hv = blockIdx.y, n = blockIdx.z, lane = threadIdx.x & 31;
    const bool early = (i_v & 1) == 0;
    const int row0 = i_v * DIAG_ROWS, c0 = (lane & 7) * 8;
    const long long slot = p.idx[n];
    const bool live = slot > (long long)p.null_block_id;
    bf16_t* rows = p.state + ((slot * p.HV + hv) * V + row0) * K;
    const u32 b0 = smem_u32(&bar);
    uint4 w[2 * DIAG_STEPS];
    if (MODE == 4) {
        if (live && early) rows_to_regs(rows, w, lane);
    } else if (live && lane == 0) {
        bar_init(b0);
        if (early) bulk_load(smem_u32(smem), rows, DIAG_ROWS * K * 2, b0);
    }
    __syncwarp();
    grid_launch_dependents();
    grid_wait();
    bf16_t* o_rows = p.out + ((long long)n * p.HV + hv) * V + row0;
    if (!live) {
        if (lane < DIAG_ROWS) o_rows[lane] = 0;
        return;
    }
    if (!early) {
        if (MODE == 4) rows_to_regs(rows, w, lane);
        else if (lane == 0) bulk_load(smem_u32(smem), rows, DIAG_ROWS * K * 2, b0);
    }
    if (MODE == 3) {
        Token t;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            t.q[j] = 0.01f * (j + 1 + (lane & 7));
            t.k[j] = 0.02f * (16 - j);
        }
        t.kq = 0.1f; t.decay = 0.9f; t.beta = 0.5f; t.v_mine = 0.01f * lane;
        update_rows<DIAG_STEPS, 1, false>(t, smem, rows, o_rows, b0, 0, lane);
        return;
    }
    float extra = 0.f;
    if (MODE == 2) {
        Token t;
        load_token(p, n, hv, row0, lane, DIAG_ROWS, t);
        extra = t.decay + t.kq + t.v_mine;
#pragma unroll
        for (int j = 0; j < 16; ++j) extra = fmaf(t.q[j], t.k[j], extra);
    }
    if (MODE != 4) bar_wait(b0, 0);
#pragma unroll
    for (int s = 0; s < DIAG_STEPS; ++s) {
        const int r = s * 4 + (lane >> 3);
        unsigned char* dst = reinterpret_cast<unsigned char*>(rows + r * K + c0);
        if (MODE == 4) {
            *reinterpret_cast<uint4*>(dst) = w[2 * s];
            *reinterpret_cast<uint4*>(dst + 128) = w[2 * s + 1];
        } else {
            const unsigned char* srow = smem + r * K * 2 + c0 * 2;
            *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(srow);
            *reinterpret_cast<uint4*>(dst + 128) = *reinterpret_cast<const uint4*>(srow + 128);
        }
    }
    if (lane < DIAG_ROWS) o_rows[lane] = (bf16_t)(pack_bf16x2(extra, 0.f) & 0xffffu);
}

}  // namespace

#define GDN_ODD_DIAG_ENTRY(MODE)                                                                    \
    extern "C" __global__ void __launch_bounds__(32)                                                \
        gdn_tma_r16_w1_e1_s0_p1_ep8##MODE(const __grid_constant__ GdnTmaParams p) {                 \
        gdn_odd_diag_body<MODE>(p);                                                                 \
    }

GDN_ODD_DIAG_ENTRY(1)
GDN_ODD_DIAG_ENTRY(2)
GDN_ODD_DIAG_ENTRY(3)
GDN_ODD_DIAG_ENTRY(4)
