/* simt.h: the subset of CUDA that pacic's generated kernels use, emulated on the CPU so that
 * stages.cu compiles as C++17 (g++ -include tests/cuda_emu/simt.h -x c++ stages.cu) and its
 * kernels run without a GPU. Header-only; test tooling, never part of pacic or run.
 *
 * Execution model. A launch of G blocks of N threads runs the blocks one after another on
 * the calling OS thread. Within a block every CUDA thread is a coroutine with a stack of its
 * own (SIMT_STACK_BYTES, a guard page below it); the block's threads are resumed round-robin
 * in threadIdx order, and a thread runs until it finishes or waits:
 *   - __syncthreads() is a barrier of the block's live threads: a thread that has returned
 *     no longer counts (real GPUs leave that undefined; write kernels whose threads all
 *     reach every barrier or none).
 *   - a warp shuffle (__shfl_xor_sync, __shfl_down_sync, __shfl_up_sync, __shfl_sync) and
 *     __syncwarp() are warp-level exchange points. Warps are 32 consecutive threads. Every
 *     lane of the warp must take part with mask 0xffffffff: a partial mask, a warp cut short
 *     by blockDim, or a lane that returned before a shuffle its warp reaches is reported and
 *     aborts. Values are double-buffered by each lane's shuffle count, so a lane that runs
 *     ahead to its next shuffle never overwrites a value that a slower lane has still to read.
 *   - if a whole round of the block's live threads passes with every one of them still
 *     waiting, the block is deadlocked (threads at different barriers or shuffles): reported,
 *     abort.
 * The schedule is deterministic: the same launch runs the same interleaving every time, and
 * a kernel with no barrier or shuffle runs its threads to the end in threadIdx order (so
 * atomicAdd sums in the same order as a loop over the indices would).
 *
 * Memory. Every pointer is host memory. `__shared__` declares a function-local
 * `static thread_local` variable: one copy per OS thread, correct per block because a
 * thread's blocks run one at a time (and the pipeline's stage threads launch independently);
 * its contents are not cleared between blocks, as on a GPU. Dynamic shared memory
 * (`extern __shared__`) is not supported. There is no memory model to emulate: threads
 * interleave only at barriers and shuffles, and atomicAdd is a plain read-modify-write.
 *
 * Switching. A coroutine is entered once per stack, the first time a launch needs that
 * stack, through ucontext (makecontext gives it the stack); it then runs CUDA threads one
 * after another for every later block and launch, and every switch between it and the
 * scheduler is a sigsetjmp (mask not saved) and siglongjmp: no system call, where
 * swapcontext makes one per switch to save the signal mask, and getcontext one per CUDA
 * thread (system time was about 40% of the emulated tests' CPU time). QEMU's ucontext
 * coroutines switch the same way; a siglongjmp to another stack is what _FORTIFY_SOURCE's
 * checked longjmp refuses, hence the #undef below.
 *
 * Launching from C: simt::trampoline<kernel> unpacks a cuLaunchKernel-style void **args
 * (args[i] points to parameter i) into the kernel's typed parameters; the table of
 * trampolines is generated from stages.cu by tests/cuda_emu/trampolines.sh.
 */
#ifndef SIMT_H
#define SIMT_H

#undef _FORTIFY_SOURCE /* before any system header: see "Switching" */

#include <math.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

/* ---- the CUDA spellings ------------------------------------------------------------- */

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __shared__ static thread_local
#define __align__(n) __attribute__((aligned(n)))
/* __restrict__ is a g++ keyword already; _Pragma("unroll") is an unknown pragma g++
 * ignores (compile with -Wno-unknown-pragmas). */

struct simt_dim3 {
    unsigned x, y, z;
};

enum { warpSize = 32 };

#ifndef SIMT_STACK_BYTES
#define SIMT_STACK_BYTES (64 * 1024) /* per CUDA thread: local arrays of 64 floats fit many times */
#endif
#define SIMT_MAX_BLOCK 1024

#include "simt_table.h" /* the table trampolines.sh writes, and simt_translate_pointer */

