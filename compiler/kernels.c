/* kernels.c: every fused kernel of the GPT-2 stage programs, described once.
 *
 * Each description is a body for one index of a 1-D iteration space. The C emitter wraps
 * it in a loop; the CUDA emitter in a __global__ function with one thread per index. So
 * bodies keep to the common subset of C and CUDA C (see KernelDesc in pacic.h): no
 * library calls but float math, no local arrays, ATOMIC_ADD where indices running at the
 * same time may add to the same element (plain += in C, where indices run in order, so the
 * C result is deterministic).
 *
 * Shape constants: B micro-batch, T context, C width, NH heads, HS = C / NH, V vocabulary,
 * BT = B * T rows. Activations are row-major [BT, width]; qkv rows hold q | k | v.
 */
#include <string.h>

#include "pacic.h"

const KernelDesc kernel_descs[] = {
    {
        .name = "encoder_forward",
        .doc = "out[b,t,:] = wte[token[b,t],:] + wpe[t,:]",
        .params = "float *RESTRICT out, const int *RESTRICT tokens, const float *RESTRICT wte, "
                  "const float *RESTRICT wpe",
        .index = "row",
        .extent = "BT",
        .body = "const float *tok = wte + (long)tokens[row] * C;\n"
                "const float *pos = wpe + (long)(row % T) * C;\n"
                "float *o = out + (long)row * C;\n"
                "for (int c = 0; c < C; c++)\n"
                "    o[c] = tok[c] + pos[c];",
    },
    {
        .name = "encoder_backward",
        .doc = "dwte[token[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:]",
        .params = "float *dwte, float *dwpe, const float *RESTRICT dout, const int *RESTRICT tokens",
        .index = "row",
        .extent = "BT",
        .body = "float *dtok = dwte + (long)tokens[row] * C;\n"
                "float *dpos = dwpe + (long)(row % T) * C;\n"
                "const float *d = dout + (long)row * C;\n"
                "for (int c = 0; c < C; c++) {\n"
                "    ATOMIC_ADD(&dtok[c], d[c]);\n"
                "    ATOMIC_ADD(&dpos[c], d[c]);\n"
                "}",
    },
    {
        .name = "layernorm_forward",
        .doc = "out = (inp - mean) * rstd * weight + bias per row, eps 1e-5; saves mean and rstd",
        .params = "float *RESTRICT out, float *RESTRICT mean, float *RESTRICT rstd, "
                  "const float *RESTRICT inp, const float *RESTRICT weight, const float *RESTRICT bias",
        .index = "row",
        .extent = "BT",
        .body = "const float *x = inp + (long)row * C;\n"
                "float *o = out + (long)row * C;\n"
                "float m = 0.0f;\n"
                "for (int c = 0; c < C; c++)\n"
                "    m += x[c];\n"
                "m = m / C;\n"
                "float var = 0.0f;\n"
                "for (int c = 0; c < C; c++) {\n"
                "    float dev = x[c] - m;\n"
                "    var += dev * dev;\n"
                "}\n"
                "var = var / C;\n"
                "float s = 1.0f / sqrtf(var + 1e-5f);\n"
                "for (int c = 0; c < C; c++)\n"
                "    o[c] = (x[c] - m) * s * weight[c] + bias[c];\n"
                "mean[row] = m;\n"
                "rstd[row] = s;",
    },
    {
        .name = "residual_layernorm_forward",
        .doc = "resid = x + (resid + proj_bias), the residual add of a projection; then "
               "out = LayerNorm(resid), saving mean and rstd",
        .params = "float *RESTRICT resid, const float *RESTRICT x, const float *RESTRICT proj_bias, "
                  "float *RESTRICT out, float *RESTRICT mean, float *RESTRICT rstd, "
                  "const float *RESTRICT weight, const float *RESTRICT bias",
        .index = "row",
        .extent = "BT",
        .body = "float *r = resid + (long)row * C;\n"
                "const float *xr = x + (long)row * C;\n"
                "float *o = out + (long)row * C;\n"
                "float m = 0.0f;\n"
                "for (int c = 0; c < C; c++) {\n"
                "    r[c] = xr[c] + (r[c] + proj_bias[c]);\n"
                "    m += r[c];\n"
                "}\n"
                "m = m / C;\n"
                "float var = 0.0f;\n"
                "for (int c = 0; c < C; c++) {\n"
                "    float dev = r[c] - m;\n"
                "    var += dev * dev;\n"
                "}\n"
                "var = var / C;\n"
                "float s = 1.0f / sqrtf(var + 1e-5f);\n"
                "for (int c = 0; c < C; c++)\n"
                "    o[c] = (r[c] - m) * s * weight[c] + bias[c];\n"
                "mean[row] = m;\n"
                "rstd[row] = s;",
    },
    {
        .name = "residual_forward",
        .doc = "resid = x + (resid + proj_bias): the residual add of a projection",
        .params = "float *RESTRICT resid, const float *RESTRICT x, const float *RESTRICT proj_bias",
        .index = "row",
        .extent = "BT",
        .body = "float *r = resid + (long)row * C;\n"
                "const float *xr = x + (long)row * C;\n"
                "for (int c = 0; c < C; c++)\n"
                "    r[c] = xr[c] + (r[c] + proj_bias[c]);",
    },
    {
        .name = "bias_forward",
        .doc = "out[row,:] += bias for rows of width OC",
        .params = "float *RESTRICT out, const float *RESTRICT bias, int OC",
        .index = "row",
        .extent = "BT",
        .body = "float *o = out + (long)row * OC;\n"
                "for (int j = 0; j < OC; j++)\n"
                "    o[j] += bias[j];",
    },
    {
        .name = "bias_gelu_forward",
        .doc = "pre += bias (saved for the backward); act = GELU(pre), tanh approximation; rows of 4C",
        .params = "float *RESTRICT pre, float *RESTRICT act, const float *RESTRICT bias",
        .index = "row",
        .extent = "BT",
        .body = "float *h = pre + (long)row * 4 * C;\n"
                "float *a = act + (long)row * 4 * C;\n"
                "for (int j = 0; j < 4 * C; j++) {\n"
                "    float x = h[j] + bias[j];\n"
                "    h[j] = x;\n"
                "    a[j] = 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));\n"
                "}",
    },
    {
        .name = "gelu_backward",
        .doc = "dact = dact * GELU'(pre), in place, rows of 4C",
        .params = "float *RESTRICT dact, const float *RESTRICT pre",
        .index = "row",
        .extent = "BT",
        .body = "float *d = dact + (long)row * 4 * C;\n"
                "const float *h = pre + (long)row * 4 * C;\n"
                "for (int j = 0; j < 4 * C; j++) {\n"
                "    float x = h[j];\n"
                "    float u = 0.7978845608f * (x + 0.044715f * x * x * x);\n"
                "    float th = tanhf(u);\n"
                "    float du = 0.7978845608f * (1.0f + 3.0f * 0.044715f * x * x);\n"
                "    d[j] *= 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;\n"
                "}",
    },
    {
        .name = "bias_backward",
        .doc = "dbias[j] += sum over rows of dout[row, j], rows of width OC",
        .params = "float *RESTRICT dbias, const float *RESTRICT dout, int OC",
        .index = "j",
        .extent = "OC",
        .body = "float sum = 0.0f;\n"
                "for (int row = 0; row < BT; row++)\n"
                "    sum += dout[(long)row * OC + j];\n"
                "dbias[j] += sum;",
    },
    {
        .name = "layernorm_backward",
        .doc = "dinp += d(LayerNorm)/d(inp) dout; dweight, dbias += their gradients",
        .params = "float *RESTRICT dinp, float *dweight, float *dbias, const float *RESTRICT dout, "
                  "const float *RESTRICT inp, const float *RESTRICT weight, "
                  "const float *RESTRICT mean, const float *RESTRICT rstd",
        .index = "row",
        .extent = "BT",
        .body = "const float *d = dout + (long)row * C;\n"
                "const float *x = inp + (long)row * C;\n"
                "float *di = dinp + (long)row * C;\n"
                "float m = mean[row];\n"
                "float s = rstd[row];\n"
                "float dnorm_mean = 0.0f;\n"
                "float dnorm_norm_mean = 0.0f;\n"
                "for (int c = 0; c < C; c++) {\n"
                "    float dnorm = weight[c] * d[c];\n"
                "    dnorm_mean += dnorm;\n"
                "    dnorm_norm_mean += dnorm * (x[c] - m) * s;\n"
                "}\n"
                "dnorm_mean = dnorm_mean / C;\n"
                "dnorm_norm_mean = dnorm_norm_mean / C;\n"
                "for (int c = 0; c < C; c++) {\n"
                "    float norm = (x[c] - m) * s;\n"
                "    float dnorm = weight[c] * d[c];\n"
                "    ATOMIC_ADD(&dbias[c], d[c]);\n"
                "    ATOMIC_ADD(&dweight[c], norm * d[c]);\n"
                "    di[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;\n"
                "}",
    },
    {
        .name = "attention_forward",
        .doc = "causal softmax(q k^T / sqrt(HS)) v for one (b, head, t) row; saves the row's "
               "log-sum-exp so the backward recomputes scores instead of storing T x T",
        .params = "float *RESTRICT out, float *RESTRICT lse, const float *RESTRICT qkv",
        .index = "i",
        .extent = "B * NH * T",
        .body = "int t = i % T;\n"
                "int h = (i / T) % NH;\n"
                "int b = i / (NH * T);\n"
                "const float scale = 1.0f / sqrtf((float)HS);\n"
                "const float *q = qkv + ((long)b * T + t) * 3 * C + h * HS;\n"
                "float *o = out + ((long)b * T + t) * C + h * HS;\n"
                "float mx = -3.0e38f;\n"
                "for (int t2 = 0; t2 <= t; t2++) {\n"
                "    const float *k = qkv + ((long)b * T + t2) * 3 * C + C + h * HS;\n"
                "    float score = 0.0f;\n"
                "    for (int d = 0; d < HS; d++)\n"
                "        score += q[d] * k[d];\n"
                "    mx = fmaxf(mx, score * scale);\n"
                "}\n"
                "for (int d = 0; d < HS; d++)\n"
                "    o[d] = 0.0f;\n"
                "float sum = 0.0f;\n"
                "for (int t2 = 0; t2 <= t; t2++) {\n"
                "    const float *k = qkv + ((long)b * T + t2) * 3 * C + C + h * HS;\n"
                "    const float *v = k + C;\n"
                "    float score = 0.0f;\n"
                "    for (int d = 0; d < HS; d++)\n"
                "        score += q[d] * k[d];\n"
                "    float e = expf(score * scale - mx);\n"
                "    sum += e;\n"
                "    for (int d = 0; d < HS; d++)\n"
                "        o[d] += e * v[d];\n"
                "}\n"
                "float inv = 1.0f / sum;\n"
                "for (int d = 0; d < HS; d++)\n"
                "    o[d] *= inv;\n"
                "lse[i] = mx + logf(sum);",
    },
    {
        .name = "attention_backward",
        .doc = "gradients of q, k, v for one (b, head, t) row, scores recomputed from the saved "
               "log-sum-exp; D = dout . out is the row's softmax correction",
        .params = "float *dqkv, const float *RESTRICT dout, const float *RESTRICT out, "
                  "const float *RESTRICT lse, const float *RESTRICT qkv",
        .index = "i",
        .extent = "B * NH * T",
        .body = "int t = i % T;\n"
                "int h = (i / T) % NH;\n"
                "int b = i / (NH * T);\n"
                "const float scale = 1.0f / sqrtf((float)HS);\n"
                "long row = (long)b * T + t;\n"
                "const float *q = qkv + row * 3 * C + h * HS;\n"
                "float *dq = dqkv + row * 3 * C + h * HS;\n"
                "const float *dor = dout + row * C + h * HS;\n"
                "const float *o = out + row * C + h * HS;\n"
                "float D = 0.0f;\n"
                "for (int d = 0; d < HS; d++)\n"
                "    D += dor[d] * o[d];\n"
                "for (int t2 = 0; t2 <= t; t2++) {\n"
                "    long row2 = (long)b * T + t2;\n"
                "    const float *k = qkv + row2 * 3 * C + C + h * HS;\n"
                "    const float *v = k + C;\n"
                "    float *dk = dqkv + row2 * 3 * C + C + h * HS;\n"
                "    float *dv = dk + C;\n"
                "    float score = 0.0f;\n"
                "    float dp = 0.0f;\n"
                "    for (int d = 0; d < HS; d++) {\n"
                "        score += q[d] * k[d];\n"
                "        dp += dor[d] * v[d];\n"
                "    }\n"
                "    float p = expf(score * scale - lse[i]);\n"
                "    float ds = p * (dp - D) * scale;\n"
                "    for (int d = 0; d < HS; d++) {\n"
                "        dq[d] += ds * k[d];\n"
                "        ATOMIC_ADD(&dk[d], ds * q[d]);\n"
                "        ATOMIC_ADD(&dv[d], p * dor[d]);\n"
                "    }\n"
                "}",
    },
    {
        .name = "softmax_xent_forward",
        .doc = "logits -> probabilities in place; losses[row] = -log p[target], computed as "
               "max + log(sum) - logit[target] so that it never takes the log of an underflow",
        .params = "float *RESTRICT probs, float *RESTRICT losses, const int *RESTRICT targets",
        .index = "row",
        .extent = "BT",
        .body = "float *p = probs + (long)row * V;\n"
                "float target_logit = p[targets[row]];\n"
                "float mx = p[0];\n"
                "for (int v = 1; v < V; v++)\n"
                "    mx = fmaxf(mx, p[v]);\n"
                "float sum = 0.0f;\n"
                "for (int v = 0; v < V; v++) {\n"
                "    p[v] = expf(p[v] - mx);\n"
                "    sum += p[v];\n"
                "}\n"
                "float inv = 1.0f / sum;\n"
                "for (int v = 0; v < V; v++)\n"
                "    p[v] *= inv;\n"
                "losses[row] = mx + logf(sum) - target_logit;",
    },
    {
        .name = "softmax_xent_backward",
        .doc = "dlogits = (probs - onehot(target)) * dloss, in place over the probabilities",
        .params = "float *RESTRICT probs, const int *RESTRICT targets, float dloss",
        .index = "row",
        .extent = "BT",
        .body = "float *p = probs + (long)row * V;\n"
                "int target = targets[row];\n"
                "for (int v = 0; v < V; v++)\n"
                "    p[v] = (p[v] - (v == target ? 1.0f : 0.0f)) * dloss;",
    },
    {
        .name = "adamw",
        .doc = "one AdamW update of n floats: decoupled weight decay, bias-corrected moments; "
               "the gradient is multiplied by grad_scale (clipping) first",
        .params = "float *RESTRICT param, const float *RESTRICT grad, float *RESTRICT m, "
                  "float *RESTRICT v, long n, float lr, float weight_decay, float grad_scale, "
                  "float beta1_correction, float beta2_correction",
        .index = "i",
        .extent = "n",
        .body = "float g = grad[i] * grad_scale;\n"
                "float mi = ADAMW_BETA1 * m[i] + (1.0f - ADAMW_BETA1) * g;\n"
                "float vi = ADAMW_BETA2 * v[i] + (1.0f - ADAMW_BETA2) * g * g;\n"
                "m[i] = mi;\n"
                "v[i] = vi;\n"
                "float m_hat = mi / beta1_correction;\n"
                "float v_hat = vi / beta2_correction;\n"
                "param[i] -= lr * (m_hat / (sqrtf(v_hat) + ADAMW_EPS) + weight_decay * param[i]);",
    },
};

const int kernel_desc_count = (int)(sizeof kernel_descs / sizeof kernel_descs[0]);

/* Kernels are looked up by name when the op lists are built; a typo is a compiler bug. */
const KernelDesc *kernel_find(const char *name)
{
    for (int i = 0; i < kernel_desc_count; i++)
        if (strcmp(kernel_descs[i].name, name) == 0)
            return &kernel_descs[i];
    ICE("no kernel named '%s'", name);
}
