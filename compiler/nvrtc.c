/* nvrtc.c: compiles the generated CUDA units with NVRTC when a toolkit is present, with a
 * cache, and reports registers and spills per kernel.
 *
 * NVRTC is loaded with dlopen, so pacic builds and runs without a toolkit: then there is no
 * GPU path and `run` trains on the CPU. The few NVRTC entry points used are declared here
 * with NVRTC's C ABI (an int result and an opaque program handle).
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pacic.h"

/* Architectures every unit is compiled for by default: cubins, then PTX for newer GPUs. */
static const char *const default_archs[] = {"sm_80", "sm_90", "compute_90"};

int cuda_arch_list(const char *const **archs)
{
    static const char *chosen[8];
    static char text[256];
    static int count = -1;
    if (count < 0) {
        const char *env = getenv("PACIC_CUDA_ARCHS");
        count = 0;
        if (env && *env) {
            snprintf(text, sizeof text, "%s", env);
            for (char *save = NULL, *name = strtok_r(text, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
                int digits = 0;
                const char *at = strncmp(name, "sm_", 3) == 0 ? name + 3 : strncmp(name, "compute_", 8) == 0 ? name + 8 : NULL;
                while (at && at[digits] >= '0' && at[digits] <= '9')
                    digits++;
                if (!at || digits < 2 || at[digits] || count == 8) {
                    fprintf(stderr, "pacic: error: PACIC_CUDA_ARCHS='%s': '%s' is not sm_NN or compute_NN "
                                    "(at most 8, comma-separated; unset, pacic compiles for %s, %s and %s)\n",
                            env, name, default_archs[0], default_archs[1], default_archs[2]);
                    exit(EXIT_USER);
                }
                chosen[count++] = name;
            }
        }
        if (count == 0)
            for (; count < (int)(sizeof default_archs / sizeof *default_archs); count++)
                chosen[count] = default_archs[count];
    }
    *archs = chosen;
    return count;
}

typedef struct NvrtcProgram *NvrtcProgramHandle;
static struct {
    void *lib;
    int (*create)(NvrtcProgramHandle *, const char *, const char *, int, const char *const *,
                  const char *const *);
    int (*compile)(NvrtcProgramHandle, int, const char *const *);
    int (*log_size)(NvrtcProgramHandle, size_t *);
    int (*log)(NvrtcProgramHandle, char *);
    int (*cubin_size)(NvrtcProgramHandle, size_t *);
    int (*cubin)(NvrtcProgramHandle, char *);
    int (*ptx_size)(NvrtcProgramHandle, size_t *);
    int (*ptx)(NvrtcProgramHandle, char *);
    int (*destroy)(NvrtcProgramHandle *);
    int (*version)(int *, int *);
    const char *(*error_string)(int);
} nvrtc;

/* $CUDA_HOME's library first, then the loader's search path; NULL when none loads. */
static void *open_nvrtc(void)
{
    const char *home = getenv("CUDA_HOME");
    const char *names[] = {"lib64/libnvrtc.so", "lib64/libnvrtc.so.13", "lib64/libnvrtc.so.12"};
    for (int i = 0; i < 3; i++) {
        char *path = xasprintf("%s/%s", home && *home ? home : "/usr/local/cuda", names[i]);
        void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        free(path);
        if (lib)
            return lib;
    }
    const char *sonames[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"};
    for (int i = 0; i < 3; i++) {
        void *lib = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL);
        if (lib)
            return lib;
    }
    return NULL;
}

bool cuda_nvrtc_available(void)
{
    if (nvrtc.lib)
        return true;
    if (getenv("PACIC_NO_CUDA") && *getenv("PACIC_NO_CUDA"))
        return false;
    void *lib = open_nvrtc();
    if (!lib)
        return false;
#define LOAD(field, symbol)                                                                  \
    if (!(*(void **)&nvrtc.field = dlsym(lib, symbol))) {                                    \
        dlclose(lib);                                                                        \
        return false;                                                                        \
    }
    LOAD(create, "nvrtcCreateProgram")
    LOAD(compile, "nvrtcCompileProgram")
    LOAD(log_size, "nvrtcGetProgramLogSize")
    LOAD(log, "nvrtcGetProgramLog")
    LOAD(cubin_size, "nvrtcGetCUBINSize")
    LOAD(cubin, "nvrtcGetCUBIN")
    LOAD(ptx_size, "nvrtcGetPTXSize")
    LOAD(ptx, "nvrtcGetPTX")
    LOAD(destroy, "nvrtcDestroyProgram")
    LOAD(version, "nvrtcVersion")
    LOAD(error_string, "nvrtcGetErrorString")
#undef LOAD
    nvrtc.lib = lib;
    return true;
}

/* FNV-1a, 64 bits: the cache key of a unit, its architecture and the NVRTC version. */
static uint64_t fnv1a(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 0x100000001b3ULL;
    return h;
}

/* $PACIC_CACHE, else $XDG_CACHE_HOME/pacic, else ~/.cache/pacic; NULL when off or homeless. */
static char *cache_dir(void)
{
    const char *env = getenv("PACIC_CACHE");
    if (env && strcmp(env, "off") == 0)
        return NULL;
    char *dir = NULL;
    if (env && *env)
        dir = xstrdup(env);
    else if (getenv("XDG_CACHE_HOME") && *getenv("XDG_CACHE_HOME"))
        dir = xasprintf("%s/pacic", getenv("XDG_CACHE_HOME"));
    else if (getenv("HOME") && *getenv("HOME")) {
        char *parent = xasprintf("%s/.cache", getenv("HOME"));
        mkdir(parent, 0755);
        free(parent);
        dir = xasprintf("%s/.cache/pacic", getenv("HOME"));
    }
    if (dir && mkdir(dir, 0755) != 0 && errno != EEXIST) {
        free(dir);
        return NULL;
    }
    return dir;
}

/* Reads "image" and "log" of a cached compilation; false on any miss. */
static bool cache_load(const char *base, CudaImage *img)
{
    char *image_path = xasprintf("%s.bin", base), *log_path = xasprintf("%s.log", base);
    size_t size = 0, log_len = 0;
    char *data = read_file(image_path, &size), *log = data ? read_file(log_path, &log_len) : NULL;
    free(image_path);
    free(log_path);
    if (!data || !log) {
        free(data);
        return false;
    }
    img->data = (unsigned char *)data;
    img->size = size;
    img->log = log;
    return true;
}

static void cache_store(const char *base, const CudaImage *img)
{
    char *image_path = xasprintf("%s.bin", base), *log_path = xasprintf("%s.log", base);
    // The log first: a reader needs both, so a crash between the writes leaves a miss.
    if (write_file_atomic(log_path, img->log, strlen(img->log)) == 0)
        write_file_atomic(image_path, img->data, img->size);
    free(image_path);
    free(log_path);
}

/* A cubin for "sm_XY", PTX for "compute_XY"; false with the log in img->log on an error.
 * fast_math trades IEEE exp, log, division and denormals for speed: for bf16 only, since
 * fp32 training is checked against the CPU to 1e-5. */
bool cuda_compile(const char *source, const char *unit_name, const char *arch, bool fast_math, CudaImage *img)
{
    *img = (CudaImage){.arch = arch};
    if (!cuda_nvrtc_available())
        ICE("cuda_compile without NVRTC");
    bool ptx = strncmp(arch, "compute_", 8) == 0;
    int major = 0, minor = 0;
    nvrtc.version(&major, &minor);
    char *dir = cache_dir(), *base = NULL;
    if (dir) {
        // The banner comment (the .paci path, the stage's layers) changes no image: units
        // that differ only there share an entry, e.g. models of one shape but other depths.
        const char *body = strstr(source, "*/");
        body = body ? body + 2 : source;
        uint64_t h = fnv1a(0xcbf29ce484222325ULL, body, strlen(body));
        h = fnv1a(h, arch, strlen(arch));
        h = fnv1a(h, &fast_math, sizeof fast_math);
        int version[2] = {major, minor};
        h = fnv1a(h, version, sizeof version);
        base = xasprintf("%s/%016llx-%s", dir, (unsigned long long)h, arch);
        free(dir);
        if (cache_load(base, img)) {
            img->arch = arch;
            free(base);
            return true;
        }
    }
    NvrtcProgramHandle prog;
    if (nvrtc.create(&prog, source, unit_name, 0, NULL, NULL) != 0)
        ICE("nvrtcCreateProgram failed for %s", unit_name);
    char *arch_opt = xasprintf("--gpu-architecture=%s", arch);
    const char *opts[4] = {arch_opt, "--std=c++17"};
    int n_opts = 2;
    if (fast_math)
        opts[n_opts++] = "--use_fast_math";
    // ptxas (and so its report) runs only for a real architecture.
    if (!ptx)
        opts[n_opts++] = "--ptxas-options=--verbose";
    int res = nvrtc.compile(prog, n_opts, opts);
    size_t log_size = 0;
    nvrtc.log_size(prog, &log_size);
    img->log = xmalloc(log_size + 1);
    nvrtc.log(prog, img->log);
    img->log[log_size] = '\0';
    bool ok = res == 0;
    if (ok) {
        if (ptx) {
            nvrtc.ptx_size(prog, &img->size);
            img->data = xmalloc(img->size);
            nvrtc.ptx(prog, (char *)img->data);
        } else {
            nvrtc.cubin_size(prog, &img->size);
            img->data = xmalloc(img->size);
            nvrtc.cubin(prog, (char *)img->data);
        }
        if (base)
            cache_store(base, img);
    }
    nvrtc.destroy(&prog);
    free(arch_opt);
    free(base);
    return ok;
}

void cuda_image_free(CudaImage *img)
{
    free(img->data);
    free(img->log);
    *img = (CudaImage){0};
}

/* ptxas's verbose log as one line per kernel: registers, spill stores and loads, stack. Per
 * kernel the log says "Function properties for NAME", then a line with its stack frame and
 * spills, then "Used N registers". */
int cuda_resource_report(StrBuf *out, const CudaImage *img)
{
    int spilling = 0, stack = 0, stores = 0, loads = 0;
    char kernel[128] = "";
    for (const char *line = img->log ? img->log : ""; *line;) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        char text[512];
        snprintf(text, sizeof text, "%.*s", (int)(len < sizeof text - 1 ? len : sizeof text - 1), line);
        const char *fn = strstr(text, "Function properties for ");
        const char *frame = strstr(text, "bytes stack frame");
        const char *used = strstr(text, "Used ");
        if (fn) {
            sscanf(fn + strlen("Function properties for "), "%127s", kernel);
            stack = stores = loads = 0;
        } else if (frame && kernel[0]) {
            const char *digits = text + strcspn(text, "0123456789");
            sscanf(digits, "%d bytes stack frame, %d bytes spill stores, %d bytes spill loads", &stack,
                   &stores, &loads);
        } else if (used && kernel[0]) {
            int registers = 0;
            sscanf(used, "Used %d registers", &registers);
            sb_printf(out, "%-28s %-8s registers %3d, spill stores %d, spill loads %d, stack %d\n",
                      kernel, img->arch, registers, stores, loads, stack);
            spilling += stores > 0 || loads > 0;
            kernel[0] = '\0';
        }
        line += len + (eol ? 1 : 0);
    }
    return spilling;
}
