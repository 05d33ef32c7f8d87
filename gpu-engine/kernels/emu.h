// Host emulation of the CUDA execution model, so that ggraph.cu can be
// compiled as C++ (g++ or clang++) and its kernels run on the CPU in the
// tests: every thread of a block is a fiber (ucontext) with its own stack,
// __syncthreads() and warp shuffles are barriers between fibers, shared
// memory is a static shared by the fibers of the block, blocks run one
// after another. A barrier that can never be passed (threads of a block
// waiting at different barriers) is reported as an error, not a hang.
#pragma once

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#define GGRAPH_EMU 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static thread_local

struct dim3 {
    unsigned x, y, z;
};

namespace emu {

enum State { READY, AT_BLOCK, AT_WARP, DONE };

struct Fiber {
    ucontext_t ctx;
    State state;
};

struct Launch {
    dim3 grid, block, block_idx;
    unsigned nthreads = 0;
    unsigned cur = 0;
    std::vector<Fiber> fibers;
    ucontext_t sched;
    std::function<void()> body;
    std::vector<uint64_t> dyn_shared;
    std::vector<uint64_t> exch;
};

// The launch running on this host thread.
inline thread_local Launch *L = nullptr;

constexpr size_t STACK_BYTES = 256 * 1024;

inline std::vector<std::unique_ptr<char[]>> &stacks() {
    static thread_local std::vector<std::unique_ptr<char[]>> s;
    return s;
}

inline dim3 thread_idx() {
    unsigned c = L->cur, bx = L->block.x, by = L->block.y;
    return dim3{c % bx, (c / bx) % by, c / (bx * by)};
}

inline void wait(State s) {
    Fiber &f = L->fibers[L->cur];
    f.state = s;
    swapcontext(&f.ctx, &L->sched);
}

inline void sync_block() { wait(AT_BLOCK); }

template <class T> inline T shfl_xor(T v, int mask) {
    static_assert(sizeof(T) <= 8, "shuffled values are at most 8 bytes");
    unsigned me = L->cur;
    memcpy(&L->exch[me], &v, sizeof(T));
    wait(AT_WARP);
    unsigned lane = me % 32;
    unsigned src = me - lane + (lane ^ (unsigned)mask);
    T r;
    memcpy(&r, &L->exch[src], sizeof(T));
    wait(AT_WARP);
    return r;
}

inline void fiber_main() {
    L->body();
    L->fibers[L->cur].state = DONE;
    swapcontext(&L->fibers[L->cur].ctx, &L->sched);
}

// Kept out of line: getcontext returns twice, which must not clobber the
// caller's loop state.
__attribute__((noinline)) inline void init_fiber(Fiber &f, char *stack) {
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = stack;
    f.ctx.uc_stack.ss_size = STACK_BYTES;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, fiber_main, 0);
    f.state = READY;
}

// Runs every thread of the current block to completion; false on a
// barrier that cannot be passed.
inline bool run_block(char *err, size_t errlen) {
    Launch &l = *L;
    unsigned n = l.nthreads;
    for (unsigned i = 0; i < n; ++i) init_fiber(l.fibers[i], stacks()[i].get());
    for (;;) {
        for (unsigned i = 0; i < n; ++i) {
            if (l.fibers[i].state == READY) {
                l.cur = i;
                swapcontext(&l.sched, &l.fibers[i].ctx);
            }
        }
        unsigned done = 0, at_block = 0;
        for (unsigned i = 0; i < n; ++i) {
            done += l.fibers[i].state == DONE;
            at_block += l.fibers[i].state == AT_BLOCK;
        }
        if (done == n) return true;
        bool released = false;
        for (unsigned w = 0; w < n; w += 32) {
            bool any = false, all = true;
            for (unsigned i = w; i < w + 32 && i < n; ++i) {
                State s = l.fibers[i].state;
                if (s == DONE) continue;
                any = true;
                all = all && s == AT_WARP;
            }
            if (any && all) {
                for (unsigned i = w; i < w + 32 && i < n; ++i)
                    if (l.fibers[i].state == AT_WARP) l.fibers[i].state = READY;
                released = true;
            }
        }
        if (released) continue;
        if (at_block > 0 && at_block + done == n) {
            for (unsigned i = 0; i < n; ++i)
                if (l.fibers[i].state == AT_BLOCK) l.fibers[i].state = READY;
            continue;
        }
        snprintf(err, errlen,
                 "block (%u, %u, %u): threads wait at different barriers (%u of %u at __syncthreads, the rest at warp "
                 "shuffles or done)",
                 l.block_idx.x, l.block_idx.y, l.block_idx.z, at_block, n);
        return false;
    }
}

template <class... A, size_t... I>
inline std::tuple<A...> copy_args(void **args, std::index_sequence<I...>) {
    return std::tuple<A...>(*reinterpret_cast<A *>(args[I])...);
}

// Launches kernel `k` as cuLaunchKernel would: args[i] points at the
// value of parameter i. Returns 0, or -1 with a message in err.
template <class... A>
inline int launch(void (*k)(A...), dim3 grid, dim3 block, unsigned shared_bytes, void **args, char *err, size_t errlen) {
    unsigned n = block.x * block.y * block.z;
    if (n == 0 || n > 1024 || n % 32 != 0) {
        snprintf(err, errlen, "block of %u threads: the emulator runs whole warps of 32, at most 1024", n);
        return -1;
    }
    auto params = copy_args<A...>(args, std::index_sequence_for<A...>{});
    Launch l;
    l.grid = grid;
    l.block = block;
    l.nthreads = n;
    l.fibers.resize(n);
    l.exch.assign(n, 0);
    l.dyn_shared.assign((shared_bytes + 7) / 8 + 1, 0);
    l.body = [&]() { std::apply(k, params); };
    while (stacks().size() < n) stacks().emplace_back(new char[STACK_BYTES]);
    Launch *prev = L;
    L = &l;
    int rc = 0;
    for (unsigned z = 0; z < grid.z && rc == 0; ++z)
        for (unsigned y = 0; y < grid.y && rc == 0; ++y)
            for (unsigned x = 0; x < grid.x && rc == 0; ++x) {
                l.block_idx = dim3{x, y, z};
                if (!run_block(err, errlen)) rc = -1;
            }
    L = prev;
    return rc;
}

} // namespace emu

#define threadIdx (emu::thread_idx())
#define blockIdx (emu::L->block_idx)
#define blockDim (emu::L->block)
#define gridDim (emu::L->grid)
#define __syncthreads() emu::sync_block()
#define SHFL_XOR(v, m) emu::shfl_xor((v), (m))
#define ATOMIC_OR(p, v) (*(p) |= (v))
#define DYN_SHARED(T, name) T *name = reinterpret_cast<T *>(emu::L->dyn_shared.data())
