/* machine.c: the machine --explain prices a program on (docs/dsl.md "hardware").
 *
 * `hardware { ... }` or `hardware gpu { ... }` is a GPU per stage, priced by the rates the
 * block writes (an H100 SXM's where it writes none). `hardware cpu { ... }`, and a file with
 * no hardware block, is what `pacic x.paci -o run` builds by default: one process, a thread
 * per stage on this machine's CPU. A CPU is priced with rates measured on it once by
 * `pacic calibrate-cpu` (runtime/calibrate.c), kept in a small text file:
 *
 *     version 1
 *     cpu "AMD EPYC 7B13"            # for the reader
 *     blas "Haswell"                 # OpenBLAS's kernels
 *     cores 2                        # online
 *     memory 8.3e9                   # bytes of RAM
 *     gemm 16 1.1e9                  # one thread's sgemm FLOP/s at m = n = k = 16 (rising sizes)
 *     vector_flops 4.2e9             # one thread's FLOP/s in the element-wise kernels
 *     memory_bandwidth 1.3e10        # one thread's bytes/s copying (read + written)
 *     latency 4e-6                   # seconds a message between stage threads takes, besides ...
 *     bandwidth 6e9                  # ... its bytes at this rate
 *
 * The file is the one `hardware cpu { calibration "FILE" }` names, else the default one
 * (cpu_calibration_default_path); where there is none, the first prediction measures this
 * machine and keeps the file there. Every rate the block writes wins over the file's.
 *
 * The partitioner prices stages with the CPU cost model on the rates known when it plans
 * (the file's, else the guesses; a build measures nothing), so a build and an --explain split
 * the same way as long as they read the same file. cfg's `flops` and `memory_bandwidth` get
 * fixed nominal rates (CPU_NOMINAL_*) where the block writes none: what cost_stage's FLOPs
 * figures (--explain's allreduce and recompute lines) divide by.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pacic.h"

#define CPU_NOMINAL_FLOPS 3e10
#define CPU_NOMINAL_MEMORY_BANDWIDTH 1e10
#define CPU_NOMINAL_LATENCY 5e-6
#define CPU_NOMINAL_BANDWIDTH 5e9
/* 10 Gb/s Ethernet between the CPU replicas' processes */
#define CPU_NOMINAL_NETWORK 1.25e9

enum { CALIBRATION_VERSION = 1 };

char *cpu_calibration_default_path(void)
{
    const char *env = getenv("PACIC_CPU_CALIBRATION");
    if (env && *env)
        return xstrdup(env);
    const char *cache = getenv("XDG_CACHE_HOME");
    if (cache && *cache)
        return xasprintf("%s/pacic/cpu.txt", cache);
    const char *home = getenv("HOME");
    return home && *home ? xasprintf("%s/.cache/pacic/cpu.txt", home) : NULL;
}

static double ram_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (double)pages * (double)page : 8e9;
}

static int online_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

void cpu_rates_guess(CpuRates *r)
{
    *r = (CpuRates){.cores = online_cores(), .memory = ram_bytes(), .n_gemm = 4,
                    .gemm_size = {16, 64, 256, 1024}, .gemm_flops = {2e9, 1.5e10, 4e10, 5e10},
                    .vector_flops = 4e9, .memory_bandwidth = 1.5e10, .latency = 5e-6, .bandwidth = 5e9};
    snprintf(r->name, sizeof r->name, "unknown");
    snprintf(r->source, sizeof r->source, "pacic's guesses for a recent x86 core: nothing measured this machine");
}

/* "KEY VALUE is out of range: it must be RANGE", VALUE as written (calibration_line's words). */
static const char *range_message(const char *key, const char *value, const char *range)
{
    static char message[160];
    snprintf(message, sizeof message, "%s %.*s is out of range: it must be %s", key,
             (int)strcspn(value, " \t\r"), value, range);
    return message;
}

