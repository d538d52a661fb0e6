/* build.c: compiles the generated sources with the system C compiler and links the runtime.
 *
 * The runtime is found the way an installed pacic finds it: $PACIC_HOME, else the folder
 * above the executable, each holding lib/pacic/libpacirt.a and include/pacic/pacirt.h.
 * The sources compile to objects in parallel, then link. The output is linked under a
 * temporary name and renamed, so a failed build never leaves a half-written executable; a C
 * compiler failure on generated code is a pacic bug.
 */
#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pacic.h"

extern char **environ;

typedef struct Argv {
    char **items;
    int n, cap;
} Argv;

static void argv_push(Argv *a, const char *s)
{
    if (a->n + 2 > a->cap) {
        a->cap = a->cap ? 2 * a->cap : 32;
        a->items = xrealloc(a->items, sizeof *a->items * (size_t)a->cap);
    }
    a->items[a->n++] = xstrdup(s);
    a->items[a->n] = NULL;
}

/* Words of an environment-style setting such as CC="ccache gcc", split on blanks. */
static void argv_push_words(Argv *a, const char *words)
{
    char *copy = xstrdup(words);
    for (char *save = NULL, *w = strtok_r(copy, " \t\n", &save); w; w = strtok_r(NULL, " \t\n", &save))
        argv_push(a, w);
    free(copy);
}

static void argv_free(Argv *a)
{
    for (int i = 0; i < a->n; i++)
        free(a->items[i]);
    free(a->items);
    *a = (Argv){0};
}

static bool is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The installation root: $PACIC_HOME, else the parent of the folder holding the running
 * executable (/proc/self/exe, or argv0 where /proc is missing). Malloc'ed. */
static char *runtime_home(const char *argv0)
{
    const char *env = getenv("PACIC_HOME");
    if (env && *env)
        return xstrdup(env);
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
    } else if (!realpath(argv0, exe)) {
        snprintf(exe, sizeof exe, "%s", argv0);
    }
    char *bin = dirname(exe);
    return xasprintf("%s/..", bin);
}

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The .c files of dir, sorted so that builds are reproducible; -1 if dir is unreadable. */
static int list_sources(const char *dir, char ***out)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    char **names = NULL;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len > 2 && strcmp(e->d_name + len - 2, ".c") == 0) {
            names = xrealloc(names, sizeof *names * (size_t)(n + 1));
            names[n++] = xasprintf("%s/%s", dir, e->d_name);
        }
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, compare_strings);
    *out = names;
    return n;
}

/* Waits for pid: its exit status, 128 + the signal that ended it, or -1 (errno set). */
static int wait_status(pid_t pid)
{
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* Runs argv and waits; the exit status, or -1 (errno set) if it could not start. */
static int run_command(char **argv)
{
    pid_t pid;
    int err = posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ);
    if (err != 0) {
        errno = err;
        return -1;
    }
    return wait_status(pid);
}

static void cannot_run(const char *cc)
{
    fprintf(stderr, "pacic: error: cannot run the C compiler '%s': %s (set CC to choose one)\n", cc,
            strerror(errno));
}

/* Generated code that does not compile is a pacic bug: it never returns. */
NORETURN static void compiler_failed(int status, const char *what, const char *dir)
{
    fprintf(stderr, "pacic: internal error: the C compiler failed (status %d) %s the generated "
                    "sources, kept in %s\nThis is a bug in pacic; please report it with the "
                    "input file.\n", status, what, dir);
    exit(EXIT_INTERNAL);
}

/* Compiles every source to its object, as many at once as there are CPUs online: the stages
 * are independent units (the study's 8 stages build in 5.6 s this way on 2 cores, 7.7 to 9.0
 * s in one compiler process). cmd holds the compiler and its flags, and holds just them again
 * on return. False, with the message printed, if the compiler cannot start. */
static bool compile_all(Argv *cmd, const char *include, char **sources, char **objects, int n, const char *dir)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int width = cpus > 0 ? (cpus < 64 ? (int)cpus : 64) : 1;
    int words = cmd->n;
    pid_t *running = xmalloc((size_t)n * sizeof *running);
    int started = 0, waited = 0, failed = 0, spawn_errno = 0;
    while (waited < started || (started < n && !spawn_errno)) {
        if (started < n && !spawn_errno && started - waited < width) {
            argv_push(cmd, "-std=c11");
            argv_push(cmd, "-I");
            argv_push(cmd, include);
            argv_push(cmd, "-c");
            argv_push(cmd, sources[started]);
            argv_push(cmd, "-o");
            argv_push(cmd, objects[started]);
            int err = posix_spawnp(&running[started], cmd->items[0], NULL, NULL, cmd->items, environ);
            for (int i = words; i < cmd->n; i++)
                free(cmd->items[i]);
            cmd->n = words;
            cmd->items[cmd->n] = NULL;
            if (err != 0)
                spawn_errno = err;
            else
                started++;
            continue;
        }
        int status = wait_status(running[waited++]);
        if (status != 0 && !failed)
            failed = status;
    }
    free(running);
    if (spawn_errno) {
        errno = spawn_errno;
        cannot_run(cmd->items[0]);
        return false;
    }
    if (failed)
        compiler_failed(failed, "on", dir);
    return true;
}

