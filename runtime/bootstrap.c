/* bootstrap.c: how the processes of a multi-process run find each other. Rank 0 listens on
 * the master port; every other rank connects (retrying until a deadline), says who it is in
 * a framed hello, and receives rank 0's opaque id (the NCCL unique id on the GPU path) and
 * the table of every rank's address. The connections stay open for small collectives
 * (gradient-norm sums, checkpoint gathers). IPv4 only.
 *
 * Frames, all integers 32-bit big-endian:
 *   hello  rank r -> 0: magic, version, world, rank, listen port
 *   reply  0 -> rank r: magic, version, status 0, id[128], world x (address, port)
 *                    or magic, version, status 1, length, message (why rank 0 gave up)
 *   block  either way: magic, length, then length bytes (collectives)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "prt.h"

#define BOOT_MAGIC 0x50414342u /* "PACB" */
#define BOOT_VERSION 1u
#define BLOCK_MAGIC 0x5041434Bu /* "PACK" */
#define HELLO_WORDS 5
#define MAX_ABORT_TEXT 400
#define REPLY_GRACE 5.0 /* seconds a connected rank waits past its deadline for rank 0 */

enum { STATUS_OK = 0, STATUS_ABORT = 1 };

/* Milliseconds left before `deadline` for poll(): -1 (forever) when there is none. */
static int ms_left(double deadline)
{
    if (deadline <= 0)
        return -1;
    double left = deadline - pr_now();
    return left <= 0 ? 0 : (int)(left * 1000.0) + 1;
}

/* Waits for fd to become ready for `events`; 0 ready, -1 with errno ETIMEDOUT or poll's. A
 * deadline that passed while the process was stopped starts its span again. */
static int wait_fd(int fd, short events, pr_deadline *deadline)
{
    for (;;) {
        struct pollfd p = {fd, events, 0};
        int rc = poll(&p, 1, ms_left(deadline->at));
        if (rc > 0)
            return 0;
        if (rc == 0 && pr_stopped_since(&deadline->continues)) {
            deadline->at = pr_now() + deadline->span; // the process was stopped meanwhile: wait again
            continue;
        }
        if (rc == 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        if (errno != EINTR)
            return -1;
    }
}

/* Reads exactly `bytes`; a peer that closes first is EPIPE, so callers tell it apart from
 * a timeout. */
int pr_sock_read(int fd, void *buf, size_t bytes, pr_deadline *deadline)
{
    char *at = buf;
    while (bytes > 0) {
        if (wait_fd(fd, POLLIN, deadline) != 0)
            return -1;
        ssize_t n = recv(fd, at, bytes, MSG_DONTWAIT);
        if (n == 0) {
            errno = EPIPE;
            return -1;
        }
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
                continue;
            if (errno == ECONNRESET)
                errno = EPIPE;
            return -1;
        }
        at += n;
        bytes -= (size_t)n;
    }
    return 0;
}

int pr_sock_write(int fd, const void *buf, size_t bytes, pr_deadline *deadline)
{
    const char *at = buf;
    while (bytes > 0) {
        if (wait_fd(fd, POLLOUT, deadline) != 0)
            return -1;
        ssize_t n = send(fd, at, bytes, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)
                continue;
            if (errno == ECONNRESET)
                errno = EPIPE;
            return -1;
        }
        at += n;
        bytes -= (size_t)n;
    }
    return 0;
}

/* Small frames go out at once rather than waiting for Nagle's timer. */
static void no_delay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int pr_sock_listen(uint16_t port, int backlog, uint16_t *bound, char *err)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return pr_fail(err, "cannot create a socket: %s", strerror(errno));
    int one = 1;
    // A previous run's connections in TIME_WAIT must not keep the port from being reused.
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, backlog) != 0) {
        int e = errno;
        close(fd);
        return pr_fail(err, "cannot listen on port %u: %s", port, strerror(e));
    }
    socklen_t len = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &len);
    if (bound)
        *bound = ntohs(a.sin_port);
    return fd;
}

int pr_sock_resolve(const char *host, uint32_t *addr, char *err)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || !res)
        return pr_fail(err, "cannot resolve host '%s': %s", host, gai_strerror(rc));
    *addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr.s_addr;
    freeaddrinfo(res);
    return 0;
}

/* One connection attempt, bounded by the deadline (a blocking connect to a silent host
 * could otherwise outlast it); the fd, or -1 with the reason in err. */
