/* transport.c: the link between neighbouring stages, a bounded FIFO of exactly `capacity`
 * messages (the schedule table's channel_capacity). In one process it is a ring of
 * buffers between stage threads; between processes (the CPU device, one process per
 * stage) it is a TCP socket on which the receiver returns one credit byte per message, so
 * the sender still blocks after `capacity` unreceived messages. Every wait is bounded by
 * the channel's timeout when one is set. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "prt.h"

/* A lock or condition that cannot be made (the system is out of them or of memory) ends
 * the run with the reason, as pr_alloc does for memory. */
static void check_made(int rc, const char *what)
{
    if (rc != 0) {
        fflush(stdout);
        fprintf(stderr, "run: error: cannot create a link's %s: %s\n", what, strerror(rc));
        exit(1);
    }
}

void pr_channel_init(pr_channel *c, int capacity, int64_t floats)
{
    check_made(pthread_mutex_init(&c->mu, NULL), "lock");
    // Waits are timed against the monotonic clock, immune to wall-clock changes.
    pthread_condattr_t attr;
    check_made(pthread_condattr_init(&attr), "condition attributes");
    check_made(pthread_condattr_setclock(&attr, CLOCK_MONOTONIC), "monotonic clock");
    check_made(pthread_cond_init(&c->not_full, &attr), "condition");
    check_made(pthread_cond_init(&c->not_empty, &attr), "condition");
    pthread_condattr_destroy(&attr);
    c->capacity = capacity;
    c->head = c->count = 0;
    c->floats = floats;
    c->buffers = pr_alloc((size_t)capacity * (size_t)floats * sizeof(float));
    c->mbs = pr_alloc((size_t)capacity * sizeof(int64_t));
    c->timeout = 0;
    c->fd = -1;
    c->in_flight = 0;
}

void pr_channel_destroy(pr_channel *c)
{
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->not_full);
    pthread_cond_destroy(&c->not_empty);
    free(c->buffers);
    free(c->mbs);
    if (c->fd >= 0)
        close(c->fd);
    memset(c, 0, sizeof *c);
}

void pr_channel_attach_socket(pr_channel *c, int fd)
{
    c->fd = fd;
    c->in_flight = 0;
}

/* Waits on cond for a free buffer (want_space) or a message; PR_LINK_TIMEOUT after
 * c->timeout seconds (0: never). */
static int wait_until(pr_channel *c, pthread_cond_t *cond, int want_space)
{
    struct timespec at;
    unsigned continues = pr_continues();
    double end = pr_now() + c->timeout;
    at.tv_sec = (time_t)end;
    at.tv_nsec = (long)((end - (double)at.tv_sec) * 1e9);
    while (want_space ? c->count == c->capacity : c->count == 0) {
        if (c->timeout <= 0)
            pthread_cond_wait(cond, &c->mu);
        else if (pthread_cond_timedwait(cond, &c->mu, &at) == ETIMEDOUT &&
                 (want_space ? c->count == c->capacity : c->count == 0)) {
            pthread_mutex_unlock(&c->mu);
            int stopped = pr_stopped_since(&continues);
            pthread_mutex_lock(&c->mu);
            if (!stopped)
                return PR_LINK_TIMEOUT;
            end = pr_now() + c->timeout; // the process was stopped meanwhile: wait again
            at.tv_sec = (time_t)end;
            at.tv_nsec = (long)((end - (double)at.tv_sec) * 1e9);
        }
    }
    return PR_LINK_OK;
}

static pr_deadline deadline_of(const pr_channel *c)
{
    return pr_deadline_in(c->timeout);
}

static int socket_failure(void)
{
    return errno == ETIMEDOUT ? PR_LINK_TIMEOUT : PR_LINK_CLOSED;
}

/* Over a socket: a message is its micro-batch then its floats; at `capacity` unacknowledged
 * messages the sender first takes a credit back. */
static int socket_send(pr_channel *c, int64_t mb, const float *data)
{
    if (c->in_flight == c->capacity) {
        char credit;
        pr_deadline deadline = deadline_of(c);
        if (pr_sock_read(c->fd, &credit, 1, &deadline) != 0)
            return socket_failure();
        c->in_flight--;
    }
    pr_deadline deadline = deadline_of(c); // one for the message: its parts share it
    if (pr_sock_write(c->fd, &mb, sizeof mb, &deadline) != 0 ||
        pr_sock_write(c->fd, data, (size_t)c->floats * sizeof(float), &deadline) != 0)
        return socket_failure();
    c->in_flight++;
    return PR_LINK_OK;
}

