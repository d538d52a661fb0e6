/* blame.c: which rank a stuck multi-process run is stuck on.
 *
 * Every process records what it waits for while it waits on another rank (a wait-for edge:
 * the ranks, what for, since when) and answers questions about it from a thread of its own,
 * on the port its bootstrap hello announced. A rank whose wait fails (a timeout, a closed
 * connection) follows the edges from the ranks it waited for, breadth first, to the nearest
 * rank that waits for nobody, does not answer (stopped, or hung with all its threads) or is
 * gone; it names that rank in its last line and tells every other rank, so that theirs name
 * the same one whichever of their timeouts runs out first. PyTorch answers the same question
 * after the fact from every rank's flight-recorder dump; here the ranks ask each other while
 * they still can.
 *
 * Frames, 32-bit big-endian words:
 *   query    magic, QUERY                  -> magic, waiting, kind, arg (2 words), waited ms,
 *                                             n, n ranks, verdict length, verdict
 *   verdict  magic, VERDICT, length, text  -> magic, 1 (stored, or one was there already)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "prt.h"

#define BLAME_MAGIC 0x50414351u /* "PACQ" */
#define MAX_EDGE_RANKS 16
#define MAX_VERDICT 480
#define QUERY_SECONDS 2.0 /* a rank that answers nothing in this long is taken as stuck */
enum { QUERY = 1, VERDICT = 2 };

static struct {
    int active; /* set before any stage thread starts; read without the lock after */
    int rank, world, stages;
    uint32_t addr[PR_MAX_RANKS];
    uint16_t port[PR_MAX_RANKS];
    pthread_mutex_t mu;
    int waiting, kind, n;
    int64_t arg;
    int ranks[MAX_EDGE_RANKS];
    double since;
    char verdict[MAX_VERDICT];
} self = {.mu = PTHREAD_MUTEX_INITIALIZER};

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

static const char *rank_name(int r, char *buf, size_t size)
{
    if (self.stages > 0 && self.world > self.stages)
        snprintf(buf, size, "rank %d (stage %d of replica %d)", r, r % self.stages, r / self.stages);
    else
        snprintf(buf, size, "rank %d (stage %d)", r, r);
    return buf;
}

/* How a rank waits for another, after "waits for rank R ". */
static void describe_wait(int kind, int64_t arg, char *out, size_t size)
{
    static const char *const how[] = {
        [PR_WAIT_RECV_ACT] = "to send micro-batch %lld's activations",
        [PR_WAIT_RECV_GRAD] = "to send micro-batch %lld's gradient",
        [PR_WAIT_SEND] = "to take micro-batch %lld",
        [PR_WAIT_REDUCE] = "in the gradient reduction of step %lld",
        [PR_WAIT_NORM] = "in the gradient-norm sums of step %lld",
        [PR_WAIT_GATHER] = "in the model gather at step %lld"};
    if (kind >= 0 && kind <= PR_WAIT_GATHER)
        snprintf(out, size, how[kind], (long long)arg);
    else
        snprintf(out, size, "(kind %d)", kind);
}

void pr_wait_begin(int kind, int64_t arg, const int *ranks, int n)
{
    if (!self.active)
        return;
    pthread_mutex_lock(&self.mu);
    self.waiting = 1;
    self.kind = kind;
    self.arg = arg;
    self.n = n < MAX_EDGE_RANKS ? n : MAX_EDGE_RANKS;
    memcpy(self.ranks, ranks, (size_t)self.n * sizeof *ranks);
    self.since = pr_now();
    pthread_mutex_unlock(&self.mu);
}

void pr_wait_collective(int kind, int64_t arg)
{
    if (!self.active)
        return;
    int others[MAX_EDGE_RANKS], n = 0;
    for (int r = self.rank > 0 ? 0 : 1; r < self.world && n < MAX_EDGE_RANKS; r += self.rank > 0 ? self.world : 1)
        others[n++] = r;
    pr_wait_begin(kind, arg, others, n);
}

void pr_wait_end(void)
{
    if (!self.active)
        return;
    pthread_mutex_lock(&self.mu);
    self.waiting = 0;
    pthread_mutex_unlock(&self.mu);
}

/* Stores the first verdict this process hears of; later ones name the same stuck run. */
static void keep_verdict(const char *text)
{
    pthread_mutex_lock(&self.mu);
    if (!self.verdict[0])
        snprintf(self.verdict, sizeof self.verdict, "%s", text);
    pthread_mutex_unlock(&self.mu);
}