int pr_sock_connect(uint32_t addr, uint16_t port, pr_deadline *deadline, char *err)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return pr_fail(err, "cannot create a socket: %s", strerror(errno));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = addr};
    int rc = connect(fd, (struct sockaddr *)&a, sizeof a), e = errno;
    if (rc != 0 && e == EINPROGRESS) {
        socklen_t len = sizeof e;
        if (wait_fd(fd, POLLOUT, deadline) != 0)
            e = errno;
        else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) != 0)
            e = errno;
        rc = e ? -1 : 0;
    }
    if (rc != 0) {
        close(fd);
        return pr_fail(err, "%s", strerror(e));
    }
    // A port in the ephemeral range that nobody listens on yet can be given to this very
    // socket as its own local port, and TCP then connects it to itself: retry instead.
    struct sockaddr_in self, peer;
    socklen_t self_len = sizeof self, peer_len = sizeof peer;
    if (getsockname(fd, (struct sockaddr *)&self, &self_len) == 0 &&
        getpeername(fd, (struct sockaddr *)&peer, &peer_len) == 0 &&
        self.sin_port == peer.sin_port && self.sin_addr.s_addr == peer.sin_addr.s_addr) {
        close(fd);
        return pr_fail(err, "connected to itself (nothing listens on port %u yet)", port);
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    no_delay(fd);
    return fd;
}

static void put32(unsigned char *p, uint32_t v)
{
    v = htonl(v);
    memcpy(p, &v, 4);
}

static uint32_t get32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return ntohl(v);
}

/* Rank 0's answer to rank r: the id and the address table, or why it gave up. */
static int send_reply(const pr_bootstrap *b, int fd, const char *abort_text, double deadline)
{
    unsigned char msg[16 + PR_BOOT_ID_BYTES + 8 * PR_MAX_RANKS + MAX_ABORT_TEXT];
    size_t n = 12;
    put32(msg, BOOT_MAGIC);
    put32(msg + 4, BOOT_VERSION);
    put32(msg + 8, abort_text ? STATUS_ABORT : STATUS_OK);
    if (abort_text) {
        size_t len = strnlen(abort_text, MAX_ABORT_TEXT);
        put32(msg + n, (uint32_t)len);
        memcpy(msg + n + 4, abort_text, len);
        n += 4 + len;
    } else {
        memcpy(msg + n, b->id, PR_BOOT_ID_BYTES);
        n += PR_BOOT_ID_BYTES;
        for (int r = 0; r < b->world; r++, n += 8) {
            memcpy(msg + n, &b->addr[r], 4);
            put32(msg + n + 4, b->port[r]);
        }
    }
    pr_deadline by = pr_deadline_at(deadline);
    return pr_sock_write(fd, msg, n, &by);
}

/* A connection rank 0 has accepted but not yet heard a whole hello from. */
typedef struct pending {
    int fd;
    uint32_t addr;
    size_t got;
    unsigned char hello[4 * HELLO_WORDS];
} pending;

/* The ranks in [1, world) without a connection, as "2, 5" (for the timeout message). */
static void missing_ranks(const pr_bootstrap *b, char *out, size_t size)
{
    size_t n = 0;
    out[0] = '\0';
    for (int r = 1; r < b->world && n < size; r++)
        if (b->fd[r] < 0)
            n += (size_t)snprintf(out + n, size - n, "%s%d", n ? ", " : "", r);
}

/* Tells every connected rank why rank 0 gives up, closes everything, returns -1. */
static int server_abort(pr_bootstrap *b, int listener, pending *pend, int n_pend, char *err)
{
    char text[MAX_ABORT_TEXT];
    snprintf(text, sizeof text, "%s", err);
    for (int r = 1; r < b->world; r++)
        if (b->fd[r] >= 0) {
            send_reply(b, b->fd[r], text, pr_now() + 2.0);
            close(b->fd[r]);
            b->fd[r] = -1;
        }
    for (int i = 0; i < n_pend; i++)
        close(pend[i].fd);
    if (listener >= 0)
        close(listener);
    return -1;
}

/* Checks a whole hello; 0 to keep the connection as rank `*rank`, 1 to drop a stray one,
 * -1 when it shows the job itself is inconsistent (err says how). */
