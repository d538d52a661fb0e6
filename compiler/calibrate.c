/* calibrate.c: `pacic calibrate-cpu [-o FILE]`, and the first prediction of a CPU nobody
 * measured yet: build the calibration program (emit_calibration_program, against the
 * runtime's kernels) in a temporary folder, run it, keep its rates file (machine.c reads it).
 * Apart from machine.c so that the front end, which reads rates, does not link a builder. */
#include <errno.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pacic.h"

void machine_cpu_resolve(Config *cfg, const char *argv0)
{
    if (cfg->machine != MACHINE_CPU || cfg->cpu->measured)
        return;
    char *path = cpu_calibration_default_path();
    char err[700];
    if (path && cpu_calibrate(argv0, path, false) && !cpu_rates_load(path, cfg->cpu, err, sizeof err))
        fprintf(stderr, "pacic: warning: %s\n", err);
    free(path);
    cpu_rates_apply(cfg->cpu, cfg->cpu_given); /* over what was measured, or still the guesses */
}

/* ---- pacic calibrate-cpu ---------------------------------------------------------------- */

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

/* mkdir -p of path's folder. */
static bool make_parent(const char *path)
{
    char *copy = xstrdup(path);
    for (char *p = copy + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(copy, 0755) != 0 && errno != EEXIST) {
                fprintf(stderr, "pacic: error: cannot create folder %s: %s\n", copy, strerror(errno));
                free(copy);
                return false;
            }
            *p = '/';
        }
    free(copy);
    return true;
}

/* Runs the calibration program, which writes tmp (and says why it cannot, by perror), and
 * moves tmp to path; false with the reason said. */
static bool measure_into(const char *command, const char *tmp, const char *path)
{
    if (strchr(tmp, '\'')) {
        fprintf(stderr, "pacic: error: cannot write the CPU calibration to %s: a quote in the path\n", path);
        return false;
    }
    if (system(command) != 0) {
        fprintf(stderr, "pacic: error: the CPU calibration could not write %s\n", path);
        return false;
    }
    if (rename(tmp, path) != 0) {
        fprintf(stderr, "pacic: error: cannot write the CPU calibration to %s: %s\n", path, strerror(errno));
        return false;
    }
    return true;
}

bool cpu_calibrate(const char *argv0, const char *path, bool quiet)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) { // rename() would fail only after the measuring
        fprintf(stderr, "pacic: error: cannot write the CPU calibration to %s: it is a folder (-o names "
                        "the rates file)\n", path);
        return false;
    }
    const char *tmpdir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char *dir = xasprintf("%s/pacic-calibrate-XXXXXX", tmpdir);
    if (!mkdtemp(dir)) {
        fprintf(stderr, "pacic: error: cannot create a temporary folder in %s: %s\n", tmpdir, strerror(errno));
        free(dir);
        return false;
    }
    if (!quiet)
        fprintf(stderr, "pacic: measuring this machine's CPU for the cost model (a few seconds, once; "
                        "kept in %s; pacic calibrate-cpu measures again)\n", path);
    StrBuf sb = {0};
    emit_calibration_program(&sb);
    char *source = xasprintf("%s/calibrate.c", dir), *program = xasprintf("%s/calibrate", dir);
    char *tmp = xasprintf("%s.tmp.%ld", path, (long)getpid());
    bool ok = write_file_atomic(source, sb.data, sb.len) == 0 && build_executable(argv0, dir, program) &&
              make_parent(path);
    if (ok) {
        char *command = xasprintf("'%s' '%s'", program, tmp);
        ok = measure_into(command, tmp, path);
        free(command);
        unlink(tmp);
    }
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    sb_free(&sb);
    free(source);
    free(program);
    free(tmp);
    free(dir);
    return ok;
}

int calibrate_main(int argc, char **argv, const char *argv0)
{
    char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) {
            free(path);
            path = xstrdup(argv[++i]);
        } else {
            fprintf(stderr, "usage: pacic calibrate-cpu [-o FILE]\n"
                            "  measures this machine's CPU (sgemm, the element-wise kernels, copies, messages between\n"
                            "  threads) for the cost model of `hardware cpu` and of files with no hardware block;\n"
                            "  FILE defaults to $PACIC_CPU_CALIBRATION, else ~/.cache/pacic/cpu.txt\n");
            free(path);
            return EXIT_USER;
        }
    }
    if (!path)
        path = cpu_calibration_default_path();
    if (!path) {
        fprintf(stderr, "pacic: error: no HOME and no PACIC_CPU_CALIBRATION: name the file with -o\n");
        return EXIT_USER;
    }
    bool ok = cpu_calibrate(argv0, path, true);
    if (ok)
        printf("%s\n", path);
    free(path);
    return ok ? 0 : EXIT_USER;
}