/* Answers one connection: a query about this process's wait, or a verdict to keep. */
static void answer(int fd)
{
    unsigned char head[8], out[64 + 4 * MAX_EDGE_RANKS + MAX_VERDICT];
    pr_deadline deadline = pr_deadline_in(QUERY_SECONDS);
    if (pr_sock_read(fd, head, 8, &deadline) != 0 || get32(head) != BLAME_MAGIC)
        return;
    if (get32(head + 4) == VERDICT) {
        unsigned char len[4];
        char text[MAX_VERDICT] = "";
        if (pr_sock_read(fd, len, 4, &deadline) != 0 || get32(len) >= MAX_VERDICT ||
            pr_sock_read(fd, text, get32(len), &deadline) != 0)
            return;
        keep_verdict(text);
        put32(out, BLAME_MAGIC);
        put32(out + 4, 1);
        pr_sock_write(fd, out, 8, &deadline);
        return;
    }
    pthread_mutex_lock(&self.mu);
    size_t at = 0, verdict = strlen(self.verdict);
    uint32_t words[] = {BLAME_MAGIC, (uint32_t)self.waiting, (uint32_t)self.kind,
                        (uint32_t)((uint64_t)self.arg >> 32), (uint32_t)self.arg,
                        (uint32_t)(1000.0 * (pr_now() - self.since)), (uint32_t)self.n};
    for (size_t i = 0; i < sizeof words / sizeof *words; i++, at += 4)
        put32(out + at, words[i]);
    for (int i = 0; i < self.n; i++, at += 4)
        put32(out + at, (uint32_t)self.ranks[i]);
    put32(out + at, (uint32_t)verdict);
    memcpy(out + at + 4, self.verdict, verdict);
    at += 4 + verdict;
    pthread_mutex_unlock(&self.mu);
    pr_sock_write(fd, out, at, &deadline);
}

static void *serve(void *arg)
{
    int listener = (int)(intptr_t)arg;
    for (;;) {
        int fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return NULL;
        }
        answer(fd);
        close(fd);
    }
}

int pr_blame_start(const pr_bootstrap *b, int stages, int listener, char *err)
{
    self.rank = b->rank;
    self.world = b->world;
    self.stages = stages;
    memcpy(self.addr, b->addr, sizeof self.addr);
    memcpy(self.port, b->port, sizeof self.port);
    pthread_t thread;
    if (pthread_create(&thread, NULL, serve, (void *)(intptr_t)listener) != 0)
        return pr_fail(err, "rank %d: cannot start the thread that answers for it", b->rank);
    pthread_detach(thread);
    self.active = 1;
    return 0;
}

/* What rank r says of itself. */
typedef struct reply {
    enum { GONE, SILENT, BUSY, WAITING, KNOWN } state;
    int kind, n;
    int64_t arg;
    double waited;
    int ranks[MAX_EDGE_RANKS];
    char verdict[MAX_VERDICT];
} reply;

static void ask(int r, reply *q)
{
    char why[PR_ERR_LEN];
    pr_deadline deadline = pr_deadline_in(QUERY_SECONDS);
    memset(q, 0, sizeof *q);
    q->state = GONE;
    int fd = pr_sock_connect(self.addr[r], self.port[r], &deadline, why);
    if (fd < 0)
        return;
    unsigned char head[8], words[28];
    put32(head, BLAME_MAGIC);
    put32(head + 4, QUERY);
    int rc = pr_sock_write(fd, head, 8, &deadline);
    if (rc == 0)
        rc = pr_sock_read(fd, words, sizeof words, &deadline);
    if (rc != 0) {
        q->state = errno == ETIMEDOUT ? SILENT : GONE;
        close(fd);
        return;
    }
    q->state = get32(words + 4) ? WAITING : BUSY;
    q->kind = (int)get32(words + 8);
    q->arg = (int64_t)((uint64_t)get32(words + 12) << 32 | get32(words + 16));
    q->waited = get32(words + 20) / 1000.0;
    uint32_t n = get32(words + 24);
    unsigned char rest[4 * MAX_EDGE_RANKS + 4];
    if (n > MAX_EDGE_RANKS || pr_sock_read(fd, rest, 4 * n + 4, &deadline) != 0) {
        q->state = SILENT;
        close(fd);
        return;
    }
    q->n = (int)n;
    for (uint32_t i = 0; i < n; i++)
        q->ranks[i] = (int)get32(rest + 4 * i);
    uint32_t len = get32(rest + 4 * n);
    if (len > 0 && len < MAX_VERDICT && pr_sock_read(fd, q->verdict, len, &deadline) == 0)
        q->state = KNOWN;
    close(fd);
}

