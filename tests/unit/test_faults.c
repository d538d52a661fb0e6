/* test_faults.c: resources the runtime may be refused, and how it says so: host memory the
 * plan does not fit in, and a link's lock or condition the system will not make. */
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

#include "prt.h"

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

/* This definition stands in for libc's in the whole test program: refused when asked. */
static int refuse_conditions;

int pthread_cond_init(pthread_cond_t *restrict cond, const pthread_condattr_t *restrict attr)
{
    if (refuse_conditions)
        return EAGAIN;
    int (*real)(pthread_cond_t *restrict, const pthread_condattr_t *restrict) =
        (int (*)(pthread_cond_t *restrict, const pthread_condattr_t *restrict))dlsym(RTLD_NEXT,
                                                                                   "pthread_cond_init");
    return real(cond, attr);
}

/* A link whose condition cannot be made ends the process with one error line, exit 1. */
static void test_channel_refused_condition(void **state)
{
    int pipe_fds[2];
    assert_int_equal(pipe(pipe_fds), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        dup2(pipe_fds[1], STDERR_FILENO);
        refuse_conditions = 1;
        pr_channel c;
        pr_channel_init(&c, 2, 4);
        _exit(0); // not reached when the refusal is seen
    }
    close(pipe_fds[1]);
    char text[512] = {0};
    ssize_t got = 0, n;
    while ((n = read(pipe_fds[0], text + got, sizeof text - 1 - (size_t)got)) > 0)
        got += n;
    close(pipe_fds[0]);
    int status = 0;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 1);
    assert_string_equal(text, "run: error: cannot create a link's condition: Resource temporarily "
                              "unavailable\n");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_memory_checked),
        cmocka_unit_test(test_channel_refused_condition),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