namespace simt {

[[noreturn]] inline void die(const char *what)
{
    fprintf(stderr, "simt: %s\n", what);
    abort();
}

struct thread {
    sigjmp_buf resume; /* where the scheduler resumes this thread's coroutine */
    char *stack;       /* SIMT_STACK_BYTES above a guard page */
    int done;
    unsigned shuffles; /* shuffles (and __syncwarp) this thread has entered */
};

struct warp {
    uint64_t slot[2][32]; /* the value each lane offers, by the parity of its shuffle count */
};

/* One per OS thread: the block in progress and the coroutines' stacks, kept between
 * launches. */
struct scheduler {
    sigjmp_buf main; /* where a coroutine hands back to the scheduler */
    thread threads[SIMT_MAX_BLOCK];
    warp warps[SIMT_MAX_BLOCK / 32];
    unsigned n_stacks; /* stacks mapped so far (threads[0..n_stacks)) */
    unsigned n, live, current;
    unsigned barrier_arrived;
    unsigned long barrier_generation;
    unsigned long progress; /* bumped by every arrival and exit; a still round is a deadlock */
    void (*body)(void *);
    void *body_arg;
};

inline thread_local scheduler *sched;
inline thread_local simt_dim3 thread_idx, block_idx, block_dim, grid_dim;

inline scheduler &self()
{
    if (!sched) {
        sched = static_cast<scheduler *>(calloc(1, sizeof(scheduler)));
        if (!sched)
            die("out of memory for the scheduler");
    }
    return *sched;
}

/* Back to the scheduler; it resumes this thread on its next round. */
inline void yield()
{
    scheduler &s = *sched;
    if (sigsetjmp(s.threads[s.current].resume, 0) == 0)
        siglongjmp(s.main, 1);
}

/* The scheduler's side: runs thread i until it waits or finishes. */
inline void resume(unsigned i)
{
    scheduler &s = *sched;
    if (sigsetjmp(s.main, 0) == 0)
        siglongjmp(s.threads[i].resume, 1);
}

/* A coroutine's whole life, on its own stack: it parks at once, then runs a CUDA thread
 * each time the scheduler resumes it after the last one finished. It never returns. */
inline void coroutine()
{
    scheduler &s = *sched;
    yield(); /* parked: the scheduler's first resume starts a thread */
    for (;;) {
        s.body(s.body_arg);
        s.threads[s.current].done = 1;
        s.live--;
        s.progress++;
        /* the barrier counts live threads: this exit may complete it */
        if (s.barrier_arrived > 0 && s.barrier_arrived == s.live) {
            s.barrier_arrived = 0;
            s.barrier_generation++;
        }
        yield(); /* parked until the next block or launch resumes this stack */
    }
}

inline void syncthreads()
{
    scheduler &s = *sched;
    unsigned long generation = s.barrier_generation;
    s.barrier_arrived++;
    s.progress++;
    if (s.barrier_arrived == s.live) {
        s.barrier_arrived = 0;
        s.barrier_generation++;
        return;
    }
    while (s.barrier_generation == generation)
        yield();
}

/* Lane `lane`'s warp enters its exchange number k = its shuffle count: it offers `bits`,
 * waits until every lane of the warp has offered its k-th value, and returns the slot of
 * that exchange (valid until the lanes reach exchange k + 2, which none can before this
 * lane has entered k + 1). */
inline const uint64_t *exchange(unsigned mask, uint64_t bits)
{
    scheduler &s = *sched;
    if (mask != 0xffffffffu)
        die("a warp shuffle or __syncwarp with a partial mask (only full warps are emulated)");
    unsigned me = s.current, first = me & ~31u, lane = me & 31u;
    if (first + 32 > s.n)
        die("a warp shuffle in a warp cut short by blockDim (only full warps are emulated)");
    thread *t = &s.threads[first];
    unsigned k = t[lane].shuffles;
    warp &w = s.warps[me / 32];
    w.slot[k & 1][lane] = bits;
    t[lane].shuffles = k + 1;
    s.progress++;
    for (;;) {
        unsigned ready = 0;
        for (unsigned i = 0; i < 32; i++) {
            if (t[i].shuffles > k) {
                ready++;
            } else if (t[i].done) {
                die("a warp shuffle after some lanes of the warp returned (unsupported)");
            }
        }
        if (ready == 32)
            return w.slot[k & 1];
        yield();
    }
}

template <typename T> inline uint64_t to_bits(T v)
{
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffles move 8 bytes at most");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    return bits;
}

template <typename T> inline T from_bits(uint64_t bits)
{
    T v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

inline unsigned lane_id()
{
    return sched->current & 31u;
}

/* Runs grid blocks of `block` threads, each thread calling body(arg). */
inline void launch(unsigned grid, unsigned block, void (*body)(void *), void *arg)
{
    if (block == 0 || block > SIMT_MAX_BLOCK)
        die("a block size outside 1..1024");
    scheduler &s = self();
    if (s.body)
        die("a launch from inside a kernel");
    long page = sysconf(_SC_PAGESIZE);
    for (; s.n_stacks < block; s.n_stacks++) {
        size_t bytes = (size_t)SIMT_STACK_BYTES + (size_t)page;
        void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            die("cannot map a thread stack");
        mprotect(p, (size_t)page, PROT_NONE); /* an overflow faults instead of corrupting */
        thread &t = s.threads[s.n_stacks];
        t.stack = static_cast<char *>(p) + page;
        /* enter the coroutine on its stack once; it parks (yield) back here */
        ucontext_t here, start;
        getcontext(&start);
        start.uc_stack.ss_sp = t.stack;
        start.uc_stack.ss_size = SIMT_STACK_BYTES;
        start.uc_link = nullptr; /* coroutine() never returns */
        makecontext(&start, coroutine, 0);
        s.current = s.n_stacks;
        if (sigsetjmp(s.main, 0) == 0)
            swapcontext(&here, &start);
    }
    s.body = body;
    s.body_arg = arg;
    s.n = block;
    grid_dim = {grid, 1, 1};
    block_dim = {block, 1, 1};
    for (unsigned b = 0; b < grid; b++) {
        block_idx = {b, 0, 0};
        s.live = block;
        s.barrier_arrived = 0;
        for (unsigned i = 0; i < block; i++) {
            s.threads[i].done = 0;
            s.threads[i].shuffles = 0;
        }
        while (s.live > 0) {
            unsigned long before = s.progress;
            for (unsigned i = 0; i < block; i++) {
                if (s.threads[i].done)
                    continue;
                s.current = i;
                thread_idx = {i, 0, 0};
                resume(i);
            }
            if (s.live > 0 && s.progress == before) {
                fprintf(stderr, "simt: block %u of %u deadlocked: %u live threads all wait (a barrier or "
                        "shuffle that not every thread reaches)\n", b, grid, s.live);
                abort();
            }
        }
    }
    s.body = nullptr;
}

template <typename... A, std::size_t... I>
inline void launch_unpacked(void (*kernel)(A...), unsigned grid, unsigned block, void **args,
                            std::index_sequence<I...>)
{
    struct call {
        void (*kernel)(A...);
        std::tuple<std::remove_cv_t<A>...> values;
        static void run(void *p)
        {
            call *c = static_cast<call *>(p);
            std::apply(c->kernel, c->values);
        }
    } c{kernel, {*static_cast<std::remove_cv_t<A> *>(args[I])...}};
    launch(grid, block, &call::run, &c);
}

template <typename... A>
inline void launch_packed(void (*kernel)(A...), unsigned grid, unsigned block, void **args)
{
    launch_unpacked(kernel, grid, block, args, std::index_sequence_for<A...>{});
}

/* A kernel launched cuLaunchKernel's way: args[i] points to the value of parameter i. */
template <auto Kernel> void trampoline(unsigned grid, unsigned block, void **args)
{
    launch_packed(Kernel, grid, block, args);
}

/* Launches that run later (tests/cuda_fake's streams): the argument values copied at the call,
 * as cuLaunchKernel copies them, each pointer passed through simt_translate_pointer. */
template <typename... A> struct bound_call {
    void (*kernel)(A...);
    std::tuple<std::remove_cv_t<A>...> values;
    static void run(void *p)
    {
        bound_call *c = static_cast<bound_call *>(p);
        std::apply(c->kernel, c->values);
    }
};

template <typename T> inline T argument_value(void *arg, int index)
{
    T value = *static_cast<T *>(arg);
    if constexpr (std::is_pointer_v<T>) {
        if (simt_translate_pointer)
            value = (T)simt_translate_pointer((const void *)value, index);
    }
    return value;
}

template <typename... A, std::size_t... I>
inline void *bind_unpacked(void (*kernel)(A...), void **args, std::index_sequence<I...>)
{
    return new bound_call<A...>{kernel, {argument_value<std::remove_cv_t<A>>(args[I], (int)I)...}};
}

template <typename... A> inline void *bind_packed(void (*kernel)(A...), void **args)
{
    return bind_unpacked(kernel, args, std::index_sequence_for<A...>{});
}

template <typename... A> inline void run_bound_typed(void (*)(A...), void *p, unsigned grid, unsigned block)
{
    bound_call<A...> *c = static_cast<bound_call<A...> *>(p);
    launch(grid, block, &bound_call<A...>::run, c);
    delete c;
}

template <auto Kernel> void *bind(void **args)
{
    return bind_packed(Kernel, args);
}

/* Runs what bind copied, then frees it. */
template <auto Kernel> void run_bound(void *bound, unsigned grid, unsigned block)
{
    run_bound_typed(Kernel, bound, grid, block);
}

} /* namespace simt */

#define threadIdx (static_cast<const simt_dim3 &>(simt::thread_idx))
#define blockIdx (static_cast<const simt_dim3 &>(simt::block_idx))
#define blockDim (static_cast<const simt_dim3 &>(simt::block_dim))
#define gridDim (static_cast<const simt_dim3 &>(simt::grid_dim))

/* ---- device functions ---------------------------------------------------------------- */

inline void __syncthreads()
{
    simt::syncthreads();
}

inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    simt::exchange(mask, 0);
}

