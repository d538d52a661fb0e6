/* test_faults.c: resources the runtime may be refused, and how it says so: host memory the
 * plan does not fit in, a link's lock or condition, the stages' barrier or statistics lock
 * the system will not make, and a stage thread that cannot be joined. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string.h>

#include "toy_model.h"

/* The CPU device checks the stages' bytes, summed, against the host's available memory. */
static void test_cpu_memory_checked(void **state)
{
    char err[PR_ERR_LEN];
    pr_program prog = {.stages = 2};
    int64_t fits[2] = {1 << 20, 1 << 20}, too_much[2] = {1 << 20, (int64_t)1 << 62};
    assert_int_equal(pr_device_cpu.check_memory(&prog, fits, err), 0);
    assert_int_equal(pr_device_cpu.check_memory(&prog, too_much, err), -1);
    if (!strstr(err, "the stages need 4294967296.00 GiB of host memory, ") ||
        !strstr(err, " GiB is available (MemAvailable in /proc/meminfo)"))
        fail_msg("unexpected message '%s'", err);
}

/* These definitions stand in for libc's in the whole test program: refused when asked. A
 * barrier or lock whose making was refused must never be destroyed; destroying_unmade
 * counts the times it is. */
static int refuse_conditions, refuse_barriers, refuse_joins, destroying_unmade;
static const pthread_mutex_t *refused_mutex;   /* this lock only: links have locks too */
static const pthread_barrier_t *refused_barrier;

#define REAL(name, type) ((type)dlsym(RTLD_NEXT, #name))

int pthread_cond_init(pthread_cond_t *restrict cond, const pthread_condattr_t *restrict attr)
{
    if (refuse_conditions)
        return EAGAIN;
    return REAL(pthread_cond_init, int (*)(pthread_cond_t *restrict, const pthread_condattr_t *restrict))(cond, attr);
}

int pthread_barrier_init(pthread_barrier_t *restrict barrier, const pthread_barrierattr_t *restrict attr,
                         unsigned count)
{
    if (refuse_barriers) {
        refused_barrier = barrier;
        return EAGAIN;
    }
    return REAL(pthread_barrier_init, int (*)(pthread_barrier_t *restrict,
                const pthread_barrierattr_t *restrict, unsigned))(barrier, attr, count);
}

int pthread_barrier_destroy(pthread_barrier_t *barrier)
{
    if (barrier == refused_barrier) {
        destroying_unmade++;
        return EINVAL;
    }
    return REAL(pthread_barrier_destroy, int (*)(pthread_barrier_t *))(barrier);
}

int pthread_mutex_init(pthread_mutex_t *restrict mutex, const pthread_mutexattr_t *restrict attr)
{
    if (mutex == refused_mutex)
        return ENOMEM;
    return REAL(pthread_mutex_init, int (*)(pthread_mutex_t *restrict, const pthread_mutexattr_t *restrict))(mutex, attr);
}

int pthread_mutex_destroy(pthread_mutex_t *mutex)
{
    if (mutex == refused_mutex) {
        destroying_unmade++;
        return EINVAL;
    }
    return REAL(pthread_mutex_destroy, int (*)(pthread_mutex_t *))(mutex);
}

/* The thread is joined, then the join reported as failed. */
int pthread_join(pthread_t thread, void **result)
{
    int rc = REAL(pthread_join, int (*)(pthread_t, void **))(thread, result);
    return refuse_joins ? EDEADLK : rc;
}

/* Runs fault(arg) in a child whose stderr is captured into text; returns its exit status. */
static int in_child(void (*fault)(void *), void *arg, char *text, size_t size)
{
    int pipe_fds[2];
    assert_int_equal(pipe(pipe_fds), 0);
    fflush(NULL);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        dup2(pipe_fds[1], STDERR_FILENO);
        fault(arg);
        _exit(0); // not reached when the refusal is seen
    }
    close(pipe_fds[1]);
    memset(text, 0, size);
    ssize_t got = 0, n;
    while ((n = read(pipe_fds[0], text + got, size - 1 - (size_t)got)) > 0)
        got += n;
    close(pipe_fds[0]);
    int status = 0;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static void make_channel(void *arg)
{
    refuse_conditions = 1;
    pr_channel c;
    pr_channel_init(&c, 2, 4);
}

/* A link whose condition cannot be made ends the process with one error line, exit 1. */
static void test_channel_refused_condition(void **state)
{
    char text[512];
    assert_int_equal(in_child(make_channel, NULL, text, sizeof text), 1);
    assert_string_equal(text, "run: error: cannot create a link's condition: Resource temporarily "
                              "unavailable\n");
}

static char token_path[] = "/tmp/pacirt_faults_XXXXXX";
static toy_table table;
static pr_program prog;

/* pr_run_init of the 2-stage toy model over 1F1B, 2 steps; 0 or -1 with err. */
static int toy_init(pr_run *run, char *err)
{
    toy_build_stages(2);
    toy_build_table(&table, TOY_1F1B, 2, 2, 2, 2);
    prog = toy_program(&table.t, 2);
    pr_options opt = {.quiet = 1};
    return pr_run_init(run, &prog, &opt, err);
}

/* As run's main does: a refused init is one error line, then the run is freed, exit 1; exit 2
 * if the free destroyed what was never made. */
static void init_refused(void *which)
{
    static pr_run run;
    char err[PR_ERR_LEN];
    if (strcmp(which, "barrier") == 0)
        refuse_barriers = 1;
    else
        refused_mutex = &run.stats_mu;
    if (toy_init(&run, err) == 0)
        return;
    fprintf(stderr, "run: error: %s\n", err);
    pr_run_free(&run);
    _exit(destroying_unmade ? 2 : 1);
}

/* The stages' barrier or statistics lock refused: a named error, and nothing unmade destroyed. */
static void test_run_refused_barrier_and_lock(void **state)
{
    char text[512];
    assert_int_equal(in_child(init_refused, "barrier", text, sizeof text), 1);
    assert_string_equal(text, "run: error: cannot create the stages' barrier: Resource temporarily "
                              "unavailable\n");
    assert_int_equal(in_child(init_refused, "lock", text, sizeof text), 1);
    assert_string_equal(text, "run: error: cannot create the stages' statistics lock: Cannot "
                              "allocate memory\n");
}

static void segment_unjoined(void *arg)
{
    static pr_run run;
    char err[PR_ERR_LEN];
    assert_int_equal(toy_init(&run, err), 0);
    assert_int_equal(pr_tokens_load(&run.train, token_path, TOY_V, TOY_B, TOY_T, err), 0);
    refuse_joins = 1;
    pr_run_segment(&run, 0);
}

/* A stage thread that cannot be joined ends the run with one error line naming the stage. */
static void test_segment_refused_join(void **state)
{
    toy_token_file(token_path);
    char text[512];
    int status = in_child(segment_unjoined, NULL, text, sizeof text);
    unlink(token_path);
    assert_string_equal(text, "run: error: cannot join the thread of stage 0: Resource deadlock "
                              "avoided\n");
    assert_int_equal(status, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_memory_checked),
        cmocka_unit_test(test_channel_refused_condition),
        cmocka_unit_test(test_run_refused_barrier_and_lock),
        cmocka_unit_test(test_segment_refused_join),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