static int socket_recv(pr_channel *c, float *data, int64_t *mb)
{
    char credit = 1;
    pr_deadline deadline = deadline_of(c);
    if (pr_sock_read(c->fd, mb, sizeof *mb, &deadline) != 0 ||
        pr_sock_read(c->fd, data, (size_t)c->floats * sizeof(float), &deadline) != 0 ||
        pr_sock_write(c->fd, &credit, 1, &deadline) != 0)
        return socket_failure();
    return PR_LINK_OK;
}

/* Send blocks only while every buffer holds an unreceived message. */
int pr_channel_send_timed(pr_channel *c, int64_t mb, const float *data)
{
    if (c->fd >= 0)
        return socket_send(c, mb, data);
    pthread_mutex_lock(&c->mu);
    if (wait_until(c, &c->not_full, 1) != PR_LINK_OK) {
        pthread_mutex_unlock(&c->mu);
        return PR_LINK_TIMEOUT;
    }
    int tail = (c->head + c->count) % c->capacity;
    pthread_mutex_unlock(&c->mu);
    // Only the sender touches a free buffer, so the copy runs outside the lock.
    memcpy(c->buffers + (size_t)tail * (size_t)c->floats, data, (size_t)c->floats * sizeof(float));
    pthread_mutex_lock(&c->mu);
    c->mbs[tail] = mb;
    c->count++;
    pthread_cond_signal(&c->not_empty);
    pthread_mutex_unlock(&c->mu);
    return PR_LINK_OK;
}

/* Receive takes messages in the order they were sent. */
int pr_channel_recv_timed(pr_channel *c, float *data, int64_t *mb)
{
    if (c->fd >= 0)
        return socket_recv(c, data, mb);
    pthread_mutex_lock(&c->mu);
    if (wait_until(c, &c->not_empty, 0) != PR_LINK_OK) {
        pthread_mutex_unlock(&c->mu);
        return PR_LINK_TIMEOUT;
    }
    int head = c->head;
    *mb = c->mbs[head];
    pthread_mutex_unlock(&c->mu);
    // The head buffer stays ours until count drops, so the sender cannot reuse it yet.
    memcpy(data, c->buffers + (size_t)head * (size_t)c->floats, (size_t)c->floats * sizeof(float));
    pthread_mutex_lock(&c->mu);
    c->head = (c->head + 1) % c->capacity;
    c->count--;
    pthread_cond_signal(&c->not_full);
    pthread_mutex_unlock(&c->mu);
    return PR_LINK_OK;
}

int pr_channel_wait_room(pr_channel *c)
{
    if (c->fd >= 0)
        pr_internal("pr_channel_wait_room on a socket channel");
    pthread_mutex_lock(&c->mu);
    int rc = wait_until(c, &c->not_full, 1);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int pr_channel_peek_timed(pr_channel *c, int64_t *mb)
{
    if (c->fd >= 0)
        pr_internal("pr_channel_peek_timed on a socket channel");
    pthread_mutex_lock(&c->mu);
    int rc = wait_until(c, &c->not_empty, 0);
    if (rc == PR_LINK_OK)
        *mb = c->mbs[c->head];
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void pr_channel_pop(pr_channel *c)
{
    pthread_mutex_lock(&c->mu);
    if (c->count == 0)
        pr_internal("pr_channel_pop on an empty channel");
    c->head = (c->head + 1) % c->capacity;
    c->count--;
    pthread_cond_signal(&c->not_full);
    pthread_mutex_unlock(&c->mu);
}

int pr_channel_held(pr_channel *c)
{
    pthread_mutex_lock(&c->mu);
    int held = c->count;
    pthread_mutex_unlock(&c->mu);
    return held;
}

/* The untimed forms are for callers that have no peer to name: a failure is a bug. */
void pr_channel_send(pr_channel *c, int64_t mb, const float *data)
{
    if (pr_channel_send_timed(c, mb, data) != PR_LINK_OK)
        pr_internal("a channel send failed (micro-batch %lld)", (long long)mb);
}

int64_t pr_channel_recv(pr_channel *c, float *data)
{
    int64_t mb = -1;
    if (pr_channel_recv_timed(c, data, &mb) != PR_LINK_OK)
        pr_internal("a channel receive failed");
    return mb;
}
