/* kernels.c: every fused kernel of the GPT-2 stage programs, described once.
 *
 * Each description is a body for one index of a 1-D iteration space. The C emitter wraps
 * it in a loop; the CUDA emitter in a __global__ function with one thread per index. So
 * bodies keep to the common subset of C and CUDA C (see KernelDesc in pacic.h): no
 * library calls but float math, ATOMIC_ADD where indices running at the
 * same time may add to the same element (plain += in C, where indices run in order, so the
 * C result is deterministic). Local arrays have a constant size (HS), and loops over them are
 * marked UNROLL so that the CUDA compiler keeps them in registers. SIMD_SUM(vars) before a
 * dot-product loop lets the C compiler vectorise it by reassociating the sums of vars;
 * SIMD_MAX(var) likewise for a maximum (exact in any order), written as a comparison: without
 * -ffinite-math-only, fmaxf is a libm call per element that keeps the loop scalar.
 * A description with `gpu_form` is replaced on the GPU by that GPU-only `tiled` one (a block
 * per index, the attention's tiles: attention_gpu.c), with the same arguments.
 *
 * A few kernels are the GPU's alone (`blocks` set: block kernels with shared memory and
 * barriers, see KernelDesc): they stand in for a CPU kernel in the GPU's form of an op
 * (ops.c), and the emulator test checks each against the kernel it replaces
 * (tests/e2e/cuda_kernels.sh).
 *
 * Shape constants: B micro-batch, T context, C width, NH heads, HS = C / NH, V vocabulary,
 * VP floats per row of logits (V rounded up to 64), BT = B * T rows. Activations are
 * row-major [BT, width]; qkv rows hold q | k | v.
 */
#include <string.h>

#include "pacic.h"

/* The classifiers' two sweeps over a row's n logits at lg (fp32) or lh (bf16, when given): an
 * online one that leaves the row's maximum in row_mx and the sum of exp(x - row_mx) in sum,
 * and one that overwrites the row in place with p - onehot(target), from its log-sum-exp. */
#define ROW_LOGSUMEXP(n)                                                                         \
    "float mx = -3.0e38f, sum = 0.0f;\n"                                                          \
    "ROW_LOOP(v, 0, " n ") {\n"                                                                   \
    "    float x = lh ? pr_from_bf16(lh[v]) : lg[v];\n"                                           \
    "    if (x > mx) {\n"                                                                         \
    "        sum *= expf(mx - x);\n"                                                              \
    "        mx = x;\n"                                                                           \
    "    }\n"                                                                                     \
    "    sum += expf(x - mx);\n"                                                                  \
    "}\n"                                                                                         \
    "float row_mx = ROW_MAX(mx);\n"                                                               \
    "sum = ROW_SUM(sum * expf(mx - row_mx));\n"
#define ROW_DLOGITS(n, lse, target)                                                              \
    "ROW_LOOP(v, 0, " n ") {\n"                                                                   \
    "    float x = lh ? pr_from_bf16(lh[v]) : lg[v];\n"                                           \
    "    float d = expf(x - " lse ") - (v == " target " ? 1.0f : 0.0f);\n"                        \
    "    if (lh)\n"                                                                               \
    "        lh[v] = pr_to_bf16(d);\n"                                                            \
    "    else\n"                                                                                  \
    "        lg[v] = d;\n"                                                                        \
    "}"

/* A data table, not a function: every kernel one entry, kept whole past the 120 lines a
 * function may have, so that a kernel is read in one place. */
