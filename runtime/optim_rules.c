/* optim_rules.c: the update rules besides AdamW (docs/dsl.md "optimizer"): Muon with an
 * AdamW group, LAMB, LARS, NAdamW and LANS, one tensor of a stage per call, in float32 with norms summed
 * in double. Every rule is local to a tensor, so stages stay independent. The per-layer
 * tensors of a stage hold several layers back to back; the rules that look at a matrix or
 * a norm see one layer's slice at a time, as if the layers were separate tensors. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "prt.h"

#define NS_A PR_NS_A
#define NS_B PR_NS_B
#define NS_C PR_NS_C
#define NS_NORM_EPS PR_NS_NORM_EPS

/* Floats of one layer's slice of a per-layer tensor; 0 for the tensors outside the blocks. */
int64_t pr_optim_layer_floats(int32_t kind, int64_t C)
{
    switch (kind) {
    case PR_CKPT_LN1W: case PR_CKPT_LN1B: case PR_CKPT_ATTPROJB: case PR_CKPT_LN2W:
    case PR_CKPT_LN2B: case PR_CKPT_FCPROJB: return C;
    case PR_CKPT_QKVB: return 3 * C;
    case PR_CKPT_FCB: return 4 * C;
    case PR_CKPT_ATTPROJW: return C * C;
    case PR_CKPT_QKVW: return 3 * C * C;
    case PR_CKPT_FCW: case PR_CKPT_FCPROJW: return 4 * C * C;
    default: return 0;
    }
}

/* The shape Muon orthogonalises (the GPU step shares these two): qkv as three C x C matrices (q, k and v are separate maps
 * stacked for speed), fc as 4C x C, its projection C x 4C, the attention projection C x C.
 * False for the tensors the AdamW group takes. */
bool pr_optim_muon_shape(int32_t kind, int64_t C, int64_t *rows, int64_t *cols)
{
    *rows = *cols = C;
    switch (kind) {
    case PR_CKPT_QKVW: case PR_CKPT_ATTPROJW: return true;
    case PR_CKPT_FCW: *rows = 4 * C; return true;
    case PR_CKPT_FCPROJW: *cols = 4 * C; return true;
    default: return false;
    }
}

static double sumsq(const float *x, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += (double)x[i] * (double)x[i];
    return s;
}

void pr_adam_corrections(const pr_optim_rule *r, int64_t t, float *c1, float *c2)
{
    *c1 = (float)(1.0 - pow(r->beta1, (double)t));
    *c2 = (float)(1.0 - pow(r->beta2, (double)t));
}

/* Adam's bias-corrected direction m_hat / (sqrt(v_hat) + eps), shared by AdamW, LAMB and the
 * prediction. */
static inline float adam_direction(float m, float v, float c1, float c2, float eps)
{
    return (m / c1) / (sqrtf(v / c2) + eps);
}

/* AdamW on n floats: the generated kernel's formula with the rule's own betas and eps. */
static void adamw_slice(const pr_optim_rule *r, float *p, const float *grad, float *m, float *v,
                        int64_t n, float lr, float wd, float grad_scale, int64_t t)
{
    float b1 = (float)r->beta1, b2 = (float)r->beta2, eps = (float)r->eps, c1, c2;
    pr_adam_corrections(r, t, &c1, &c2);
    for (int64_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale;
        m[i] = b1 * m[i] + (1.0f - b1) * g;
        v[i] = b2 * v[i] + (1.0f - b2) * g * g;
        p[i] -= lr * (adam_direction(m[i], v[i], c1, c2, eps) + wd * p[i]);
    }
}

/* Newton-Schulz on x (r x c, r <= c, row-major), normalised first by its Frobenius norm;
 * a and b are r x r scratch, y r x c scratch. The result is left in x. */
static void newton_schulz(float *x, float *y, float *a, float *b, int r, int c, int steps)
{
    float inv = (float)(1.0 / (sqrt(sumsq(x, (int64_t)r * c)) + NS_NORM_EPS));
    for (int64_t i = 0; i < (int64_t)r * c; i++)
        x[i] *= inv;
    for (int k = 0; k < steps; k++) {
        pr_gemm(0, 1, r, r, c, 1.0f, x, c, x, c, 0.0f, a, r);          /* A = X X^T */
        pr_gemm(0, 0, r, r, r, NS_C, a, r, a, r, 0.0f, b, r);          /* B = cA^2 ... */
        for (int64_t i = 0; i < (int64_t)r * r; i++)                  /* ... + bA */
            b[i] += NS_B * a[i];
        for (int64_t i = 0; i < (int64_t)r * c; i++)
            y[i] = NS_A * x[i];
        pr_gemm(0, 0, r, c, r, 1.0f, b, r, x, c, 1.0f, y, c);          /* Y = aX + BX */
        memcpy(x, y, (size_t)r * c * sizeof *x);
    }
}

