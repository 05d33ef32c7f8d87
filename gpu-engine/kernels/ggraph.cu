// ggraph GPU kernels: one source for CUDA (NVRTC), HIP (hiprtc) and the
// host emulator used by the tests (g++ with kernels/emu.h).
//
// Why one file of about 1,400 lines: NVRTC and hiprtc compile a single
// string without include paths, the disk cache of compiled kernels keys on
// that string, the emulator includes the file whole and build.rs reads the
// kernel names from it. Splitting it would mean stitching the pieces back
// together in each of those places. The "// ----" sections below (scalars,
// quantised blocks, tensor access, reductions, elementwise, row kernels,
// rope, sorting, matrix products, attention) are its table of contents.
//
// The file includes nothing: a small compatibility prelude chosen by the
// host (kernels/compat_cuda.h, kernels/compat_hip.h or kernels/emu.h) is
// put in front of it and defines SHFL_XOR, ATOMIC_OR and DYN_SHARED.
// Only plain C++ that every one of those compilers accepts is used: no
// standard library, no vendor headers, no templates in kernel signatures.
//
// Semantics follow ggml and the CPU kernels of ggraph (backend-cpu) op by
// op: every tensor is described by a `Tensor` (pointer, ne, nb in bytes,
// type), so views, strides and broadcasting are read the same way as on
// the CPU. A "warp" here is always 32 threads (HIP wave64 hardware runs
// two of them per wave; shuffles use width 32).

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef int i32;
typedef long long i64;

// ggml type ids
#define T_F32 0
#define T_F16 1
#define T_Q4_0 2
#define T_Q4_1 3
#define T_Q5_0 6
#define T_Q5_1 7
#define T_Q8_0 8
#define T_Q2_K 10
#define T_Q3_K 11
#define T_Q4_K 12
#define T_Q5_K 13
#define T_Q6_K 14
#define T_IQ4_NL 20
#define T_IQ4_XS 23
#define T_I32 26
#define T_BF16 30
#define T_MXFP4 39

// error flags written by kernels that read indices (read back by the host
// when the stream synchronises)
#define ERR_GET_ROWS 1
#define ERR_SET_ROWS 2
#define ERR_MUL_MAT_ID 4
#define ERR_SSM_SCAN 8
#define ERR_ADD_ID 16
#define SSM_MAX_STATE 256
#define DELTA_MAX_STATE 256

#define WARP 32

// A tensor as the kernels see it; #[repr(C)] KTensor on the Rust side.
struct Tensor {
    char *data;
    i64 ne[4];
    i64 nb[4];
    i32 type;
    i32 pad_;
};

// ---- scalars ---------------------------------------------------------------

__device__ __forceinline__ float bits_to_f32(u32 u) {
    union { u32 u; float f; } x;
    x.u = u;
    return x.f;
}

__device__ __forceinline__ u32 f32_to_bits(float f) {
    union { u32 u; float f; } x;
    x.f = f;
    return x.u;
}

// IEEE half to float, exact and without branches: the half's exponent
// and mantissa moved into a float's place are that value times 2^-112
// (a float subnormal for a half subnormal), so one exact multiplication
// by 2^112 finishes it; infinities and NaNs (payload kept) are selected.
__device__ __forceinline__ float h2f(u16 h) {
    u32 em = (u32)(h & 0x7fffu) << 13;
    float f = bits_to_f32(em) * 5.192296858534828e33f;
    u32 bits = em >= 0x0f800000u ? (0x7f800000u | em) : f32_to_bits(f);
    return bits_to_f32(bits | ((u32)(h & 0x8000u) << 16));
}

// float to IEEE half, round to nearest even (as the `half` crate and ggml).
__device__ __forceinline__ u16 f2h(float f) {
    u32 x = f32_to_bits(f);
    u32 sign = (x >> 16) & 0x8000u;
    u32 ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (u16)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
    if (ax >= 0x477ff000u) return (u16)(sign | 0x7c00u); // rounds to infinity
    if (ax < 0x38800000u) {
        // zero or subnormal half: the value in units of 2^-24, rounded to even
        u32 m = (u32)rintf(bits_to_f32(ax) * 16777216.0f);
        return (u16)(sign | m);
    }
    u32 h = (((ax >> 23) - 112u) << 10) | ((ax & 0x7fffffu) >> 13);
    u32 rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h += 1u;
    return (u16)(sign | h);
}

// +infinity without math.h (NVRTC has no such macro)
__device__ __forceinline__ float inf_f() { return bits_to_f32(0x7f800000u); }

__device__ __forceinline__ float bf2f(u16 h) { return bits_to_f32(((u32)h) << 16); }

// As ggml_compute_fp32_to_bf16: NaN made quiet, otherwise round to nearest even.
__device__ __forceinline__ u16 f2bf(float f) {
    u32 u = f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u16)((u >> 16) | 64u);
    return (u16)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

__device__ __forceinline__ u16 rd16(const char *p) {
    const u8 *b = (const u8 *)p;
    return (u16)(b[0] | (b[1] << 8));
}

__device__ __forceinline__ void wr16(char *p, u16 v) {
    u8 *b = (u8 *)p;
    b[0] = (u8)(v & 0xff);
    b[1] = (u8)(v >> 8);
}

__device__ __forceinline__ int block_size(int type) {
    switch (type) {
    case T_Q8_0:
    case T_Q4_0:
    case T_Q4_1:
    case T_Q5_0:
    case T_Q5_1:
    case T_IQ4_NL:
    case T_MXFP4: return 32;
    case T_Q2_K:
    case T_Q3_K:
    case T_Q4_K:
    case T_Q5_K:
    case T_Q6_K:
    case T_IQ4_XS: return 256;
    default: return 1;
    }
}

__device__ __forceinline__ bool is_quant(int type) { return block_size(type) > 1; }

__device__ __forceinline__ int type_size(int type) {
    switch (type) {
    case T_F32:
    case T_I32: return 4;
    case T_F16:
    case T_BF16: return 2;
    case T_Q8_0: return 34;
    case T_Q4_0: return 18;
    case T_Q4_1: return 20;
    case T_Q5_0: return 22;
    case T_Q5_1: return 24;
    case T_IQ4_NL: return 18;
    case T_MXFP4: return 17;
    case T_Q2_K: return 84;
    case T_Q3_K: return 110;
    case T_Q4_K: return 144;
    case T_Q5_K: return 176;
    case T_Q6_K: return 210;
    case T_IQ4_XS: return 136;
    default: return 1;
    }
}

// One value of a plain (non-quantised) type.
__device__ __forceinline__ float load_scalar(int type, const char *p) {
    switch (type) {
    case T_F32: return *(const float *)p;
    case T_F16: return h2f(*(const u16 *)p);
    case T_BF16: return bf2f(*(const u16 *)p);
    case T_I32: return (float)*(const i32 *)p;
    default: return 0.0f;
    }
}

__device__ __forceinline__ void store_scalar(int type, char *p, float v) {
    switch (type) {
    case T_F32: *(float *)p = v; break;
    case T_F16: *(u16 *)p = f2h(v); break;
    case T_BF16: *(u16 *)p = f2bf(v); break;
    case T_I32: *(i32 *)p = (i32)v; break;
    default: break;
    }
}

// 16 and 8 bytes in one load or store (the pointer aligned to its size).
struct alignas(16) U32x4 {
    u32 v[4];
};
struct alignas(8) U32x2 {
    u32 v[2];
};

__device__ __forceinline__ bool aligned_to(const void *p, unsigned long long bytes) {
    return ((unsigned long long)p & (bytes - 1)) == 0;
}

// Four consecutive values of F32, F16 or BF16 at `p`, aligned to the four
// (16 bytes for F32, 8 for the halves).
__device__ __forceinline__ void load4_plain(int type, const char *p, float *v) {
    if (type == T_F32) {
        U32x4 q = *(const U32x4 *)p;
        for (int l = 0; l < 4; ++l) v[l] = bits_to_f32(q.v[l]);
        return;
    }
    U32x2 q = *(const U32x2 *)p;
    for (int l = 0; l < 4; ++l) {
        u16 h = (u16)(q.v[l / 2] >> (16 * (l % 2)));
        v[l] = type == T_F16 ? h2f(h) : bf2f(h);
    }
}

// ---- quantised blocks (layouts as ggraph-core/src/quant) -------------------

