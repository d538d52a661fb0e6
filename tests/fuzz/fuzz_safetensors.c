/* fuzz_safetensors.c: libFuzzer harness for the Hugging Face reader (runtime/hf.c). The input
 * is split into config.json and model.safetensors of an HF folder (the first four bytes,
 * little-endian, give config.json's length), loaded into the runtime's toy model (GPT-2's
 * tensor table at a tiny shape, 2 stages, untied) by pr_load_init as a folder and, the
 * safetensors part alone, as a bare .safetensors file. Crashes, leaks, reads out of bounds
 * and an error that names no file are the findings.
 *
 * With FUZZ_SAFETENSORS_SEED=FILE set, it instead exports the toy model's initial weights
 * with pr_export_hf and writes them in the input format to FILE, and exits. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_files.h"
#include "toy_model.h"

static toy_table table;
static pr_program prog;
static pr_run run;
static char dir[64];
static char folder[128], config_path[160], model_path[160], bare_path[160];

/* The scratch folder goes when the fuzzer exits (libFuzzer leaves through exit()). */
static void remove_scratch(void)
{
    unlink(config_path);
    unlink(model_path);
    unlink(bare_path);
    rmdir(folder);
    rmdir(dir);
}

/* The seed: the runtime's own export of the toy model. */
static void write_seed(const char *out)
{
    char err[PR_ERR_LEN];
    int64_t offsets[PR_CKPT_COUNT];
    float *flat = pr_alloc((size_t)pr_ckpt_offsets(&prog, offsets) * sizeof(float));
    pr_init_params(&prog, flat);
    pr_scatter(&run, 0, flat);
    free(flat);
    rmdir(folder);
    if (pr_export_hf(&run, folder, err) != 0) {
        fprintf(stderr, "fuzz_safetensors: %s\n", err);
        exit(1);
    }
    size_t config_size, model_size;
    uint8_t *config = read_bytes(config_path, &config_size), *model = read_bytes(model_path, &model_size);
    write_two_parts(out, config, config_size, model, model_size);
    free(config);
    free(model);
    exit(0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char err[PR_ERR_LEN];
    // memory-backed when the machine has /dev/shm: creating and truncating files on a disk
    // file system took four fifths of the harness's time
    snprintf(dir, sizeof dir, "%s/fuzz_safetensors_XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (!mkdtemp(dir))
        abort();
    atexit(remove_scratch);
    toy_build_stages(2);
    toy_build_table(&table, TOY_GPIPE, 2, 2, 14, 7);
    prog = toy_program(&table.t, 14);
    pr_options opt = {.steps = 7, .ckpt_dir = dir, .quiet = 1};
    if (pr_run_init(&run, &prog, &opt, err) != 0) {
        fprintf(stderr, "fuzz_safetensors: %s\n", err);
        abort();
    }
    snprintf(folder, sizeof folder, "%s/hf", dir);
    snprintf(config_path, sizeof config_path, "%s/config.json", folder);
    snprintf(model_path, sizeof model_path, "%s/model.safetensors", folder);
    snprintf(bare_path, sizeof bare_path, "%s/bare.safetensors", dir);
    const char *seed = getenv("FUZZ_SAFETENSORS_SEED");
    if (seed)
        write_seed(seed);
    mkdir(folder, 0755);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[PR_ERR_LEN];
    size_t config_size = 0;
    if (size >= 4) {
        config_size = (size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16 |
                      (size_t)data[3] << 24;
        data += 4, size -= 4;
    }
    if (config_size > size)
        config_size = size;
    write_file(config_path, data, config_size);
    write_file(model_path, data + config_size, size - config_size);
    write_file(bare_path, data + config_size, size - config_size);
    if (pr_load_init(&run, folder, err) < 0 && !strstr(err, folder))
        abort(); // every error names the file
    if (pr_load_init(&run, bare_path, err) < 0 && !strstr(err, bare_path))
        abort();
    return 0;
}