/* Where element (i, j) of a rows x cols matrix sits in the orientation Muon orthogonalises:
 * the wide one, so that A = X X^T is the small side. */
static inline int64_t wide_at(int64_t i, int64_t j, int64_t rows, int64_t cols)
{
    return rows > cols ? j * rows + i : i * cols + j;
}

float pr_muon_shape_scale(const pr_optim_rule *r, int64_t rows, int64_t cols)
{
    return r->shape_scale == PR_MUON_SCALE_RMS ? (float)(0.2 * sqrt((double)(rows > cols ? rows : cols)))
                                               : (float)sqrt(rows > cols ? (double)rows / (double)cols : 1.0);
}

float pr_lamb_trust_ratio(int decay, double w_norm, double d_norm)
{
    return decay && w_norm > 0.0 && d_norm > 0.0 ? (float)(w_norm / d_norm) : 1.0f;
}

/* Orthogonalises x (rows x cols laid out by wide_at) in place with the rule's Newton-Schulz
 * steps, and returns the rule's shape scaling for that matrix. */
static float muon_orthogonalise(const pr_optim_rule *r, float *x, int64_t rows, int64_t cols)
{
    int64_t rr = rows > cols ? cols : rows, cc = rows > cols ? rows : cols;
    float *y = pr_alloc((size_t)(rr * cc) * sizeof *y);
    float *a = pr_alloc((size_t)(rr * rr) * sizeof *a), *b = pr_alloc((size_t)(rr * rr) * sizeof *b);
    newton_schulz(x, y, a, b, (int)rr, (int)cc, r->ns_steps);
    free(y);
    free(a);
    free(b);
    return pr_muon_shape_scale(r, rows, cols);
}

/* Muon on one rows x cols matrix: momentum, Nesterov, orthogonalisation, shape scaling,
 * decoupled weight decay. */
static void muon_matrix(const pr_optim_rule *r, float *p, const float *grad, float *buf,
                        int64_t rows, int64_t cols, float lr, float grad_scale)
{
    float mu = (float)r->momentum, wd = (float)r->muon_weight_decay;
    float *x = pr_alloc((size_t)(rows * cols) * sizeof *x);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            int64_t at = i * cols + j;
            float g = grad[at] * grad_scale;
            buf[at] = mu * buf[at] + g;
            x[wide_at(i, j, rows, cols)] = r->nesterov ? g + mu * buf[at] : buf[at];
        }
    float scale = muon_orthogonalise(r, x, rows, cols);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            int64_t at = i * cols + j;
            p[at] -= lr * (scale * x[wide_at(i, j, rows, cols)] + wd * p[at]);
        }
    free(x);
}

/* LAMB's trust ratio of a slice (update_sq: the direction's squared norm). */
static float lamb_trust_ratio(const float *p, int64_t n, int decay, double update_sq)
{
    return pr_lamb_trust_ratio(decay, sqrt(sumsq(p, n)), sqrt(update_sq));
}

/* LAMB (You et al. 2019) on one slice: Adam's bias-corrected direction plus weight decay,
 * scaled by the trust ratio ||w|| / ||direction||, 1 when either norm is 0. Slices without
 * decay (biases, LayerNorm) take neither decay nor the trust ratio. */
static void lamb_slice(const pr_optim_rule *r, float *p, const float *grad, float *m, float *v,
                       int64_t n, float lr, int decay, float grad_scale, int64_t t)
{
    float b1 = (float)r->beta1, b2 = (float)r->beta2, eps = (float)r->eps, c1, c2;
    float wd = decay ? (float)r->weight_decay : 0.0f;
    pr_adam_corrections(r, t, &c1, &c2);
    double update_sq = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale;
        m[i] = b1 * m[i] + (1.0f - b1) * g;
        v[i] = b2 * v[i] + (1.0f - b2) * g * g;
        float d = adam_direction(m[i], v[i], c1, c2, eps) + wd * p[i];
        update_sq += (double)d * (double)d;
    }
    float ratio = lamb_trust_ratio(p, n, decay, update_sq);
    for (int64_t i = 0; i < n; i++)
        p[i] -= lr * ratio * (adam_direction(m[i], v[i], c1, c2, eps) + wd * p[i]);
}

