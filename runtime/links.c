/* links.c: which link a send or receive instruction uses, and who is at each end. The
 * executor and the native transport both read the table through this one mapping, so a
 * link's sender and receiver agree on the communicator, the ranks in it and the order. */
#include "prt.h"

/* act[i] goes i -> i+1 and grad[i] goes i+1 -> i; in a link's communicator the sender is
 * rank 0 and the receiver rank 1. */
int pr_link_of(int op, int stage, int stages, pr_link_use *out)
{
    pr_link_use u = {0};
    switch (op) {
    case PACI_OP_SEND_ACT:
        u = (pr_link_use){PR_LINK_ACT, stage, 1, stage + 1, 0, 1};
        break;
    case PACI_OP_RECV_ACT:
        u = (pr_link_use){PR_LINK_ACT, stage - 1, 0, stage - 1, 1, 0};
        break;
    case PACI_OP_SEND_GRAD:
        u = (pr_link_use){PR_LINK_GRAD, stage - 1, 1, stage - 1, 0, 1};
        break;
    case PACI_OP_RECV_GRAD:
        u = (pr_link_use){PR_LINK_GRAD, stage, 0, stage + 1, 1, 0};
        break;
    default:
        return -1;
    }
    if (stage < 0 || stage >= stages || u.peer < 0 || u.peer >= stages)
        return -1;
    *out = u;
    return 0;
}

/* Processes can only meet over the native transport; threads on one GPU share its memory. */
int pr_link_native(int world, int gpu_lo, int gpu_hi)
{
    return world > 1 || gpu_lo != gpu_hi;
}
