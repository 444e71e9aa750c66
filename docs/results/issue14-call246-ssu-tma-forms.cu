// Issue 14, call 246 (H200): the SSU's CUDA kernel as shipped plus three more forms of it, bf16 entries unless said:
//   _w2:   32-row CTAs on two warps of 16 rows (one bulk copy a warp, both before the wait): the 16-row CTA's work
//          a warp with the 32-row CTA's count of CTAs, for 9-16 requests;
//   _p2:   32-row one-warp CTAs whose rows come in two bulk copies, both before the wait, each with its barrier, so
//          that the update starts when the first 16 rows are in;
//   _lean: the kernel as first committed (f81ecee, call 239's "rule"): the same update without the warp / piece
//          switches, for every state and activation dtype, to time it again beside the shipped body and to profile
//          both (call 239 measured it slower in the bench and faster after a torch kernel at batch 1).
#include "../../lib/mambalab/kernels/cuda/ssu_decode_tma.cu"

namespace {

template <typename S, typename A, int ROWS, bool HAS_Z>
__device__ __forceinline__ void ssu_lean_body(const SsuTmaParams& p) {
    constexpr int RUN = Elem<S>::RUN, NRUN = 16 / RUN, STEPS = ROWS / 4;
    constexpr u32 ROW_BYTES = N * sizeof(S);
    static_assert(ROWS % 4 == 0 && ROWS <= 32, "4 rows a step, at most a lane a row");
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) u64 bar_mem;

    const int i_m = blockIdx.x, h = blockIdx.y, n = blockIdx.z;
    const int lane = threadIdx.x;
    const int row0 = i_m * ROWS;
    const long long slot = p.idx[n];
    const bool live = slot != (long long)p.null_block_id;
    S* rows = (S*)p.state + slot * p.s_state_slot + h * p.s_state_head + (long long)row0 * N;
    const u32 bar = smem_u32(&bar_mem);
    if (live && lane == 0) {
        bar_init(bar);
        bulk_load(smem_u32(smem), rows, ROWS * ROW_BYTES, bar);
    }
    // the head's weights before the wait too (no kernel writes them)
    const float Ah = p.A[h * p.s_A_head];
    const float dtb = p.has_dt_bias ? p.dt_bias[h * p.s_dtb_head] : 0.f;
    const float Dh = p.has_D ? p.D[h * p.s_D_head] : 0.f;
    __syncwarp();  // the barrier initialised before any lane waits on it
    grid_launch_dependents();
    grid_wait();
    char* o_rows = (char*)p.out + (n * p.s_out_tok + h * p.s_out_head + row0) * (long long)sizeof(A);
    if (!live) {  // the null block (padding): zero outputs, no state traffic
        if (lane < ROWS) Elem<A>::put(o_rows, lane, 0.f);
        return;
    }
    // the token: dt; B dt and C on this lane's columns; x (and z) of row row0 + lane
    const int g = h / p.heads_per_group;
    const int cl = (lane & 7) * RUN;
    float dt = Elem<A>::get(p.dt, n * p.s_dt_tok + h * p.s_dt_head) + dtb;
    const A* Bp = (const A*)p.B + n * p.s_B_tok + g * p.s_B_group + cl;
    const A* Cp = (const A*)p.C + n * p.s_C_tok + g * p.s_C_group + cl;
    float Bd[16], Cc[16];
#pragma unroll
    for (int j = 0; j < NRUN; ++j) {
        load_cols<A, RUN>(Bp + j * 8 * RUN, Bd + j * RUN);
        load_cols<A, RUN>(Cp + j * 8 * RUN, Cc + j * RUN);
    }
    const float x_mine = lane < ROWS ? Elem<A>::get(p.x, n * p.s_x_tok + h * p.s_x_head + row0 + lane) : 0.f;
    float z_mine = 0.f;
    if (HAS_Z) z_mine = lane < ROWS ? Elem<A>::get(p.z, n * p.s_z_tok + h * p.s_z_head + row0 + lane) : 0.f;
    if (p.dt_softplus) dt = dt <= 20.f ? log1pf(expf(dt)) : dt;
    const float dA = expf(Ah * dt);
#pragma unroll
    for (int j = 0; j < 16; ++j) Bd[j] *= dt;

    float o_mine = 0.f;
    bar_wait(bar);
#pragma unroll
    for (int s = 0; s < STEPS; ++s) {
        const int r = s * 4 + (lane >> 3);  // the row this lane works on
        const unsigned char* srow = smem + r * ROW_BYTES + cl * sizeof(S);
        float st[16];
#pragma unroll
        for (int j = 0; j < NRUN; ++j) Elem<S>::run16(srow + j * 8 * RUN * sizeof(S), st + j * RUN);
        const float xr = __shfl_sync(0xffffffffu, x_mine, r);
        float acc = 0.f;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            st[j] = fmaf(st[j], dA, Bd[j] * xr);
            acc = fmaf(st[j], Cc[j], acc);
        }
        acc = sum8(acc);
        const float o = acc + Dh * xr;
        const float o_src = __shfl_sync(0xffffffffu, o, (lane & 3) * 8);  // lane L keeps row L's output
        if ((lane >> 2) == s) o_mine = o_src;
        S* drow = rows + r * N + cl;
#pragma unroll
        for (int j = 0; j < NRUN; ++j) Elem<S>::store16(drow + j * 8 * RUN, st + j * RUN);
    }
    if (HAS_Z) o_mine *= z_mine / (1.f + expf(-z_mine));
    if (lane < ROWS) Elem<A>::put(o_rows, lane, o_mine);
}


}  // namespace

#define SSU_LEAN_ENTRY(SN, S, AN, A, R, Z)                                                            \
    extern "C" __global__ void __launch_bounds__(32)                                                  \
        ssu_tma_##SN##AN##_r##R##_z##Z##_lean(const __grid_constant__ SsuTmaParams p) {               \
        ssu_lean_body<S, A, R, Z>(p);                                                                 \
    }
#define SSU_LEAN_TYPES(SN, S, AN, A)                                                                  \
    SSU_LEAN_ENTRY(SN, S, AN, A, 16, 0)                                                               \
    SSU_LEAN_ENTRY(SN, S, AN, A, 16, 1)                                                               \
    SSU_LEAN_ENTRY(SN, S, AN, A, 32, 0)                                                               \
    SSU_LEAN_ENTRY(SN, S, AN, A, 32, 1)
SSU_LEAN_TYPES(b, bf16_t, b, bf16_t)
SSU_LEAN_TYPES(b, bf16_t, f, float)
SSU_LEAN_TYPES(f, float, b, bf16_t)
SSU_LEAN_TYPES(f, float, f, float)

#define SSU_FORM_ENTRY(Z, SUFFIX, THREADS, W, P, EP)                                                  \
    extern "C" __global__ void __launch_bounds__(THREADS)                                             \
        ssu_tma_bb_r32_z##Z##_##SUFFIX(const __grid_constant__ SsuTmaParams p) {                      \
        ssu_tma_body<bf16_t, bf16_t, 32, W, true, Z, P, EP>(p);                                       \
    }
SSU_FORM_ENTRY(0, w2, 64, 2, 1, 1)
SSU_FORM_ENTRY(1, w2, 64, 2, 1, 1)
SSU_FORM_ENTRY(0, p2, 32, 1, 2, 2)
SSU_FORM_ENTRY(1, p2, 32, 1, 2, 2)
