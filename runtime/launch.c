/* launch.c: who this process is in a multi-process run, read from the launcher's
 * environment variables (torchrun, Open MPI's mpirun, Slurm's srun) by a pure function of
 * an environment array, so every case is a unit test.
 *
 * Precedence, first match wins: torchrun-style RANK/WORLD_SIZE (set by torchrun, or by
 * hand; they override a launcher underneath, as with `srun torchrun`), then Open MPI's
 * OMPI_COMM_WORLD_*, then Slurm's SLURM_PROCID. With none of them the process is alone
 * and runs every stage. The rank-0 host comes from MASTER_ADDR first, then the launcher.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "prt.h"

/* Names for messages, in enum pr_launcher order. */
const char *pr_launcher_name(int launcher)
{
    static const char *const names[PR_LAUNCH_COUNT] = {"single process", "torchrun", "Open MPI",
                                                        "Slurm"};
    return launcher >= 0 && launcher < PR_LAUNCH_COUNT ? names[launcher] : "?";
}

/* The value of NAME in a NULL-terminated "NAME=value" array; NULL when absent or empty. */
const char *pr_env_get(const char *const *env, const char *name)
{
    size_t len = strlen(name);
    for (; env && *env; env++)
        if (strncmp(*env, name, len) == 0 && (*env)[len] == '=')
            return (*env)[len + 1] ? *env + len + 1 : NULL;
    return NULL;
}

/* A variable holding a decimal integer in [min, max]; 1 when absent, -1 on a bad value. */
static int env_int(const char *const *env, const char *name, long min, long max, int *out,
                   char *err)
{
    const char *text = pr_env_get(env, name);
    if (!text)
        return 1;
    char *end;
    errno = 0;
    long n = strtol(text, &end, 10);
    if (errno || *end || end == text || n < min || n > max || text[0] == '+' || text[0] == ' ')
        return pr_fail(err, "%s='%s' is not an integer in [%ld, %ld]", name, text, min, max);
    *out = (int)n;
    return 0;
}

/* Reads a required integer; an absent one is an error naming the variable and the launcher
 * whose other variables were found. */
static int need_int(const char *const *env, const char *name, long min, long max, int *out,
                    const char *found, char *err)
{
    int rc = env_int(env, name, min, max, out, err);
    if (rc > 0)
        return pr_fail(err, "%s is set but %s is not: set both", found, name);
    return rc;
}

/* The first host of a Slurm node list: "gpu[07-09,12],cpu3" -> "gpu07"; a bracket
 * contributes its first number (zero padding kept), text after it is kept. */
int pr_slurm_first_host(const char *list, char *host, size_t size)
{
    size_t n = 0;
    for (const char *c = list; *c && *c != ','; c++) {
        if (*c == '[') {
            for (c++; *c && *c != ',' && *c != '-' && *c != ']'; c++)
                if (n + 1 < size)
                    host[n++] = *c;
            while (*c && *c != ']')
                c++;
            if (!*c)
                return -1;
            continue;
        }
        if (*c == ']' || n + 1 >= size)
            return -1;
        host[n++] = *c;
    }
    host[n] = '\0';
    return n > 0 ? 0 : -1;
}

/* The rank-0 host: MASTER_ADDR, else what the launcher tells; "" if nobody does. */
static int master_address(const char *const *env, pr_launch *l, int local_world, char *err)
{
    const char *addr = pr_env_get(env, "MASTER_ADDR");
    if (addr) {
        l->addr_from = "MASTER_ADDR";
    } else if (l->launcher == PR_LAUNCH_SLURM) {
        const char *list = pr_env_get(env, "SLURM_STEP_NODELIST");
        l->addr_from = "SLURM_STEP_NODELIST";
        if (!list) {
            list = pr_env_get(env, "SLURM_NODELIST");
            l->addr_from = "SLURM_NODELIST";
        }
        if (list) {
            if (pr_slurm_first_host(list, l->master_addr, sizeof l->master_addr) != 0)
                return pr_fail(err, "%s='%s' is not a Slurm node list", l->addr_from, list);
            return 0;
        }
        addr = pr_env_get(env, "SLURM_LAUNCH_NODE_IPADDR");
        l->addr_from = "SLURM_LAUNCH_NODE_IPADDR";
    } else if (l->launcher == PR_LAUNCH_OPEN_MPI && local_world == l->world) {
        // Every rank is on this node, so rank 0 is too.
        addr = "127.0.0.1";
        l->addr_from = "OMPI_COMM_WORLD_LOCAL_SIZE (every rank on this node)";
    }
    if (!addr) {
        l->addr_from = NULL;
        return 0;
    }
    if (strlen(addr) >= sizeof l->master_addr)
        return pr_fail(err, "%s: host name longer than %zu characters", l->addr_from,
                       sizeof l->master_addr - 1);
    strcpy(l->master_addr, addr);
    return 0;
}