// The 6-bit scale and min of sub-block j of a Q4_K super-block.
__device__ __forceinline__ void q4k_scale_min(int j, const u8 *s, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

__device__ __forceinline__ u32 rd32(const char *p) {
    const u8 *b = (const u8 *)p;
    return (u32)b[0] | ((u32)b[1] << 8) | ((u32)b[2] << 16) | ((u32)b[3] << 24);
}

// The values IQ4_NL and IQ4_XS codes index (ggraph_core::quant::IQ4_VALUES).
__device__ const i8 IQ4_TABLE[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// MXFP4's values, E2M1 doubled (ggraph_core::quant::MXFP4_VALUES).
__device__ const i8 MXFP4_TABLE[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Half the E8M0 scale 2^(e - 127), as ggml forms its bits.
__device__ __forceinline__ float e8m0_half(u8 e) { return bits_to_f32(e < 2 ? 0x00200000u << e : (u32)(e - 1) << 23); }

// Code l (0..31) of 16 bytes of nibbles holding value l in the low nibble
// of byte l and value l + 16 in the high one (the 32-value blocks, IQ4_XS).
__device__ __forceinline__ int nibble32(const u8 *qs, int l) { return l < 16 ? (qs[l] & 15) : (qs[l - 16] >> 4); }

// The 5-bit code l of a Q5_0 / Q5_1 block: its nibble and bit l of `qh`.
__device__ __forceinline__ int code5(u32 qh, const u8 *qs, int l) { return nibble32(qs, l) | (int)(((qh >> l) & 1u) << 4); }

// The 2-bit code of value i (0..255) from the 64 code bytes of a Q2_K or
// Q3_K super-block.
__device__ __forceinline__ int code2(const u8 *qs, int i) { return (qs[32 * (i / 128) + i % 32] >> (2 * ((i % 128) / 32))) & 3; }

// The 6-bit scale (offset by 32) of sub-block j (0..15) of a Q3_K super-block.
__device__ __forceinline__ int q3k_scale(const u8 *s, int j) {
    return ((s[j % 8] >> (4 * (j / 8))) & 15) | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
}

// The 5-bit code of value i (0..255) of a Q5_K super-block.
__device__ __forceinline__ int q5k_code(const u8 *qh, const u8 *qs, int i) {
    int l = i % 32;
    return ((qs[32 * (i / 64) + l] >> (4 * ((i % 64) / 32))) & 15) | (((qh[l] >> (i / 32)) & 1) << 4);
}

// The 6-bit scale (offset by 32) of sub-block j (0..7) of an IQ4_XS super-block.
__device__ __forceinline__ int iq4xs_scale(const char *blk, int j) {
    int high = (rd16(blk + 2) >> (2 * j)) & 3;
    return ((((const u8 *)blk)[4 + j / 2] >> (4 * (j % 2))) & 15) | (high << 4);
}

// Value i0 of a quantised row starting at `row`.
__device__ float deq1(int type, const char *row, i64 i0) {
    switch (type) {
    case T_Q4_1: {
        const char *blk = row + (i0 / 32) * 20;
        int q = nibble32((const u8 *)blk + 4, (int)(i0 % 32));
        return (float)q * h2f(rd16(blk)) + h2f(rd16(blk + 2));
    }
    case T_Q5_0: {
        const char *blk = row + (i0 / 32) * 22;
        int q = code5(rd32(blk + 2), (const u8 *)blk + 6, (int)(i0 % 32));
        return h2f(rd16(blk)) * (float)(q - 16);
    }
    case T_Q5_1: {
        const char *blk = row + (i0 / 32) * 24;
        int q = code5(rd32(blk + 4), (const u8 *)blk + 8, (int)(i0 % 32));
        return (float)q * h2f(rd16(blk)) + h2f(rd16(blk + 2));
    }
    case T_IQ4_NL: {
        const char *blk = row + (i0 / 32) * 18;
        return h2f(rd16(blk)) * (float)IQ4_TABLE[nibble32((const u8 *)blk + 2, (int)(i0 % 32))];
    }
    case T_MXFP4: {
        const u8 *blk = (const u8 *)row + (i0 / 32) * 17;
        return (float)MXFP4_TABLE[nibble32(blk + 1, (int)(i0 % 32))] * e8m0_half(blk[0]);
    }
    case T_Q2_K: {
        const char *blk = row + (i0 / 256) * 84;
        const u8 *b = (const u8 *)blk;
        int i = (int)(i0 % 256);
        int sc = b[i / 16];
        float dl = h2f(rd16(blk + 80)) * (float)(sc & 15);
        float ml = h2f(rd16(blk + 82)) * (float)(sc >> 4);
        return dl * (float)code2(b + 16, i) - ml;
    }
    case T_Q3_K: {
        const char *blk = row + (i0 / 256) * 110;
        const u8 *b = (const u8 *)blk;
        int i = (int)(i0 % 256);
        float dl = h2f(rd16(blk + 108)) * (float)(q3k_scale(b + 96, i / 16) - 32);
        int q = code2(b + 32, i) | (((b[i % 32] >> (i / 32)) & 1) << 2);
        return dl * (float)(q - 4);
    }
    case T_Q5_K: {
        const char *blk = row + (i0 / 256) * 176;
        const u8 *b = (const u8 *)blk;
        int i = (int)(i0 % 256);
        int sc, m;
        q4k_scale_min(i / 32, b + 4, &sc, &m);
        float d = h2f(rd16(blk)), dmin = h2f(rd16(blk + 2));
        return d * (float)sc * (float)q5k_code(b + 16, b + 48, i) - dmin * (float)m;
    }
    case T_IQ4_XS: {
        const char *blk = row + (i0 / 256) * 136;
        int i = (int)(i0 % 256), j = i / 32;
        float dl = h2f(rd16(blk)) * (float)(iq4xs_scale(blk, j) - 32);
        return dl * (float)IQ4_TABLE[nibble32((const u8 *)blk + 8 + 16 * j, i % 32)];
    }
    case T_Q8_0: {
        const char *blk = row + (i0 / 32) * 34;
        float d = h2f(rd16(blk));
        return (float)((const i8 *)blk)[2 + (i0 % 32)] * d;
    }
    case T_Q4_0: {
        const char *blk = row + (i0 / 32) * 18;
        float d = h2f(rd16(blk));
        int l = (int)(i0 % 32);
        u8 q = ((const u8 *)blk)[2 + (l & 15)];
        int code = l < 16 ? (q & 15) : (q >> 4);
        return (float)(code - 8) * d;
    }
    case T_Q4_K: {
        const char *blk = row + (i0 / 256) * 144;
        int v = (int)(i0 % 256);
        int g = v / 64, l = v % 64;
        int j = 2 * g + (l >= 32 ? 1 : 0);
        float d = h2f(rd16(blk));
        float dmin = h2f(rd16(blk + 2));
        int sc, m;
        q4k_scale_min(j, (const u8 *)blk + 4, &sc, &m);
        u8 q = ((const u8 *)blk + 16)[32 * g + (l & 31)];
        int code = l < 32 ? (q & 15) : (q >> 4);
        float dl = d * (float)sc;
        float ml = dmin * (float)m;
        return dl * (float)code - ml;
    }
    case T_Q6_K: {
        const char *blk = row + (i0 / 256) * 210;
        int v = (int)(i0 % 256);
        int half = v / 128, r = v % 128;
        int quarter = r / 32, l = r % 32;
        const u8 *ql = (const u8 *)blk + 64 * half;
        const u8 *qh = (const u8 *)blk + 128 + 32 * half;
        const i8 *sc = (const i8 *)(blk + 192) + 8 * half;
        float d = h2f(rd16(blk + 208));
        int q;
        switch (quarter) {
        case 0: q = (ql[l] & 15) | ((qh[l] & 3) << 4); break;
        case 1: q = (ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4); break;
        case 2: q = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4); break;
        default: q = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4); break;
        }
        int is = l / 16 + 2 * quarter;
        return d * (float)sc[is] * (float)(q - 32);
    }
    default: return 0.0f;
    }
}

// Values 32u .. 32u+31 of a row of `k` values (zero past the end), for
// any type; `nb0` is the byte stride between values of a plain type. `w`
// never aliases the row (it may be shared memory): the block's bytes are
// loaded without waiting for the values stored before them.
__device__ void dequant_unit(int type, const char *__restrict__ row, i64 nb0, i64 u, i64 k, float *__restrict__ w) {
    switch (type) {
    case T_Q4_1: {
        const char *blk = row + u * 20;
        float d = h2f(rd16(blk)), m = h2f(rd16(blk + 2));
        for (int l = 0; l < 32; ++l) w[l] = (float)nibble32((const u8 *)blk + 4, l) * d + m;
        break;
    }
    case T_Q5_0: {
        const char *blk = row + u * 22;
        float d = h2f(rd16(blk));
        u32 qh = rd32(blk + 2);
        for (int l = 0; l < 32; ++l) w[l] = d * (float)(code5(qh, (const u8 *)blk + 6, l) - 16);
        break;
    }
    case T_Q5_1: {
        const char *blk = row + u * 24;
        float d = h2f(rd16(blk)), m = h2f(rd16(blk + 2));
        u32 qh = rd32(blk + 4);
        for (int l = 0; l < 32; ++l) w[l] = (float)code5(qh, (const u8 *)blk + 8, l) * d + m;
        break;
    }
    case T_IQ4_NL: {
        const char *blk = row + u * 18;
        float d = h2f(rd16(blk));
        for (int l = 0; l < 32; ++l) w[l] = d * (float)IQ4_TABLE[nibble32((const u8 *)blk + 2, l)];
        break;
    }
    case T_MXFP4: {
        const u8 *blk = (const u8 *)row + u * 17;
        float d = e8m0_half(blk[0]);
        for (int l = 0; l < 32; ++l) w[l] = (float)MXFP4_TABLE[nibble32(blk + 1, l)] * d;
        break;
    }
    case T_Q2_K: {
        // unit j of the super-block: sub-blocks 2j and 2j + 1, the codes at
        // bits 2 (j % 4) of code bytes 32 (j / 4) ..
        const char *blk = row + (u / 8) * 84;
        const u8 *b = (const u8 *)blk;
        int j = (int)(u % 8);
        float d = h2f(rd16(blk + 80)), dmin = h2f(rd16(blk + 82));
        float dl[2], ml[2];
        for (int h = 0; h < 2; ++h) {
            dl[h] = d * (float)(b[2 * j + h] & 15);
            ml[h] = dmin * (float)(b[2 * j + h] >> 4);
        }
        const u8 *q = b + 16 + 32 * (j / 4);
        int shift = 2 * (j % 4);
        for (int l = 0; l < 32; ++l) w[l] = dl[l / 16] * (float)((q[l] >> shift) & 3) - ml[l / 16];
        break;
    }
    case T_Q3_K: {
        const char *blk = row + (u / 8) * 110;
        const u8 *b = (const u8 *)blk;
        int j = (int)(u % 8);
        float d = h2f(rd16(blk + 108));
        float dl[2];
        for (int h = 0; h < 2; ++h) dl[h] = d * (float)(q3k_scale(b + 96, 2 * j + h) - 32);
        const u8 *q = b + 32 + 32 * (j / 4);
        int shift = 2 * (j % 4);
        for (int l = 0; l < 32; ++l) {
            int c = ((q[l] >> shift) & 3) | (((b[l] >> j) & 1) << 2);
            w[l] = dl[l / 16] * (float)(c - 4);
        }
        break;
    }
    case T_Q5_K: {
        const char *blk = row + (u / 8) * 176;
        const u8 *b = (const u8 *)blk;
        int j = (int)(u % 8);
        int sc, m;
        q4k_scale_min(j, b + 4, &sc, &m);
        float dl = h2f(rd16(blk)) * (float)sc;
        float ml = h2f(rd16(blk + 2)) * (float)m;
        const u8 *q = b + 48 + 32 * (j / 2);
        int shift = 4 * (j % 2);
        for (int l = 0; l < 32; ++l) {
            int c = ((q[l] >> shift) & 15) | (((b[16 + l] >> j) & 1) << 4);
            w[l] = dl * (float)c - ml;
        }
        break;
    }
    case T_IQ4_XS: {
        const char *blk = row + (u / 8) * 136;
        int j = (int)(u % 8);
        float dl = h2f(rd16(blk)) * (float)(iq4xs_scale(blk, j) - 32);
        const u8 *q = (const u8 *)blk + 8 + 16 * j;
        for (int l = 0; l < 32; ++l) w[l] = dl * (float)IQ4_TABLE[nibble32(q, l)];
        break;
    }
    case T_Q8_0: {
        const char *blk = row + u * 34;
        float d = h2f(rd16(blk));
        for (int l = 0; l < 32; ++l) w[l] = (float)((const i8 *)blk)[2 + l] * d;
        break;
    }
    case T_Q4_0: {
        const char *blk = row + u * 18;
        float d = h2f(rd16(blk));
        for (int j = 0; j < 16; ++j) {
            u8 q = ((const u8 *)blk)[2 + j];
            w[j] = (float)((q & 15) - 8) * d;
            w[j + 16] = (float)((q >> 4) - 8) * d;
        }
        break;
    }
    case T_Q4_K: {
        const char *blk = row + (u / 8) * 144;
        int j = (int)(u % 8);
        int g = j / 2, shift = (j & 1) * 4;
        float d = h2f(rd16(blk));
        float dmin = h2f(rd16(blk + 2));
        int sc, m;
        q4k_scale_min(j, (const u8 *)blk + 4, &sc, &m);
        float dl = d * (float)sc;
        float ml = dmin * (float)m;
        const u8 *q = (const u8 *)blk + 16 + 32 * g;
        for (int l = 0; l < 32; ++l) w[l] = dl * (float)((q[l] >> shift) & 15) - ml;
        break;
    }
    case T_Q6_K: {
        const char *blk = row + (u / 8) * 210;
        int j = (int)(u % 8);
        int half = j / 4, quarter = j % 4;
        const u8 *ql = (const u8 *)blk + 64 * half;
        const u8 *qh = (const u8 *)blk + 128 + 32 * half;
        const i8 *sc = (const i8 *)(blk + 192) + 8 * half;
        float d = h2f(rd16(blk + 208));
        for (int l = 0; l < 32; ++l) {
            int q;
            switch (quarter) {
            case 0: q = (ql[l] & 15) | ((qh[l] & 3) << 4); break;
            case 1: q = (ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4); break;
            case 2: q = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4); break;
            default: q = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4); break;
            }
            w[l] = d * (float)sc[l / 16 + 2 * quarter] * (float)(q - 32);
        }
        break;
    }
    default: {
        for (int l = 0; l < 32; ++l) {
            i64 kk = u * 32 + l;
            w[l] = kk < k ? load_scalar(type, row + kk * nb0) : 0.0f;
        }
        break;
    }
    }
}