/* One line of a calibration file (comment removed, not blank); NULL or what is wrong. */
static const char *calibration_line(char *p, CpuRates *r, int *version)
{
    char key[32];
    int used = 0;
    if (sscanf(p, "%31s %n", key, &used) != 1)
        return "expected a key";
    p += used;
    double a, b;
    if (strcmp(key, "cpu") == 0 || strcmp(key, "blas") == 0) {
        char *open = strchr(p, '"'), *close = open ? strchr(open + 1, '"') : NULL;
        if (!close)
            return "expected a name in double quotes";
        if (strcmp(key, "cpu") == 0)
            snprintf(r->name, sizeof r->name, "%.*s", (int)(close - open - 1), open + 1);
        return NULL;
    }
    if (strcmp(key, "gemm") == 0) {
        if (sscanf(p, "%lf %lf", &a, &b) != 2 || !(a > 0 && a <= MACHINE_RATE_MAX) ||
            !(b >= MACHINE_RATE_MIN && b <= MACHINE_RATE_MAX))
            return "expected 'gemm SIZE FLOPS', SIZE in (0, 1e+30] and FLOPS in [1, 1e+30]";
        if (r->n_gemm == CPU_GEMM_SIZES)
            return "more gemm lines than pacic reads";
        if (r->n_gemm > 0 && a <= r->gemm_size[r->n_gemm - 1])
            return "gemm sizes must rise";
        r->gemm_size[r->n_gemm] = a;
        r->gemm_flops[r->n_gemm++] = b;
        return NULL;
    }
    // the DSL's hardware keys' ranges (MACHINE_RATE_MIN): every time priced on them stays finite
    double *rate = strcmp(key, "memory") == 0             ? &r->memory
                   : strcmp(key, "vector_flops") == 0     ? &r->vector_flops
                   : strcmp(key, "memory_bandwidth") == 0 ? &r->memory_bandwidth
                   : strcmp(key, "bandwidth") == 0        ? &r->bandwidth
                                                          : NULL;
    if (sscanf(p, "%lf", &a) != 1 || !(a >= 0 && a <= MACHINE_RATE_MAX))
        return "expected a number in [0, 1e+30]";
    if (strcmp(key, "version") == 0) {
        if (a != CALIBRATION_VERSION)
            return "a calibration format this pacic does not read (version 1)";
        *version = (int)a;
    } else if (strcmp(key, "cores") == 0) {
        if (!(a >= 1 && a <= 1 << 20))
            return range_message(key, p, "in 1..1048576");
        r->cores = (int)a;
    } else if (rate) {
        if (a < MACHINE_RATE_MIN)
            return range_message(key, p, "in [1, 1e+30]");
        *rate = a;
    } else if (strcmp(key, "latency") == 0) {
        r->latency = a;
    } else {
        return "expected version, cpu, blas, cores, memory, gemm, vector_flops, memory_bandwidth, latency or "
               "bandwidth";
    }
    return NULL;
}

bool cpu_rates_load(const char *path, CpuRates *r, char *err, size_t err_size)
{
    char why[200];
    char *text = read_input_file(path, CALIBRATION_FILE_LIMIT, NULL, why, sizeof why);
    if (!text) {
        snprintf(err, err_size, "cannot read the CPU calibration '%s': %s", path, why);
        return false;
    }
    CpuRates got = {.latency = -1};
    snprintf(got.name, sizeof got.name, "unknown");
    int version = 0, line_no = 0;
    bool ok = true;
    for (char *line = text; line && ok;) {
        char *next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        line_no++;
        char *hash = strchr(line, '#');
        if (hash && !(strchr(line, '"') && strchr(line, '"') < hash))
            *hash = '\0';
        char *p = line + strspn(line, " \t\r");
        if (*p) {
            const char *why = calibration_line(p, &got, &version);
            if (!why && version == 0)
                why = "the first line must be 'version 1'";
            if (why) {
                snprintf(err, err_size, "%s:%d: %s (pacic calibrate-cpu -o FILE writes one)", path, line_no, why);
                ok = false;
            }
        }
        line = next;
    }
    free(text);
    if (ok && (got.n_gemm == 0 || got.cores == 0 || got.vector_flops == 0 || got.memory_bandwidth == 0 ||
               got.latency < 0 || got.bandwidth == 0)) {
        snprintf(err, err_size, "%s: the CPU calibration lacks a rate (it needs cores, gemm, vector_flops, "
                 "memory_bandwidth, latency and bandwidth; pacic calibrate-cpu -o FILE writes one)", path);
        ok = false;
    }
    if (!ok)
        return false;
    if (got.memory == 0)
        got.memory = ram_bytes();
    got.measured = true;
    snprintf(got.source, sizeof got.source, "measured by pacic calibrate-cpu, %s", path);
    *r = got;
    return true;
}

void cpu_rates_apply(CpuRates *r, const CpuRates *given)
{
    if (given->n_gemm > 0) {
        r->n_gemm = given->n_gemm;
        memcpy(r->gemm_size, given->gemm_size, sizeof r->gemm_size);
        memcpy(r->gemm_flops, given->gemm_flops, sizeof r->gemm_flops);
    }
    if (given->cores > 0)
        r->cores = given->cores;
    if (given->memory > 0)
        r->memory = given->memory;
    if (given->vector_flops > 0)
        r->vector_flops = given->vector_flops;
    if (given->memory_bandwidth > 0)
        r->memory_bandwidth = given->memory_bandwidth;
    if (given->latency >= 0)
        r->latency = given->latency;
    if (given->bandwidth > 0)
        r->bandwidth = given->bandwidth;
}

