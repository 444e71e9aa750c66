// Mamba2's one-token decode step (selective_state_update with A, dt, dt_bias and D one a head, as mamba_mixer2
// calls it) with the state staged through shared memory by the bulk-copy engine (TMA's one-dimensional form),
// beside mambalab's Triton kernel, sm_90 and newer: the H200's SSU at small batches
// (mambalab.kernels.mamba_ssm_tma.RULES, measured there), and a kernel to study.
//
// The step is vLLM 0.33's _selective_scan_update_kernel (vllm/model_executor/layers/mamba/ops/mamba_ssm.py) and
// mambalab.kernels.mamba_ssm's: dt = softplus(dt + dt_bias) (threshold 20), dA = exp(A dt),
// state' = state dA + (B dt) x, out = state' . C + D x, times z sigmoid(z) with a gate z. dstate is 128. A request
// whose slot is the null block writes zero outputs and moves no state (the SSU's guard: slot != null_block_id).
//
// Layout of the work: a one-warp CTA owns ROWS head-dim rows of one (request, head). Lane 0 issues bulk copies of
// those rows into shared memory (16 rows a copy) before PDL's griddepcontrol.wait (the caller's early_state_load
// promise: the previous kernel writes neither the state nor the indices), with the head's A, dt_bias and D; the token
// (dt, x, z, B, C) is read after the wait. Eight lanes share a state row, sixteen columns each in 16-byte runs (a
// bf16 row's columns c0..c0+7 and c0+64..c0+71, an fp32 row's four runs of four), so the eight lanes of a row read
// 128 contiguous bytes of shared memory an instruction, four rows a step, without bank conflicts; the row's dot
// product with C takes three shuffle levels. The new rows go back with plain stores.
//
// No CUDA headers: the kernel builds with nvcc alone (mambalab.kernels.cuda_driver compiles it to a cubin); the PTX
// pieces it shares with the GDN's kernel are in tma_ptx.cuh.

#include "tma_ptx.cuh"

struct SsuTmaParams {
    const void* x;           // [N, nheads, dim], unit stride along dim (activation dtype, as dt, B, C, z, out)
    const void* dt;          // [N, nheads] (broadcast along dim)
    const void* B;           // [N, ngroups, 128], unit stride along dstate
    const void* C;
    const void* z;           // as x (unused without HAS_Z)
    const float* A;          // [nheads]
    const float* dt_bias;    // [nheads] (unused without has_dt_bias)
    const float* D;          // [nheads] (unused without has_D)
    void* state;             // [slots, nheads, dim, 128], rows contiguous (bf16 or fp32)
    void* out;               // as x
    const int* idx;          // [N], contiguous
    long long s_state_slot, s_state_head;
    long long s_x_tok, s_x_head, s_dt_tok, s_dt_head, s_B_tok, s_B_group, s_C_tok, s_C_group;
    long long s_z_tok, s_z_head, s_out_tok, s_out_head, s_A_head, s_dtb_head, s_D_head;
    int heads_per_group, null_block_id, dt_softplus, has_dt_bias, has_D;
};

namespace {

constexpr int N = 128;  // dstate

// An element type's 16-byte run holds RUN elements; a lane's 16 columns are 16 / RUN runs, run j at
// (lane & 7) * RUN + j * 8 * RUN.
template <typename T> struct Elem;
template <> struct Elem<bf16_t> {
    static constexpr int RUN = 8;
    __device__ static float get(const void* p, long long i) { return bf1(((const bf16_t*)p)[i]); }
    __device__ static void put(void* p, long long i, float v) {
        ((bf16_t*)p)[i] = (bf16_t)(pack_bf16x2(v, 0.f) & 0xffffu);
    }
    __device__ static void run16(const void* p, float* f) {
        const uint4 w = *reinterpret_cast<const uint4*>(p);
        const u32 a[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) { f[2 * i] = bf_lo(a[i]); f[2 * i + 1] = bf_hi(a[i]); }
    }
    __device__ static void store16(void* p, const float* f) {
        *reinterpret_cast<uint4*>(p) = make_uint4(pack_bf16x2(f[0], f[1]), pack_bf16x2(f[2], f[3]),
                                                  pack_bf16x2(f[4], f[5]), pack_bf16x2(f[6], f[7]));
    }
};
template <> struct Elem<float> {
    static constexpr int RUN = 4;
    __device__ static float get(const void* p, long long i) { return ((const float*)p)[i]; }
    __device__ static void put(void* p, long long i, float v) { ((float*)p)[i] = v; }
    __device__ static void run16(const void* p, float* f) {
        const float4 w = *reinterpret_cast<const float4*>(p);
        f[0] = w.x; f[1] = w.y; f[2] = w.z; f[3] = w.w;
    }
    __device__ static void store16(void* p, const float* f) {
        *reinterpret_cast<float4*>(p) = make_float4(f[0], f[1], f[2], f[3]);
    }
};

// RUN consecutive activation elements (RUN: the state type's) into f.
template <typename A, int RUN>
__device__ __forceinline__ void load_cols(const A* p, float* f) {
    if constexpr (sizeof(A) == 2 && RUN == 8) {
        Elem<bf16_t>::run16(p, f);
    } else if constexpr (sizeof(A) == 2 && RUN == 4) {
        const uint2 w = *reinterpret_cast<const uint2*>(p);
        f[0] = bf_lo(w.x); f[1] = bf_hi(w.x); f[2] = bf_lo(w.y); f[3] = bf_hi(w.y);
    } else if constexpr (sizeof(A) == 4 && RUN == 4) {
        Elem<float>::run16(p, f);
    } else {
        Elem<float>::run16(p, f);
        Elem<float>::run16(p + 4, f + 4);
    }
}

// WARPS warps a CTA of ROWS rows; a warp's rows in PIECES bulk copies, the first EP of them before PDL's wait
// (EARLY). Calls 237 and 246-247 measured these forms; the entries below are one warp, every copy before the wait.
template <typename S, typename A, int ROWS, int WARPS, bool EARLY, bool HAS_Z, int PIECES, int EP, bool FAST = false>
__device__ __forceinline__ void ssu_tma_body(const SsuTmaParams& p) {  // FAST: approximate exp / log (call 243)
    constexpr int RUN = Elem<S>::RUN, NRUN = 16 / RUN;
    constexpr int ROWS_W = ROWS / WARPS, STEPS = ROWS_W / 4;
    constexpr u32 ROW_BYTES = N * sizeof(S), PIECE = ROWS_W * ROW_BYTES / PIECES;
    static_assert(ROWS_W % 4 == 0 && ROWS_W <= 32 && STEPS % PIECES == 0, "rows a warp: 4 a step, whole pieces");
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) u64 bars[WARPS * PIECES];