__device__ __forceinline__ int nearest_int(float x) { return (int)rintf(x); }

__device__ __forceinline__ int clampi(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Q4_K: ggml's make_qkx2_quants (32 values, weighted); returns scale and
// the (non-negative) min shift. Mirrors ggraph-core/src/quant/q4_k.rs.
__device__ void q4k_fit(const float *x, const float *wt, int nmax, u8 *codes, float *out_scale, float *out_min) {
    const float rmin = -1.0f, rdelta = 0.1f;
    const int nstep = 20;
    float mn = x[0], mx = x[0], sum_w = 0.0f, sum_x = 0.0f;
    for (int i = 0; i < 32; ++i) {
        mn = fminf(mn, x[i]);
        mx = fmaxf(mx, x[i]);
        sum_w += wt[i];
        sum_x += wt[i] * x[i];
    }
    if (mn > 0.0f) mn = 0.0f;
    if (mx == mn) {
        for (int i = 0; i < 32; ++i) codes[i] = 0;
        *out_scale = 0.0f;
        *out_min = -mn;
        return;
    }
    float iscale = (float)nmax / (mx - mn);
    float scale = 1.0f / iscale;
    float best_error = 0.0f;
    for (int i = 0; i < 32; ++i) {
        int l = clampi(nearest_int(iscale * (x[i] - mn)), 0, nmax);
        codes[i] = (u8)l;
        float diff = scale * (float)l + mn - x[i];
        best_error += wt[i] * diff * diff;
    }
    u8 trial[32];
    for (int step = 0; step <= nstep; ++step) {
        iscale = (rmin + rdelta * (float)step + (float)nmax) / (mx - mn);
        float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
        for (int i = 0; i < 32; ++i) {
            int l = clampi(nearest_int(iscale * (x[i] - mn)), 0, nmax);
            trial[i] = (u8)l;
            float lf = (float)l;
            sum_l += wt[i] * lf;
            sum_l2 += wt[i] * lf * lf;
            sum_xl += wt[i] * lf * x[i];
        }
        float det = sum_w * sum_l2 - sum_l * sum_l;
        if (det > 0.0f) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if (this_min > 0.0f) {
                this_min = 0.0f;
                this_scale = sum_xl / sum_l2;
            }
            float err = 0.0f;
            for (int i = 0; i < 32; ++i) {
                float diff = this_scale * (float)trial[i] + this_min - x[i];
                err += wt[i] * diff * diff;
            }
            if (err < best_error) {
                for (int i = 0; i < 32; ++i) codes[i] = trial[i];
                best_error = err;
                scale = this_scale;
                mn = this_min;
            }
        }
    }
    *out_scale = scale;
    *out_min = -mn;
}

// Q6_K: ggml's make_qx_quants (16 values, weights x^2); codes offset by nmax.
__device__ float q6k_fit(const float *x, int nmax, u8 *codes) {
    float mx = 0.0f, amax = 0.0f;
    for (int i = 0; i < 16; ++i) {
        float a = fabsf(x[i]);
        if (a > amax) {
            amax = a;
            mx = x[i];
        }
    }
    if (amax < 1e-15f) {
        for (int i = 0; i < 16; ++i) codes[i] = 0;
        return 0.0f;
    }
    float iscale = -(float)nmax / mx;
    float sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < 16; ++i) {
        int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        codes[i] = (u8)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int step = -9; step <= 9; ++step) {
        if (step == 0) continue;
        float is = -((float)nmax + 0.1f * (float)step) / mx;
        float slx = 0.0f, sl2 = 0.0f;
        for (int i = 0; i < 16; ++i) {
            int l = clampi(nearest_int(is * x[i]), -nmax, nmax - 1);
            float w = x[i] * x[i];
            slx += w * x[i] * (float)l;
            sl2 += w * (float)l * (float)l;
        }
        if (sl2 > 0.0f && slx * slx > best * sl2) {
            for (int i = 0; i < 16; ++i) codes[i] = (u8)(clampi(nearest_int(is * x[i]), -nmax, nmax - 1) + nmax);
            scale = slx / sl2;
            best = scale * slx;
        }
    }
    return scale;
}