static int check_hello(const pr_bootstrap *b, const pending *p, int *rank, char *err)
{
    char who[INET_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET, &p->addr, who, sizeof who);
    if (get32(p->hello) != BOOT_MAGIC) {
        fprintf(stderr, "run: notice: rank 0: rejected a connection from %s (not a pacic "
                "bootstrap hello)\n", who);
        return 1;
    }
    uint32_t version = get32(p->hello + 4), world = get32(p->hello + 8), r = get32(p->hello + 12);
    if (version != BOOT_VERSION)
        return pr_fail(err, "rank 0: a rank at %s speaks bootstrap version %u, this binary %u: "
                       "every rank must run the same binary", who, version, BOOT_VERSION);
    if ((int)world != b->world || r == 0 || (int)r >= b->world)
        return pr_fail(err, "rank 0: a process at %s says it is rank %u of %u, but the world "
                       "has %d ranks", who, r, world, b->world);
    if (b->fd[r] >= 0)
        return pr_fail(err, "rank 0: two processes say they are rank %u (the second from %s)",
                       r, who);
    *rank = (int)r;
    return 0;
}

/* Rank 0: accept until every rank has said hello, then answer them all. */
static int serve(const pr_launch *l, double deadline, double timeout_s, pr_bootstrap *b, char *err)
{
    uint16_t port = (uint16_t)l->master_port;
    char why[PR_ERR_LEN];
    int listener = pr_sock_listen(port, 2 * PR_MAX_RANKS, NULL, why);
    if (listener < 0)
        return pr_fail(err, "rank 0: %s (--master-port or MASTER_PORT picks another)", why);
    pending pend[PR_MAX_RANKS];
    int n_pend = 0, joined = 1;
    while (joined < b->world) {
        struct pollfd fds[PR_MAX_RANKS + 1];
        fds[0] = (struct pollfd){listener, POLLIN, 0};
        for (int i = 0; i < n_pend; i++)
            fds[i + 1] = (struct pollfd){pend[i].fd, POLLIN, 0};
        int rc = poll(fds, (nfds_t)n_pend + 1, ms_left(deadline));
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0) {
            char missing[256];
            missing_ranks(b, missing, sizeof missing);
            pr_fail(err, "rank 0: no bootstrap connection from rank%s %s within %g s on port %u",
                    strchr(missing, ',') ? "s" : "", missing, timeout_s, port);
            return server_abort(b, listener, pend, n_pend, err);
        }
        // Hellos first, from the end, so removing one keeps the indices below it valid.
        for (int i = n_pend - 1; i >= 0; i--) {
            if (!(fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            pending *p = &pend[i];
            ssize_t n = recv(p->fd, p->hello + p->got, sizeof p->hello - p->got, MSG_DONTWAIT);
            if (n < 0 && (errno == EAGAIN || errno == EINTR))
                continue;
            int rank = -1, verdict = 1;
            if (n > 0) {
                p->got += (size_t)n;
                // A wrong magic is known after 4 bytes: drop it without waiting for more.
                if (p->got < sizeof p->hello && (p->got < 4 || get32(p->hello) == BOOT_MAGIC))
                    continue;
                verdict = check_hello(b, p, &rank, err);
            }
            if (verdict < 0)
                return server_abort(b, listener, pend, n_pend, err);
            if (verdict == 0) {
                b->fd[rank] = p->fd;
                b->addr[rank] = p->addr;
                b->port[rank] = (uint16_t)get32(p->hello + 16);
                joined++;
            } else {
                close(p->fd);
            }
            pend[i] = pend[--n_pend];
        }
        if ((fds[0].revents & POLLIN) && n_pend < PR_MAX_RANKS) {
            struct sockaddr_in from;
            socklen_t len = sizeof from;
            int fd = accept4(listener, (struct sockaddr *)&from, &len, SOCK_CLOEXEC);
            if (fd >= 0) {
                no_delay(fd);
                pend[n_pend++] = (pending){fd, from.sin_addr.s_addr, 0, {0}};
            }
        }
    }
    for (int i = 0; i < n_pend; i++)
        close(pend[i].fd);
    close(listener);
    for (int r = 1; r < b->world; r++)
        if (send_reply(b, b->fd[r], NULL, deadline) != 0) {
            pr_fail(err, "rank 0: cannot send the id to rank %d: %s", r, strerror(errno));
            return server_abort(b, -1, pend, 0, err);
        }
    return 0;
}

/* Rank r > 0, one attempt on an open connection: hello, then the reply. 0 done, 1 to retry
 * (rank 0 closed the line: an earlier instance going away), -1 fatal. */
static int ask(const pr_launch *l, int fd, uint16_t listen_port, double deadline,
               double timeout_s, pr_bootstrap *b, char *err)
{
    unsigned char hello[4 * HELLO_WORDS], head[12];
    put32(hello, BOOT_MAGIC);
    put32(hello + 4, BOOT_VERSION);
    put32(hello + 8, (uint32_t)l->world);
    put32(hello + 12, (uint32_t)l->rank);
    put32(hello + 16, listen_port);
    // Rank 0 keeps the common deadline and explains a timeout to every connected rank, so
    // a connected rank waits a little longer than its own deadline to hear why.
    pr_deadline hello_by = pr_deadline_at(deadline), reply_by = pr_deadline_at(deadline + REPLY_GRACE);
    if (pr_sock_write(fd, hello, sizeof hello, &hello_by) != 0 ||
        pr_sock_read(fd, head, sizeof head, &reply_by) != 0) {
        if (errno == EPIPE)
            return 1;
        return pr_fail(err, "rank %d: rank 0 at %s:%d took the connection but sent no id within "
                       "%g s", l->rank, l->master_addr, l->master_port, timeout_s);
    }
    if (get32(head) != BOOT_MAGIC || get32(head + 4) != BOOT_VERSION)
        return pr_fail(err, "rank %d: %s:%d answered, but not as a pacic rank 0 of this version "
                       "(another service on the port?)", l->rank, l->master_addr, l->master_port);
    if (get32(head + 8) == STATUS_ABORT) {
        unsigned char len_bytes[4];
        char text[MAX_ABORT_TEXT + 1] = "";
        if (pr_sock_read(fd, len_bytes, 4, &reply_by) == 0) {
            uint32_t len = get32(len_bytes);
            len = len > MAX_ABORT_TEXT ? MAX_ABORT_TEXT : len;
            if (pr_sock_read(fd, text, len, &reply_by) == 0)
                text[len] = '\0';
        }
        return pr_fail(err, "rank %d: rank 0 gave up: %s", l->rank, text);
    }
    unsigned char table[8 * PR_MAX_RANKS];
    if (pr_sock_read(fd, b->id, PR_BOOT_ID_BYTES, &reply_by) != 0 ||
        pr_sock_read(fd, table, 8 * (size_t)l->world, &reply_by) != 0)
        return pr_fail(err, "rank %d: rank 0 closed the connection in the middle of the id",
                       l->rank);
    for (int r = 0; r < l->world; r++) {
        memcpy(&b->addr[r], table + 8 * r, 4);
        b->port[r] = (uint16_t)get32(table + 8 * r + 4);
    }
    return 0;
}

/* Rank r > 0: connect with retries (rank 0 may start later), backing off up to 1 s. */
static int join(const pr_launch *l, double deadline, double timeout_s, uint16_t listen_port,
                pr_bootstrap *b, char *err)
{
    uint32_t addr = 0;
    char why[PR_ERR_LEN];
    if (pr_sock_resolve(l->master_addr, &addr, why) != 0)
        return pr_fail(err, "rank %d: %s (from %s)", l->rank, why,
                       l->addr_from ? l->addr_from : "MASTER_ADDR");
    double pause = 0.05;
    snprintf(why, sizeof why, "no attempt finished");
    while (pr_now() < deadline) {
        pr_deadline connect_by = pr_deadline_at(deadline);
        int fd = pr_sock_connect(addr, (uint16_t)l->master_port, &connect_by, why);
        if (fd >= 0) {
            int rc = ask(l, fd, listen_port, deadline, timeout_s, b, err);
            if (rc <= 0) {
                if (rc == 0)
                    b->fd[0] = fd;
                else
                    close(fd);
                return rc;
            }
            close(fd);
            snprintf(why, sizeof why, "rank 0 closed the connection");
        }
        double left = deadline - pr_now();
        usleep((useconds_t)(1e6 * (pause < left ? pause : left > 0 ? left : 0)));
        pause = pause * 2 < 1.0 ? pause * 2 : 1.0;
    }
    return pr_fail(err, "rank %d: cannot reach rank 0 at %s:%d within %g s (last: %s)", l->rank,
                   l->master_addr, l->master_port, timeout_s, why);
}

int pr_bootstrap_tcp(const pr_launch *l, double timeout_s, uint16_t listen_port, pr_bootstrap *b,
                     char *err)
{
    b->rank = l->rank;
    b->world = l->world;
    b->timeout = timeout_s;
    for (int r = 0; r < PR_MAX_RANKS; r++)
        b->fd[r] = -1;
    if (l->world < 1 || l->world > PR_MAX_RANKS || l->rank < 0 || l->rank >= l->world)
        return pr_fail(err, "rank %d of %d: outside 1..%d ranks", l->rank, l->world,
                       PR_MAX_RANKS);
    double deadline = pr_now() + timeout_s;
    if (l->rank > 0)
        return join(l, deadline, timeout_s, listen_port, b, err);
    b->port[0] = listen_port;
    if (l->world > 1 && pr_sock_resolve(l->master_addr, &b->addr[0], err) != 0)
        return -1;
    return l->world > 1 ? serve(l, deadline, timeout_s, b, err) : 0;
}

void pr_bootstrap_close(pr_bootstrap *b)
{
    for (int r = 0; r < PR_MAX_RANKS; r++)
        if (b->fd[r] >= 0) {
            close(b->fd[r]);
            b->fd[r] = -1;
        }
}

/* A framed block on the bootstrap line: magic, length, bytes. */
static int send_block(const pr_bootstrap *b, int fd, const void *data, size_t bytes)
{
    unsigned char head[8];
    put32(head, BLOCK_MAGIC);
    put32(head + 4, (uint32_t)bytes);
    pr_deadline deadline = pr_deadline_in(b->timeout);
    return pr_sock_write(fd, head, 8, &deadline) || pr_sock_write(fd, data, bytes, &deadline) ? -1 : 0;
}

/* "rank 3", or with replicas "rank 3 (stage 1 of replica 1)", so a failed peer is named as the
 * user wrote the run. */
static const char *rank_name(const pr_bootstrap *b, int r, char *buf, size_t size)
{
    if (b->stages > 0 && b->world > b->stages)
        snprintf(buf, size, "rank %d (stage %d of replica %d)", r, r % b->stages, r / b->stages);
    else
        snprintf(buf, size, "rank %d", r);
    return buf;
}

/* Receives a block of exactly `bytes` from rank `peer`; the error names both ranks. */
static int recv_block(const pr_bootstrap *b, int peer, void *data, size_t bytes, char *err)
{
    unsigned char head[8];
    int fd = b->rank == 0 ? b->fd[peer] : b->fd[0];
    pr_deadline deadline = pr_deadline_in(b->timeout);
    if (pr_sock_read(fd, head, 8, &deadline) != 0 ||
        (get32(head) == BLOCK_MAGIC && get32(head + 4) == bytes &&
         pr_sock_read(fd, data, bytes, &deadline) != 0)) {
        char who[64];
        if (errno == ETIMEDOUT)
            return pr_fail(err, "no message from %s for %g s", rank_name(b, peer, who, sizeof who),
                           b->timeout);
        return pr_fail(err, "%s closed the connection", rank_name(b, peer, who, sizeof who));
    }
    if (get32(head) != BLOCK_MAGIC || get32(head + 4) != bytes)
        return pr_fail(err, "rank %d sent a block of %u bytes, %zu expected", peer,
                       get32(head + 4), bytes);
    return 0;
}

int pr_bootstrap_allgather(pr_bootstrap *b, const void *mine, size_t bytes, void *all, char *err)
{
    if (b->mpi && b->world > 1)
        return b->mpi->allgather(mine, bytes, all, err);
    char *out = all;
    memcpy(out + (size_t)b->rank * bytes, mine, bytes);
    if (b->world == 1)
        return 0;
    if (b->rank > 0) {
        if (send_block(b, b->fd[0], mine, bytes) != 0)
            return pr_fail(err, "rank 0 closed the connection");
        return recv_block(b, 0, all, bytes * (size_t)b->world, err);
    }
    for (int r = 1; r < b->world; r++)
        if (recv_block(b, r, out + (size_t)r * bytes, bytes, err) != 0)
            return -1;
    char who[64];
    for (int r = 1; r < b->world; r++)
        if (send_block(b, b->fd[r], all, bytes * (size_t)b->world) != 0)
            return pr_fail(err, "%s closed the connection", rank_name(b, r, who, sizeof who));
    return 0;
}

int pr_bootstrap_gather(pr_bootstrap *b, const void *data, size_t bytes, void *const *dst,
                        const size_t *dst_bytes, char *err)
{
    if (b->rank > 0)
        return send_block(b, b->fd[0], data, bytes) == 0 ? 0
               : pr_fail(err, "rank 0 closed the connection");
    for (int r = 1; r < b->world; r++)
        if (recv_block(b, r, dst[r], dst_bytes[r], err) != 0)
            return -1;
    return 0;
}