/* Lane i gets lane (i ^ lane_mask)'s value. */
template <typename T> inline T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32)
{
    if (width != 32)
        simt::die("__shfl_xor_sync with a width other than 32");
    const uint64_t *slot = simt::exchange(mask, simt::to_bits(value));
    return simt::from_bits<T>(slot[(simt::lane_id() ^ (unsigned)lane_mask) & 31u]);
}

/* Lane i gets lane i + delta's value, its own where i + delta is past the warp. */
template <typename T> inline T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = 32)
{
    if (width != 32)
        simt::die("__shfl_down_sync with a width other than 32");
    const uint64_t *slot = simt::exchange(mask, simt::to_bits(value));
    unsigned src = simt::lane_id() + delta;
    return src < 32 ? simt::from_bits<T>(slot[src]) : value;
}

/* Lane i gets lane i - delta's value, its own where i < delta. */
template <typename T> inline T __shfl_up_sync(unsigned mask, T value, unsigned delta, int width = 32)
{
    if (width != 32)
        simt::die("__shfl_up_sync with a width other than 32");
    const uint64_t *slot = simt::exchange(mask, simt::to_bits(value));
    unsigned lane = simt::lane_id();
    return lane >= delta ? simt::from_bits<T>(slot[lane - delta]) : value;
}