// Encodes one block of `block_size(type)` values; mirrors the reference
// quantisers of ggraph-core byte for byte (up to float contraction).
__device__ void quantize_block(int type, const float *x, char *out) {
    u8 *o = (u8 *)out;
    switch (type) {
    case T_Q8_0: {
        float amax = 0.0f;
        for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(x[i]));
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        wr16(out, f2h(d));
        for (int i = 0; i < 32; ++i) ((i8 *)o)[2 + i] = (i8)(int)roundf(x[i] * id);
        break;
    }
    case T_Q4_0: {
        float mx = 0.0f;
        for (int i = 0; i < 32; ++i)
            if (fabsf(x[i]) > fabsf(mx)) mx = x[i];
        float d = mx / -8.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        wr16(out, f2h(d));
        for (int j = 0; j < 16; ++j) {
            int c0 = clampi((int)(x[j] * id + 8.5f), 0, 15);
            int c1 = clampi((int)(x[j + 16] * id + 8.5f), 0, 15);
            o[2 + j] = (u8)(c0 | (c1 << 4));
        }
        break;
    }
    case T_Q4_K: {
        u8 codes[256];
        float scales[8], mins[8], wt[32];
        for (int j = 0; j < 8; ++j) {
            const float *xs = x + 32 * j;
            float s2 = 0.0f;
            for (int i = 0; i < 32; ++i) s2 += xs[i] * xs[i];
            float av_x = sqrtf(s2 / 32.0f);
            for (int i = 0; i < 32; ++i) wt[i] = av_x + fabsf(xs[i]);
            q4k_fit(xs, wt, 15, codes + 32 * j, &scales[j], &mins[j]);
        }
        float max_scale = 0.0f, max_min = 0.0f;
        for (int j = 0; j < 8; ++j) {
            max_scale = fmaxf(max_scale, scales[j]);
            max_min = fmaxf(max_min, mins[j]);
        }
        float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
        float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
        for (int i = 0; i < 144; ++i) o[i] = 0;
        u8 *packed = o + 4;
        for (int j = 0; j < 8; ++j) {
            int ls = clampi(nearest_int(inv_scale * scales[j]), 0, 63);
            int lm = clampi(nearest_int(inv_min * mins[j]), 0, 63);
            if (j < 4) {
                packed[j] = (u8)ls;
                packed[j + 4] = (u8)lm;
            } else {
                packed[j + 4] = (u8)((ls & 0x0f) | ((lm & 0x0f) << 4));
                packed[j - 4] |= (u8)((ls >> 4) << 6);
                packed[j] |= (u8)((lm >> 4) << 6);
            }
        }
        u16 d16 = f2h(max_scale / 63.0f);
        u16 dmin16 = f2h(max_min / 63.0f);
        float d = h2f(d16), dmin = h2f(dmin16);
        for (int j = 0; j < 8; ++j) {
            int sc, m;
            q4k_scale_min(j, packed, &sc, &m);
            float dj = d * (float)sc;
            if (dj == 0.0f) continue;
            float mj = dmin * (float)m;
            for (int i = 32 * j; i < 32 * (j + 1); ++i) codes[i] = (u8)clampi(nearest_int((x[i] + mj) / dj), 0, 15);
        }
        wr16(out, d16);
        wr16(out + 2, dmin16);
        u8 *qs = o + 16;
        for (int g = 0; g < 4; ++g)
            for (int l = 0; l < 32; ++l) qs[32 * g + l] = (u8)(codes[64 * g + l] | (codes[64 * g + l + 32] << 4));
        break;
    }
    case T_Q6_K: {
        u8 codes[256];
        float scales[16];
        float max_scale = 0.0f, max_abs = 0.0f;
        for (int j = 0; j < 16; ++j) {
            scales[j] = q6k_fit(x + 16 * j, 32, codes + 16 * j);
            if (fabsf(scales[j]) > max_abs) {
                max_abs = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        for (int i = 0; i < 210; ++i) o[i] = 0;
        if (max_abs < 1e-15f) break;
        float iscale = -128.0f / max_scale;
        u16 d16 = f2h(1.0f / iscale);
        float d = h2f(d16);
        u8 *ql = o;
        u8 *qh = o + 128;
        i8 *sc = (i8 *)(o + 192);
        wr16(out + 208, d16);
        for (int j = 0; j < 16; ++j) {
            int s = nearest_int(iscale * scales[j]);
            if (s > 127) s = 127;
            sc[j] = (i8)s;
            float dj = d * (float)(i8)s;
            if (dj == 0.0f) continue;
            for (int i = 16 * j; i < 16 * (j + 1); ++i) codes[i] = (u8)(clampi(nearest_int(x[i] / dj), -32, 31) + 32);
        }
        for (int half = 0; half < 2; ++half) {
            const u8 *c = codes + 128 * half;
            u8 *l8 = ql + 64 * half;
            u8 *h8 = qh + 32 * half;
            for (int l = 0; l < 32; ++l) {
                l8[l] = (u8)((c[l] & 0x0f) | ((c[l + 64] & 0x0f) << 4));
                l8[l + 32] = (u8)((c[l + 32] & 0x0f) | ((c[l + 96] & 0x0f) << 4));
                h8[l] = (u8)((c[l] >> 4) | ((c[l + 32] >> 4) << 2) | ((c[l + 64] >> 4) << 4) | ((c[l + 96] >> 4) << 6));
            }
        }
        break;
    }
    default: break;
    }
}

// ---- tensor access -----------------------------------------------------------

__device__ __forceinline__ const char *row_ptr(const Tensor &t, i64 i1, i64 i2, i64 i3) {
    return t.data + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
}

__device__ __forceinline__ char *elem_ptr(const Tensor &t, i64 i0, i64 i1, i64 i2, i64 i3) {
    return t.data + i0 * t.nb[0] + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
}

// Value (i0, i1, i2, i3) of any tensor as float.
__device__ __forceinline__ float load_f(const Tensor &t, i64 i0, i64 i1, i64 i2, i64 i3) {
    if (is_quant(t.type)) return deq1(t.type, row_ptr(t, i1, i2, i3), i0);
    return load_scalar(t.type, elem_ptr(t, i0, i1, i2, i3));
}

__device__ __forceinline__ i64 nelements(const Tensor &t) { return t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]; }

__device__ __forceinline__ void unflat(i64 k, const i64 *ne, i64 *i) {
    i[0] = k % ne[0];
    k /= ne[0];
    i[1] = k % ne[1];
    k /= ne[1];
    i[2] = k % ne[2];
    i[3] = k / ne[2];
}

// (i1, i2, i3) of row r.
__device__ __forceinline__ void row_coords(i64 r, const i64 *ne, i64 *i1, i64 *i2, i64 *i3) {
    *i1 = r % ne[1];
    *i2 = (r / ne[1]) % ne[2];
    *i3 = r / (ne[1] * ne[2]);
}

__device__ __forceinline__ i64 global_id() { return (i64)blockIdx.x * blockDim.x + threadIdx.x; }

__device__ __forceinline__ i64 global_stride() { return (i64)gridDim.x * blockDim.x; }

// ---- reductions ----------------------------------------------------------------

__device__ __forceinline__ float warp_sum(float v) {
    for (int m = 16; m > 0; m >>= 1) v += SHFL_XOR(v, m);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int m = 16; m > 0; m >>= 1) v = fmaxf(v, SHFL_XOR(v, m));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every
// thread gets the result. `sh` holds 32 floats of shared memory.
__device__ float block_sum(float v, float *sh) {
    int lane = threadIdx.x % WARP, w = threadIdx.x / WARP;
    int nw = blockDim.x / WARP;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        float t = lane < nw ? sh[lane] : 0.0f;
        t = warp_sum(t);
        if (lane == 0) sh[0] = t;
    }
    __syncthreads();
    return sh[0];
}

__device__ float block_max(float v, float *sh) {
    int lane = threadIdx.x % WARP, w = threadIdx.x / WARP;
    int nw = blockDim.x / WARP;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        float t = lane < nw ? sh[lane] : -inf_f();
        t = warp_max(t);
        if (lane == 0) sh[0] = t;
    }
    __syncthreads();
    return sh[0];
}

// ---- elementwise ---------------------------------------------------------------

__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }

__device__ __forceinline__ float gelu_f(float x) {
    const float sqrt_2_over_pi = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(sqrt_2_over_pi * x * (1.0f + 0.044715f * x * x)));
}

// UnaryOp order of ggraph-core: silu, gelu, relu, neg, exp, sigmoid, tanh, sqr, sqrt.
// ln(1 + e^x), and x itself above 20, as ggml computes it.
__device__ __forceinline__ float softplus_f(float x) {
    return x > 20.0f ? x : logf(1.0f + expf(x));
}

__device__ __forceinline__ float unary_f(int op, float x) {
    switch (op) {
    case 0: return silu_f(x);
    case 1: return gelu_f(x);
    case 2: return fmaxf(x, 0.0f);
    case 3: return -x;
    case 4: return expf(x);
    case 5: return 1.0f / (1.0f + expf(-x));
    case 6: return tanhf(x);
    case 7: return x * x;
    case 8: return sqrtf(x);
    case 9: return softplus_f(x);
    default: return x;
    }
}

// dst = a (op) b, b repeated over a; op: 0 add, 1 sub, 2 mul, 3 div.
extern "C" __global__ void k_binary(Tensor dst, Tensor a, Tensor b, int op) {
    i64 n = nelements(dst);
    for (i64 k = global_id(); k < n; k += global_stride()) {
        i64 i[4];
        unflat(k, dst.ne, i);
        float x = load_f(a, i[0], i[1], i[2], i[3]);
        float y = load_f(b, i[0] % b.ne[0], i[1] % b.ne[1], i[2] % b.ne[2], i[3] % b.ne[3]);
        float r;
        switch (op) {
        case 0: r = x + y; break;
        case 1: r = x - y; break;
        case 2: r = x * y; break;
        default: r = x / y; break;
        }
        store_scalar(dst.type, elem_ptr(dst, i[0], i[1], i[2], i[3]), r);
    }
}

extern "C" __global__ void k_scale(Tensor dst, Tensor a, float s, float bias) {
    i64 n = nelements(dst);
    for (i64 k = global_id(); k < n; k += global_stride()) {
        i64 i[4];
        unflat(k, dst.ne, i);
        float x = load_f(a, i[0], i[1], i[2], i[3]);
        store_scalar(dst.type, elem_ptr(dst, i[0], i[1], i[2], i[3]), x * s + bias);
    }
}

extern "C" __global__ void k_unary(Tensor dst, Tensor a, int op) {
    i64 n = nelements(dst);
    for (i64 k = global_id(); k < n; k += global_stride()) {
        i64 i[4];
        unflat(k, dst.ne, i);
        float x = load_f(a, i[0], i[1], i[2], i[3]);
        store_scalar(dst.type, elem_ptr(dst, i[0], i[1], i[2], i[3]), unary_f(op, x));
    }
}

// act(x) * g; op 0 swiglu (silu), 1 geglu (gelu). With b: x from a, g
// from b. Without: x and g are the two halves of a's rows (exchanged when
// swapped).
// op 0 swiglu, 1 geglu, 2 swiglu_oai (gpt-oss: the gate clamped above and
// the value on both sides at `limit`, the sigmoid's slope `alpha`)
extern "C" __global__ void k_glu(Tensor dst, Tensor a, Tensor b, int has_b, int op, int swapped, float alpha, float limit) {
    i64 n = nelements(dst);
    i64 n0 = dst.ne[0];
    i64 xo = swapped ? n0 : 0, go = swapped ? 0 : n0;
    for (i64 k = global_id(); k < n; k += global_stride()) {
        i64 i[4];
        unflat(k, dst.ne, i);
        float x, g;
        if (has_b) {
            x = load_f(a, i[0], i[1], i[2], i[3]);
            g = load_f(b, i[0], i[1], i[2], i[3]);
        } else {
            x = load_f(a, i[0] + xo, i[1], i[2], i[3]);
            g = load_f(a, i[0] + go, i[1], i[2], i[3]);
        }
        float out;
        if (op == 2) {
            float xc = limit < x ? limit : x;
            float gc = g < -limit ? -limit : (limit < g ? limit : g);
            out = xc / (1.0f + expf(alpha * -xc)) * (gc + 1.0f);
        } else {
            out = (op == 0 ? silu_f(x) : gelu_f(x)) * g;
        }
        store_scalar(dst.type, elem_ptr(dst, i[0], i[1], i[2], i[3]), out);
    }
}