/* Defined by libpacirt_mpi.a, which pacic links (naming the symbol, so the archive member is
 * pulled) only where the build found MPI; weak, so without it the address is NULL. */
extern const pr_mpi_ops pr_mpi_impl __attribute__((weak));

const pr_mpi_ops *pr_mpi(void)
{
    return &pr_mpi_impl ? &pr_mpi_impl : NULL;
}

/* Launcher variables -> rank, world, local rank, rank-0 host and port; checks world
 * against the program's stages (one process per stage, or one for all). */
int pr_launch_parse(const char *const *env, int stages, int replicas, int port_flag, pr_launch *l,
                    char *err)
{
    memset(l, 0, sizeof *l);
    l->world = 1;
    const char *world_var = "WORLD_SIZE", *rank_var = "RANK";
    int local_world = 0;
    if (pr_env_get(env, "RANK") || pr_env_get(env, "WORLD_SIZE")) {
        l->launcher = PR_LAUNCH_TORCHRUN;
        const char *found = pr_env_get(env, "RANK") ? "RANK" : "WORLD_SIZE";
        if (need_int(env, "RANK", 0, 1 << 20, &l->rank, found, err) ||
            need_int(env, "WORLD_SIZE", 1, 1 << 20, &l->world, found, err))
            return -1;
        l->local_rank = l->rank;
        if (env_int(env, "LOCAL_RANK", 0, 1 << 20, &l->local_rank, err) < 0)
            return -1;
    } else if (pr_env_get(env, "OMPI_COMM_WORLD_RANK")) {
        l->launcher = PR_LAUNCH_OPEN_MPI;
        world_var = "OMPI_COMM_WORLD_SIZE", rank_var = "OMPI_COMM_WORLD_RANK";
        if (need_int(env, rank_var, 0, 1 << 20, &l->rank, rank_var, err) ||
            need_int(env, world_var, 1, 1 << 20, &l->world, rank_var, err) ||
            need_int(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0, 1 << 20, &l->local_rank, rank_var, err) ||
            env_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, 1 << 20, &local_world, err) < 0)
            return -1;
    } else if (pr_env_get(env, "SLURM_PROCID")) {
        l->launcher = PR_LAUNCH_SLURM;
        rank_var = "SLURM_PROCID";
        // srun states its step's task count; SLURM_NTASKS is the allocation's.
        world_var = pr_env_get(env, "SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
        if (need_int(env, rank_var, 0, 1 << 20, &l->rank, rank_var, err) ||
            need_int(env, world_var, 1, 1 << 20, &l->world, rank_var, err) ||
            need_int(env, "SLURM_LOCALID", 0, 1 << 20, &l->local_rank, rank_var, err))
            return -1;
    }
    if (l->rank >= l->world)
        return pr_fail(err, "%s=%d is not below %s=%d", rank_var, l->rank, world_var, l->world);
    if (replicas > 1 && l->world > 1 && l->world != stages * replicas)
        return pr_fail(err, "%s=%d, but the program has %d stages x %d replicas (data %d): start one "
                       "process per stage and replica (%d), or one process for all", world_var,
                       l->world, stages, replicas, replicas, stages * replicas);
    if (replicas <= 1 && l->world > 1 && l->world != stages)
        return pr_fail(err, "%s=%d, but the program has %d stages: start one process per stage "
                       "(%d), or one process for all", world_var, l->world, stages, stages);
    l->master_port = PR_DEFAULT_MASTER_PORT;
    if (port_flag > 0) {
        l->master_port = port_flag;
    } else if (env_int(env, "MASTER_PORT", 1, 65535, &l->master_port, err) < 0) {
        return -1;
    }
    if (l->world == 1)
        return 0;
    if (master_address(env, l, local_world, err) != 0)
        return -1;
    // Under mpirun a binary with MPI learns it from rank 0 by broadcast (pr_mpi()->start).
    if (!l->master_addr[0] && !(l->launcher == PR_LAUNCH_OPEN_MPI && pr_mpi()))
        return pr_fail(err, "%s=%d needs the rank-0 host: set MASTER_ADDR", world_var, l->world);
    return 0;
}