/* Every lane gets lane src_lane's value. */
template <typename T> inline T __shfl_sync(unsigned mask, T value, int src_lane, int width = 32)
{
    if (width != 32)
        simt::die("__shfl_sync with a width other than 32");
    const uint64_t *slot = simt::exchange(mask, simt::to_bits(value));
    return simt::from_bits<T>(slot[(unsigned)src_lane & 31u]);
}

/* Threads interleave only at barriers and shuffles: a read-modify-write is atomic. */
template <typename T> inline T atomicAdd(T *address, T value)
{
    T old = *address;
    *address = old + value;
    return old;
}

/* The float intrinsics: the IEEE functions (what fp32 kernels get without fast math). */
inline float rsqrtf(float x)
{
    return 1.0f / sqrtf(x);
}
/* glibc declares __expf and __logf itself (the same functions as expf and logf) */
#define __expf(x) expf(x)
#define __logf(x) logf(x)
#define __fdividef(a, b) ((a) / (b))
inline float __frcp_rn(float x)
{
    return 1.0f / x;
}
/* Rounded products and sums that a compiler never fuses into an fma (the CPU never does). */
inline float __fmul_rn(float a, float b)
{
    return a * b;
}
inline float __fadd_rn(float a, float b)
{
    return a + b;
}
inline float __fsub_rn(float a, float b)
{
    return a - b;
}
/* A float's bits and back, as the bf16 conversions of the generated code use them. */
inline unsigned __float_as_uint(float x)
{
    unsigned u;
    memcpy(&u, &x, sizeof u);
    return u;
}
inline float __uint_as_float(unsigned u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}
inline float __saturatef(float x)
{
    return fminf(fmaxf(x, 0.0f), 1.0f);
}

