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
#include <stdlib.h>
#include <string.h>

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

/* Launcher variables -> rank, world, local rank, rank-0 host and port; checks world
 * against the program's stages (one process per stage, or one for all). */
int pr_launch_parse(const char *const *env, int stages, int port_flag, pr_launch *l, char *err)
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
    if (l->world > 1 && l->world != stages)
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
    if (!l->master_addr[0])
        return pr_fail(err, "%s=%d needs the rank-0 host: set MASTER_ADDR", world_var, l->world);
    return 0;
}
