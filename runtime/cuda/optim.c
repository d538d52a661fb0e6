/* optim.c: muon, lamb, lars, nadamw and lans on the GPU, the same rules as runtime/optim_rules.c (see
 * there and docs/dsl.md): elementwise kernels of the stage's unit (compiler/kernels.c), the
 * Newton-Schulz products through cuBLASLt (pr_cuda_gemm, fp32), and each norm as a sum of
 * squares the CUDA layer computes on the compute stream and brings back (one synchronisation
 * per norm). Only pacirt.h's GPU calls and the device's table are used, so the CUDA
 * emulator (tests/cuda_emu) runs this file unchanged. */
#include <math.h>

#include "../prt.h"

/* A device scratch of `floats` floats for one call (zeroed by the device's alloc). */
static float *scratch(int stage, int64_t floats)
{
    return pr_device_cuda.alloc(stage, (size_t)floats * sizeof(float));
}

static double norm_of(int stage, const float *x, int64_t n)
{
    pr_tensor whole = {.name = "optimizer operand", .size = n};
    double sum;
    pr_device_cuda.sumsq(stage, x, &whole, 1, &sum);
    return sqrt(sum);
}

/* y = alpha x + beta y over n floats (x may be y). */
static void scale_add(int stage, const pr_optim_kernels *k, const float *x, float *y, int64_t n,
                      float alpha, float beta)
{
    long count = (long)n;
    void *args[] = {&x, &y, &count, &alpha, &beta};
    pr_cuda_launch(stage, k->scale_add, n, k->block, args);
}

/* Newton-Schulz on *x (the wide orientation of a rows x cols matrix), normalised first by its
 * Frobenius norm, with *y as the other buffer of the iteration: the result is left in *x (the
 * two may have swapped). Returns the rule's shape scaling for the matrix. */
static float orthogonalise(const pr_optim_rule *r, int stage, const pr_optim_kernels *k, float **x,
                           float **y, int64_t rows, int64_t cols)
{
    int64_t n = rows * cols;
    int flip = rows > cols, rr = (int)(flip ? cols : rows), cc = (int)(flip ? rows : cols);
    float *a = scratch(stage, (int64_t)rr * rr), *b = scratch(stage, (int64_t)rr * rr);
    float inv = (float)(1.0 / (norm_of(stage, *x, n) + PR_NS_NORM_EPS));
    scale_add(stage, k, *x, *x, n, inv, 0.0f);
    for (int step = 0; step < r->ns_steps; step++) {
        pr_cuda_gemm(stage, PR_GEMM_FP32, 0, 1, rr, rr, cc, 1.0f, *x, cc, *x, cc, 0.0f, a, rr);
        pr_cuda_gemm(stage, PR_GEMM_FP32, 0, 0, rr, rr, rr, PR_NS_C, a, rr, a, rr, 0.0f, b, rr);
        scale_add(stage, k, a, b, (int64_t)rr * rr, PR_NS_B, 1.0f);
        scale_add(stage, k, *x, *y, n, PR_NS_A, 0.0f);
        pr_cuda_gemm(stage, PR_GEMM_FP32, 0, 0, rr, cc, rr, 1.0f, b, rr, *x, cc, 1.0f, *y, cc);
        float *swap = *x;
        *x = *y;
        *y = swap;
    }
    pr_device_cuda.release(stage, a);
    pr_device_cuda.release(stage, b);
    return pr_muon_shape_scale(r, rows, cols);
}

/* p -= lr (scale o + decay p), o the orthogonalised matrix in the wide orientation. */
static void muon_apply(const pr_optim_rule *r, int stage, const pr_optim_kernels *k, float *p,
                       const float *o, int64_t rows, int64_t cols, float lr, float scale)
{
    long n = (long)(rows * cols), lrows = (long)rows, lcols = (long)cols;
    int flip = rows > cols;
    float wd = (float)r->muon_weight_decay;
    void *apply_args[] = {&p, &o, &n, &lrows, &lcols, &flip, &lr, &scale, &wd};
    pr_cuda_launch(stage, k->muon_apply, n, k->block, apply_args);
}