__device__ __forceinline__ bool is_contiguous(const Tensor &t, int ts) {
    return t.nb[0] == ts && t.nb[1] == t.nb[0] * t.ne[0] && t.nb[2] == t.nb[1] * t.ne[1] &&
           t.nb[3] == t.nb[2] * t.ne[2];
}

// cpy / cont into a plain type: element k of src (logical order) to
// element k of dst, converting; exact bytes when the types agree, 16 at
// a time when both are also contiguous.
extern "C" __global__ void k_cpy(Tensor dst, Tensor src) {
    i64 n = nelements(dst);
    bool same = dst.type == src.type && !is_quant(src.type);
    int ts = type_size(dst.type);
    if (same && is_contiguous(dst, ts) && is_contiguous(src, ts)) {
        i64 bytes = n * ts;
        if (aligned_to(dst.data, 16) && aligned_to(src.data, 16)) {
            i64 wide = bytes / 16;
            for (i64 c = global_id(); c < wide; c += global_stride())
                ((U32x4 *)dst.data)[c] = ((const U32x4 *)src.data)[c];
            for (i64 c = wide * 16 + global_id(); c < bytes; c += global_stride()) dst.data[c] = src.data[c];
        } else {
            for (i64 c = global_id(); c < bytes; c += global_stride()) dst.data[c] = src.data[c];
        }
        return;
    }
    for (i64 k = global_id(); k < n; k += global_stride()) {
        i64 s[4], d[4];
        unflat(k, src.ne, s);
        unflat(k, dst.ne, d);
        char *dp = elem_ptr(dst, d[0], d[1], d[2], d[3]);
        const char *sp = elem_ptr(src, s[0], s[1], s[2], s[3]);
        if (same && ts == 4) {
            *(u32 *)dp = *(const u32 *)sp;
        } else if (same && ts == 2) {
            *(u16 *)dp = *(const u16 *)sp;
        } else if (same) {
            for (int c = 0; c < ts; ++c) dp[c] = sp[c];
        } else {
            store_scalar(dst.type, dp, load_f(src, s[0], s[1], s[2], s[3]));
        }
    }
}

// cpy / cont into a quantised type: one thread per destination block; row
// r of src (same row length) becomes row r of dst.
extern "C" __global__ void k_cpy_q(Tensor dst, Tensor src) {
    int bs = block_size(dst.type), ts = type_size(dst.type);
    i64 nblk = dst.ne[0] / bs;
    i64 n = nblk * dst.ne[1] * dst.ne[2] * dst.ne[3];
    float x[256];
    for (i64 k = global_id(); k < n; k += global_stride()) {
        i64 bi = k % nblk, r = k / nblk;
        i64 d1, d2, d3, s1, s2, s3;
        row_coords(r, dst.ne, &d1, &d2, &d3);
        row_coords(r, src.ne, &s1, &s2, &s3);
        for (int l = 0; l < bs; ++l) x[l] = load_f(src, bi * bs + l, s1, s2, s3);
        quantize_block(dst.type, x, (char *)row_ptr(dst, d1, d2, d3) + bi * ts);
    }
}

// get_rows: dst (i0, j, i1, i2) = a (i0, idx[j, i1, i2], i1, i2).
extern "C" __global__ void k_get_rows(Tensor dst, Tensor a, Tensor idx, int *err) {
    i64 n = nelements(dst);
    bool same = dst.type == a.type && !is_quant(a.type);
    int ts = type_size(dst.type);
    for (i64 k = global_id(); k < n; k += global_stride()) {
        i64 i[4];
        unflat(k, dst.ne, i);
        i32 r = *(const i32 *)elem_ptr(idx, i[1], i[2], i[3], 0);
        char *dp = elem_ptr(dst, i[0], i[1], i[2], i[3]);
        if (r < 0 || r >= a.ne[1]) {
            ATOMIC_OR(err, ERR_GET_ROWS);
            for (int c = 0; c < ts; ++c) dp[c] = 0;
            continue;
        }
        if (same) {
            const char *sp = elem_ptr(a, i[0], r, i[2], i[3]);
            for (int c = 0; c < ts; ++c) dp[c] = sp[c];
        } else {
            store_scalar(dst.type, dp, load_f(a, i[0], r, i[2], i[3]));
        }
    }
}

__device__ __forceinline__ i64 set_rows_target(const Tensor &idx, i64 i1, i64 i2, i64 i3) {
    return *(const i32 *)elem_ptr(idx, i1, i2 % idx.ne[1], i3 % idx.ne[2], 0);
}

// set_rows into a plain type: src (i0, i1, i2, i3) to dst (i0, idx[i1, ..], i2, i3).
extern "C" __global__ void k_set_rows(Tensor dst, Tensor src, Tensor idx, int *err) {
    i64 n = nelements(src);
    for (i64 k = global_id(); k < n; k += global_stride()) {
        i64 i[4];
        unflat(k, src.ne, i);
        i64 t = set_rows_target(idx, i[1], i[2], i[3]);
        if (t < 0 || t >= dst.ne[1]) {
            ATOMIC_OR(err, ERR_SET_ROWS);
            continue;
        }
        store_scalar(dst.type, elem_ptr(dst, i[0], t, i[2], i[3]), load_f(src, i[0], i[1], i[2], i[3]));
    }
}

// set_rows into a quantised type: one thread per (source row, block).
extern "C" __global__ void k_set_rows_q(Tensor dst, Tensor src, Tensor idx, int *err) {
    int bs = block_size(dst.type), ts = type_size(dst.type);
    i64 nblk = dst.ne[0] / bs;
    i64 n = nblk * src.ne[1] * src.ne[2] * src.ne[3];
    float x[256];
    for (i64 k = global_id(); k < n; k += global_stride()) {
        i64 bi = k % nblk, r = k / nblk;
        i64 s1, s2, s3;
        row_coords(r, src.ne, &s1, &s2, &s3);
        i64 t = set_rows_target(idx, s1, s2, s3);
        if (t < 0 || t >= dst.ne[1]) {
            ATOMIC_OR(err, ERR_SET_ROWS);
            continue;
        }
        for (int l = 0; l < bs; ++l) x[l] = load_f(src, bi * bs + l, s1, s2, s3);
        quantize_block(dst.type, x, (char *)row_ptr(dst, t, s2, s3) + bi * ts);
    }
}

extern "C" __global__ void k_concat(Tensor dst, Tensor a, Tensor b, int dim) {
    i64 n = nelements(dst);
    i64 na = a.ne[dim];
    int ts = type_size(dst.type);
    for (i64 k = global_id(); k < n; k += global_stride()) {
        i64 i[4];
        unflat(k, dst.ne, i);
        const char *sp;
        if (i[dim] < na) {
            sp = elem_ptr(a, i[0], i[1], i[2], i[3]);
        } else {
            i64 j[4] = {i[0], i[1], i[2], i[3]};
            j[dim] -= na;
            sp = elem_ptr(b, j[0], j[1], j[2], j[3]);
        }
        char *dp = elem_ptr(dst, i[0], i[1], i[2], i[3]);
        for (int c = 0; c < ts; ++c) dp[c] = sp[c];
    }
}

// ssm_conv: dst[i, t, s] = sum over k < d_conv of sx[t + k, i, s] * c[k, i],
// summed in k order; one thread per output element.
extern "C" __global__ void k_ssm_conv(Tensor dst, Tensor sx, Tensor c) {
    i64 n = nelements(dst);
    i64 d_conv = c.ne[0];
    for (i64 k = global_id(); k < n; k += global_stride()) {
        i64 i[4];
        unflat(k, dst.ne, i);
        float sum = 0.0f;
        for (i64 j = 0; j < d_conv; ++j) {
            sum += load_f(sx, i[1] + j, i[0], i[2], 0) * load_f(c, j, i[0], 0, 0);
        }
        store_scalar(dst.type, elem_ptr(dst, i[0], i[1], i[2], i[3]), sum);
    }
}

// ssm_scan: one thread per (i1, h, j), its state row in local memory
// (d_state <= SSM_MAX_STATE); y first in dst, then the final states.
extern "C" __global__ void k_ssm_scan(Tensor dst, Tensor s, Tensor x, Tensor dt, Tensor a,
                                      Tensor b, Tensor c, Tensor ids, int *err) {
    i64 d_state = s.ne[0], head_dim = x.ne[0], n_head = x.ne[1], n_t = x.ne[2], n_s = x.ne[3];
    i64 per_group = n_head / b.ne[1];
    bool mamba2 = a.ne[0] == 1;
    i64 n = head_dim * n_head * n_s;
    i64 states_at = head_dim * n_head * n_t * n_s;
    float *out = (float *)elem_ptr(dst, 0, 0, 0, 0);
    for (i64 k = global_id(); k < n; k += global_stride()) {
        i64 i1 = k % head_dim, h = (k / head_dim) % n_head, j = k / (head_dim * n_head);
        i64 grp = h / per_group;
        i32 id = *(const i32 *)elem_ptr(ids, j, 0, 0, 0);
        if (id < 0 || id >= s.ne[3]) {
            ATOMIC_OR(err, ERR_SSM_SCAN);
            continue;
        }
        float st[SSM_MAX_STATE];
        for (i64 i0 = 0; i0 < d_state; ++i0) st[i0] = load_f(s, i0, i1, h, id);
        for (i64 t = 0; t < n_t; ++t) {
            float d = softplus_f(load_f(dt, h, t, j, 0));
            float x_dt = load_f(x, i1, h, t, j) * d;
            float decay = expf(d * load_f(a, 0, h, 0, 0));
            float sum = 0.0f;
            for (i64 i0 = 0; i0 < d_state; ++i0) {
                if (!mamba2) decay = expf(d * load_f(a, i0, h, 0, 0));
                float w = st[i0] * decay + load_f(b, i0, grp, t, j) * x_dt;
                sum += w * load_f(c, i0, grp, t, j);
                st[i0] = w;
            }
            out[((j * n_t + t) * n_head + h) * head_dim + i1] = sum;
        }
        i64 at = states_at + ((j * n_head + h) * head_dim + i1) * d_state;
        for (i64 i0 = 0; i0 < d_state; ++i0) out[at + i0] = st[i0];
    }
}

