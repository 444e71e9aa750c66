// The PTX pieces the decode kernels of this folder share (gdn_packed_decode_tma.cu, ssu_decode_tma.cu): bf16
// conversions, programmatic dependent launch's two instructions, and the one-dimensional bulk copy (TMA) into shared
// memory with the mbarrier that counts its bytes. No CUDA headers: nvcc alone builds the kernels
// (mambalab.kernels.cuda_driver hashes this file with each source, so an edit here rebuilds both).
#pragma once

typedef unsigned short bf16_t;
typedef unsigned int u32;
typedef unsigned long long u64;

namespace {

__device__ __forceinline__ float bf_lo(u32 w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf_hi(u32 w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ float bf1(bf16_t x) { return __uint_as_float(((u32)x) << 16); }

__device__ __forceinline__ u32 pack_bf16x2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ u32 smem_u32(const void* p) {
    return (u32)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void grid_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void grid_launch_dependents() {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

__device__ __forceinline__ void bar_init(u32 bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ void bulk_load(u32 dst, const void* src, u32 bytes, u32 bar) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
        ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

__device__ __forceinline__ void bar_wait(u32 bar, u32 parity = 0) {
    u32 done = 0;
    while (!done) {
        asm volatile(
            "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
            : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    }
}

// A warp's rows in PIECES bulk copies of PIECE bytes, each counted by its own mbarrier (bar0, bar0 + 8, ...): lane 0
// initialises the barriers and issues the first EP copies (where EARLY: before PDL's wait) ...
template <int PIECES, bool EARLY, int EP>
__device__ __forceinline__ void issue_early(u32 bar0, unsigned char* chunk, const void* rows, u32 PIECE) {
#pragma unroll
    for (int i = 0; i < PIECES; ++i) {
        bar_init(bar0 + 8 * i);
        if (EARLY && i < EP)
            bulk_load(smem_u32(chunk) + i * PIECE, (const char*)rows + i * PIECE, PIECE, bar0 + 8 * i);
    }
}

// ... and the rest after the wait.
template <int PIECES, bool EARLY, int EP>
__device__ __forceinline__ void issue_rest(u32 bar0, unsigned char* chunk, const void* rows, u32 PIECE) {
#pragma unroll
    for (int i = EARLY ? EP : 0; i < PIECES; ++i)
        bulk_load(smem_u32(chunk) + i * PIECE, (const char*)rows + i * PIECE, PIECE, bar0 + 8 * i);
}

__device__ __forceinline__ float sum8(float x) {  // over the eight lanes that share a row
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    x += __shfl_xor_sync(0xffffffffu, x, 2);
    x += __shfl_xor_sync(0xffffffffu, x, 4);
    return x;
}

}  // namespace