static void muon_matrix(const pr_optim_rule *r, int stage, const pr_optim_kernels *k, float *p,
                        const float *grad, float *buf, int64_t rows, int64_t cols, float lr,
                        float grad_scale)
{
    long n = (long)(rows * cols), lrows = (long)rows, lcols = (long)cols;
    int flip = rows > cols, nesterov = r->nesterov;
    float *x = scratch(stage, n), *y = scratch(stage, n);
    float mu = (float)r->momentum;
    void *momentum_args[] = {&grad, &buf, &x, &n, &lrows, &lcols, &flip, &mu, &nesterov, &grad_scale};
    pr_cuda_launch(stage, k->momentum, n, k->block, momentum_args);
    float scale = orthogonalise(r, stage, k, &x, &y, rows, cols);
    muon_apply(r, stage, k, p, x, rows, cols, lr, scale);
    pr_device_cuda.release(stage, x);
    pr_device_cuda.release(stage, y);
}

static void lamb_slice(const pr_optim_rule *r, int stage, const pr_optim_kernels *k, float *p,
                       const float *g, float *m, float *v, int64_t size, float lr, int decay,
                       float grad_scale, int64_t t)
{
    long n = (long)size;
    float *d = scratch(stage, size);
    float beta1 = (float)r->beta1, beta2 = (float)r->beta2, eps = (float)r->eps;
    float wd = decay ? (float)r->weight_decay : 0.0f;
    float c1, c2;
    pr_adam_corrections(r, t, &c1, &c2);
    void *args[] = {&p, &g, &m, &v, &d, &n, &beta1, &beta2, &eps, &wd, &grad_scale, &c1, &c2};
    pr_cuda_launch(stage, k->lamb_direction, size, k->block, args);
    double w_norm = norm_of(stage, p, size), d_norm = norm_of(stage, d, size);
    float ratio = pr_lamb_trust_ratio(decay, w_norm, d_norm);
    scale_add(stage, k, d, p, size, -(lr * ratio), 1.0f);
    pr_device_cuda.release(stage, d);
}

/* LANS: the gradient's norm, the kernel's moments and two directions (r from m^, c from the
 * normalised gradient), their norms and the weights', then the two trust-ratio-scaled steps. */
static void lans_slice(const pr_optim_rule *r, int stage, const pr_optim_kernels *k, float *p,
                       const float *g, float *m, float *v, int64_t size, float lr, int decay, int64_t t)
{
    long n = (long)size;
    float *rd = scratch(stage, size), *cd = scratch(stage, size);
    float beta1 = (float)r->beta1, beta2 = (float)r->beta2, eps = (float)r->eps;
    float wd = decay ? (float)r->weight_decay : 0.0f, c1, c2;
    double g_norm = norm_of(stage, g, size);
    float inv = g_norm > 0.0 ? (float)(1.0 / g_norm) : 0.0f;
    pr_adam_corrections(r, t, &c1, &c2);
    void *args[] = {&p, &g, &m, &v, &rd, &cd, &n, &beta1, &beta2, &eps, &wd, &inv, &c1, &c2};
    pr_cuda_launch(stage, k->lans_direction, size, k->block, args);
    double w_norm = norm_of(stage, p, size);
    float ratio_r = pr_lamb_trust_ratio(decay, w_norm, norm_of(stage, rd, size));
    float ratio_c = pr_lamb_trust_ratio(decay, w_norm, norm_of(stage, cd, size));
    scale_add(stage, k, rd, p, size, -(lr * beta1 * ratio_r), 1.0f);
    scale_add(stage, k, cd, p, size, -(lr * (1.0f - beta1) * ratio_c), 1.0f);
    pr_device_cuda.release(stage, rd);
    pr_device_cuda.release(stage, cd);
}

static void lars_slice(const pr_optim_rule *r, int stage, const pr_optim_kernels *k, float *p,
                       const float *g, float *buf, int64_t size, float lr, int decay, float grad_scale)
{
    long n = (long)size;
    double w_norm = norm_of(stage, p, size), g_norm = norm_of(stage, g, size) * fabs((double)grad_scale);
    double local = decay && w_norm > 0.0 && g_norm > 0.0
                       ? r->trust_coefficient * w_norm / (g_norm + r->weight_decay * w_norm + r->eps)
                       : 1.0;
    float mu = (float)r->momentum, step = lr * (float)local;
    float wd = decay ? (float)r->weight_decay : 0.0f;
    void *args[] = {&p, &g, &buf, &n, &mu, &step, &wd, &grad_scale};
    pr_cuda_launch(stage, k->lars_apply, size, k->block, args);
}