/* ---- the WMMA subset of the tiled attention (compiler/attention_gpu.c) ------------------ */

/* pacic's stages.cu declares the part of CUDA's WMMA API (nvcuda::wmma) it uses as pr_wmma,
 * over PTX, unless PR_WMMA_EMULATED is defined: here every lane's fragment holds the whole
 * 16 x 16 tile in fp32 (bf16 elements widened exactly), so kernels may touch fragments only
 * through these calls. mma_sync sums each product in fp32 in k order and is a warp-level
 * exchange point, as the real instruction is warp-collective: every lane must take part. */
#define PR_WMMA_EMULATED 1
namespace pr_wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "only 16 x 16 x 16 fragments are emulated");
    enum { num_elements = 256 };
    float x[256]; /* element (row, col) at x[row * 16 + col] */
};

inline float element_value(float x)
{
    return x;
}

/* bf16 is stored as its bits (pr_bf16, an unsigned short) */
inline float element_value(unsigned short bits)
{
    return __uint_as_float((unsigned)bits << 16);
}

template <typename Use, typename T, typename Layout, typename E>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout> &f, const E *p, unsigned ldm)
{
    static_assert(std::is_same<T, E>::value, "a fragment loads from memory of its own element type");
    static_assert(std::is_same<Layout, row_major>::value || std::is_same<Layout, col_major>::value,
                  "an operand fragment has a layout");
    for (int row = 0; row < 16; row++)
        for (int col = 0; col < 16; col++)
            f.x[row * 16 + col] = element_value(std::is_same<Layout, row_major>::value ? p[row * ldm + col]
                                                                                        : p[col * ldm + row]);
}

inline void fill_fragment(fragment<accumulator, 16, 16, 16, float> &f, float value)
{
    for (float &x : f.x)
        x = value;
}

template <typename T, typename LA, typename LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d, const fragment<matrix_a, 16, 16, 16, T, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, T, LB> &b, const fragment<accumulator, 16, 16, 16, float> &c)
{
    simt::exchange(0xffffffffu, 0);
    float out[256];
    for (int i = 0; i < 16; i++) {
        for (int j = 0; j < 16; j++) {
            float sum = c.x[i * 16 + j];
            for (int k = 0; k < 16; k++)
                sum += a.x[i * 16 + k] * b.x[k * 16 + j];
            out[i * 16 + j] = sum;
        }
    }
    memcpy(d.x, out, sizeof out);
}

inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ldm, layout_t layout)
{
    for (int row = 0; row < 16; row++)
        for (int col = 0; col < 16; col++)
            p[layout == mem_row_major ? row * ldm + col : col * ldm + row] = f.x[row * 16 + col];
}
} /* namespace pr_wmma */

#endif