/* ---- joining a run of one process per device (CPU device) ------------------------------ */

#define LINK_MAGIC 0x5041434Cu /* "PACL" */

/* A neighbour link's hello: magic, the connecting rank, which link (0 act, 1 grad, 2 the
 * device's reduction group), the pair of stages (boundary, boundary + 1) it joins, and the
 * run's id, so a connection from another run or program is refused. */
typedef struct link_hello {
    uint32_t magic, rank, link, boundary;
    unsigned char id[16];
} link_hello;

/* Whether the pair (boundary, boundary + 1) crosses from this rank's device to another: the
 * higher stage's process connects, the lower one's accepts. Stages of one device hand over in
 * the process (a channel without a socket). */
static int crosses(const pr_run *run, int device, int boundary)
{
    const paci_table *tab = run->tab;
    return boundary >= 0 && boundary + 1 < tab->stages && tab->stage_device[boundary] == device &&
           tab->stage_device[boundary + 1] != device;
}

/* The rank of the process that runs stage s in this rank's replica. */
static int rank_of_stage(const pr_run *run, int s)
{
    return run->replica * run->devices + run->tab->stage_device[s];
}

/* Whether a hello is one rank r expects: one of the two links of a pair whose lower stage r
 * runs, from the rank of the higher stage (same replica), or, on replica 0 of device d, the
 * reduction link of another replica's device d. */
static int expected_hello(const pr_run *run, int r, const link_hello *h, uint8_t linked[][2],
                          const unsigned char *id)
{
    int devices = run->devices, d = r % devices;
    if (h->magic != LINK_MAGIC || memcmp(h->id, id, sizeof h->id) != 0 || h->rank >= PR_MAX_RANKS)
        return 0;
    if (h->link <= 1)
        return h->boundary < PACI_MAX_STAGES && crosses(run, d, (int)h->boundary) &&
               h->rank == (uint32_t)rank_of_stage(run, (int)h->boundary + 1) && !linked[h->boundary][h->link];
    int from = (int)h->rank;
    return h->link == 2 && r < devices && from % devices == d && from / devices >= 1 &&
           from / devices < run->replicas && run->reduce_fd[from / devices] < 0;
}

/* Rank r accepts the two links (act sender and grad receiver) of each pair whose lower stage it
 * runs and whose higher stage another device does and, on replica 0, its device's D - 1
 * reduction links. */
