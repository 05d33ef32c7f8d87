// Prelude of ggraph.cu for CUDA (NVRTC).
#define GGRAPH_CUDA 1
#define SHFL_XOR(v, m) __shfl_xor_sync(0xffffffffu, (v), (m), 32)
#define ATOMIC_OR(p, v) atomicOr((p), (v))
#define DYN_SHARED(T, name) extern __shared__ T name[]