    const int i_m = blockIdx.x, h = blockIdx.y, n = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row0 = i_m * ROWS + warp * ROWS_W;
    const long long slot = p.idx[n];
    const bool live = slot != (long long)p.null_block_id;
    S* rows = (S*)p.state + slot * p.s_state_slot + h * p.s_state_head + (long long)row0 * N;
    unsigned char* chunk = smem + warp * ROWS_W * ROW_BYTES;
    const u32 bar0 = smem_u32(&bars[warp * PIECES]);
    if (live && lane == 0) issue_early<PIECES, EARLY, EP>(bar0, chunk, rows, PIECE);
    // the head's weights before the wait (no kernel writes them)
    const float Ah = p.A[h * p.s_A_head];
    const float dtb = p.has_dt_bias ? p.dt_bias[h * p.s_dtb_head] : 0.f;
    const float Dh = p.has_D ? p.D[h * p.s_D_head] : 0.f;
    __syncwarp();
    grid_launch_dependents();
    grid_wait();
    char* o_rows = (char*)p.out + (n * p.s_out_tok + h * p.s_out_head + row0) * (long long)sizeof(A);
    if (!live) {
        if (lane < ROWS_W) Elem<A>::put(o_rows, lane, 0.f);
        return;
    }
    if (lane == 0) issue_rest<PIECES, EARLY, EP>(bar0, chunk, rows, PIECE);
    // the token: dt, B dt and C on this lane's columns, x (and z) of row row0 + lane
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
    const long long xi = n * p.s_x_tok + h * p.s_x_head + row0 + lane;
    const float x_mine = lane < ROWS_W ? Elem<A>::get(p.x, xi) : 0.f;
    float z_mine = 0.f;
    if (HAS_Z) z_mine = lane < ROWS_W ? Elem<A>::get(p.z, n * p.s_z_tok + h * p.s_z_head + row0 + lane) : 0.f;
    if (p.dt_softplus) dt = dt <= 20.f ? (FAST ? __logf(1.f + __expf(dt)) : log1pf(expf(dt))) : dt;
    const float dA = FAST ? __expf(Ah * dt) : expf(Ah * dt);
#pragma unroll
    for (int j = 0; j < 16; ++j) Bd[j] *= dt;

    float o_mine = 0.f;
#pragma unroll
    for (int s = 0; s < STEPS; ++s) {
        if (s % (STEPS / PIECES) == 0) bar_wait(bar0 + 8 * (s / (STEPS / PIECES)));
        const int r = s * 4 + (lane >> 3);
        const unsigned char* srow = chunk + r * ROW_BYTES + cl * sizeof(S);
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
    if (HAS_Z) o_mine *= FAST ? __fdividef(z_mine, 1.f + __expf(-z_mine)) : z_mine / (1.f + expf(-z_mine));
    if (lane < ROWS_W) Elem<A>::put(o_rows, lane, o_mine);
}

}  // namespace

// One entry point a launch: ssu_tma_<state><activations>_r<ROWS>_z<HAS_Z> (b: bf16, f: fp32), a one-warp CTA
// whose rows come before the wait: 16 rows in one bulk copy; 32 in two of 16, each with its barrier, so the update
// starts when the first half is in (calls 246-247: bf16 at 9 requests 1.085 -> 1.102x; the 16-row CTA in two copies
// loses).
#define SSU_TMA_ENTRY(SN, S, AN, A, R, Z)                                                             \
    extern "C" __global__ void __launch_bounds__(32)                                                  \
        ssu_tma_##SN##AN##_r##R##_z##Z(const __grid_constant__ SsuTmaParams p) {                      \
        ssu_tma_body<S, A, R, 1, true, Z, R / 16, R / 16>(p);                                         \
    }
#define SSU_TMA_TYPES(SN, S, AN, A)                                                                   \
    SSU_TMA_ENTRY(SN, S, AN, A, 16, 0)                                                                \
    SSU_TMA_ENTRY(SN, S, AN, A, 16, 1)                                                                \
    SSU_TMA_ENTRY(SN, S, AN, A, 32, 0)                                                                \
    SSU_TMA_ENTRY(SN, S, AN, A, 32, 1)

SSU_TMA_TYPES(b, bf16_t, b, bf16_t)
SSU_TMA_TYPES(b, bf16_t, f, float)
SSU_TMA_TYPES(f, float, b, bf16_t)
SSU_TMA_TYPES(f, float, f, float)
