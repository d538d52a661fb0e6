/* simt_test.cpp: the emulator's primitives on their own (tests/e2e/cuda_emu.sh builds and
 * runs it): handwritten kernels in the patterns generated code uses, a block reduction
 * through __shared__ and __syncthreads, warp reductions with __shfl_xor_sync and
 * __shfl_down_sync (one warp per row, threads = rows * 32, whole warps past the end
 * returning), both combined, atomicAdd, per-thread locals kept across barriers, and two OS
 * threads launching at once. Prints one line per check and "simt: N checks passed"; exits 1
 * on a wrong value. With an argument it runs a kernel the emulator must refuse (it aborts):
 *   deadlock   lane 0 waits at a barrier while its warp waits at a shuffle
 *   exited     a shuffle after some lanes of the warp returned
 *   partial    a shuffle with a partial mask
 * Build: g++ -std=c++17 -O1 -include tests/cuda_emu/simt.h -x c++ simt_test.cpp -pthread
 */
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

static int checks, failures;

static void check(bool ok, const char *what)
{
    checks++;
    if (!ok) {
        failures++;
        printf("FAIL %s\n", what);
    } else {
        printf("ok   %s\n", what);
    }
}

/* Sum of in[block's 256 elements] per block: a tree over shared memory, a barrier a level. */
extern "C" __global__ void __launch_bounds__(256) block_sum(float *__restrict__ out, const float *__restrict__ in)
{
    __shared__ float part[256];
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    part[threadIdx.x] = in[i];
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half)
            part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        out[blockIdx.x] = part[0];
}

/* One warp per row of `cols`: lane partial sums, then a butterfly; every lane writes the total
 * it received into all[row * 32 + lane]. */
extern "C" __global__ void __launch_bounds__(256) row_sum_xor(float *__restrict__ all, const float *__restrict__ x, int rows, int cols)
{
    long global_thread = (long)blockIdx.x * blockDim.x + threadIdx.x;
    long row = global_thread / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    float s = 0.0f;
    for (int c = lane; c < cols; c += 32)
        s += x[row * cols + c];
    _Pragma("unroll") for (int offset = 16; offset > 0; offset /= 2)
        s += __shfl_xor_sync(0xffffffffu, s, offset);
    all[row * 32 + lane] = s;
}

/* The same with __shfl_down_sync: lane 0 ends with the total. */
extern "C" __global__ void __launch_bounds__(256) row_sum_down(float *__restrict__ out, const float *__restrict__ x, int rows, int cols)
{
    long global_thread = (long)blockIdx.x * blockDim.x + threadIdx.x;
    long row = global_thread / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows)
        return;
    float s = 0.0f;
    for (int c = lane; c < cols; c += 32)
        s += x[row * cols + c];
    for (int offset = 16; offset > 0; offset /= 2)
        s += __shfl_down_sync(0xffffffffu, s, offset);
    if (lane == 0)
        out[row] = s;
}

/* Block reduction in two levels: each warp reduces with shuffles, warp totals meet in shared
 * memory, warp 0 reduces them; then every thread scales its element by the block total, from
 * a register array written before the barriers (locals survive the switches). */
extern "C" __global__ void __launch_bounds__(256) normalise(float *__restrict__ y, const float *__restrict__ x)
{
    __shared__ float warp_totals[32];
    __shared__ float total;
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float local[64];
    for (int j = 0; j < 64; j++)
        local[j] = x[i] * (float)(j + 1);
    float s = x[i];
    for (int offset = 16; offset > 0; offset /= 2)
        s += __shfl_xor_sync(0xffffffffu, s, offset);
    if (lane == 0)
        warp_totals[warp] = s;
    __syncthreads();
    if (warp == 0) {
        float w = lane < (int)(blockDim.x / 32) ? warp_totals[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset /= 2)
            w += __shfl_down_sync(0xffffffffu, w, offset);
        if (lane == 0)
            total = w;
    }
    __syncthreads();
    float acc = 0.0f;
    for (int j = 0; j < 64; j++)
        acc += local[j];
    y[i] = acc / 2080.0f / total; /* sum(1..64) = 2080 */
}

/* Threads past n return before the barrier; the others still meet at it. */
extern "C" __global__ void __launch_bounds__(256) reverse_prefix(float *__restrict__ out, const float *__restrict__ in, int n)
{
    __shared__ float tile[256];
    int t = threadIdx.x;
    if (t >= n)
        return;
    tile[t] = in[t];
    __syncthreads();
    out[t] = tile[n - 1 - t];
}

extern "C" __global__ void __launch_bounds__(256) count_all(float *counter, int *ints, long n)
{
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    atomicAdd(counter, 1.0f);
    atomicAdd(ints, (int)i);
}

/* Must be refused: each mode breaks one rule of the emulated subset. */
extern "C" __global__ void __launch_bounds__(64) misuse(float *out, int mode)
{
    int lane = threadIdx.x % 32;
    float v = (float)threadIdx.x;
    if (mode == 0) { /* deadlock */
        if (threadIdx.x >= 32)
            return;
        if (lane == 0)
            __syncthreads();
        else
            v += __shfl_xor_sync(0xffffffffu, v, 1);
    } else if (mode == 1) { /* exited lanes */
        if (lane >= 16)
            return;
        v += __shfl_xor_sync(0xffffffffu, v, 1);
    } else { /* partial mask */
        v += __shfl_xor_sync(0x0000ffffu, v, 1);
    }
    out[threadIdx.x] = v;
}