// gated_delta_net: one thread per column j of a (head, sequence)'s state
// matrix, the column in local memory (S <= DELTA_MAX_STATE): the delta rule
// updates each column on its own. The outputs first in dst, then the final
// states; the state element [i, j] is M[i][j].
extern "C" __global__ void k_gated_delta_net(Tensor dst, Tensor q, Tensor k, Tensor v, Tensor g,
                                             Tensor beta, Tensor state) {
    i64 s = v.ne[0], n_head = v.ne[1], n_t = v.ne[2], n_s = v.ne[3];
    i64 n = s * n_head * n_s;
    bool per_channel = g.ne[0] == s;
    float scale = 1.0f / sqrtf((float)s);
    float *out = (float *)elem_ptr(dst, 0, 0, 0, 0);
    for (i64 idx = global_id(); idx < n; idx += global_stride()) {
        i64 j = idx % s, h = (idx / s) % n_head, seq = idx / (s * n_head);
        i64 hk = h % q.ne[1], sk = seq / (n_s / q.ne[3]);
        float m[DELTA_MAX_STATE];
        for (i64 i = 0; i < s; ++i) m[i] = load_f(state, i, j, h, seq);
        for (i64 t = 0; t < n_t; ++t) {
            float e = expf(load_f(g, 0, h, t, seq));
            float mk = 0.0f;
            for (i64 i = 0; i < s; ++i) {
                float w = m[i] * (per_channel ? expf(load_f(g, i, h, t, seq)) : e);
                m[i] = w;
                mk += w * load_f(k, i, hk, t, sk);
            }
            float delta = (load_f(v, j, h, t, seq) - mk) * load_f(beta, 0, h, t, seq);
            float mq = 0.0f;
            for (i64 i = 0; i < s; ++i) {
                float w = m[i] + load_f(k, i, hk, t, sk) * delta;
                m[i] = w;
                mq += w * load_f(q, i, hk, t, sk);
            }
            out[((seq * n_t + t) * n_head + h) * s + j] = mq * scale;
        }
        i64 at = s * n_head * n_t * n_s + ((seq * n_head + h) * s + j) * s;
        for (i64 i = 0; i < s; ++i) out[at + i] = m[i];
    }
}

// ---- row kernels: one block per row ------------------------------------------

extern "C" __global__ void k_rms_norm(Tensor dst, Tensor a, float eps) {
    __shared__ float sh[32];
    i64 i1, i2, i3;
    row_coords(blockIdx.x, dst.ne, &i1, &i2, &i3);
    i64 n0 = dst.ne[0];
    float s = 0.0f;
    for (i64 i0 = threadIdx.x; i0 < n0; i0 += blockDim.x) {
        float v = load_f(a, i0, i1, i2, i3);
        s += v * v;
    }
    s = block_sum(s, sh);
    float scale = 1.0f / sqrtf(s / (float)n0 + eps);
    for (i64 i0 = threadIdx.x; i0 < n0; i0 += blockDim.x) {
        float v = load_f(a, i0, i1, i2, i3);
        store_scalar(dst.type, elem_ptr(dst, i0, i1, i2, i3), v * scale);
    }
}

extern "C" __global__ void k_norm(Tensor dst, Tensor a, float eps) {
    __shared__ float sh[32];
    i64 i1, i2, i3;
    row_coords(blockIdx.x, dst.ne, &i1, &i2, &i3);
    i64 n0 = dst.ne[0];
    float s = 0.0f;
    for (i64 i0 = threadIdx.x; i0 < n0; i0 += blockDim.x) s += load_f(a, i0, i1, i2, i3);
    float mean = block_sum(s, sh) / (float)n0;
    float v2 = 0.0f;
    for (i64 i0 = threadIdx.x; i0 < n0; i0 += blockDim.x) {
        float d = load_f(a, i0, i1, i2, i3) - mean;
        v2 += d * d;
    }
    float var = block_sum(v2, sh) / (float)n0;
    float scale = 1.0f / sqrtf(var + eps);
    for (i64 i0 = threadIdx.x; i0 < n0; i0 += blockDim.x) {
        float v = load_f(a, i0, i1, i2, i3);
        store_scalar(dst.type, elem_ptr(dst, i0, i1, i2, i3), (v - mean) * scale);
    }
}

extern "C" __global__ void k_sum_rows(Tensor dst, Tensor a) {
    __shared__ float sh[32];
    i64 i1, i2, i3;
    row_coords(blockIdx.x, dst.ne, &i1, &i2, &i3);
    float s = 0.0f;
    for (i64 i0 = threadIdx.x; i0 < a.ne[0]; i0 += blockDim.x) s += load_f(a, i0, i1, i2, i3);
    s = block_sum(s, sh);
    if (threadIdx.x == 0) store_scalar(dst.type, elem_ptr(dst, 0, i1, i2, i3), s);
}

// ALiBi slope of head h (1 when max_bias is 0), from the host's m0, m1
// and n_head_log2.
__device__ __forceinline__ float alibi_slope(float max_bias, float m0, float m1, int n_head_log2, i64 h) {
    if (max_bias <= 0.0f) return 1.0f;
    return h < n_head_log2 ? powf(m0, (float)(h + 1)) : powf(m1, (float)(2 * (h - n_head_log2) + 1));
}

__device__ __forceinline__ float soft_max_in(const Tensor &a, const Tensor &mask, int has_mask, float scale, float slope, i64 i0,
                                             i64 i1, i64 i2, i64 i3) {
    float v = load_f(a, i0, i1, i2, i3) * scale;
    if (has_mask) v += slope * load_f(mask, i0, i1, i2 % mask.ne[2], i3 % mask.ne[3]);
    return v;
}

// softmax(a * scale + mask * slope) along rows; a row with no finite value
// gives zeros.
// With sinks (F32, one per head i2), the head's sink joins each row's
// maximum and sum of exponentials.
extern "C" __global__ void k_soft_max(Tensor dst, Tensor a, Tensor mask, int has_mask, Tensor sinks, int has_sinks,
                                      float scale, float max_bias, float m0, float m1, int n_head_log2) {
    __shared__ float sh[32];
    i64 i1, i2, i3;
    row_coords(blockIdx.x, dst.ne, &i1, &i2, &i3);
    i64 n0 = dst.ne[0];
    float slope = alibi_slope(max_bias, m0, m1, n_head_log2, i2);
    float mx = -inf_f();
    for (i64 i0 = threadIdx.x; i0 < n0; i0 += blockDim.x)
        mx = fmaxf(mx, soft_max_in(a, mask, has_mask, scale, slope, i0, i1, i2, i3));
    mx = block_max(mx, sh);
    float sink = has_sinks ? ((const float *)sinks.data)[i2] : 0.0f;
    if (has_sinks && sink > mx) mx = sink;
    float s = 0.0f;
    if (mx != -inf_f())
        for (i64 i0 = threadIdx.x; i0 < n0; i0 += blockDim.x)
            s += expf(soft_max_in(a, mask, has_mask, scale, slope, i0, i1, i2, i3) - mx);
    s = block_sum(s, sh);
    if (has_sinks) s += expf(sink - mx);
    float inv = (mx == -inf_f() || s == 0.0f) ? 0.0f : 1.0f / s;
    // each thread rewrites only the values it reads here, after every
    // thread is done with the reductions, so an in-place dst is safe
    for (i64 i0 = threadIdx.x; i0 < n0; i0 += blockDim.x) {
        float v = mx == -inf_f() ? 0.0f : expf(soft_max_in(a, mask, has_mask, scale, slope, i0, i1, i2, i3) - mx) * inv;
        store_scalar(dst.type, elem_ptr(dst, i0, i1, i2, i3), v);
    }
}

// ---- rope --------------------------------------------------------------------

// One thread per pair of a row: the first n_dims/2 threads rotate a pair,
// the rest copy the dims past n_dims two at a time. mode 0 normal
// (adjacent pairs), 2 neox (halves). Rows are (head i1, token i2, i3).
extern "C" __global__ void k_rope(Tensor dst, Tensor a, Tensor pos, Tensor ff, int has_ff, int n_dims, int mode, float freq_base,
                                  float freq_scale, float ext_factor, float attn_factor, float corr_low, float corr_high) {
    i64 ne0 = dst.ne[0];
    i64 half = n_dims / 2;
    i64 per_row = half + (ne0 - n_dims + 1) / 2;
    i64 n = per_row * dst.ne[1] * dst.ne[2] * dst.ne[3];
    for (i64 k = global_id(); k < n; k += global_stride()) {
        i64 p = k % per_row;
        i64 i1, i2, i3;
        row_coords(k / per_row, dst.ne, &i1, &i2, &i3);
        if (p >= half) {
            i64 c0 = n_dims + 2 * (p - half);
            for (i64 c = c0; c < c0 + 2 && c < ne0; ++c)
                store_scalar(dst.type, elem_ptr(dst, c, i1, i2, i3), load_f(a, c, i1, i2, i3));
            continue;
        }
        float position = (float)*(const i32 *)elem_ptr(pos, i2, 0, 0, 0);
        float f = has_ff ? load_f(ff, p, 0, 0, 0) : 1.0f;
        float theta_scale = powf(freq_base, -2.0f / (float)n_dims);
        float theta_extrap = position * powf(theta_scale, (float)p) / f;
        float theta_interp = freq_scale * theta_extrap;
        float theta = theta_interp;
        float mscale = attn_factor;
        if (ext_factor != 0.0f) {
            float y = ((float)p - corr_low) / fmaxf(0.001f, corr_high - corr_low);
            float ramp_mix = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * ext_factor;
            theta = theta_interp * (1.0f - ramp_mix) + theta_extrap * ramp_mix;
            mscale *= 1.0f + 0.1f * logf(1.0f / freq_scale);
        }
        float c = cosf(theta) * mscale, s = sinf(theta) * mscale;
        i64 j0 = mode == 2 ? p : 2 * p;
        i64 j1 = mode == 2 ? p + half : 2 * p + 1;
        float x0 = load_f(a, j0, i1, i2, i3), x1 = load_f(a, j1, i1, i2, i3);
        store_scalar(dst.type, elem_ptr(dst, j0, i1, i2, i3), x0 * c - x1 * s);
        store_scalar(dst.type, elem_ptr(dst, j1, i1, i2, i3), x0 * s + x1 * c);
    }
}