/* LANS (Zheng et al. 2020, Algorithm 2) on one slice, LAMB's block: the gradient divided by its
 * norm (a zero gradient stays zero; the clip factor cancels, so the raw gradient's norm is
 * taken), Adam's moments of it, then two trust-ratio-scaled directions, r from m^ and c from
 * the normalised gradient, both over sqrt(v^) + eps and with decay, weighted beta1 and
 * 1 - beta1 (the Nesterov step). Slices without decay take neither decay nor the ratios. */
static void lans_slice(const pr_optim_rule *r, float *p, const float *grad, float *m, float *v,
                       int64_t n, float lr, int decay, int64_t t)
{
    float b1 = (float)r->beta1, b2 = (float)r->beta2, eps = (float)r->eps, c1, c2;
    float wd = decay ? (float)r->weight_decay : 0.0f;
    double g_norm = sqrt(sumsq(grad, n));
    float inv = g_norm > 0.0 ? (float)(1.0 / g_norm) : 0.0f;
    pr_adam_corrections(r, t, &c1, &c2);
    double r_sq = 0.0, c_sq = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float g = grad[i] * inv;
        m[i] = b1 * m[i] + (1.0f - b1) * g;
        v[i] = b2 * v[i] + (1.0f - b2) * g * g;
        float denom = sqrtf(v[i] / c2) + eps;
        float rd = (m[i] / c1) / denom + wd * p[i], cd = g / denom + wd * p[i];
        r_sq += (double)rd * (double)rd;
        c_sq += (double)cd * (double)cd;
    }
    double w_norm = sqrt(sumsq(p, n));
    float ratio_r = pr_lamb_trust_ratio(decay, w_norm, sqrt(r_sq));
    float ratio_c = pr_lamb_trust_ratio(decay, w_norm, sqrt(c_sq));
    float step_r = lr * b1 * ratio_r, step_c = lr * (1.0f - b1) * ratio_c;
    for (int64_t i = 0; i < n; i++) {
        float g = grad[i] * inv, denom = sqrtf(v[i] / c2) + eps;
        p[i] -= step_r * ((m[i] / c1) / denom + wd * p[i]) + step_c * (g / denom + wd * p[i]);
    }
}

/* LARS (You et al. 2017) on one slice: local lr eta ||w|| / (||g|| + wd ||w|| + eps), 1 when
 * either norm is 0, into a momentum buffer that holds lr-scaled steps. Slices without decay
 * (biases, LayerNorm) take neither decay nor the local lr. */
static void lars_slice(const pr_optim_rule *r, float *p, const float *grad, float *buf, int64_t n,
                       float lr, int decay, float grad_scale)
{
    float mu = (float)r->momentum, wd = decay ? (float)r->weight_decay : 0.0f;
    double g_sq = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale;
        g_sq += (double)g * (double)g;
    }
    double w_norm = sqrt(sumsq(p, n)), g_norm = sqrt(g_sq);
    double local = decay && w_norm > 0.0 && g_norm > 0.0
                       ? r->trust_coefficient * w_norm / (g_norm + r->weight_decay * w_norm + r->eps)
                       : 1.0;
    float step = lr * (float)local;
    for (int64_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale;
        buf[i] = mu * buf[i] + step * (g + wd * p[i]);
        p[i] -= buf[i];
    }
}

/* mu_i of NAdam's momentum schedule (Dozat 2016; torch.optim.NAdam's momentum_decay psi). */
static double nadam_mu(const pr_optim_rule *r, int64_t i)
{
    return r->beta1 * (1.0 - 0.5 * pow(0.96, (double)i * r->momentum_decay));
}

/* P_t = mu_1 ... mu_t. A stage's steps come one after another on one thread, so the product
 * of the last call is extended by one factor: the same multiplications in the same order as
 * computing it from 1, which a resumed run (or another rule) does. */
static double nadam_mu_product(const pr_optim_rule *r, int64_t t)
{
    static _Thread_local struct { double beta1, psi, product; int64_t t; } last;
    int64_t from = 0;
    double product = 1.0;
    if (last.t > 0 && last.t <= t && last.beta1 == r->beta1 && last.psi == r->momentum_decay) {
        from = last.t;
        product = last.product;
    }
    for (int64_t i = from + 1; i <= t; i++)
        product *= nadam_mu(r, i);
    last.beta1 = r->beta1;
    last.psi = r->momentum_decay;
    last.t = t;
    last.product = product;
    return product;
}

