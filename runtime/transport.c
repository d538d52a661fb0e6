/* transport.c: the in-process link between neighbouring stage threads, a bounded FIFO of
 * exactly `capacity` message buffers (the schedule table's channel_capacity). */
#include <stdlib.h>
#include <string.h>

#include "prt.h"

void pr_channel_init(pr_channel *c, int capacity, int64_t floats)
{
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->not_full, NULL);
    pthread_cond_init(&c->not_empty, NULL);
    c->capacity = capacity;
    c->head = c->count = 0;
    c->floats = floats;
    c->buffers = pr_alloc((size_t)capacity * (size_t)floats * sizeof(float));
    c->mbs = pr_alloc((size_t)capacity * sizeof(int64_t));
}

void pr_channel_destroy(pr_channel *c)
{
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->not_full);
    pthread_cond_destroy(&c->not_empty);
    free(c->buffers);
    free(c->mbs);
    memset(c, 0, sizeof *c);
}

/* Send blocks only while every buffer holds an unreceived message. */
void pr_channel_send(pr_channel *c, int64_t mb, const float *data)
{
    pthread_mutex_lock(&c->mu);
    while (c->count == c->capacity)
        pthread_cond_wait(&c->not_full, &c->mu);
    int tail = (c->head + c->count) % c->capacity;
    pthread_mutex_unlock(&c->mu);
    // Only the sender touches a free buffer, so the copy runs outside the lock.
    memcpy(c->buffers + (size_t)tail * (size_t)c->floats, data, (size_t)c->floats * sizeof(float));
    pthread_mutex_lock(&c->mu);
    c->mbs[tail] = mb;
    c->count++;
    pthread_cond_signal(&c->not_empty);
    pthread_mutex_unlock(&c->mu);
}

/* Receive takes messages in the order they were sent. */
int64_t pr_channel_recv(pr_channel *c, float *data)
{
    pthread_mutex_lock(&c->mu);
    while (c->count == 0)
        pthread_cond_wait(&c->not_empty, &c->mu);
    int head = c->head;
    int64_t mb = c->mbs[head];
    pthread_mutex_unlock(&c->mu);
    // The head buffer stays ours until count drops, so the sender cannot reuse it yet.
    memcpy(data, c->buffers + (size_t)head * (size_t)c->floats, (size_t)c->floats * sizeof(float));
    pthread_mutex_lock(&c->mu);
    c->head = (c->head + 1) % c->capacity;
    c->count--;
    pthread_cond_signal(&c->not_full);
    pthread_mutex_unlock(&c->mu);
    return mb;
}