// ---- sorting: one block per row, bitonic over a power-of-two padding ---------

// Whether element x sorts before y (index tie-break keeps the sort
// stable; padding sorts last).
__device__ __forceinline__ bool sorts_before(const float *v, const int *ix, int x, int y, int n, int descending) {
    int a = ix[x], b = ix[y];
    if (a >= n) return false;
    if (b >= n) return true;
    float va = v[a], vb = v[b];
    if (va == vb) return a < b;
    return descending ? va > vb : va < vb;
}

__device__ void bitonic_sort_row(const Tensor &a, i64 i1, i64 i2, i64 i3, int npad, int descending, float *vals, int *ix) {
    int n = (int)a.ne[0];
    for (int t = threadIdx.x; t < npad; t += blockDim.x) {
        ix[t] = t;
        vals[t] = t < n ? load_f(a, t, i1, i2, i3) : 0.0f;
    }
    __syncthreads();
    for (int k = 2; k <= npad; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int t = threadIdx.x; t < npad; t += blockDim.x) {
                int partner = t ^ j;
                if (partner > t) {
                    bool up = (t & k) == 0;
                    bool swap = up ? sorts_before(vals, ix, partner, t, n, descending)
                                   : sorts_before(vals, ix, t, partner, n, descending);
                    if (swap) {
                        int tmp = ix[t];
                        ix[t] = ix[partner];
                        ix[partner] = tmp;
                    }
                }
            }
            __syncthreads();
        }
    }
}

// argsort (k = ne0) and top_k (descending, first k): dst holds I32 indices.
extern "C" __global__ void k_argsort(Tensor dst, Tensor a, int npad, int descending) {
    DYN_SHARED(char, smem);
    float *vals = (float *)smem;
    int *ix = (int *)(smem + 4 * (i64)npad);
    i64 i1, i2, i3;
    row_coords(blockIdx.x, a.ne, &i1, &i2, &i3);
    bitonic_sort_row(a, i1, i2, i3, npad, descending, vals, ix);
    for (int t = threadIdx.x; t < dst.ne[0]; t += blockDim.x) *(i32 *)elem_ptr(dst, t, i1, i2, i3) = ix[t];
}

// ---- matrix products -------------------------------------------------------------

// Warps per block of the mat-vec kernels (MMV_WARPS in dispatch.rs).
#define MMV_WARPS 4

// The mat-vec kernels: mul_mat for a few columns (n <= 8) of F32
// activations with packed values (dispatch.rs sends anything else to the
// tiled kernel). One warp per output row, the lanes reading consecutive
// values of the row so that every load of the warp is one stretch of
// memory; each plain and quantised in a kernel of its own, so that
// neither pays the other's registers (fewer registers, more warps in
// flight). grid (ceil(m / MMV_WARPS), 1, ne2 * ne3 of dst), block
// 32 * MMV_WARPS.

// The sums of the lanes of a warp into row i of the columns.
__device__ __forceinline__ void mmv_store(const Tensor &dst, i64 i, i64 i2, i64 i3, int ncols, const float *acc) {
    int lane = threadIdx.x % WARP;
    for (int j = 0; j < 8; ++j) {
        if (j < ncols) {
            float v = warp_sum(acc[j]);
            if (lane == 0) *(float *)elem_ptr(dst, i, j, i2, i3) = v;
        }
    }
}

// Plain rows (F32, F16, BF16): four values a lane at a time where the
// rows allow, else one.
extern "C" __global__ void __launch_bounds__(32 * MMV_WARPS, 8) k_mul_mat_vec(Tensor dst, Tensor a, Tensor b) {
    int lane = threadIdx.x % WARP;
    i64 i = (i64)blockIdx.x * MMV_WARPS + threadIdx.x / WARP;
    i64 i2 = blockIdx.z % dst.ne[2], i3 = blockIdx.z / dst.ne[2];
    if (i >= dst.ne[0]) return;
    i64 r2 = b.ne[2] / a.ne[2], r3 = b.ne[3] / a.ne[3];
    const char *arow = row_ptr(a, i, i2 / r2, i3 / r3);
    const char *bcol = row_ptr(b, 0, i2, i3);
    int ncols = (int)dst.ne[1];
    i64 k = a.ne[0], bstride = b.nb[1];
    int ts = type_size(a.type);
    float acc[8];
    for (int j = 0; j < 8; ++j) acc[j] = 0.0f;
    bool wide = a.nb[0] == ts && k % 4 == 0 && aligned_to(arow, 4 * ts) && aligned_to(bcol, 16) && bstride % 16 == 0;
    if (wide && ncols == 1) {
        // generation: two steps of the warp at a time, their loads in
        // flight together (k is a multiple of 4: a step is whole or absent)
        for (i64 e = 4 * (i64)lane; e < k; e += 8 * WARP) {
            i64 e2 = e + 4 * WARP;
            bool second = e2 < k;
            float w[8], xv[8];
            load4_plain(a.type, arow + e * ts, w);
            load4_plain(T_F32, bcol + e * 4, xv);
            if (second) {
                load4_plain(a.type, arow + e2 * ts, w + 4);
                load4_plain(T_F32, bcol + e2 * 4, xv + 4);
            } else {
                for (int l = 4; l < 8; ++l) w[l] = xv[l] = 0.0f;
            }
            float sum = 0.0f;
            for (int l = 0; l < 8; ++l) sum += w[l] * xv[l];
            acc[0] += sum;
        }
    } else if (wide) {
        for (i64 e = 4 * (i64)lane; e < k; e += 4 * WARP) {
            float w[4];
            load4_plain(a.type, arow + e * ts, w);
            for (int j = 0; j < 8; ++j) {
                if (j < ncols) {
                    float x[4];
                    load4_plain(T_F32, bcol + j * bstride + e * 4, x);
                    acc[j] += w[0] * x[0] + w[1] * x[1] + w[2] * x[2] + w[3] * x[3];
                }
            }
        }
    } else {
        for (i64 e = lane; e < k; e += WARP) {
            float w = load_scalar(a.type, arow + e * a.nb[0]);
            for (int j = 0; j < 8; ++j)
                if (j < ncols) acc[j] += w * ((const float *)(bcol + j * bstride))[e];
        }
    }
    mmv_store(dst, i, i2, i3, ncols, acc);
}

// Quantised rows, 32 blocks of 32 values at a time: each lane dequantises
// one block into shared memory (rows of 33 floats, so that neither the
// writes nor the reads of the warp share a bank), then the warp reads
// them back in order against the activations.
extern "C" __global__ void k_mul_mat_vec_q(Tensor dst, Tensor a, Tensor b) {
    __shared__ float staged[MMV_WARPS][32 * 33];
    int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP;
    i64 i = (i64)blockIdx.x * MMV_WARPS + warp;
    i64 i2 = blockIdx.z % dst.ne[2], i3 = blockIdx.z / dst.ne[2];
    // every warp takes part in the block's barriers, past the last row too
    bool active = i < dst.ne[0];
    i64 r2 = b.ne[2] / a.ne[2], r3 = b.ne[3] / a.ne[3];
    const char *arow = row_ptr(a, active ? i : 0, i2 / r2, i3 / r3);
    const char *bcol = row_ptr(b, 0, i2, i3);
    int ncols = (int)dst.ne[1];
    i64 k = a.ne[0], bstride = b.nb[1];
    float acc[8];
    for (int j = 0; j < 8; ++j) acc[j] = 0.0f;
    i64 units = (k + 31) / 32;
    float *mine = staged[warp];
    for (i64 u0 = 0; u0 < units; u0 += WARP) {
        float *w = mine + lane * 33;
        if (active && u0 + lane < units) {
            dequant_unit(a.type, arow, a.nb[0], u0 + lane, k, w);
        } else {
            for (int l = 0; l < 32; ++l) w[l] = 0.0f;
        }
        __syncthreads();
        int n_units = (int)(units - u0 < WARP ? units - u0 : WARP);
        if (ncols == 1) {
            // generation: four blocks a step, their four loads in flight
            // together (units past the row's end read as zeros)
            const float *x = (const float *)bcol;
            for (int t0 = 0; t0 < n_units; t0 += 4) {
                float sum = 0.0f;
                for (int q = 0; q < 4; ++q) {
                    i64 e = (u0 + t0 + q) * 32 + lane;
                    bool valid = t0 + q < n_units && e < k;
                    float wv = valid ? mine[(t0 + q) * 33 + lane] : 0.0f;
                    sum += wv * x[valid ? e : lane];
                }
                acc[0] += sum;
            }
        } else {
            for (int t = 0; t < n_units; ++t) {
                i64 e = (u0 + t) * 32 + lane;
                if (e < k) {
                    float wv = mine[t * 33 + lane];
                    for (int j = 0; j < 8; ++j)
                        if (j < ncols) acc[j] += wv * ((const float *)(bcol + j * bstride))[e];
                }
            }
        }
        __syncthreads();
    }
    if (active) mmv_store(dst, i, i2, i3, ncols, acc);
}

