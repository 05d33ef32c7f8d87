// Prelude of ggraph.cu for HIP (hiprtc). The names that differ from CUDA:
// warp shuffles take no mask (width 32 keeps a "warp" at 32 lanes on
// wave64 hardware too).
#define GGRAPH_HIP 1
#define SHFL_XOR(v, m) __shfl_xor((v), (m), 32)
#define ATOMIC_OR(p, v) atomicOr((p), (v))
#define DYN_SHARED(T, name) extern __shared__ T name[]