static void nadam_tensor(const pr_optim_rule *r, int stage, const pr_optim_kernels *k, float *p,
                         const float *g, float *m, float *v, int64_t size, float lr, int decay,
                         float grad_scale, int64_t t)
{
    long n = (long)size;
    float beta1 = (float)r->beta1, beta2 = (float)r->beta2, eps = (float)r->eps;
    pr_nadam_scalars c = pr_nadam_scalars_at(r, t, lr, decay ? (float)r->weight_decay : 0.0f);
    void *args[] = {&p, &g, &m, &v, &n, &beta1, &beta2, &eps, &grad_scale,
                    &c.c2, &c.coef_g, &c.coef_m, &c.keep};
    pr_cuda_launch(stage, k->nadam_apply, size, k->block, args);
}

void pr_cuda_optim_step(const pr_optim_rule *r, const pr_tensor *t, const pr_adamw_args *args,
                        int32_t stage, const pr_optim_kernels *k)
{
    float *p = args->params + t->offset, *m = args->m + t->offset, *v = args->v + t->offset;
    const float *g = args->grads + t->offset;
    pr_bf16 *param_h = args->params_h ? args->params_h + t->offset : NULL;
    int64_t C = r->width, slice = pr_optim_layer_floats(t->ckpt_tensor, C), rows, cols;
    if (slice == 0)
        slice = t->size;
    float gs = args->grad_scale;
    switch (r->kind) {
    case PR_OPT_MUON:
        if (pr_optim_muon_shape(t->ckpt_tensor, C, &rows, &cols)) {
            for (int64_t at = 0; at < t->size; at += rows * cols)
                muon_matrix(r, stage, k, p + at, g + at, m + at, rows, cols, args->lr, gs);
        } else {
            // the unit's AdamW kernel, compiled with the group's betas and eps (emit_cuda.c)
            long n = (long)t->size;
            float lr = (float)((double)args->lr * r->group_lr_ratio);
            float wd = t->decay ? (float)r->weight_decay : 0.0f;
            float c1, c2;
            pr_adam_corrections(r, args->t, &c1, &c2);
            void *adamw_args[] = {&p, &g, &m, &v, &n, &lr, &wd, &gs, &c1, &c2, &param_h};
            pr_cuda_launch(stage, k->adamw, t->size, k->block, adamw_args);
            return;
        }
        break;
    case PR_OPT_LAMB:
        for (int64_t at = 0; at < t->size; at += slice)
            lamb_slice(r, stage, k, p + at, g + at, m + at, v + at, slice, args->lr, t->decay, gs, args->t);
        break;
    case PR_OPT_LARS:
        for (int64_t at = 0; at < t->size; at += slice)
            lars_slice(r, stage, k, p + at, g + at, m + at, slice, args->lr, t->decay, gs);
        break;
    case PR_OPT_NADAMW:
        nadam_tensor(r, stage, k, p, g, m, v, t->size, args->lr, t->decay, gs, args->t);
        break;
    case PR_OPT_LANS: // the clip factor cancels in the normalised gradient
        for (int64_t at = 0; at < t->size; at += slice)
            lans_slice(r, stage, k, p + at, g + at, m + at, v + at, slice, args->lr, t->decay, args->t);
        break;
    default:
        pr_internal("pr_cuda_optim_step: optimizer %d", (int)r->kind);
    }
    if (param_h) { // the products' bf16 copy of the weights
        long n = (long)t->size;
        void *copy_args[] = {&p, &param_h, &n};
        pr_cuda_launch(stage, k->to_bf16, t->size, k->block, copy_args);
    }
}

/* ---- delay_correction predict: pr_optim_predict's rules (runtime/optim_rules.c) --------- */

/* out = p - ahead d over n floats, d Adam's direction with mix and the corrections (see the
 * kernel), or d itself when direction_only. */
static void predict_slice(const pr_optim_rule *r, int stage, const pr_optim_kernels *k, const float *p,
                          const float *m, const float *v, float *out, int64_t size, float mix, float c1,
                          float c2, float wd, float ahead, int direction_only)
{
    long n = (long)size;
    float eps = (float)r->eps;
    void *args[] = {&p, &m, &v, &out, &n, &mix, &c1, &c2, &eps, &wd, &ahead, &direction_only};
    pr_cuda_launch(stage, k->optim_predict, size, k->block, args);
}

