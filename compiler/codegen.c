/* codegen.c: the driver that writes the generated sources of a lowered program (lower.c). It
 * has the emitters render each file:
 * stage_N.c (emit_c.c, with emit_cuda.c's host half appended on the GPU path), program.c
 * (emit_c.c), and on the GPU path stages.cu with its NVRTC images (emit_cuda.c, nvrtc.c).
 * Nothing below calls back into it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pacic.h"

static bool write_source(const char *dir, const char *name, const StrBuf *sb)
{
    char *path = xasprintf("%s/%s", dir, name);
    bool ok = write_file_atomic(path, sb->data ? sb->data : "", sb->len) == 0;
    if (!ok)
        fprintf(stderr, "pacic: error: cannot write %s: %s\n", path, strerror(errno));
    free(path);
    return ok;
}

/* The GPU path's device half: every stage launches kernels of the same unit (it holds every
 * kernel at the model's shapes), so it is compiled once per architecture; the images go to
 * cuda_images.c, ptxas's report to cuda_resources.txt. An NVRTC error is a pacic bug: the
 * unit stays in dir for inspection and pacic exits 2. */
static bool cuda_write(const Config *cfg, const Lowered *low, const char *dir)
{
    StrBuf unit = {0}, report = {0}, images_c = {0};
    emit_cuda_stage(&unit, cfg, low, 0);
    bool ok = write_source(dir, "stages.cu", &unit);
    CudaImage images[8];
    const char *const *cuda_archs;
    int n = 0, spilling = 0, cuda_arch_count = cuda_arch_list(&cuda_archs);
    for (int i = 0; i < cuda_arch_count && ok; i++, n++) {
        if (!cuda_compile(unit.data, "stages.cu", cuda_archs[i], cfg->precision == PREC_BF16, &images[n])) {
            fprintf(stderr, "pacic: internal error: NVRTC cannot compile the generated CUDA for %s; "
                            "the unit is kept in %s/stages.cu\n%s\nThis is a bug in pacic; please "
                            "report it with the input file.\n", cuda_archs[i], dir, images[n].log);
            exit(EXIT_INTERNAL);
        }
        spilling += cuda_resource_report(&report, &images[n]);
    }
    if (ok) {
        sb_printf(&report, "kernels with spills: %d\n", spilling);
        emit_cuda_images(&images_c, cfg, images, n);
        ok = write_source(dir, "cuda_resources.txt", &report) && write_source(dir, "cuda_images.c", &images_c);
    }
    for (int i = 0; i < n; i++)
        cuda_image_free(&images[i]);
    sb_free(&unit);
    sb_free(&report);
    sb_free(&images_c);
    return ok;
}

/* One stage_S.c per stage and program.c; the folder is created if missing. */
bool codegen_write(const Config *cfg, const Lowered *low, const paci_table *t, const char *dir)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "pacic: error: cannot create %s: %s\n", dir, strerror(errno));
        return false;
    }
    bool ok = !cfg->cuda || cuda_write(cfg, low, dir);
    for (int s = 0; s < low->stages && ok; s++) {
        StrBuf sb = {0};
        emit_c_stage(&sb, cfg, low, s);
        if (cfg->cuda)
            emit_cuda_host(&sb, cfg, low, s);
        char *name = xasprintf("stage_%d.c", s);
        ok = write_source(dir, name, &sb);
        free(name);
        sb_free(&sb);
    }
    if (ok) {
        StrBuf sb = {0};
        emit_c_program(&sb, cfg, low, t);
        ok = write_source(dir, "program.c", &sb);
        sb_free(&sb);
    }
    return ok;
}
