/* util.c: the runtime's error messages, aligned memory, clock, random numbers and file helpers. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "prt.h"

int pr_fail(char *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, PR_ERR_LEN, fmt, ap);
    va_end(ap);
    return -1;
}

void pr_internal(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "run: internal error: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    exit(2);
}

void *pr_alloc(size_t bytes)
{
    // Round up so aligned_alloc's size rule holds; zeroed so arenas start clean.
    size_t size = (bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, size ? size : 64);
    if (!p) {
        fprintf(stderr, "run: error: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    memset(p, 0, size ? size : 64);
    return p;
}

double pr_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static atomic_uint continues_seen;

static void count_continue(int signal_number)
{
    (void)signal_number;
    atomic_fetch_add(&continues_seen, 1);
}

void pr_watch_stops(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = count_continue;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCONT, &sa, NULL);
}

unsigned pr_continues(void)
{
    return atomic_load(&continues_seen);
}

int pr_stopped_since(unsigned *seen)
{
    if (atomic_load(&continues_seen) == *seen) {
        // the continue wakes every thread at once: give the one that runs the handler a moment
        struct timespec grace = {0, 200 * 1000 * 1000};
        nanosleep(&grace, NULL);
    }
    unsigned now = atomic_load(&continues_seen);
    if (now == *seen)
        return 0;
    *seen = now;
    return 1;
}

pr_deadline pr_deadline_in(double seconds)
{
    pr_deadline d = {0, 0, pr_continues()};
    if (seconds > 0)
        d.at = pr_now() + seconds, d.span = seconds;
    return d;
}

pr_deadline pr_deadline_at(double at)
{
    double left = at - pr_now();
    pr_deadline d = pr_deadline_in(left > 1e-3 ? left : 1e-3);
    d.at = at; // passed already or not, the wait still gets one look
    return d;
}

double pr_thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

uint64_t pr_rng_next(pr_rng *r)
{
    uint64_t z = (r->state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

double pr_rng_uniform(pr_rng *r)
{
    return (double)(pr_rng_next(r) >> 11) * 0x1.0p-53;
}

/* Box-Muller, one value per call (two uniforms): simple and deterministic. */
double pr_rng_normal(pr_rng *r)
{
    double u1 = pr_rng_uniform(r), u2 = pr_rng_uniform(r);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* What a path that is not a regular file is, for a message: " (a folder)", ... */
static const char *file_kind(mode_t mode)
{
    return S_ISDIR(mode) ? " (a folder)" : S_ISCHR(mode) ? " (a character device)" : S_ISFIFO(mode) ? " (a pipe)"
           : S_ISBLK(mode) ? " (a block device)" : S_ISSOCK(mode) ? " (a socket)" : "";
}

FILE *pr_open_regular(const char *path, const char *what, char *err)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        pr_fail(err, "%s: cannot open %s: %s", path, what, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        pr_fail(err, "%s: not a regular file%s", path, file_kind(st.st_mode));
    } else {
        FILE *f = fdopen(fd, "rb");
        if (f)
            return f;
        pr_fail(err, "%s: cannot open %s: %s", path, what, strerror(errno));
    }
    if (fd >= 0)
        close(fd);
    return NULL;
}

char *pr_read_regular(const char *path, const char *what, size_t limit, size_t *len, char *err)
{
    FILE *f = pr_open_regular(path, what, err);
    struct stat st;
    if (!f)
        return NULL;
    if (fstat(fileno(f), &st) != 0 || (unsigned long long)st.st_size > limit) {
        pr_fail(err, "%s: %lld bytes, more than the %zu MiB a %s may hold", path, (long long)st.st_size,
                limit >> 20, what);
        return fclose(f), NULL;
    }
    size_t want = (size_t)st.st_size;
    char *buf = malloc(want + 1);
    size_t got = buf ? fread(buf, 1, want, f) : 0;
    int failed = !buf || ferror(f);
    if (failed)
        pr_fail(err, "%s: %s", path, buf ? "read failed" : "out of memory");
    fclose(f);
    if (failed)
        return free(buf), NULL;
    buf[got] = '\0'; // a file that shrank while read: what was there
    *len = got;
    return buf;
}

int pr_write_all(int fd, const void *data, size_t bytes, const char *path, char *err)
{
    const char *p = data;
    while (bytes > 0) {
        ssize_t w = write(fd, p, bytes);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return pr_fail(err, "%s: write failed: %s", path, strerror(errno));
        p += w;
        bytes -= (size_t)w;
    }
    return 0;
}

int pr_fsync_dir(const char *path, char *err)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return pr_fail(err, "%s: cannot open the folder to flush it to disk: %s", path, strerror(errno));
    int rc = fsync(fd), saved = errno;
    close(fd);
    if (rc != 0 && saved != EINVAL)
        return pr_fail(err, "%s: cannot flush the folder to disk: %s", path, strerror(saved));
    return 0;
}

int pr_probe_output(const char *path, const char *what, char *err)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return pr_fail(err, "%s: cannot write %s: it is a folder", path, what);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644), made = fd >= 0;
    if (fd < 0 && errno == EEXIST) // kept as it is until the run writes it
        fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return pr_fail(err, "%s: cannot write %s: %s", path, what, strerror(errno));
    close(fd);
    if (made)
        unlink(path);
    return 0;
}
