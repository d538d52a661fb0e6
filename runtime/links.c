/* links.c: which link a send or receive instruction uses, and who is at each end. The
 * executor and the native transport both read the table through this one mapping, so a
 * link's sender and receiver agree on the communicator, the ranks in it and the order.
 * Also the device links: in-process links whose messages stay in device memory. */
#include <stdlib.h>
#include <string.h>

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

/* The pair's FIFO: the table's capacity; between two stages on one device room for each
 * micro-batch stage index can hold (its slots) and a stop mark: in flight on either link of
 * the pair is only what index holds between its forward and its backward, so the one thread
 * that sends there and receives later never blocks on itself. */
int pr_link_capacity(const paci_table *tab, int index)
{
    int capacity = tab->channel_capacity;
    if (tab->stage_device[index] == tab->stage_device[index + 1] && tab->slots[index] + 1 > capacity)
        capacity = tab->slots[index] + 1;
    return capacity;
}

/* ---- device links --------------------------------------------------------------------- */

int64_t pr_link_floats(const pr_program *prog, int kind, int index)
{
    int64_t floats = kind == PR_LINK_ACT ? prog->stage[index].out_floats : prog->stage[index + 1].dx_floats;
    return floats > 0 ? floats : (int64_t)prog->micro * prog->context * prog->width;
}

int64_t pr_link_floats_max(const pr_program *prog)
{
    int64_t most = (int64_t)prog->micro * prog->context * prog->width;
    for (int i = 0; i + 1 < prog->stages; i++)
        for (int kind = 0; kind < PR_LINK_KINDS; kind++)
            most = pr_link_floats(prog, kind, i) > most ? pr_link_floats(prog, kind, i) : most;
    return most;
}

void pr_dev_link_open(pr_dev_link *l, const pr_device *dev, int sender, int receiver, int capacity,
                      size_t floats)
{
    *l = (pr_dev_link){.floats = floats, .capacity = capacity, .sender = sender, .receiver = receiver};
    l->ring = dev->alloc(sender, (size_t)capacity * floats * sizeof(float));
    l->sent = pr_alloc((size_t)capacity * sizeof(void *));
    l->drained = pr_alloc((size_t)capacity * sizeof(void *));
    for (int k = 0; k < capacity; k++) {
        l->sent[k] = dev->event_create(sender);
        l->drained[k] = dev->event_create(receiver);
    }
}

void pr_dev_link_close(pr_dev_link *l, const pr_device *dev)
{
    if (!l->ring)
        return;
    for (int k = 0; k < l->capacity; k++) {
        dev->event_destroy(l->sender, l->sent[k]);
        dev->event_destroy(l->receiver, l->drained[k]);
    }
    free(l->sent);
    free(l->drained);
    dev->release(l->sender, l->ring);
    memset(l, 0, sizeof *l);
}

/* Message n goes through ring buffer n mod capacity. The host channel (no floats) keeps the
 * count of unreceived messages at most `capacity`, as for the host links, and each event
 * is waited for only after the host saw its record made:
 *   - the sender waits for room first, so the buffer's previous message (capacity sends ago)
 *     has been peeked, copied out and drained[k] recorded by the receiver, which pops it
 *     only after that record;
 *   - the receiver peeks message n only once the sender has recorded sent[k] for it, and
 *     the sender records sent[k] again only after the receiver has popped message n.
 * Neither host waits for the GPU: the streams wait for each other. */
int pr_dev_link_send(pr_dev_link *l, const pr_device *dev, pr_channel *c, int64_t mb, const float *src)
{
    int rc = pr_channel_wait_room(c);
    if (rc != PR_LINK_OK)
        return rc;
    int k = (int)(l->sends % l->capacity);
    float *buffer = l->ring + (size_t)k * l->floats;
    if (l->sends >= l->capacity)
        dev->event_wait(l->sender, l->drained[k]);
    dev->copy(l->sender, buffer, src, l->floats * sizeof(float));
    dev->event_record(l->sender, l->sent[k]);
    l->sends++;
    static const float none = 0.0f; // the channel carries no floats (its floats are 0)
    return pr_channel_send_timed(c, mb, &none);
}

int pr_dev_link_recv(pr_dev_link *l, const pr_device *dev, pr_channel *c, float *dst, int64_t *mb)
{
    int rc = pr_channel_peek_timed(c, mb);
    if (rc != PR_LINK_OK)
        return rc;
    int k = (int)(l->receives % l->capacity);
    dev->event_wait(l->receiver, l->sent[k]);
    dev->copy(l->receiver, dst, l->ring + (size_t)k * l->floats, l->floats * sizeof(float));
    dev->event_record(l->receiver, l->drained[k]);
    l->receives++;
    pr_channel_pop(c);
    return PR_LINK_OK;
}