static void launch(void (*t)(unsigned, unsigned, void **), long threads, unsigned block, void **args)
{
    t((unsigned)((threads + block - 1) / block), block, args);
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        std::vector<float> out(64);
        float *o = out.data();
        int mode = strcmp(argv[1], "deadlock") == 0 ? 0 : strcmp(argv[1], "exited") == 0 ? 1 : 2;
        void *args[] = {&o, &mode};
        launch(simt::trampoline<misuse>, 64, 64, args);
        printf("misuse %s was not refused\n", argv[1]);
        return 0;
    }

    /* block reduction: 4 blocks of 256 */
    {
        std::vector<float> in(1024), out(4);
        for (int i = 0; i < 1024; i++)
            in[i] = (float)(i % 97);
        float *o = out.data();
        const float *x = in.data();
        void *args[] = {&o, &x};
        launch(simt::trampoline<block_sum>, 1024, 256, args);
        bool ok = true;
        for (int b = 0; b < 4; b++) {
            float want = 0.0f;
            for (int i = 0; i < 256; i++)
                want += (float)((b * 256 + i) % 97);
            ok = ok && out[b] == want; /* integers: exact in any order */
        }
        check(ok, "__shared__ + __syncthreads block reduction, 4 blocks of 256");
    }

    /* warp per row, 37 rows of 100: 1184 threads in 5 blocks, the last with 4 warps past the end */
    {
        int rows = 37, cols = 100;
        std::vector<float> x((size_t)rows * cols), all((size_t)rows * 32, -1.0f), down(rows, -1.0f);
        for (size_t i = 0; i < x.size(); i++)
            x[i] = (float)(i % 13) - 6.0f;
        float *a = all.data(), *d = down.data();
        const float *xp = x.data();
        void *args_xor[] = {&a, &xp, &rows, &cols};
        launch(simt::trampoline<row_sum_xor>, (long)rows * 32, 256, args_xor);
        void *args_down[] = {&d, &xp, &rows, &cols};
        launch(simt::trampoline<row_sum_down>, (long)rows * 32, 256, args_down);
        bool ok_xor = true, ok_down = true;
        for (int r = 0; r < rows; r++) {
            float want = 0.0f;
            for (int c = 0; c < cols; c++)
                want += x[(size_t)r * cols + c];
            for (int l = 0; l < 32; l++)
                ok_xor = ok_xor && all[(size_t)r * 32 + l] == want;
            ok_down = ok_down && down[r] == want;
        }
        check(ok_xor, "__shfl_xor_sync butterfly: every lane of 37 row warps holds its row's sum");
        check(ok_down, "__shfl_down_sync reduction: lane 0 of 37 row warps holds its row's sum");
    }

    /* two-level block reduction, locals across barriers */
    {
        std::vector<float> x(512), y(512);
        for (int i = 0; i < 512; i++)
            x[i] = (float)(1 + i % 7);
        float *yp = y.data();
        const float *xp = x.data();
        void *args[] = {&yp, &xp};
        launch(simt::trampoline<normalise>, 512, 256, args);
        bool ok = true;
        for (int b = 0; b < 2; b++) {
            float total = 0.0f;
            for (int i = 0; i < 256; i++)
                total += x[(size_t)b * 256 + i];
            for (int i = 0; i < 256; i++) {
                float got = y[(size_t)b * 256 + i], want = x[(size_t)b * 256 + i] / total;
                ok = ok && got > want * (1 - 1e-6f) && got < want * (1 + 1e-6f);
            }
        }
        check(ok, "warp shuffles + __shared__ + __syncthreads two-level reduction, float[64] locals kept");
    }

    /* barrier of the live threads */
    {
        int n = 100;
        std::vector<float> in(256), out(256, -1.0f);
        for (int i = 0; i < 256; i++)
            in[i] = (float)i;
        float *o = out.data();
        const float *x = in.data();
        void *args[] = {&o, &x, &n};
        launch(simt::trampoline<reverse_prefix>, 256, 256, args);
        bool ok = true;
        for (int i = 0; i < 256; i++)
            ok = ok && out[i] == (i < n ? (float)(n - 1 - i) : -1.0f);
        check(ok, "__syncthreads after 156 of 256 threads returned");
    }

    /* atomicAdd */
    {
        float counter = 0.0f;
        int sum = 0;
        long n = 1000;
        float *c = &counter;
        int *s = &sum;
        void *args[] = {&c, &s, &n};
        launch(simt::trampoline<count_all>, n, 128, args);
        check(counter == 1000.0f && sum == 999 * 1000 / 2, "atomicAdd float and int over 1000 threads");
    }

    /* two OS threads launching at once, each with its own __shared__ and scheduler */
    {
        std::vector<float> in(256 * 64), out_a(64), out_b(64);
        for (size_t i = 0; i < in.size(); i++)
            in[i] = (float)(i % 31);
        auto work = [&](std::vector<float> *out) {
            for (int rep = 0; rep < 4; rep++) {
                float *o = out->data();
                const float *x = in.data();
                void *args[] = {&o, &x};
                launch(simt::trampoline<block_sum>, (long)in.size(), 256, args);
            }
        };
        std::thread a(work, &out_a), b(work, &out_b);
        a.join();
        b.join();
        bool ok = true;
        for (int blk = 0; blk < 64; blk++) {
            float want = 0.0f;
            for (int i = 0; i < 256; i++)
                want += (float)((blk * 256 + i) % 31);
            ok = ok && out_a[blk] == want && out_b[blk] == want;
        }
        check(ok, "two OS threads launching block reductions at once");
    }

    printf("simt: %d checks passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