const KernelDesc kernel_descs[] = {
    {
        .name = "encoder_forward",
        .doc = "out[b,t,:] = wte[token[b,t],:] + wpe[t,:]",
        .params = "float *RESTRICT out, const int *RESTRICT tokens, const float *RESTRICT wte, "
                  "const float *RESTRICT wpe",
        .index = "row",
        .extent = "BT",
        .lanes = 32,
        .body = "const float *tok = wte + (long)tokens[row] * C;\n"
                "const float *pos = wpe + (long)(row % T) * C;\n"
                "float *o = out + (long)row * C;\n"
                "ROW_LOOP(c, 0, C)\n"
                "    o[c] = tok[c] + pos[c];",
    },
    {
        .name = "encoder_backward",
        .doc = "dwte[token[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:]",
        .params = "float *dwte, float *dwpe, const float *RESTRICT dout, const int *RESTRICT tokens",
        .index = "row",
        .extent = "BT",
        .lanes = 32,
        .body = "float *dtok = dwte + (long)tokens[row] * C;\n"
                "float *dpos = dwpe + (long)(row % T) * C;\n"
                "const float *d = dout + (long)row * C;\n"
                "ROW_LOOP(c, 0, C) {\n"
                "    ATOMIC_ADD(&dtok[c], d[c]);\n"
                "    ATOMIC_ADD(&dpos[c], d[c]);\n"
                "}",
    },
    {
        .name = "layernorm_forward",
        .doc = "out = (inp - mean) * rstd * weight + bias per row, eps 1e-5; saves mean and rstd; "
               "given out_h, out goes there in bf16 instead (it is only a product's operand then)",
        .params = "float *RESTRICT out, float *RESTRICT mean, float *RESTRICT rstd, "
                  "const float *RESTRICT inp, const float *RESTRICT weight, const float *RESTRICT bias, "
                  "pr_bf16 *RESTRICT out_h",
        .index = "row",
        .extent = "BT",
        .lanes = 32,
        .body = "const float *x = inp + (long)row * C;\n"
                "float m = 0.0f;\n"
                "SIMD_SUM(m) ROW_LOOP(c, 0, C)\n"
                "    m += x[c];\n"
                "m = ROW_SUM(m) / C;\n"
                "float var = 0.0f;\n"
                "SIMD_SUM(var) ROW_LOOP(c, 0, C) {\n"
                "    float dev = x[c] - m;\n"
                "    var += dev * dev;\n"
                "}\n"
                "var = ROW_SUM(var) / C;\n"
                "float s = 1.0f / sqrtf(var + 1e-5f);\n"
                "if (out_h) {\n"
                "    pr_bf16 *oh = out_h + (long)row * C;\n"
                "    ROW_LOOP(c, 0, C)\n"
                "        oh[c] = pr_to_bf16((x[c] - m) * s * weight[c] + bias[c]);\n"
                "} else {\n"
                "    float *o = out + (long)row * C;\n"
                "    ROW_LOOP(c, 0, C)\n"
                "        o[c] = (x[c] - m) * s * weight[c] + bias[c];\n"
                "}\n"
                "if (LEAD) {\n"
                "    mean[row] = m;\n"
                "    rstd[row] = s;\n"
                "}",
    },
    {
        .name = "residual_layernorm_forward",
        .doc = "resid = x + resid, the residual add of a projection (its bias already added by "
               "the matrix product); then out = LayerNorm(resid), saving mean and rstd; given out_h, out "
               "goes there in bf16 instead",
        .params = "float *RESTRICT resid, const float *RESTRICT x, "
                  "float *RESTRICT out, float *RESTRICT mean, float *RESTRICT rstd, "
                  "const float *RESTRICT weight, const float *RESTRICT bias, pr_bf16 *RESTRICT out_h",
        .index = "row",
        .extent = "BT",
        .lanes = 32,
        .body = "float *r = resid + (long)row * C;\n"
                "const float *xr = x + (long)row * C;\n"
                "float m = 0.0f;\n"
                "SIMD_SUM(m) ROW_LOOP(c, 0, C) {\n"
                "    r[c] = xr[c] + r[c];\n"
                "    m += r[c];\n"
                "}\n"
                "m = ROW_SUM(m) / C;\n"
                "float var = 0.0f;\n"
                "SIMD_SUM(var) ROW_LOOP(c, 0, C) {\n"
                "    float dev = r[c] - m;\n"
                "    var += dev * dev;\n"
                "}\n"
                "var = ROW_SUM(var) / C;\n"
                "float s = 1.0f / sqrtf(var + 1e-5f);\n"
                "if (out_h) {\n"
                "    pr_bf16 *oh = out_h + (long)row * C;\n"
                "    ROW_LOOP(c, 0, C)\n"
                "        oh[c] = pr_to_bf16((r[c] - m) * s * weight[c] + bias[c]);\n"
                "} else {\n"
                "    float *o = out + (long)row * C;\n"
                "    ROW_LOOP(c, 0, C)\n"
                "        o[c] = (r[c] - m) * s * weight[c] + bias[c];\n"
                "}\n"
                "if (LEAD) {\n"
                "    mean[row] = m;\n"
                "    rstd[row] = s;\n"
                "}",
    },
    {
        .name = "residual_forward",
        .doc = "resid = x + resid: the residual add of a projection (bias included)",
        .params = "float *RESTRICT resid, const float *RESTRICT x",
        .index = "row",
        .extent = "BT",
        .lanes = 32,
        .body = "float *r = resid + (long)row * C;\n"
                "const float *xr = x + (long)row * C;\n"
                "ROW_LOOP(c, 0, C)\n"
                "    r[c] = xr[c] + r[c];",
    },
    {
        .name = "gelu_forward",
        .doc = "act = GELU(pre) (pre has its bias from the matrix product, and is kept for the "
               "backward), tanh approximation, written x * sigmoid(2u) = 0.5 x (1 + tanh(u)) so "
               "that it costs one expf; rows of 4C; given act_h, act goes there in bf16 instead",
        .params = "const float *RESTRICT pre, float *RESTRICT act, pr_bf16 *RESTRICT act_h",
        .index = "row",
        .extent = "BT",
        .lanes = 32,
        .body = "const float *h = pre + (long)row * 4 * C;\n"
                "if (act_h) {\n"
                "    pr_bf16 *ah = act_h + (long)row * 4 * C;\n"
                "    ROW_LOOP(j, 0, 4 * C) {\n"
                "        float x = h[j];\n"
                "        float u = 0.7978845608f * (x + 0.044715f * x * x * x);\n"
                "        ah[j] = pr_to_bf16(x / (1.0f + expf(-2.0f * u)));\n"
                "    }\n"
                "} else {\n"
                "    float *a = act + (long)row * 4 * C;\n"
                "    ROW_LOOP(j, 0, 4 * C) {\n"
                "        float x = h[j];\n"
                "        float u = 0.7978845608f * (x + 0.044715f * x * x * x);\n"
                "        a[j] = x / (1.0f + expf(-2.0f * u));\n"
                "    }\n"
                "}",
    },
    {
        .name = "gelu_backward",
        .doc = "dact = dact * GELU'(pre), in place, rows of 4C; with s = sigmoid(2u) = "
               "0.5 (1 + tanh(u)): GELU' = s + 2 x s (1 - s) u'; dact_h, when given, gets the result in bf16",
        .params = "float *RESTRICT dact, const float *RESTRICT pre, pr_bf16 *RESTRICT dact_h",
        .index = "row",
        .extent = "BT",
        .lanes = 32,
        .body = "float *d = dact + (long)row * 4 * C;\n"
                "const float *h = pre + (long)row * 4 * C;\n"
                "ROW_LOOP(j, 0, 4 * C) {\n"
                "    float x = h[j];\n"
                "    float u = 0.7978845608f * (x + 0.044715f * x * x * x);\n"
                "    float sg = 1.0f / (1.0f + expf(-2.0f * u));\n"
                "    float du = 0.7978845608f * (1.0f + 3.0f * 0.044715f * x * x);\n"
                "    d[j] *= sg + 2.0f * x * sg * (1.0f - sg) * du;\n"
                "}\n"
                "if (dact_h) {\n"
                "    pr_bf16 *dh = dact_h + (long)row * 4 * C;\n"
                "    ROW_LOOP(j, 0, 4 * C)\n"
                "        dh[j] = pr_to_bf16(d[j]);\n"
                "}",
    },
    {
        .name = "bias_backward",
        .doc = "dbias[j] += sum over rows of dout[row, j], rows of width OC (on the GPU a warp "
               "sums each column, so OC x 32 threads run instead of OC)",
        .params = "float *RESTRICT dbias, const float *RESTRICT dout, int OC",
        .index = "j",
        .extent = "OC",
        .lanes = 32,
        .body = "float sum = 0.0f;\n"
                "ROW_LOOP(row, 0, BT)\n"
                "    sum += dout[(long)row * OC + j];\n"
                "sum = ROW_SUM(sum);\n"
                "if (LEAD)\n"
                "    dbias[j] += sum;",
    },
    {
        .name = "layernorm_backward",
        .doc = "dinp += d(LayerNorm)/d(inp) dout; dweight, dbias += their gradients; dinp_h, when "
               "given, gets the new dinp in bf16",
        .params = "float *RESTRICT dinp, float *dweight, float *dbias, const float *RESTRICT dout, "
                  "const float *RESTRICT inp, const float *RESTRICT weight, "
                  "const float *RESTRICT mean, const float *RESTRICT rstd, pr_bf16 *RESTRICT dinp_h",
        .index = "row",
        .extent = "BT",
        .lanes = 32,
        .body = "const float *d = dout + (long)row * C;\n"
                "const float *x = inp + (long)row * C;\n"
                "float *di = dinp + (long)row * C;\n"
                "float m = mean[row];\n"
                "float s = rstd[row];\n"
                "float dnorm_mean = 0.0f;\n"
                "float dnorm_norm_mean = 0.0f;\n"
                "SIMD_SUM(dnorm_mean, dnorm_norm_mean) ROW_LOOP(c, 0, C) {\n"
                "    float dnorm = weight[c] * d[c];\n"
                "    dnorm_mean += dnorm;\n"
                "    dnorm_norm_mean += dnorm * (x[c] - m) * s;\n"
                "}\n"
                "dnorm_mean = ROW_SUM(dnorm_mean) / C;\n"
                "dnorm_norm_mean = ROW_SUM(dnorm_norm_mean) / C;\n"
                "ROW_LOOP(c, 0, C) {\n"
                "    float norm = (x[c] - m) * s;\n"
                "    float dnorm = weight[c] * d[c];\n"
                "    ATOMIC_ADD(&dbias[c], d[c]);\n"
                "    ATOMIC_ADD(&dweight[c], norm * d[c]);\n"
                "    di[c] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;\n"
                "}\n"
                "if (dinp_h) {\n"
                "    pr_bf16 *dh = dinp_h + (long)row * C;\n"
                "    ROW_LOOP(c, 0, C)\n"
                "        dh[c] = pr_to_bf16(di[c]);\n"
                "}",
    },
    {
        .name = "attention_softmax_forward",
        .doc = "causal softmax, in place, of rows of T attention scores (already scaled by "
               "1/sqrt(HS)); row r is query position r % T; saves each row's log-sum-exp so the "
               "backward recomputes probabilities instead of storing them; the exponentials have a loop "
               "of their own, apart from the in-order sum, so that the CPU's compiler vectorises them",
        .params = "float *RESTRICT att, float *RESTRICT lse, int rows",
        .index = "r",
        .extent = "rows",
        .lanes = 32,
        .body = "int t = r % T;\n"
                "float *w = att + (long)r * T;\n"
                "float mx = -3.0e38f;\n"
                "SIMD_MAX(mx) ROW_LOOP(t2, 0, t + 1)\n"
                "    mx = w[t2] > mx ? w[t2] : mx;\n"
                "mx = ROW_MAX(mx);\n"
                "ROW_LOOP(t2, 0, t + 1)\n"
                "    w[t2] = expf(w[t2] - mx);\n"
                "float sum = 0.0f;\n"
                "SIMD_SUM(sum) ROW_LOOP(t2, 0, t + 1)\n"
                "    sum += w[t2];\n"
                "sum = ROW_SUM(sum);\n"
                "float inv = 1.0f / sum;\n"
                "ROW_LOOP(t2, 0, t + 1)\n"
                "    w[t2] *= inv;\n"
                "ROW_LOOP(t2, t + 1, T)\n"
                "    w[t2] = 0.0f;\n"
                "if (LEAD)\n"
                "    lse[r] = mx + logf(sum);",
    },
    {
        .name = "attention_probs",
        .doc = "attention probabilities recomputed in place from rows of T scaled scores and the "
               "saved log-sum-exp: exp(score - lse) up to the query position, 0 after it",
        .params = "float *RESTRICT att, const float *RESTRICT lse, int rows",
        .index = "r",
        .extent = "rows",
        .lanes = 32,
        .body = "int t = r % T;\n"
                "float *w = att + (long)r * T;\n"
                "float l = lse[r];\n"
                "ROW_LOOP(t2, 0, t + 1)\n"
                "    w[t2] = expf(w[t2] - l);\n"
                "ROW_LOOP(t2, t + 1, T)\n"
                "    w[t2] = 0.0f;",
    },
    {
        .name = "attention_softmax_backward",
        .doc = "d(scaled scores) from d(probabilities), in place, rows of T: "
               "p * (dp - sum(p * dp)) / sqrt(HS), the scale of the scores folded in",
        .params = "float *RESTRICT datt, const float *RESTRICT att, int rows",
        .index = "r",
        .extent = "rows",
        .lanes = 32,
        .body = "int t = r % T;\n"
                "float *d = datt + (long)r * T;\n"
                "const float *p = att + (long)r * T;\n"
                "const float scale = 1.0f / sqrtf((float)HS);\n"
                "float dot = 0.0f;\n"
                "SIMD_SUM(dot) ROW_LOOP(t2, 0, t + 1)\n"
                "    dot += p[t2] * d[t2];\n"
                "dot = ROW_SUM(dot);\n"
                "ROW_LOOP(t2, 0, t + 1)\n"
                "    d[t2] = p[t2] * (d[t2] - dot) * scale;\n"
                "ROW_LOOP(t2, t + 1, T)\n"
                "    d[t2] = 0.0f;",
    },
    {
        .name = "attention_forward",
        .doc = "causal attention of one query row (r = (b * NH + h) * T + t) in one pass over its "
               "keys: online softmax, rescaling the output accumulated so far whenever the running "
               "maximum grows, so the T x T scores never exist; saves the row's log-sum-exp; given out_h, "
               "the row goes there in bf16 instead",
        .params = "float *RESTRICT out, float *RESTRICT lse, const float *RESTRICT qkv, pr_bf16 *RESTRICT out_h",
        .index = "r",
        .extent = "B * NH * T",
        .body = "int t = r % T, h = (r / T) % NH, b = r / (T * NH);\n"
                "const float *q = qkv + ((long)b * T + t) * 3 * C + h * HS;\n"
                "const float *keys = qkv + (long)b * T * 3 * C + C + h * HS;\n"
                "const float scale = 1.0f / sqrtf((float)HS);\n"
                "float qs[HS], acc[HS];\n"
                "UNROLL for (int d = 0; d < HS; d++) {\n"
                "    qs[d] = q[d] * scale;\n"
                "    acc[d] = 0.0f;\n"
                "}\n"
                "float mx = -3.0e38f, sum = 0.0f;\n"
                "for (int t2 = 0; t2 <= t; t2++) {\n"
                "    const float *k = keys + (long)t2 * 3 * C, *v = k + C;\n"
                "    float score = 0.0f;\n"
                "    UNROLL SIMD_SUM(score) for (int d = 0; d < HS; d++)\n"
                "        score += qs[d] * k[d];\n"
                "    if (score > mx) {\n"
                "        float shrink = expf(mx - score);\n"
                "        sum *= shrink;\n"
                "        UNROLL for (int d = 0; d < HS; d++)\n"
                "            acc[d] *= shrink;\n"
                "        mx = score;\n"
                "    }\n"
                "    float e = expf(score - mx);\n"
                "    sum += e;\n"
                "    UNROLL for (int d = 0; d < HS; d++)\n"
                "        acc[d] += e * v[d];\n"
                "}\n"
                "float inv = 1.0f / sum;\n"
                "if (out_h) {\n"
                "    pr_bf16 *oh = out_h + ((long)b * T + t) * C + h * HS;\n"
                "    UNROLL for (int d = 0; d < HS; d++)\n"
                "        oh[d] = pr_to_bf16(acc[d] * inv);\n"
                "} else {\n"
                "    float *o = out + ((long)b * T + t) * C + h * HS;\n"
                "    UNROLL for (int d = 0; d < HS; d++)\n"
                "        o[d] = acc[d] * inv;\n"
                "}\n"
                "lse[r] = mx + logf(sum);",
        .gpu_form = "flash_attention_forward",
    },
    {
        .name = "attention_backward_query",
        .doc = "attention backward for one query row: delta = dout . out (saved for the key "
               "side), then dq = sum over keys of p * (dout . v - delta) * k / sqrt(HS), p "
               "recomputed from the saved log-sum-exp; on the GPU a warp per row, whose lanes "
               "split the head's dimensions, so dq accumulates in place with adjacent lanes on "
               "adjacent floats; dqkv_h, when given, gets dq in bf16; given out_h, out is read from there "
               "in bf16",
        .params = "float *RESTRICT dqkv, float *RESTRICT delta, const float *RESTRICT dout, "
                  "const float *RESTRICT out, const float *RESTRICT qkv, const float *RESTRICT lse, "
                  "pr_bf16 *RESTRICT dqkv_h, const pr_bf16 *RESTRICT out_h",
        .index = "r",
        .extent = "B * NH * T",
        .lanes = 32,
        .body = "int t = r % T, h = (r / T) % NH, b = r / (T * NH);\n"
                "long row = (long)b * T + t;\n"
                "const float *q = qkv + row * 3 * C + h * HS;\n"
                "const float *keys = qkv + (long)b * T * 3 * C + C + h * HS;\n"
                "const float *dor = dout + row * C + h * HS;\n"
                "float *dq = dqkv + row * 3 * C + h * HS;\n"
                "const float scale = 1.0f / sqrtf((float)HS);\n"
                "float dsum = 0.0f;\n"
                "if (out_h) {\n"
                "    const pr_bf16 *oh = out_h + row * C + h * HS;\n"
                "    ROW_LOOP(d, 0, HS)\n"
                "        dsum += dor[d] * pr_from_bf16(oh[d]);\n"
                "} else {\n"
                "    const float *o = out + row * C + h * HS;\n"
                "    ROW_LOOP(d, 0, HS)\n"
                "        dsum += dor[d] * o[d];\n"
                "}\n"
                "ROW_LOOP(d, 0, HS)\n"
                "    dq[d] = 0.0f;\n"
                "dsum = ROW_SUM(dsum);\n"
                "if (LEAD)\n"
                "    delta[r] = dsum;\n"
                "float l = lse[r];\n"
                "for (int t2 = 0; t2 <= t; t2++) {\n"
                "    const float *k = keys + (long)t2 * 3 * C, *v = k + C;\n"
                "    float score = 0.0f, dp = 0.0f;\n"
                "    SIMD_SUM(score, dp) ROW_LOOP(d, 0, HS) {\n"
                "        score += q[d] * k[d];\n"
                "        dp += dor[d] * v[d];\n"
                "    }\n"
                "    score = ROW_SUM(score);\n"
                "    dp = ROW_SUM(dp);\n"
                "    float ds = expf(score * scale - l) * (dp - dsum) * scale;\n"
                "    ROW_LOOP(d, 0, HS)\n"
                "        dq[d] += ds * k[d];\n"
                "}\n"
                "if (dqkv_h) {\n"
                "    pr_bf16 *dqh = dqkv_h + row * 3 * C + h * HS;\n"
                "    ROW_LOOP(d, 0, HS)\n"
                "        dqh[d] = pr_to_bf16(dq[d]);\n"
                "}",
        .gpu_form = "flash_attention_backward_query",
    },
    {
        .name = "attention_backward_key",
        .doc = "attention backward for one key row (r = (b * NH + h) * T + j), after the query "
               "side saved delta: dk = sum over later queries of p * (dout . v - delta) * q / "
               "sqrt(HS), dv = sum of p * dout; no atomics, so the result is deterministic; on "
               "the GPU a warp per row as on the query side; dqkv_h, when given, gets dk and dv in bf16",
        .params = "float *RESTRICT dqkv, const float *RESTRICT delta, const float *RESTRICT dout, "
                  "const float *RESTRICT qkv, const float *RESTRICT lse, pr_bf16 *RESTRICT dqkv_h",
        .index = "r",
        .extent = "B * NH * T",
        .lanes = 32,
        .body = "int j = r % T, h = (r / T) % NH, b = r / (T * NH);\n"
                "long row = (long)b * T + j;\n"
                "const float *k = qkv + row * 3 * C + C + h * HS, *v = k + C;\n"
                "float *dk = dqkv + row * 3 * C + C + h * HS, *dv = dk + C;\n"
                "const float scale = 1.0f / sqrtf((float)HS);\n"
                "long head_rows = (long)(b * NH + h) * T;\n"
                "ROW_LOOP(d, 0, HS) {\n"
                "    dk[d] = 0.0f;\n"
                "    dv[d] = 0.0f;\n"
                "}\n"
                "for (int t = j; t < T; t++) {\n"
                "    const float *q = qkv + ((long)b * T + t) * 3 * C + h * HS;\n"
                "    const float *dor = dout + ((long)b * T + t) * C + h * HS;\n"
                "    float score = 0.0f, dp = 0.0f;\n"
                "    SIMD_SUM(score, dp) ROW_LOOP(d, 0, HS) {\n"
                "        score += q[d] * k[d];\n"
                "        dp += dor[d] * v[d];\n"
                "    }\n"
                "    score = ROW_SUM(score);\n"
                "    dp = ROW_SUM(dp);\n"
                "    float p = expf(score * scale - lse[head_rows + t]);\n"
                "    float ds = p * (dp - delta[head_rows + t]) * scale;\n"
                "    ROW_LOOP(d, 0, HS) {\n"
                "        dk[d] += ds * q[d];\n"
                "        dv[d] += p * dor[d];\n"
                "    }\n"
                "}\n"
                "if (dqkv_h) {\n"
                "    pr_bf16 *dkh = dqkv_h + row * 3 * C + C + h * HS, *dvh = dkh + C;\n"
                "    ROW_LOOP(d, 0, HS) {\n"
                "        dkh[d] = pr_to_bf16(dk[d]);\n"
                "        dvh[d] = pr_to_bf16(dv[d]);\n"
                "    }\n"
                "}",
        .gpu_form = "flash_attention_backward_key",
    },
    {
        .name = "flash_attention_forward",
        .doc = "GPU only, in place of attention_forward: the tiled causal attention forward of one "
               "(sequence, head, query tile) (attention_gpu.c)",
        .params = "float *RESTRICT out, float *RESTRICT lse, const float *RESTRICT qkv, pr_bf16 *RESTRICT out_h",
        .index = "blk",
        .extent = "B * NH * ((T + 16 * ATT_FWD_WARPS - 1) / (16 * ATT_FWD_WARPS))",
        .tiled = TILED_FORWARD,
        .body = "att_forward_tile(out, lse, qkv, out_h, blk);",
    },
    {
        .name = "flash_attention_backward_query",
        .doc = "GPU only, in place of attention_backward_query: delta and dq of one (sequence, head, "
               "query tile) (attention_gpu.c)",
        .params = "float *RESTRICT dqkv, float *RESTRICT delta, const float *RESTRICT dout, "
                  "const float *RESTRICT out, const float *RESTRICT qkv, const float *RESTRICT lse, "
                  "pr_bf16 *RESTRICT dqkv_h, const pr_bf16 *RESTRICT out_h",
        .index = "blk",
        .extent = "B * NH * ((T + 16 * ATT_BWD_WARPS - 1) / (16 * ATT_BWD_WARPS))",
        .tiled = TILED_BACKWARD,
        .body = "att_backward_query_tile(dqkv, delta, dout, out, qkv, lse, dqkv_h, out_h, blk);",
    },
    {
        .name = "flash_attention_backward_key",
        .doc = "GPU only, in place of attention_backward_key: dk and dv of one (sequence, head, key "
               "tile) (attention_gpu.c)",
        .params = "float *RESTRICT dqkv, const float *RESTRICT delta, const float *RESTRICT dout, "
                  "const float *RESTRICT qkv, const float *RESTRICT lse, pr_bf16 *RESTRICT dqkv_h",
        .index = "blk",
        .extent = "B * NH * ((T + 16 * ATT_BWD_WARPS - 1) / (16 * ATT_BWD_WARPS))",
        .tiled = TILED_BACKWARD,
        .body = "att_backward_key_tile(dqkv, delta, dout, qkv, lse, dqkv_h, blk);",
    },
    {
        .name = "softmax_xent_forward",
        .doc = "logits -> probabilities in place; losses[row] = -log p[target], computed as "
               "max + log(sum) - logit[target] so that it never takes the log of an underflow",
        .params = "float *RESTRICT probs, float *RESTRICT losses, const int *RESTRICT targets",
        .index = "row",
        .extent = "BT",
        .lanes = 32,
        .body = "float *p = probs + (long)row * VP;\n"
                "float target_logit = p[targets[row]];\n"
                "float mx = -3.0e38f;\n"
                "SIMD_MAX(mx) ROW_LOOP(v, 0, V)\n"
                "    mx = p[v] > mx ? p[v] : mx;\n"
                "mx = ROW_MAX(mx);\n"
                "ROW_LOOP(v, 0, V)\n"
                "    p[v] = expf(p[v] - mx);\n"
                "float sum = 0.0f;\n"
                "ROW_LOOP(v, 0, V)\n"
                "    sum += p[v];\n"
                "sum = ROW_SUM(sum);\n"
                "float inv = 1.0f / sum;\n"
                "ROW_LOOP(v, 0, V)\n"
                "    p[v] *= inv;\n"
                "if (LEAD)\n"
                "    losses[row] = mx + logf(sum) - target_logit;",
    },
    {
        .name = "softmax_xent_backward",
        .doc = "dlogits = (probs - onehot(target)) * dloss, in place over the probabilities; "
               "dlogits_h, when given, gets them in bf16",
        .params = "float *RESTRICT probs, const int *RESTRICT targets, float dloss, pr_bf16 *RESTRICT dlogits_h",
        .index = "row",
        .extent = "BT",
        .lanes = 32,
        .body = "float *p = probs + (long)row * VP;\n"
                "int target = targets[row];\n"
                "ROW_LOOP(v, 0, V)\n"
                "    p[v] = (p[v] - (v == target ? 1.0f : 0.0f)) * dloss;\n"
                "if (dlogits_h) {\n"
                "    pr_bf16 *dh = dlogits_h + (long)row * VP;\n"
                "    ROW_LOOP(v, 0, V)\n"
                "        dh[v] = pr_to_bf16(p[v]);\n"
                "}",
    },
    {
        .name = "classifier_fused",
        .doc = "the GPU's classifier, as llm.c's: one online-softmax sweep of a row of logits (fp32, "
               "or bf16 in logits_h when given) gives its log-sum-exp and losses[row]; a second sweep "
               "overwrites the row in place with p - onehot(target), the dlogits before the loss scale "
               "(the head's backward products apply it as their alpha)",
        .params = "float *RESTRICT logits, pr_bf16 *RESTRICT logits_h, float *RESTRICT losses, "
                  "const int *RESTRICT targets",
        .index = "row",
        .extent = "BT",
        .lanes = 32,
        .body = "float *lg = logits + (long)row * VP;\n"
                "pr_bf16 *lh = logits_h ? logits_h + (long)row * VP : (pr_bf16 *)0;\n"
                "int target = targets[row];\n"
                "float target_logit = lh ? pr_from_bf16(lh[target]) : lg[target];\n"
                ROW_LOGSUMEXP("V")
                "float lse = row_mx + logf(sum);\n"
                "if (LEAD)\n"
                "    losses[row] = lse - target_logit;\n"
                ROW_DLOGITS("V", "lse", "target"),
    },
    {
        .name = "xent_part_forward",
        .doc = "the vocabulary split's stage before the last: over its rows [v0, v0 + vn) of a row of "
               "logits (fp32, or bf16 in logits_h when given), part[row] = their log-sum-exp and "
               "part[BT + row] = the target's logit if among them, else 0",
        .params = "const float *RESTRICT logits, const pr_bf16 *RESTRICT logits_h, float *RESTRICT part, "
                  "const int *RESTRICT targets, int vn, int vp, int v0",
        .index = "row",
        .extent = "BT",
        .lanes = 32,
        .body = "const float *lg = logits + (long)row * vp;\n"
                "const pr_bf16 *lh = logits_h ? logits_h + (long)row * vp : (const pr_bf16 *)0;\n"
                ROW_LOGSUMEXP("vn")
                "int t = targets[row] - v0;\n"
                "if (LEAD) {\n"
                "    part[row] = row_mx + logf(sum);\n"
                "    part[BT + row] = t >= 0 && t < vn ? (lh ? pr_from_bf16(lh[t]) : lg[t]) : 0.0f;\n"
                "}",
    },
    {
        .name = "xent_split_forward",
        .doc = "the vocabulary split's last stage: its rows [v0, v0 + vn) of a row of logits (fp32, or "
               "bf16 in logits_h) and the rows before them, summarised in part (xent_part_forward), give "
               "the token's log-sum-exp lse[row] and losses[row]; the row is then overwritten in place "
               "with p - onehot(target), the dlogits before the loss scale",
        .params = "float *RESTRICT logits, pr_bf16 *RESTRICT logits_h, const float *RESTRICT part, "
                  "float *RESTRICT lse, float *RESTRICT losses, const int *RESTRICT targets, int vn, int vp, int v0",
        .index = "row",
        .extent = "BT",
        .lanes = 32,
        .body = "float *lg = logits + (long)row * vp;\n"
                "pr_bf16 *lh = logits_h ? logits_h + (long)row * vp : (pr_bf16 *)0;\n"
                "int t = targets[row] - v0;\n"
                "float target_logit = t >= 0 && t < vn ? (lh ? pr_from_bf16(lh[t]) : lg[t]) : part[BT + row];\n"
                ROW_LOGSUMEXP("vn")
                "float before = part[row];\n"
                "float top = fmaxf(row_mx, before);\n"
                "float row_lse = top + logf(sum * expf(row_mx - top) + expf(before - top));\n"
                "if (LEAD) {\n"
                "    lse[row] = row_lse;\n"
                "    losses[row] = row_lse - target_logit;\n"
                "}\n"
                ROW_DLOGITS("vn", "row_lse", "t"),
    },
    {
        .name = "xent_part_backward",
        .doc = "the vocabulary split's stage before the last, in the backward: its row of logits (fp32, or "
               "bf16 in logits_h) overwritten in place with p - onehot(target) over its rows [v0, v0 + vn), "
               "from the whole vocabulary's log-sum-exp lse[row] that the last stage sent back",
        .params = "float *RESTRICT logits, pr_bf16 *RESTRICT logits_h, const float *RESTRICT lse, "
                  "const int *RESTRICT targets, int vn, int vp, int v0",
        .index = "row",
        .extent = "BT",
        .lanes = 32,
        .body = "float *lg = logits + (long)row * vp;\n"
                "pr_bf16 *lh = logits_h ? logits_h + (long)row * vp : (pr_bf16 *)0;\n"
                "int t = targets[row] - v0;\n"
                "float row_lse = lse[row];\n"
                ROW_DLOGITS("vn", "row_lse", "t"),
    },
    {
        .name = "bias_backward_tiles",
        .doc = "the GPU's bias_backward, deterministic and without atomics: a block per tile of 8 "
               "columns, its 256 threads 32 row groups of 8 columns (a warp reads 4 rows of 32 bytes), "
               "the groups' sums added by a fixed tree in shared memory; dout_h, when given, gets dout "
               "in bf16 on the way (the copy a product reads, where no earlier kernel wrote it)",
        .params = "float *RESTRICT dbias, const float *RESTRICT dout, int OC, pr_bf16 *RESTRICT dout_h",
        .lanes = 256,
        .blocks = "(OC + 7) / 8",
        .body = "__shared__ float partial[32][8];\n"
                "int at = threadIdx.x % 8, group = threadIdx.x / 8;\n"
                "int col = blockIdx.x * 8 + at;\n"
                "float sum = 0.0f;\n"
                "if (col < OC) {\n"
                "    for (long row = group; row < BT; row += 32) {\n"
                "        float x = dout[row * OC + col];\n"
                "        sum += x;\n"
                "        if (dout_h)\n"
                "            dout_h[row * OC + col] = pr_to_bf16(x);\n"
                "    }\n"
                "}\n"
                "partial[group][at] = sum;\n"
                "__syncthreads();\n"
                "for (int half = 16; half > 0; half /= 2) {\n"
                "    if (group < half)\n"
                "        partial[group][at] += partial[group + half][at];\n"
                "    __syncthreads();\n"
                "}\n"
                "if (group == 0 && col < OC)\n"
                "    dbias[col] += partial[0][at];",
    },
    {
        .name = "layernorm_backward_blocks",
        .doc = "the GPU's layernorm_backward: a block of 8 warps takes 64 rows, a warp per row; "
               "dweight and dbias gather in shared memory (shared atomics), and the block makes one "
               "global atomic add per column of each (not one per row)",
        .params = "float *RESTRICT dinp, float *dweight, float *dbias, const float *RESTRICT dout, "
                  "const float *RESTRICT inp, const float *RESTRICT weight, "
                  "const float *RESTRICT mean, const float *RESTRICT rstd, pr_bf16 *RESTRICT dinp_h",
        .lanes = 256,
        .blocks = "(BT + 63) / 64",
        .body = "enum { WARPS = 8, ROWS = 64 };\n"
                "__shared__ float partial[2 * C]; /* the block's dweight | dbias */\n"
                "int warp = threadIdx.x / 32, lane = threadIdx.x % 32;\n"
                "for (int c = threadIdx.x; c < 2 * C; c += blockDim.x)\n"
                "    partial[c] = 0.0f;\n"
                "__syncthreads();\n"
                "long end = (long)(blockIdx.x + 1) * ROWS < BT ? (long)(blockIdx.x + 1) * ROWS : (long)BT;\n"
                "for (long row = (long)blockIdx.x * ROWS + warp; row < end; row += WARPS) {\n"
                "    const float *d = dout + row * C;\n"
                "    const float *x = inp + row * C;\n"
                "    float *di = dinp + row * C;\n"
                "    float m = mean[row], s = rstd[row];\n"
                "    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;\n"
                "    for (int c = lane; c < C; c += 32) {\n"
                "        float dnorm = weight[c] * d[c];\n"
                "        dnorm_mean += dnorm;\n"
                "        dnorm_norm_mean += dnorm * (x[c] - m) * s;\n"
                "    }\n"
                "    dnorm_mean = warp_sum(dnorm_mean) / C;\n"
                "    dnorm_norm_mean = warp_sum(dnorm_norm_mean) / C;\n"
                "    for (int c = lane; c < C; c += 32) {\n"
                "        float norm = (x[c] - m) * s;\n"
                "        float dnorm = weight[c] * d[c];\n"
                "        ATOMIC_ADD(&partial[c], norm * d[c]);\n"
                "        ATOMIC_ADD(&partial[C + c], d[c]);\n"
                "        float v = di[c] + (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;\n"
                "        di[c] = v;\n"
                "        if (dinp_h)\n"
                "            dinp_h[row * C + c] = pr_to_bf16(v);\n"
                "    }\n"
                "}\n"
                "__syncthreads();\n"
                "for (int c = threadIdx.x; c < C; c += blockDim.x) {\n"
                "    ATOMIC_ADD(&dweight[c], partial[c]);\n"
                "    ATOMIC_ADD(&dbias[c], partial[C + c]);\n"
                "}",
    },
    {
        .name = "adamw",
        .doc = "one AdamW update of n floats: decoupled weight decay, bias-corrected moments; "
               "the gradient is multiplied by grad_scale (clipping) first; param_h, when given, gets the "
               "new weights in bf16 (the copy the products read)",
        .params = "float *RESTRICT param, const float *RESTRICT grad, float *RESTRICT m, "
                  "float *RESTRICT v, long n, float lr, float weight_decay, float grad_scale, "
                  "float beta1_correction, float beta2_correction, pr_bf16 *RESTRICT param_h",
        .index = "i",
        .extent = "n",
        .body = "float g = grad[i] * grad_scale;\n"
                "float mi = ADAMW_BETA1 * m[i] + (1.0f - ADAMW_BETA1) * g;\n"
                "float vi = ADAMW_BETA2 * v[i] + (1.0f - ADAMW_BETA2) * g * g;\n"
                "m[i] = mi;\n"
                "v[i] = vi;\n"
                "float m_hat = mi / beta1_correction;\n"
                "float v_hat = vi / beta2_correction;\n"
                "param[i] -= lr * (m_hat / (sqrtf(v_hat) + ADAMW_EPS) + weight_decay * param[i]);\n"
                "if (param_h)\n"
                "    param_h[i] = pr_to_bf16(param[i]);",
    },
    /* The GPU steps of muon, lamb, lars, nadamw and lans (runtime/cuda/optim.c launches them; the CPU runs
     * runtime/optim_rules.c). A matrix element i = row * cols + col sits at `at` in the
     * orthogonalisation's operand: transposed (col * rows + row) when `flip`. */
    {
        .name = "optim_momentum",
        .doc = "momentum buffer buf = mu buf + g (g the gradient times grad_scale); out gets "
               "g + mu buf under nesterov, else buf, transposed when flip",
        .params = "const float *RESTRICT grad, float *RESTRICT buf, float *RESTRICT out, long n, long rows, "
                  "long cols, int flip, float mu, int nesterov, float grad_scale",
        .index = "i",
        .extent = "n",
        .body = "float g = grad[i] * grad_scale;\n"
                "float b = mu * buf[i] + g;\n"
                "buf[i] = b;\n"
                "long at = flip ? (i % cols) * rows + i / cols : i;\n"
                "out[at] = nesterov ? g + mu * b : b;",
    },
    {
        .name = "scale_add",
        .doc = "y = alpha x + beta y (x may be y); beta 0 never reads y",
        .params = "const float *x, float *y, long n, float alpha, float beta",
        .index = "i",
        .extent = "n",
        .body = "y[i] = beta == 0.0f ? alpha * x[i] : alpha * x[i] + beta * y[i];",
    },
    {
        .name = "muon_apply",
        .doc = "param -= lr (scale o + weight_decay param), o read transposed when flip",
        .params = "float *RESTRICT param, const float *RESTRICT o, long n, long rows, long cols, int flip, "
                  "float lr, float scale, float weight_decay",
        .index = "i",
        .extent = "n",
        .body = "long at = flip ? (i % cols) * rows + i / cols : i;\n"
                "param[i] -= lr * (scale * o[at] + weight_decay * param[i]);",
    },
    {
        .name = "lamb_direction",
        .doc = "LAMB's moments and direction d = m^ / (sqrt(v^) + eps) + weight_decay param",
        .params = "const float *RESTRICT param, const float *RESTRICT grad, float *RESTRICT m, "
                  "float *RESTRICT v, float *RESTRICT d, long n, float beta1, float beta2, float eps, "
                  "float weight_decay, float grad_scale, float beta1_correction, float beta2_correction",
        .index = "i",
        .extent = "n",
        .body = "float g = grad[i] * grad_scale;\n"
                "float mi = beta1 * m[i] + (1.0f - beta1) * g;\n"
                "float vi = beta2 * v[i] + (1.0f - beta2) * g * g;\n"
                "m[i] = mi;\n"
                "v[i] = vi;\n"
                "d[i] = (mi / beta1_correction) / (sqrtf(vi / beta2_correction) + eps) + weight_decay * param[i];",
    },
    {
        .name = "lans_direction",
        .doc = "LANS's moments of the normalised gradient g = grad inv_norm and its two directions "
               "r = m^ / (sqrt(v^) + eps) + weight_decay param, c = g / (sqrt(v^) + eps) + weight_decay param",
        .params = "const float *RESTRICT param, const float *RESTRICT grad, float *RESTRICT m, "
                  "float *RESTRICT v, float *RESTRICT r, float *RESTRICT c, long n, float beta1, float beta2, "
                  "float eps, float weight_decay, float inv_norm, float beta1_correction, float beta2_correction",
        .index = "i",
        .extent = "n",
        .body = "float g = grad[i] * inv_norm;\n"
                "float mi = beta1 * m[i] + (1.0f - beta1) * g;\n"
                "float vi = beta2 * v[i] + (1.0f - beta2) * g * g;\n"
                "m[i] = mi;\n"
                "v[i] = vi;\n"
                "float denom = sqrtf(vi / beta2_correction) + eps;\n"
                "r[i] = (mi / beta1_correction) / denom + weight_decay * param[i];\n"
                "c[i] = g / denom + weight_decay * param[i];",
    },
    {
        .name = "lars_apply",
        .doc = "LARS: buf = mu buf + step (g + weight_decay param), param -= buf",
        .params = "float *RESTRICT param, const float *RESTRICT grad, float *RESTRICT buf, long n, float mu, "
                  "float step, float weight_decay, float grad_scale",
        .index = "i",
        .extent = "n",
        .body = "float b = mu * buf[i] + step * (grad[i] * grad_scale + weight_decay * param[i]);\n"
                "buf[i] = b;\n"
                "param[i] -= b;",
    },
    {
        .name = "nadam_apply",
        .doc = "NAdamW: Adam's moments, then param = keep param - (coef_g g + coef_m m) / "
               "(sqrt(v / beta2_correction) + eps), the scalars of pr_nadam_scalars_at",
        .params = "float *RESTRICT param, const float *RESTRICT grad, float *RESTRICT m, "
                  "float *RESTRICT v, long n, float beta1, float beta2, float eps, float grad_scale, "
                  "float beta2_correction, float coef_g, float coef_m, float keep",
        .index = "i",
        .extent = "n",
        .body = "float g = grad[i] * grad_scale;\n"
                "float mi = beta1 * m[i] + (1.0f - beta1) * g;\n"
                "float vi = beta2 * v[i] + (1.0f - beta2) * g * g;\n"
                "m[i] = mi;\n"
                "v[i] = vi;\n"
                "float denom = sqrtf(vi / beta2_correction) + eps;\n"
                "param[i] = keep * param[i] - (coef_g * g + coef_m * mi) / denom;",
    },
    /* delay_correction predict on the GPU (runtime/cuda/optim.c): the forward's weights,
     * extrapolated along the update direction, as runtime/optim_rules.c's pr_optim_predict. */
    {
        .name = "optim_predict",
        .doc = "Adam's direction d = (mix m / beta1_correction) / (sqrt(v / beta2_correction) + eps) "
               "+ weight_decay param from the moments as they stand (AdamW: mix 1; NAdamW: its "
               "Nesterov mix and beta1_correction 1); out = param - ahead d, or d itself when "
               "direction_only (LAMB's trust ratio needs its norm first)",
        .params = "const float *RESTRICT param, const float *RESTRICT m, const float *RESTRICT v, "
                  "float *RESTRICT out, long n, float mix, float beta1_correction, float beta2_correction, "
                  "float eps, float weight_decay, float ahead, int direction_only",
        .index = "i",
        .extent = "n",
        .body = "float d = (mix * m[i]) / beta1_correction / (sqrtf(v[i] / beta2_correction) + eps) + "
                "weight_decay * param[i];\n"
                "out[i] = direction_only ? d : param[i] - ahead * d;",
    },
    {
        .name = "wide_copy",
        .doc = "out = x, transposed when flip: a matrix into the orientation Muon orthogonalises",
        .params = "const float *RESTRICT x, float *RESTRICT out, long n, long rows, long cols, int flip",
        .index = "i",
        .extent = "n",
        .body = "out[flip ? (i % cols) * rows + i / cols : i] = x[i];",
    },
    {
        .name = "to_bf16",
        .doc = "out[i] = x[i] in bf16, to nearest even: the bf16 copy of an fp32 tensor that a "
               "product reads, where no kernel of the tensor's own writes it",
        .params = "const float *RESTRICT x, pr_bf16 *RESTRICT out, long n",
        .index = "i",
        .extent = "n",
        .body = "out[i] = pr_to_bf16(x[i]);",
    },
    {
        .name = "keep_gradient",
        .doc = "out[i] = x[i], and out_h[i] = x[i] in bf16 when given: a zero-bubble B keeps a gradient "
               "in the slot for its W and writes on the way the bf16 copy the next product reads, where "
               "a product fused with GELU's gradient wrote none",
        .params = "float *RESTRICT out, const float *RESTRICT x, long n, pr_bf16 *RESTRICT out_h",
        .index = "i",
        .extent = "n",
        .body = "out[i] = x[i];\n"
                "if (out_h)\n"
                "    out_h[i] = pr_to_bf16(x[i]);",
    },
    {
        .name = "from_bf16",
        .doc = "out[i] = x[i] widened to fp32: a message received in bf16 (messages bf16)",
        .params = "const pr_bf16 *RESTRICT x, float *RESTRICT out, long n",
        .index = "i",
        .extent = "n",
        .body = "out[i] = pr_from_bf16(x[i]);",
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
