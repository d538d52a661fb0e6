/* lower.c: every stage lowered once, after planning and verification. What a stage is to the
 * back ends (its buffer layout, its parameter tensors, its sections over the model's shared
 * op lists, its messages) is built here and nowhere else; the C and CUDA emitters, the GPU
 * cost model and the generated runtime metadata read the result and never rebuild it.
 */
#include <stdlib.h>
#include <string.h>

#include "pacic.h"

/* The plan sizes memory with formulas (plan.c); the blocks laid out here must be what they
 * count, up to the entries' padding, or --explain and the memory errors would be wrong. */
static void check_plan(const Plan *plan, const Lowered *low)
{
    for (int s = 0; s < plan->stages; s++) {
        const StagePlan *sp = &plan->stage[s];
        const StageLayout *lay = &low->stage[s].layout;
        long act_pad = (lay->acts.n + (long)(lay->att_acts.n + lay->proj_acts.n + lay->fc_acts.n + lay->gelu_acts.n) * (sp->n_layers + 1)) *
                       LAYOUT_ALIGN_FLOATS;
        if (labs(lay->scratch.total - sp->scratch_floats) > lay->scratch.n * LAYOUT_ALIGN_FLOATS ||
            labs(lay->acts.total - sp->act_bytes / 4) > act_pad)
            ICE("stage %d: the plan counts %ld scratch and %ld activation floats, the layout %ld and %ld", s,
                sp->scratch_floats, sp->act_bytes / 4, lay->scratch.total, lay->acts.total);
    }
}

void lower_build(const Config *cfg, const Plan *plan, Lowered *low)
{
    memset(low, 0, sizeof *low);
    low->plan = plan;
    model_ops_build(cfg, &low->ops);
    low->stages = plan->stages;
    for (int s = 0; s < plan->stages; s++) {
        LoweredStage *ls = &low->stage[s];
        ls->index = s;
        ls->plan = &plan->stage[s];
        stage_layout(cfg, ls->plan, &ls->layout);
        ls->n_tensors = stage_tensors(cfg, ls->plan, &ls->layout, &ls->tensors);
        ls->n_sections = stage_sections(ls->plan, &low->ops, ls->sections);
        for (int i = 0; i < ls->n_sections; i++)
            ls->n_ops += section_timed_ops(&ls->sections[i]);
    }
    check_plan(plan, low);
}

void lower_free(Lowered *low)
{
    for (int s = 0; s < low->stages; s++)
        free(low->stage[s].tensors);
    model_ops_free(&low->ops);
    memset(low, 0, sizeof *low);
}
