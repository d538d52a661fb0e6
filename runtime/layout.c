/* layout.c: the checkpoint layout (llm.c's GPT-2 tensors in file order, then our untied
 * lm_head), how the stages' parameter blocks map onto it, and the seeded initialisation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "prt.h"

void pr_ckpt_sizes(const pr_program *prog, int64_t sizes[PR_CKPT_COUNT])
{
    int64_t L = prog->layers, C = prog->width, V = prog->vocab, maxT = prog->context;
    int64_t per_layer[PR_CKPT_COUNT] = {
        [PR_CKPT_LN1W] = C,         [PR_CKPT_LN1B] = C,     [PR_CKPT_QKVW] = 3 * C * C,
        [PR_CKPT_QKVB] = 3 * C,     [PR_CKPT_ATTPROJW] = C * C, [PR_CKPT_ATTPROJB] = C,
        [PR_CKPT_LN2W] = C,         [PR_CKPT_LN2B] = C,     [PR_CKPT_FCW] = 4 * C * C,
        [PR_CKPT_FCB] = 4 * C,      [PR_CKPT_FCPROJW] = 4 * C * C, [PR_CKPT_FCPROJB] = C,
    };
    for (int i = 0; i < PR_CKPT_COUNT; i++)
        sizes[i] = L * per_layer[i];
    sizes[PR_CKPT_WTE] = V * C;
    sizes[PR_CKPT_WPE] = maxT * C;
    sizes[PR_CKPT_LNFW] = C;
    sizes[PR_CKPT_LNFB] = C;
    sizes[PR_CKPT_LM_HEAD] = prog->tied ? 0 : V * C;
}

int64_t pr_ckpt_offsets(const pr_program *prog, int64_t offsets[PR_CKPT_COUNT])
{
    int64_t sizes[PR_CKPT_COUNT], total = 0;
    pr_ckpt_sizes(prog, sizes);
    for (int i = 0; i < PR_CKPT_COUNT; i++) {
        offsets[i] = total;
        total += sizes[i];
    }
    return total;
}

typedef struct piece {
    int32_t tensor;
    int64_t begin, end;
    int stage;
    const char *name;
} piece;

static int piece_order(const void *a, const void *b)
{
    const piece *x = a, *y = b;
    if (x->tensor != y->tensor)
        return x->tensor < y->tensor ? -1 : 1;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

/* Every float of every checkpoint tensor belongs to exactly one stage tensor, and every
 * stage tensor lies inside its stage's parameter block: otherwise checkpoints would drop
 * or duplicate weights. */
int pr_check_layout(const pr_program *prog, char *err)
{
    int64_t sizes[PR_CKPT_COUNT];
    pr_ckpt_sizes(prog, sizes);
    int n = 0;
    for (int s = 0; s < prog->stages; s++)
        n += prog->stage[s].n_tensors;
    piece *pieces = pr_alloc(((size_t)n + 1) * sizeof *pieces); // exits on out of memory
    int k = 0, rc = 0;
    for (int s = 0; s < prog->stages && rc == 0; s++) {
        const pr_stage_code *sc = &prog->stage[s];
        for (int i = 0; i < sc->n_tensors; i++) {
            const pr_tensor *t = &sc->tensors[i];
            if (t->ckpt_tensor < 0 || t->ckpt_tensor >= PR_CKPT_COUNT || t->size < 0 ||
                t->offset < 0 || t->offset + t->size > sc->n_params) {
                rc = pr_fail(err, "stage %d tensor %s lies outside its parameter block", s, t->name);
                break;
            }
            pieces[k++] = (piece){t->ckpt_tensor, t->ckpt_offset, t->ckpt_offset + t->size, s, t->name};
        }
    }
    if (rc == 0)
        qsort(pieces, (size_t)k, sizeof *pieces, piece_order);
    for (int c = 0, i = 0; rc == 0 && c < PR_CKPT_COUNT; c++) {
        int64_t at = 0;
        for (; i < k && pieces[i].tensor == c; i++) {
            if (pieces[i].begin != at) {
                rc = pr_fail(err, "checkpoint tensor %d: %s on stage %d starts at %lld, expected %lld",
                             c, pieces[i].name, pieces[i].stage, (long long)pieces[i].begin,
                             (long long)at);
                break;
            }
            at = pieces[i].end;
        }
        if (rc == 0 && at != sizes[c])
            rc = pr_fail(err, "checkpoint tensor %d: stages hold %lld floats, the shape needs %lld",
                         c, (long long)at, (long long)sizes[c]);
    }
    free(pieces);
    return rc;
}

/* One generator walks llm.c's tensors in file order, so the weights depend on the seed and
 * the shape only, never on the partition. */
void pr_init_params(const pr_program *prog, float *flat)
{
    int64_t sizes[PR_CKPT_COUNT], offsets[PR_CKPT_COUNT];
    pr_ckpt_sizes(prog, sizes);
    pr_ckpt_offsets(prog, offsets);
    pr_rng rng = {prog->seed};
    double residual_std = 0.02 / sqrt(2.0 * prog->layers);
    for (int c = 0; c < PR_CKPT_LLMC_COUNT; c++) {
        float *x = flat + offsets[c];
        switch (c) {
        case PR_CKPT_LN1W: case PR_CKPT_LN2W: case PR_CKPT_LNFW:
            for (int64_t i = 0; i < sizes[c]; i++)
                x[i] = 1.0f;
            break;
        case PR_CKPT_LN1B: case PR_CKPT_LN2B: case PR_CKPT_LNFB: case PR_CKPT_QKVB:
        case PR_CKPT_ATTPROJB: case PR_CKPT_FCB: case PR_CKPT_FCPROJB:
            memset(x, 0, (size_t)sizes[c] * sizeof(float));
            break;
        case PR_CKPT_ATTPROJW: case PR_CKPT_FCPROJW:
            for (int64_t i = 0; i < sizes[c]; i++)
                x[i] = (float)(residual_std * pr_rng_normal(&rng));
            break;
        default:
            for (int64_t i = 0; i < sizes[c]; i++)
                x[i] = (float)(0.02 * pr_rng_normal(&rng));
        }
    }
    if (sizes[PR_CKPT_LM_HEAD] > 0)
        memcpy(flat + offsets[PR_CKPT_LM_HEAD], flat + offsets[PR_CKPT_WTE],
               (size_t)sizes[PR_CKPT_WTE] * sizeof(float));
}