bool runtime_has_cuda(const char *argv0)
{
    char *home = runtime_home(argv0);
    char *lib = xasprintf("%s/lib/pacic/libpacirt_cuda.a", home);
    char *flags = xasprintf("%s/lib/pacic/cuda_ldflags", home);
    bool found = is_file(lib) && is_file(flags);
    free(home);
    free(lib);
    free(flags);
    return found;
}

/* The CUDA archive and its libraries, linked before libpacirt.a, which it calls. */
static void push_cuda_link(Argv *cmd, const char *home)
{
    char *flags_path = xasprintf("%s/lib/pacic/cuda_ldflags", home);
    size_t len = 0;
    char *flags = read_file(flags_path, &len);
    if (!flags)
        ICE("cannot read %s though it was found", flags_path);
    char *lib = xasprintf("%s/lib/pacic/libpacirt_cuda.a", home);
    argv_push(cmd, lib);
    argv_push_words(cmd, flags);
    free(lib);
    free(flags);
    free(flags_path);
}

/* The MPI archive, when the build made one: `run` then starts MPI under mpirun. The symbol
 * is named so the linker takes the archive's member (the runtime refers to it weakly). */
static void push_mpi_link(Argv *cmd, const char *home)
{
    char *lib = xasprintf("%s/lib/pacic/libpacirt_mpi.a", home);
    char *flags_path = xasprintf("%s/lib/pacic/mpi_ldflags", home);
    size_t len = 0;
    char *flags = is_file(lib) ? read_file(flags_path, &len) : NULL;
    if (flags) {
        argv_push(cmd, "-Wl,--undefined=pr_mpi_impl");
        argv_push(cmd, lib);
        argv_push_words(cmd, flags);
    }
    free(lib);
    free(flags);
    free(flags_path);
}

bool build_executable(const char *argv0, const char *dir, const char *out)
{
    char *home = runtime_home(argv0);
    char *lib = xasprintf("%s/lib/pacic/libpacirt.a", home);
    char *include = xasprintf("%s/include/pacic", home);
    char *header = xasprintf("%s/pacirt.h", include);
    char *tmp = xasprintf("%s.tmp.%ld", out, (long)getpid());
    char **sources = NULL, **objects = NULL;
    int n_sources = 0;
    Argv cmd = {0};
    bool ok = false;

    if (!is_file(lib) || !is_file(header)) {
        fprintf(stderr, "pacic: error: cannot find the runtime: no %s or %s\n"
                        "  (set PACIC_HOME to the folder that holds lib/pacic and include/pacic)\n",
                lib, header);
        goto done;
    }
    n_sources = list_sources(dir, &sources);
    char *images = xasprintf("%s/cuda_images.c", dir);
    bool cuda = is_file(images); /* codegen wrote the GPU path */
    free(images);
    if (n_sources <= 0)
        ICE("no generated sources in %s", dir);

    const char *cc = getenv("CC");
    const char *cflags = getenv("PACIC_CFLAGS");
    const char *march = getenv("PACIC_MARCH");
    if (!march || !*march)
        march = "native";
    if (strspn(march, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.+") != strlen(march)) {
        fprintf(stderr, "pacic: error: PACIC_MARCH '%s' is not an instruction-set name (a value of the C "
                        "compiler's -march, such as native or x86-64-v3)\n", march);
        goto done;
    }
    // the compiler and its flags start both the compilations and the link (sanitizers link too)
    argv_push_words(&cmd, cc && *cc ? cc : "cc");
    // -fno-math-errno: sqrtf then vectorises (AdamW); nothing reads errno, results are the same.
    // PACIC_MARCH: the instruction set of other machines than this one (a cluster's nodes), or
    // a fixed one for the same bits everywhere (the study's x86-64-v3).
    char *default_flags = xasprintf("-O3 -march=%s -fno-math-errno -fopenmp-simd -DPR_OMP_SIMD", march);
    argv_push_words(&cmd, cflags ? cflags : default_flags);
    free(default_flags);
    objects = xmalloc((size_t)n_sources * sizeof *objects);
    for (int i = 0; i < n_sources; i++) {
        size_t len = strlen(sources[i]);
        objects[i] = xasprintf("%.*s.o", (int)(len - 2), sources[i]); /* NAME.c -> NAME.o */
    }
    if (!compile_all(&cmd, include, sources, objects, n_sources, dir))
        goto done;
    for (int i = 0; i < n_sources; i++)
        argv_push(&cmd, objects[i]);
    if (cuda)
        push_cuda_link(&cmd, home);
    push_mpi_link(&cmd, home);
    argv_push(&cmd, lib);
    argv_push_words(&cmd, "-lpcre2-8 -ljansson -lopenblas -lpthread -lm -o");
    argv_push(&cmd, tmp);

    int status = run_command(cmd.items);
    if (status < 0) {
        cannot_run(cmd.items[0]);
        goto done;
    }
    if (status != 0) {
        unlink(tmp);
        compiler_failed(status, "linking", dir);
    }
    if (rename(tmp, out) != 0) {
        fprintf(stderr, "pacic: error: cannot write %s: %s\n", out, strerror(errno));
        unlink(tmp);
        goto done;
    }
    ok = true;
done:
    argv_free(&cmd);
    for (int i = 0; i < n_sources; i++) {
        free(sources[i]);
        if (objects)
            free(objects[i]);
    }
    free(sources);
    free(objects);
    free(home);
    free(lib);
    free(include);
    free(header);
    free(tmp);
    return ok;
}