/* Tells rank r the verdict and waits for it to be stored, so that it is there before this
 * process exits and r sees its connections close. */
static void tell(int r, const char *verdict)
{
    char why[PR_ERR_LEN];
    pr_deadline deadline = pr_deadline_in(1.0);
    int fd = pr_sock_connect(self.addr[r], self.port[r], &deadline, why);
    if (fd < 0)
        return;
    size_t len = strlen(verdict);
    unsigned char msg[12 + MAX_VERDICT], ack[8];
    put32(msg, BLAME_MAGIC);
    put32(msg + 4, VERDICT);
    put32(msg + 8, (uint32_t)len);
    memcpy(msg + 12, verdict, len);
    if (pr_sock_write(fd, msg, 12 + len, &deadline) == 0)
        pr_sock_read(fd, ack, sizeof ack, &deadline);
    close(fd);
}

/* Breadth first from the ranks this process waits for, to the nearest one that is gone,
 * silent or busy; the verdict names it, and the path of waits that leads there goes into
 * `path`. A rank that already knows the verdict ends the search with it. */
static void search(char *verdict, size_t size, char *path, size_t path_size)
{
    int queue[PR_MAX_RANKS], parent[PR_MAX_RANKS], head = 0, tail = 0;
    uint8_t seen[PR_MAX_RANKS] = {0};
    reply *replies = pr_alloc((size_t)self.world * sizeof *replies);
    seen[self.rank] = 1;
    pthread_mutex_lock(&self.mu);
    for (int i = 0; i < self.n; i++)
        if (self.ranks[i] >= 0 && self.ranks[i] < self.world && !seen[self.ranks[i]]) {
            seen[self.ranks[i]] = 1;
            parent[self.ranks[i]] = -1;
            queue[tail++] = self.ranks[i];
        }
    pthread_mutex_unlock(&self.mu);
    int root = -1;
    char name[64], what[96];
    while (head < tail && root < 0) {
        int r = queue[head++];
        reply *q = &replies[r];
        ask(r, q);
        if (q->state == KNOWN) {
            snprintf(verdict, size, "%s", q->verdict);
            free(replies);
            return;
        }
        if (q->state != WAITING) {
            root = r;
            break;
        }
        for (int i = 0; i < q->n; i++)
            if (q->ranks[i] >= 0 && q->ranks[i] < self.world && !seen[q->ranks[i]]) {
                seen[q->ranks[i]] = 1;
                parent[q->ranks[i]] = r;
                queue[tail++] = q->ranks[i];
            }
    }
    path[0] = '\0';
    if (root < 0) {
        snprintf(verdict, size, "a cycle of waits among the ranks it asked (a deadlock), found by "
                 "rank %d", self.rank);
        free(replies);
        return;
    }
    static const char *const why[] = {
        [GONE] = "its process is gone (killed, or ended on an error of its own)",
        [SILENT] = "it does not answer (stopped, or hung with all its threads)",
        [BUSY] = "it answers, but waits for no rank (busy: slow, or stuck in its own work)"};
    snprintf(verdict, size, "%s: %s, found by rank %d", rank_name(root, name, sizeof name),
             why[replies[root].state], self.rank);
    // The waits that lead there, nearest first: "rank 2 has waited 10.4 s for rank 3 to take ...".
    size_t at = 0;
    for (int r = parent[root], below = root; r >= 0 && at < path_size; below = r, r = parent[r]) {
        describe_wait(replies[r].kind, replies[r].arg, what, sizeof what);
        at += (size_t)snprintf(path + at, path_size - at, "%srank %d has waited %.1f s for rank %d %s",
                               at ? "; " : "", r, replies[r].waited, below, what);
    }
    free(replies);
}

void pr_blame(char *out, size_t size)
{
    out[0] = '\0';
    if (!self.active)
        return;
    char verdict[MAX_VERDICT], path[600] = "";
    pthread_mutex_lock(&self.mu);
    snprintf(verdict, sizeof verdict, "%s", self.verdict);
    pthread_mutex_unlock(&self.mu);
    if (!verdict[0]) {
        search(verdict, sizeof verdict, path, sizeof path);
        keep_verdict(verdict);
        for (int r = 0; r < self.world; r++)
            if (r != self.rank)
                tell(r, verdict);
    }
    snprintf(out, size, "; the run is stuck on %s%s%s%s", verdict, path[0] ? " (" : "", path,
             path[0] ? ")" : "");
}