bool machine_cpu_config(Config *cfg, const char **error)
{
    static char message[700];
    CpuRates *given = xcalloc(1, sizeof *given), *rates = xcalloc(1, sizeof *rates);
    given->latency = -1;
    if (cfg->device_flops > 0) { /* one rate at every size */
        given->n_gemm = 1;
        given->gemm_size[0] = 1;
        given->gemm_flops[0] = cfg->device_flops;
    }
    given->cores = cfg->cpu_cores;
    given->memory = cfg->device_memory;
    given->vector_flops = cfg->vector_flops;
    given->memory_bandwidth = cfg->memory_bandwidth;
    given->latency = cfg->link_latency;
    given->bandwidth = cfg->link_bandwidth;
    cfg->cpu = rates;
    cfg->cpu_given = given;

    bool ok = true;
    char *path = cfg->cpu_calibration ? xstrdup(cfg->cpu_calibration) : cpu_calibration_default_path();
    struct stat st;
    if (cfg->cpu_calibration || (path && stat(path, &st) == 0)) {
        if (!cpu_rates_load(path, rates, message, sizeof message)) {
            if (!cfg->cpu_calibration) // the default file: say how to mend it
                snprintf(message + strlen(message), sizeof message - strlen(message),
                         "; delete it, and pacic measures this machine again");
            *error = message;
            ok = false;
        }
    }
    free(path);
    if (!rates->measured) /* until machine_cpu_resolve measures: never a rate of 0 */
        cpu_rates_guess(rates);
    cpu_rates_apply(rates, given);
    // what the partitioner and the memory check use: see the comment at the top
    if (cfg->device_flops == 0)
        cfg->device_flops = CPU_NOMINAL_FLOPS;
    if (cfg->memory_bandwidth == 0)
        cfg->memory_bandwidth = CPU_NOMINAL_MEMORY_BANDWIDTH;
    if (cfg->link_latency < 0)
        cfg->link_latency = CPU_NOMINAL_LATENCY;
    if (cfg->link_bandwidth == 0)
        cfg->link_bandwidth = CPU_NOMINAL_BANDWIDTH;
    if (cfg->network_bandwidth == 0)
        cfg->network_bandwidth = CPU_NOMINAL_NETWORK;
    if (cfg->device_memory == 0)
        cfg->device_memory = rates->measured ? rates->memory : ram_bytes();
    return ok;
}

double cpu_gemm_seconds(const CpuRates *r, double m, double n, double k)
{
    double flops = 2 * m * n * k;
    if (flops <= 0)
        return 0;
    double size = cbrt(m * n * k), rate = r->gemm_flops[0];
    if (size >= r->gemm_size[r->n_gemm - 1])
        rate = r->gemm_flops[r->n_gemm - 1];
    else
        for (int i = 0; i + 1 < r->n_gemm; i++)
            if (size < r->gemm_size[i + 1]) {
                if (size > r->gemm_size[i]) {
                    double f = log(size / r->gemm_size[i]) / log(r->gemm_size[i + 1] / r->gemm_size[i]);
                    rate = exp(log(r->gemm_flops[i]) + f * log(r->gemm_flops[i + 1] / r->gemm_flops[i]));
                } else {
                    rate = r->gemm_flops[i];
                }
                break;
            }
    return flops / rate;
}

int cpu_blas_threads(const Config *cfg)
{
    int threads = cfg->cpu->cores / config_devices(cfg);
    return threads < 1 ? 1 : threads;
}

double cpu_core_share(const Config *cfg)
{
    return config_devices(cfg) > cfg->cpu->cores ? (double)cfg->cpu->cores / config_devices(cfg) : 1.0;
}

void machine_explain(FILE *out, const Config *cfg)
{
    const char *what = config_chunks(cfg) > 1 ? "device" : "stage"; /* with chunks a device runs its stages in turn */
    if (cfg->machine == MACHINE_GPU) {
        fprintf(out, "priced on: a GPU per %s, as the hardware block states it (%.0f TFLOP/s, %.3g TB/s memory, "
                     "%.4g GB; links %.0f GB/s, %.1f us)\n", what,
                cfg->device_flops / 1e12, cfg->memory_bandwidth / 1e12, cfg->device_memory / 1e9,
                cfg->link_bandwidth / 1e9, cfg->link_latency * 1e6);
        return;
    }
    const CpuRates *r = cfg->cpu;
    fprintf(out, "priced on: this machine's CPU, a thread per %s (%s, %d cores: %d BLAS thread%s a %s; sgemm "
                 "%.3g-%.3g GFLOP/s a thread, kernels %.3g GFLOP/s, copies %.3g GB/s, messages %.3g us + %.3g GB/s; "
                 "%s)\n",
            what, r->name, r->cores, cpu_blas_threads(cfg), cpu_blas_threads(cfg) == 1 ? "" : "s", what,
            r->gemm_flops[0] / 1e9,
            r->gemm_flops[r->n_gemm - 1] / 1e9, r->vector_flops / 1e9, r->memory_bandwidth / 1e9,
            r->latency * 1e6, r->bandwidth / 1e9, r->source);
}