pr_nadam_scalars pr_nadam_scalars_at(const pr_optim_rule *r, int64_t t, float lr, float wd)
{
    double mu = nadam_mu(r, t), mu_next = nadam_mu(r, t + 1), product = nadam_mu_product(r, t);
    return (pr_nadam_scalars){
        .keep = (float)(1.0 - (double)lr * (double)wd),
        .coef_g = (float)((double)lr * (1.0 - mu) / (1.0 - product)),
        .coef_m = (float)((double)lr * mu_next / (1.0 - product * mu_next)),
        .c2 = (float)(1.0 - pow(r->beta2, (double)t)),
    };
}

/* NAdamW on n floats: Adam's moments, the Nesterov mix of the gradient and the momentum
 * (pr_nadam_scalars), decoupled weight decay on the decayed tensors. */
static void nadam_slice(const pr_optim_rule *r, float *p, const float *grad, float *m, float *v,
                        int64_t n, float lr, int decay, float grad_scale, int64_t t)
{
    float b1 = (float)r->beta1, b2 = (float)r->beta2, eps = (float)r->eps;
    pr_nadam_scalars k = pr_nadam_scalars_at(r, t, lr, decay ? (float)r->weight_decay : 0.0f);
    for (int64_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale;
        m[i] = b1 * m[i] + (1.0f - b1) * g;
        v[i] = b2 * v[i] + (1.0f - b2) * g * g;
        float denom = sqrtf(v[i] / k.c2) + eps;
        p[i] = k.keep * p[i] - (k.coef_g * g + k.coef_m * m[i]) / denom;
    }
}

void pr_optim_step(const pr_optim_rule *r, const pr_tensor *t, const pr_adamw_args *args)
{
    float *p = args->params + t->offset, *m = args->m + t->offset, *v = args->v + t->offset;
    const float *g = args->grads + t->offset;
    int64_t C = r->width, slice = pr_optim_layer_floats(t->ckpt_tensor, C), rows, cols;
    if (slice == 0)
        slice = t->size;
    if (t->size % slice != 0)
        pr_internal("%s: %lld floats are not whole layers of %lld", t->name, (long long)t->size,
                    (long long)slice);
    switch (r->kind) {
    case PR_OPT_MUON:
        if (pr_optim_muon_shape(t->ckpt_tensor, C, &rows, &cols)) {
            for (int64_t at = 0; at < t->size; at += rows * cols)
                muon_matrix(r, p + at, g + at, m + at, rows, cols, args->lr, args->grad_scale);
        } else {
            float lr = (float)((double)args->lr * r->group_lr_ratio);
            adamw_slice(r, p, g, m, v, t->size, lr, t->decay ? (float)r->weight_decay : 0.0f,
                        args->grad_scale, args->t);
        }
        return;
    case PR_OPT_LAMB:
        for (int64_t at = 0; at < t->size; at += slice)
            lamb_slice(r, p + at, g + at, m + at, v + at, slice, args->lr, t->decay,
                       args->grad_scale, args->t);
        return;
    case PR_OPT_LARS:
        for (int64_t at = 0; at < t->size; at += slice)
            lars_slice(r, p + at, g + at, m + at, slice, args->lr, t->decay, args->grad_scale);
        return;
    case PR_OPT_NADAMW: // elementwise: one call for the whole tensor
        nadam_slice(r, p, g, m, v, t->size, args->lr, t->decay, args->grad_scale, args->t);
        return;
    case PR_OPT_LANS: // LAMB's blocks, for the gradient's norm too
        for (int64_t at = 0; at < t->size; at += slice)
            lans_slice(r, p + at, g + at, m + at, v + at, slice, args->lr, t->decay, args->t);
        return;
    default:
        pr_internal("pr_optim_step: optimizer %d", (int)r->kind);
    }
}

/* Muon's predicted matrix: its direction with the momentum buffer standing in for the Nesterov
 * mix (parallel to it under a constant gradient; Newton-Schulz ignores the length). */