// Rows of a matrix of any type as F16, for the BLAS library: dst is F16
// with packed rows, a.ne[1] rows of a.ne[0] values (dims 2 and 3 are not
// read). One thread per 32 values, written 16 bytes at a time.
extern "C" __global__ void k_dequant_f16(Tensor dst, Tensor a) {
    i64 k = a.ne[0], units = (k + 31) / 32, n = units * a.ne[1];
    float w[32];
    for (i64 g = global_id(); g < n; g += global_stride()) {
        i64 r = g / units, u = g % units;
        dequant_unit(a.type, row_ptr(a, r, 0, 0), a.nb[0], u, k, w);
        char *out = (char *)row_ptr(dst, r, 0, 0) + u * 64;
        int len = (int)(k - u * 32 < 32 ? k - u * 32 : 32);
        if (len == 32 && aligned_to(out, 16)) {
            for (int q = 0; q < 4; ++q) {
                U32x4 v;
                for (int h = 0; h < 4; ++h)
                    v.v[h] = (u32)f2h(w[8 * q + 2 * h]) | ((u32)f2h(w[8 * q + 2 * h + 1]) << 16);
                ((U32x4 *)out)[q] = v;
            }
        } else {
            for (int l = 0; l < len; ++l) *(u16 *)(out + 2 * l) = f2h(w[l]);
        }
    }
}

#define TILE_M 64
#define TILE_N 64
#define TILE_K 32

// mul_mat for any weight type and batch: 64x64 output tiles, weights
// dequantised straight from their blocks into shared memory 32 values of
// k at a time. grid (ceil(m/64), ceil(n/64), ne2 * ne3), block 256.
extern "C" __global__ void k_mul_mat_tiled(Tensor dst, Tensor a, Tensor b) {
    __shared__ float as[TILE_M][TILE_K + 1];
    __shared__ float bs[TILE_N][TILE_K + 1];
    int t = threadIdx.x;
    i64 m = dst.ne[0], n = dst.ne[1], k = a.ne[0];
    i64 i0 = (i64)blockIdx.x * TILE_M, j0 = (i64)blockIdx.y * TILE_N;
    i64 i2 = blockIdx.z % dst.ne[2], i3 = blockIdx.z / dst.ne[2];
    i64 r2 = b.ne[2] / a.ne[2], r3 = b.ne[3] / a.ne[3];
    int tr = t / 16, tc = t % 16;
    float acc[4][4];
    for (int p = 0; p < 4; ++p)
        for (int q = 0; q < 4; ++q) acc[p][q] = 0.0f;
    // each thread loads 8 values of one row of each tile
    int lr = t / 4, lk = (t % 4) * 8;
    bool quant = is_quant(a.type);
    for (i64 k0 = 0; k0 < k; k0 += TILE_K) {
        i64 ia = i0 + lr;
        for (int l = 0; l < 8; ++l) {
            i64 kk = k0 + lk + l;
            float v = 0.0f;
            if (ia < m && kk < k) {
                const char *arow = row_ptr(a, ia, i2 / r2, i3 / r3);
                v = quant ? deq1(a.type, arow, kk) : load_scalar(a.type, arow + kk * a.nb[0]);
            }
            as[lr][lk + l] = v;
        }
        i64 jb = j0 + lr;
        for (int l = 0; l < 8; ++l) {
            i64 kk = k0 + lk + l;
            bs[lr][lk + l] = (jb < n && kk < k) ? load_f(b, kk, jb, i2, i3) : 0.0f;
        }
        __syncthreads();
        for (int kk = 0; kk < TILE_K; ++kk) {
            float av[4], bv[4];
            for (int p = 0; p < 4; ++p) av[p] = as[tr + 16 * p][kk];
            for (int q = 0; q < 4; ++q) bv[q] = bs[tc + 16 * q][kk];
            for (int p = 0; p < 4; ++p)
                for (int q = 0; q < 4; ++q) acc[p][q] += av[p] * bv[q];
        }
        __syncthreads();
    }
    for (int p = 0; p < 4; ++p) {
        i64 i = i0 + tr + 16 * p;
        if (i >= m) continue;
        for (int q = 0; q < 4; ++q) {
            i64 j = j0 + tc + 16 * q;
            if (j < n) *(float *)elem_ptr(dst, i, j, i2, i3) = acc[p][q];
        }
    }
}

// mul_mat_id: dst (i, e, t) = experts[ids[e, t]] row i . b column (e % n_b, t).
// grid (ceil(m / warps), n_used, n_tokens), block 32 * warps.
extern "C" __global__ void k_mul_mat_id(Tensor dst, Tensor as, Tensor b, Tensor ids, int *err) {
    int lane = threadIdx.x % WARP;
    i64 i = (i64)blockIdx.x * (blockDim.x / WARP) + threadIdx.x / WARP;
    i64 e = blockIdx.y, t = blockIdx.z;
    if (i >= dst.ne[0]) return;
    i32 x = *(const i32 *)elem_ptr(ids, e, t, 0, 0);
    float *out = (float *)elem_ptr(dst, i, e, t, 0);
    if (x < 0 || x >= as.ne[2]) {
        if (lane == 0) {
            ATOMIC_OR(err, ERR_MUL_MAT_ID);
            *out = 0.0f;
        }
        return;
    }
    const char *arow = row_ptr(as, i, x, 0);
    i64 col = e % b.ne[1];
    i64 k = as.ne[0];
    i64 units = (k + 31) / 32;
    float w[32];
    float acc = 0.0f;
    for (i64 u = lane; u < units; u += WARP) {
        dequant_unit(as.type, arow, as.nb[0], u, k, w);
        int len = (int)(k - u * 32 < 32 ? k - u * 32 : 32);
        for (int l = 0; l < len; ++l) acc += w[l] * load_f(b, u * 32 + l, col, t, 0);
    }
    acc = warp_sum(acc);
    if (lane == 0) *out = acc;
}

// ---- attention -------------------------------------------------------------------

#define FA_MAX_PER_LANE 16

// flash_attn_ext: one warp per (query, head, sequence) with an online
// softmax over the keys; head dims up to 32 * FA_MAX_PER_LANE.
// grid (n_q, n_head, n_seq), block 32. dst [dv, n_head, n_q, n_seq].
extern "C" __global__ void k_flash_attn(Tensor dst, Tensor q, Tensor k, Tensor v, Tensor mask, int has_mask, Tensor sinks,
                                        int has_sinks, float scale, float max_bias, float softcap, float m0, float m1,
                                        int n_head_log2) {
    int lane = threadIdx.x % WARP;
    i64 iq = blockIdx.x, h = blockIdx.y, is = blockIdx.z;
    i64 d = q.ne[0], dv = v.ne[0], n_kv = k.ne[1];
    i64 group = q.ne[2] / k.ne[2];
    if (group < 1) group = 1;
    i64 hk = h / group;
    float slope = alibi_slope(max_bias, m0, m1, n_head_log2, h);
    float qv[FA_MAX_PER_LANE], acc[FA_MAX_PER_LANE];
    for (int r = 0; r < FA_MAX_PER_LANE; ++r) {
        i64 c = lane + (i64)WARP * r;
        qv[r] = c < d ? load_f(q, c, iq, h, is) : 0.0f;
        acc[r] = 0.0f;
    }
    float mx = -inf_f(), sum = 0.0f;
    for (i64 j = 0; j < n_kv; ++j) {
        float mv = has_mask ? load_f(mask, j, iq, h % mask.ne[2], is % mask.ne[3]) : 0.0f;
        if (mv == -inf_f()) continue;
        float part = 0.0f;
        for (int r = 0; r < FA_MAX_PER_LANE; ++r) {
            i64 c = lane + (i64)WARP * r;
            if (c < d) part += qv[r] * load_f(k, c, j, hk, is);
        }
        float s = warp_sum(part) * scale;
        if (softcap != 0.0f) s = softcap * tanhf(s / softcap);
        s += slope * mv;
        if (s > mx) {
            float c = expf(mx - s);
            for (int r = 0; r < FA_MAX_PER_LANE; ++r) acc[r] *= c;
            sum *= c;
            mx = s;
        }
        float p = expf(s - mx);
        sum += p;
        for (int r = 0; r < FA_MAX_PER_LANE; ++r) {
            i64 c = lane + (i64)WARP * r;
            if (c < dv) acc[r] += p * load_f(v, c, j, hk, is);
        }
    }
    if (has_sinks) {
        // the head's sink joins the maximum and the sum, and adds no value
        float sk = ((const float *)sinks.data)[h];
        if (sk > mx) {
            float c = expf(mx - sk);
            for (int r = 0; r < FA_MAX_PER_LANE; ++r) acc[r] *= c;
            sum *= c;
            mx = sk;
        }
        sum += expf(sk - mx);
    }
    float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int r = 0; r < FA_MAX_PER_LANE; ++r) {
        i64 c = lane + (i64)WARP * r;
        if (c < dv) *(float *)elem_ptr(dst, c, h, iq, is) = acc[r] * inv;
    }
}

// add_id: dst[:, e, t] = a[:, e, t] + b[:, ids[e, t]] (a bias per selected
// expert); an id outside b's rows sets ERR_ADD_ID and leaves the row.
extern "C" __global__ void k_add_id(Tensor dst, Tensor a, Tensor b, Tensor ids, int *err) {
    i64 n = nelements(dst);
    for (i64 k = global_id(); k < n; k += global_stride()) {
        i64 i[4];
        unflat(k, dst.ne, i);
        int e = *(const int *)elem_ptr(ids, i[1], i[2], 0, 0);
        if (e < 0 || e >= b.ne[1]) {
            ATOMIC_OR(err, ERR_ADD_ID);
            continue;
        }
        float v = load_f(a, i[0], i[1], i[2], i[3]) + load_f(b, i[0], e, 0, 0);
        *(float *)elem_ptr(dst, i[0], i[1], i[2], i[3]) = v;
    }
}