/* Muon's predicted matrix: the momentum buffer orthogonalised (the CPU's muon_predict_matrix). */
static void muon_predict_matrix(const pr_optim_rule *r, int stage, const pr_optim_kernels *k, const float *p,
                                const float *buf, float *out, int64_t rows, int64_t cols, float ahead)
{
    long n = (long)(rows * cols), lrows = (long)rows, lcols = (long)cols;
    int flip = rows > cols;
    float *x = scratch(stage, n), *y = scratch(stage, n);
    void *copy_args[] = {&buf, &x, &n, &lrows, &lcols, &flip};
    pr_cuda_launch(stage, k->wide_copy, n, k->block, copy_args);
    float scale = orthogonalise(r, stage, k, &x, &y, rows, cols);
    pr_device_cuda.copy(stage, out, p, (size_t)n * sizeof(float));
    muon_apply(r, stage, k, out, x, rows, cols, ahead, scale);
    pr_device_cuda.release(stage, x);
    pr_device_cuda.release(stage, y);
}

/* LAMB's predicted slice: its direction, the trust ratio from the two norms, then the step. */
static void lamb_predict_slice(const pr_optim_rule *r, int stage, const pr_optim_kernels *k, const float *p,
                               const float *m, const float *v, float *out, int64_t size, int decay, int64_t t,
                               float ahead)
{
    float c1, c2, wd = decay ? (float)r->weight_decay : 0.0f;
    pr_adam_corrections(r, t, &c1, &c2);
    float *d = scratch(stage, size);
    predict_slice(r, stage, k, p, m, v, d, size, 1.0f, c1, c2, wd, 0.0f, 1);
    double w_norm = norm_of(stage, p, size), d_norm = norm_of(stage, d, size);
    float ratio = pr_lamb_trust_ratio(decay, w_norm, d_norm);
    predict_slice(r, stage, k, p, m, v, out, size, 1.0f, c1, c2, wd, ahead * ratio, 0);
    pr_device_cuda.release(stage, d);
}

void pr_cuda_optim_predict(const pr_optim_rule *r, const pr_tensor *t, const pr_predict_args *args,
                           int32_t stage, const pr_optim_kernels *k)
{
    const float *p = args->params + t->offset, *m = args->m + t->offset, *v = args->v + t->offset;
    float *out = args->out + t->offset;
    int64_t rows, cols, slice = pr_optim_layer_floats(t->ckpt_tensor, r->width);
    float ahead = (float)((double)args->d * args->lr), wd = t->decay ? (float)r->weight_decay : 0.0f, c1, c2;
    switch (r->kind) {
    case PR_OPT_ADAMW:
        pr_adam_corrections(r, args->steps_done, &c1, &c2);
        predict_slice(r, stage, k, p, m, v, out, t->size, 1.0f, c1, c2, wd, ahead, 0);
        break;
    case PR_OPT_MUON:
        if (pr_optim_muon_shape(t->ckpt_tensor, r->width, &rows, &cols)) {
            for (int64_t at = 0; at < t->size; at += rows * cols)
                muon_predict_matrix(r, stage, k, p + at, m + at, out + at, rows, cols, ahead);
        } else {
            float group_ahead = (float)((double)args->d * args->lr * r->group_lr_ratio);
            pr_adam_corrections(r, args->steps_done, &c1, &c2);
            predict_slice(r, stage, k, p, m, v, out, t->size, 1.0f, c1, c2, wd, group_ahead, 0);
        }
        break;
    case PR_OPT_LAMB: // the trust ratio per layer, as the step takes it
    case PR_OPT_LANS: // as the CPU's: with m^ for the normalised gradient, LAMB's direction
        for (int64_t at = 0; at < t->size; at += slice ? slice : t->size)
            lamb_predict_slice(r, stage, k, p + at, m + at, v + at, out + at, slice ? slice : t->size, t->decay,
                               args->steps_done, ahead);
        break;
    case PR_OPT_NADAMW: { // step t's Nesterov mix with m standing in for the gradient
        pr_nadam_scalars c = pr_nadam_scalars_at(r, args->steps_done, 1.0f, wd);
        predict_slice(r, stage, k, p, m, v, out, t->size, c.coef_g + c.coef_m, 1.0f, c.c2, wd, ahead, 0);
        break;
    }
    default:
        pr_internal("pr_cuda_optim_predict: optimizer %d has no prediction", (int)r->kind);
    }
    if (args->out_h) { // the products' bf16 copy of the predicted weights
        pr_bf16 *out_h = args->out_h + t->offset;
        long n = (long)t->size;
        void *copy_args[] = {&out, &out_h, &n};
        pr_cuda_launch(stage, k->to_bf16, t->size, k->block, copy_args);
    }
}