static void muon_predict_matrix(const pr_optim_rule *r, const float *p, const float *buf, int64_t rows,
                                int64_t cols, float ahead, float *out)
{
    float wd = (float)r->muon_weight_decay;
    float *x = pr_alloc((size_t)(rows * cols) * sizeof *x);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            x[wide_at(i, j, rows, cols)] = buf[i * cols + j];
    float scale = muon_orthogonalise(r, x, rows, cols);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            int64_t at = i * cols + j;
            out[at] = p[at] - ahead * (scale * x[wide_at(i, j, rows, cols)] + wd * p[at]);
        }
    free(x);
}

/* AdamW's predicted slice: Adam's direction at the moments after t steps, plus decay. */
static void adamw_predict_slice(const pr_optim_rule *r, const float *p, const float *m, const float *v,
                                int64_t n, float wd, int64_t t, float ahead, float *out)
{
    float eps = (float)r->eps, c1, c2;
    pr_adam_corrections(r, t, &c1, &c2);
    for (int64_t i = 0; i < n; i++)
        out[i] = p[i] - ahead * (adam_direction(m[i], v[i], c1, c2, eps) + wd * p[i]);
}

/* NAdamW's predicted slice: step t's Nesterov mix with m standing in for the gradient,
 * (coef_g + coef_m) / lr * m / (sqrt(v / c2) + eps), plus decay. */
static void nadam_predict_slice(const pr_optim_rule *r, const float *p, const float *m, const float *v,
                                int64_t n, float wd, int64_t t, float ahead, float *out)
{
    pr_nadam_scalars k = pr_nadam_scalars_at(r, t, 1.0f, wd);
    float eps = (float)r->eps, mix = k.coef_g + k.coef_m;
    for (int64_t i = 0; i < n; i++)
        out[i] = p[i] - ahead * (mix * m[i] / (sqrtf(v[i] / k.c2) + eps) + wd * p[i]);
}

/* LAMB's predicted slice: its trust-ratio-scaled direction at the moments after t steps. */
static void lamb_predict_slice(const pr_optim_rule *r, const float *p, const float *m, const float *v,
                               int64_t n, int decay, int64_t t, float ahead, float *out)
{
    float eps = (float)r->eps, wd = decay ? (float)r->weight_decay : 0.0f, c1, c2;
    pr_adam_corrections(r, t, &c1, &c2);
    double update_sq = 0.0;
    for (int64_t i = 0; i < n; i++) {
        float d = adam_direction(m[i], v[i], c1, c2, eps) + wd * p[i];
        update_sq += (double)d * (double)d;
    }
    float ratio = lamb_trust_ratio(p, n, decay, update_sq);
    for (int64_t i = 0; i < n; i++)
        out[i] = p[i] - ahead * ratio * (adam_direction(m[i], v[i], c1, c2, eps) + wd * p[i]);
}

void pr_optim_predict(const pr_optim_rule *r, const pr_tensor *t, const float *params, const float *m,
                      const float *v, int64_t steps_done, double lr, int32_t d, float *out)
{
    const float *p = params + t->offset;
    m += t->offset;
    v += t->offset;
    out += t->offset;
    int64_t rows, cols, slice = pr_optim_layer_floats(t->ckpt_tensor, r->width);
    float ahead = (float)((double)d * lr), wd = t->decay ? (float)r->weight_decay : 0.0f;
    switch (r->kind) {
    case PR_OPT_ADAMW:
        adamw_predict_slice(r, p, m, v, t->size, wd, steps_done, ahead, out);
        return;
    case PR_OPT_MUON:
        if (pr_optim_muon_shape(t->ckpt_tensor, r->width, &rows, &cols)) {
            for (int64_t at = 0; at < t->size; at += rows * cols)
                muon_predict_matrix(r, p + at, m + at, rows, cols, ahead, out + at);
        } else {
            float group_ahead = (float)((double)d * lr * r->group_lr_ratio);
            adamw_predict_slice(r, p, m, v, t->size, wd, steps_done, group_ahead, out);
        }
        return;
    case PR_OPT_LAMB: // the trust ratio per layer, as the step takes it
    case PR_OPT_LANS: // m^ standing in for the normalised gradient makes c = r: LAMB's direction
        for (int64_t at = 0; at < t->size; at += slice ? slice : t->size)
            lamb_predict_slice(r, p + at, m + at, v + at, slice ? slice : t->size, t->decay, steps_done, ahead,
                               out + at);
        return;
    case PR_OPT_NADAMW:
        nadam_predict_slice(r, p, m, v, t->size, wd, steps_done, ahead, out);
        return;
    default:
        pr_internal("pr_optim_predict: optimizer %d has no prediction", (int)r->kind);
    }
}
