/* attention_check.cpp: the tiled attention kernels (compiler/attention_gpu.c) against the row
 * kernels the CPU runs (attention_forward, attention_backward_query, attention_backward_key,
 * the same descriptions as the CPU path), both from one generated stages.cu run under the
 * emulator, on inputs large enough that the softmax is peaked (scores of standard deviation
 * about 3, where the training runs' first steps hardly depend on the scores). Compares the
 * output, log-sum-exp, delta, dq, dk and dv: max |tiled - row| / max |row| per tensor must be
 * at most TOL. Outputs start as NaN, so an element no kernel writes fails.
 *
 *   g++ -std=c++17 -O1 -Wno-unknown-pragmas -include tests/cuda_emu/simt.h \
 *       -DSTAGES_CU='"stages.cu"' tests/cuda_emu/attention_check.cpp -o attention_check
 *   ./attention_check TOL
 * Test tooling for tests/e2e/cuda_emu.sh; stages.cu from tests/cuda_emu/emit_stage_cu.c.
 */
#include STAGES_CU

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

/* A fixed sequence in [-1, 1). */
static float uniform(unsigned long long *state)
{
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*state >> 40) * (1.0 / (1ULL << 24))) * 2.0f - 1.0f;
}

/* max |a - b| / max |b| over the n elements at stride `stride`, width `width` each, from `from`. */
static double difference(const std::vector<float> &a, const std::vector<float> &b, long rows, long stride, long from,
                         long width)
{
    double worst = 0.0, scale = 0.0;
    for (long r = 0; r < rows; r++) {
        for (long i = from; i < from + width; i++) {
            double x = a[r * stride + i], y = b[r * stride + i];
            double d = std::fabs(x - y);
            if (!(d <= worst)) /* NaN too */
                worst = std::isnan(d) ? INFINITY : d;
            scale = std::fmax(scale, std::fabs(y));
        }
    }
    return scale > 0.0 ? worst / scale : worst;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s TOL\n", argv[0]);
        return 2;
    }
    double tol = atof(argv[1]);
    const long rows = (long)B * NH * T;
    unsigned long long state = 42;
    std::vector<float> qkv((size_t)BT * 3 * C), dout((size_t)BT * C);
    for (float &x : qkv)
        x = 3.0f * uniform(&state);
    for (float &x : dout)
        x = uniform(&state);
    const float nan = NAN;
    std::vector<float> out[2], lse[2], delta[2], dqkv[2];
    for (int k = 0; k < 2; k++) {
        out[k].assign((size_t)BT * C, nan);
        lse[k].assign((size_t)rows, nan);
        delta[k].assign((size_t)rows, nan);
        dqkv[k].assign((size_t)BT * 3 * C, nan);
    }
    pr_bf16 *no_h = nullptr;
    const pr_bf16 *no_in_h = nullptr;
    const float *qkv_p = qkv.data(), *dout_p = dout.data();
    for (int k = 0; k < 2; k++) { /* 0: the row kernels, 1: the tiled ones */
        float *o = out[k].data(), *l = lse[k].data(), *dl = delta[k].data(), *d = dqkv[k].data();
        const float *o_in = o, *l_in = l, *dl_in = dl;
        void *fwd[] = {&o, &l, &qkv_p, &no_h};
        void *query[] = {&d, &dl, &dout_p, &o_in, &qkv_p, &l_in, &no_h, &no_in_h};
        void *key[] = {&d, &dl_in, &dout_p, &qkv_p, &l_in, &no_h};
        if (k == 0) {
            simt::trampoline<attention_forward>((unsigned)((rows + 255) / 256), 256, fwd);
            simt::trampoline<attention_backward_query>((unsigned)((rows * 32 + 255) / 256), 256, query);
            simt::trampoline<attention_backward_key>((unsigned)((rows * 32 + 255) / 256), 256, key);
        } else {
            unsigned fwd_blocks = B * NH * ((T + 16 * ATT_FWD_WARPS - 1) / (16 * ATT_FWD_WARPS));
            unsigned bwd_blocks = B * NH * ((T + 16 * ATT_BWD_WARPS - 1) / (16 * ATT_BWD_WARPS));
            simt::trampoline<flash_attention_forward>(fwd_blocks, 32 * ATT_FWD_WARPS, fwd);
            simt::trampoline<flash_attention_backward_query>(bwd_blocks, 32 * ATT_BWD_WARPS, query);
            simt::trampoline<flash_attention_backward_key>(bwd_blocks, 32 * ATT_BWD_WARPS, key);
        }
    }
    struct {
        const char *name;
        double diff;
    } results[] = {
        {"out", difference(out[1], out[0], BT, C, 0, C)},
        {"lse", difference(lse[1], lse[0], rows, 1, 0, 1)},
        {"delta", difference(delta[1], delta[0], rows, 1, 0, 1)},
        {"dq", difference(dqkv[1], dqkv[0], BT, 3 * C, 0, C)},
        {"dk", difference(dqkv[1], dqkv[0], BT, 3 * C, C, C)},
        {"dv", difference(dqkv[1], dqkv[0], BT, 3 * C, 2 * C, C)},
    };
    bool ok = true;
    printf("tiled attention (B %d, T %d, HS %d padded to %d, %s; forward %d warps x %d keys, backward %d x %d) "
           "against the row kernels, max |difference| / max |value|:",
           B, T, HS, ATT_HSP, ATT_TENSOR_CORES ? "bf16 tensor cores" : "fp32", ATT_FWD_WARPS, ATT_FWD_N,
           ATT_BWD_WARPS, ATT_BWD_N);
    for (auto &r : results) {
        printf(" %s %.2g", r.name, r.diff);
        ok &= r.diff <= tol;
    }
    printf("%s\n", ok ? "" : " (over the tolerance)");
    return ok ? 0 : 1;
}