static int accept_links(pr_run *run, const pr_bootstrap *b, int listener, double deadline,
                        char *err)
{
    int r = b->rank, d = r % run->devices, missing = 0;
    uint8_t linked[PACI_MAX_STAGES][2] = {{0}};
    for (int i = 0; i + 1 < run->p; i++)
        missing += 2 * crosses(run, d, i);
    int group = r < run->devices && run->replicas > 1 ? run->replicas - 1 : 0;
    while (missing > 0 || group > 0) {
        struct pollfd pfd = {listener, POLLIN, 0};
        int left = (int)((deadline - pr_now()) * 1000.0);
        if (left <= 0 || poll(&pfd, 1, left) <= 0) {
            for (int i = 0; i + 1 < run->p; i++)
                if (crosses(run, d, i) && (!linked[i][0] || !linked[i][1]))
                    return pr_fail(err, "rank %d: stage %d (rank %d) did not connect within the connect timeout",
                                   r, i + 1, rank_of_stage(run, i + 1));
            return pr_fail(err, "rank %d: %d replica(s) of device %d did not connect within the "
                           "connect timeout", r, group, d);
        }
        int fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
        link_hello h;
        if (fd < 0)
            continue;
        pr_deadline hello_by = pr_deadline_in(5.0);
        if (pr_sock_read(fd, &h, sizeof h, &hello_by) != 0 ||
            !expected_hello(run, r, &h, linked, b->id)) {
            fprintf(stderr, "run: notice: rank %d: refused a connection that is not a link of "
                    "this run to device %d\n", r, d);
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (h.link == 2) {
            run->reduce_fd[h.rank / (uint32_t)run->devices] = fd;
            group--;
            continue;
        }
        pr_channel_attach_socket(h.link == 0 ? &run->act[h.boundary] : &run->grad[h.boundary], fd);
        linked[h.boundary][h.link] = 1;
        missing--;
    }
    return 0;
}

/* Replica r > 0 of device d connects its reduction link to replica 0's rank d. */
static int connect_group(pr_run *run, const pr_bootstrap *b, double deadline, char *err)
{
    int r = b->rank, d = r % run->devices;
    char why[PR_ERR_LEN] = "no attempt finished";
    int fd = -1;
    pr_deadline by = pr_deadline_at(deadline);
    while (fd < 0 && pr_now() < deadline) {
        by = pr_deadline_at(deadline);
        fd = pr_sock_connect(b->addr[d], b->port[d], &by, why);
        if (fd < 0)
            usleep(100000);
    }
    link_hello h = {LINK_MAGIC, (uint32_t)r, 2, 0, {0}};
    memcpy(h.id, b->id, sizeof h.id);
    if (fd < 0 || pr_sock_write(fd, &h, sizeof h, &by) != 0) {
        if (fd >= 0)
            close(fd);
        return pr_fail(err, "rank %d: cannot link stage %d of replica %d to replica 0 (rank %d): %s",
                       r, d, run->replica, d, why);
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    run->reduce_fd[0] = fd;
    return 0;
}

/* Rank r connects the two links of each pair whose higher stage it runs and whose lower stage
 * another device does, to that device's rank, where the bootstrap table says it listens. */
static int connect_links(pr_run *run, const pr_bootstrap *b, double deadline, char *err)
{
    int r = b->rank, d = r % run->devices;
    for (int s = 1; s < run->p; s++) {
        if (run->tab->stage_device[s] != d || run->tab->stage_device[s - 1] == d)
            continue;
        int peer = rank_of_stage(run, s - 1);
        for (uint32_t link = 0; link < 2; link++) {
            char why[PR_ERR_LEN] = "no attempt finished";
            int fd = -1;
            pr_deadline by = pr_deadline_at(deadline);
            while (fd < 0 && pr_now() < deadline) {
                by = pr_deadline_at(deadline);
                fd = pr_sock_connect(b->addr[peer], b->port[peer], &by, why);
                if (fd < 0)
                    usleep(100000);
            }
            link_hello h = {LINK_MAGIC, (uint32_t)r, link, (uint32_t)(s - 1), {0}};
            memcpy(h.id, b->id, sizeof h.id);
            if (fd < 0 || pr_sock_write(fd, &h, sizeof h, &by) != 0) {
                if (fd >= 0)
                    close(fd);
                return pr_fail(err, "rank %d: cannot link stage %d to stage %d (rank %d): %s", r, s, s - 1, peer,
                               why);
            }
            pr_channel_attach_socket(link == 0 ? &run->act[s - 1] : &run->grad[s - 1], fd);
        }
    }
    return 0;
}

int pr_launch_join(pr_run *run, const pr_launch *l, double connect_timeout, pr_bootstrap *b,
                   char *err)
{
    // Stage memory off the host can only travel over the device's own transport (NCCL).
    int native = !run->dev->host_memory;
    if (native && !run->dev->links)
        return pr_fail(err, "rank %d: one process per stage on the %s device needs a transport "
                       "between its memories, and this build has none", l->rank, run->dev->name);
    double deadline = pr_now() + connect_timeout;
    uint16_t port = 0;
    int listener = -1, d = l->rank % run->devices, accepts = 0;
    char why[PR_ERR_LEN];
    // Replicas: the reduction group's sockets, and replica 0's listener takes the others'.
    int grouped = run->replicas > 1;
    if (grouped) {
        run->reduce_fd = pr_alloc((size_t)run->replicas * sizeof *run->reduce_fd);
        for (int r = 0; r < run->replicas; r++)
            run->reduce_fd[r] = -1;
    }
    // Every rank listens: its neighbours' and replicas' links come there while the run
    // starts, and then other ranks' questions about what it waits for (blame.c).
    for (int i = 0; i + 1 < run->p; i++)
        accepts += crosses(run, d, i);
    accepts = !native && (accepts > 0 || (grouped && l->rank < run->devices));
    if ((listener = pr_sock_listen(0, 4 * run->tab->chunks + run->replicas, &port, why)) < 0)
        return pr_fail(err, "rank %d: %s", l->rank, why);
    if (l->rank == 0) {
        // The id names this run, so neighbour links from another run are refused.
        pr_rng rng = {(uint64_t)getpid() ^ (uint64_t)(pr_now() * 1e9)};
        for (int i = 0; i < PR_BOOT_ID_BYTES; i += 8) {
            uint64_t bits = pr_rng_next(&rng);
            memcpy(b->id + i, &bits, 8);
        }
    }
    int rc = pr_bootstrap_tcp(l, connect_timeout, port, b, err);
    b->mpi = l->mpi ? pr_mpi() : NULL;
    if (rc == 0 && native)
        rc = run->dev->links->open_ranks(run, b, err);
    else if (rc == 0)
        rc = connect_links(run, b, deadline, err);
    if (rc == 0 && !native && grouped && l->rank >= run->devices)
        rc = connect_group(run, b, deadline, err);
    if (rc == 0 && accepts)
        rc = accept_links(run, b, listener, deadline, err);
    if (rc == 0)
        rc = pr_blame_start(b, run->devices, listener, err);
    else
        close(listener);
    // From here on rank 0 is a peer like the neighbours: the same patience applies.
    b->timeout = run->opt.peer_timeout > 0 ? run->opt.peer_timeout : 1e9;
    b->stages = run->devices;
    run->opt.boot = b;
    return rc;
}

/* Rank 0 receives every other stage's parameters (and moments, for a checkpoint), so its
 * copy of the whole model is current for evaluation and saving. Stage memory off the host
 * (GPU) travels through host buffers: downloaded before sending, uploaded after receiving. */
/* compression dgc: every rank's residuals (and velocities, under momentum correction) to rank
 * 0, for a checkpoint: into run->dgc_gathered, in rank order (replica-major, as dgc.bin holds
 * them), a gather for the residuals and one for the velocities; a GPU's are downloaded first. */
static int gather_residuals(pr_run *run, char *err)
{
    pr_bootstrap *b = run->opt.boot;
    int parts = 1 + pr_dgc_momentum_correction(run->prog), rc = 0;
    const pr_dgc_buffers *own = &run->stage[b->rank % run->p].dgc;
    float *staged = NULL;
    float **dst = pr_alloc((size_t)b->world * sizeof *dst);
    size_t *bytes = pr_alloc((size_t)b->world * sizeof *bytes), total = 0;
    for (int r = 0; r < b->world; r++)
        total += (size_t)run->stage[r % run->p].code->n_params * (size_t)parts;
    if (b->rank == 0) {
        free(run->dgc_gathered);
        run->dgc_gathered = pr_alloc(total * sizeof(float));
    }
    for (int part = 0; part < parts && rc == 0; part++) {
        float *at = run->dgc_gathered;
        for (int r = 0; r < b->world; r++) {
            bytes[r] = (size_t)run->stage[r % run->p].code->n_params * sizeof(float);
            dst[r] = at ? at + (size_t)part * (bytes[r] / sizeof(float)) : NULL;
            at = at ? at + (size_t)parts * (bytes[r] / sizeof(float)) : NULL;
        }
        const float *mine = part == 0 ? own->residual : own->velocity;
        if (!run->dev->host_memory) { // a GPU's: through a host buffer
            float *host = pr_alloc(bytes[b->rank]);
            run->dev->download(b->rank % run->p, host, mine, bytes[b->rank]);
            mine = staged = host;
        }
        if (b->rank == 0)
            memcpy(dst[0], mine, bytes[0]);
        char why[PR_ERR_LEN], blame[PR_ERR_LEN];
        pr_wait_collective(PR_WAIT_GATHER, run->step);
        rc = pr_bootstrap_gather(b, mine, bytes[b->rank], (void *const *)dst, bytes, why);
        if (rc != 0) {
            pr_blame(blame, sizeof blame);
            pr_fail(err, "stage %d (rank %d): %s (gathering the compression residuals at step %lld)%s",
                    b->rank % run->p, b->rank, why, (long long)run->step, blame);
        }
        pr_wait_end();
        free(staged);
        staged = NULL;
    }
    free(dst);
    free(bytes);
    return rc;
}

/* The noise scale's averages of every stage, gathered at a segment's end for the summary and
 * the checkpoint: each rank of replica 0 sends its device's stages' (chunk by chunk). */
int pr_gather_noise(pr_run *run, char *err)
{
    pr_bootstrap *b = run->opt.boot;
    if (run->p == 1 || !pr_run_noise_estimated(run))
        return 0;
    const paci_table *tab = run->tab;
    int chunks = tab->chunks, d = b->rank % run->devices;
    pr_noise_ema mine[PACI_MAX_STAGES], *all = pr_alloc((size_t)b->world * (size_t)chunks * sizeof *all);
    for (int c = 0; c < chunks; c++)
        mine[c] = run->stage[paci_placed_stage(tab->placement, run->devices, d, c)].noise;
    char why[PR_ERR_LEN], blame[PR_ERR_LEN];
    pr_wait_collective(PR_WAIT_GATHER, run->step);
    int rc = pr_bootstrap_allgather(b, mine, (size_t)chunks * sizeof *mine, all, why);
    if (rc != 0) {
        pr_blame(blame, sizeof blame);
        pr_fail(err, "device %d (rank %d): %s (gathering the noise scale's averages at step %lld)%s", d, b->rank,
                why, (long long)run->step, blame);
    }
    pr_wait_end();
    // replica 0's ranks are 0 .. devices - 1, device e on rank e; the other replicas keep no averages
    for (int e = 0; e < run->devices && rc == 0; e++)
        for (int c = 0; c < chunks && e != d; c++)
            pr_run_noise_restore(run, paci_placed_stage(tab->placement, run->devices, e, c),
                                 &all[(size_t)e * (size_t)chunks + (size_t)c]);
    free(all);
    return rc;
}

/* Rank r < devices (replica 0) sends the blocks of its device's stages, chunk by chunk, in one
 * message; rank 0 puts each into the stage's memory. One stage a device on the host: straight
 * from and into the stage's block. */
int pr_gather_stages(pr_run *run, int with_moments, char *err)
{
    pr_bootstrap *b = run->opt.boot;
    const pr_device *dev = run->dev;
    const paci_table *tab = run->tab;
    int rc = 0, devices = run->devices, direct = dev->host_memory && tab->chunks == 1;
    // Replicas hold the same state: only replica 0's ranks (0..devices-1) send, the others nothing.
    void **dst = pr_alloc((size_t)b->world * sizeof *dst);
    size_t *bytes = pr_alloc((size_t)b->world * sizeof *bytes);
    for (int which = 0; which < (with_moments ? 3 : 1) && rc == 0; which++) {
        void *stage_mem[PACI_MAX_STAGES] = {0};
        for (int s = 0; s < run->p; s++) {
            pr_stage_rt *st = &run->stage[s];
            stage_mem[s] = which == 0 ? st->params : which == 1 ? st->m : st->v;
        }
        for (int d = 0; d < devices; d++) {
            bytes[d] = 0;
            for (int c = 0; c < tab->chunks; c++)
                bytes[d] += (size_t)run->stage[paci_placed_stage(tab->placement, devices, d, c)].code->n_params *
                            sizeof(float);
            dst[d] = direct ? stage_mem[d] : pr_alloc(bytes[d]);
        }
        if (!direct && b->rank > 0 && b->rank < devices)
            for (size_t c = 0, at = 0; c < (size_t)tab->chunks; c++) {
                int s = paci_placed_stage(tab->placement, devices, b->rank, (int)c);
                size_t n = (size_t)run->stage[s].code->n_params * sizeof(float);
                dev->download(s, (char *)dst[b->rank] + at, stage_mem[s], n);
                at += n;
            }
        char why[PR_ERR_LEN], blame[PR_ERR_LEN];
        pr_wait_collective(PR_WAIT_GATHER, run->step);
        rc = pr_bootstrap_gather(b, b->rank < devices ? dst[b->rank] : NULL,
                                 b->rank < devices ? bytes[b->rank] : 0, dst, bytes, why);
        if (rc != 0) {
            pr_blame(blame, sizeof blame);
            pr_fail(err, "stage %d (rank %d): %s (gathering the model at step %lld)%s", b->rank % devices,
                    b->rank, why, (long long)run->step, blame);
        }
        pr_wait_end();
        for (int d = 1; d < devices && rc == 0 && b->rank == 0; d++)
            for (size_t c = 0, at = 0; c < (size_t)tab->chunks; c++) {
                int s = paci_placed_stage(tab->placement, devices, d, (int)c);
                size_t n = (size_t)run->stage[s].code->n_params * sizeof(float);
                if (!direct)
                    dev->upload(s, stage_mem[s], (char *)dst[d] + at, n);
                if (which == 0)
                    pr_weights_changed(run, s);
                at += n;
            }
        for (int d = 0; d < devices && !direct; d++)
            free(dst[d]);
    }
    free(dst);
    free(bytes);
    if (rc == 0 && with_moments && run->prog->dgc_density > 0)
        rc = gather_residuals(run, err);
    return rc;
}
