/* fuzz_checkpoint.c: libFuzzer harness for the checkpoint reader. The input is split into
 * model.bin and state.bin of a checkpoint folder that `latest` names (the first four bytes,
 * little-endian, give model.bin's length), loaded into the runtime's toy model (GPT-2's
 * tensor table at a tiny shape, 2 stages) by pr_ckpt_load_latest; model.bin also goes
 * through pr_load_llmc, which accepts a padded vocabulary. Crashes, leaks, reads out of
 * bounds, an accepted step outside the run and an error that names no file are the findings.
 *
 * With FUZZ_CHECKPOINT_SEED=FILE set, it instead writes a valid checkpoint of the toy model
 * in the input format to FILE (how tests/fuzz/corpus/checkpoint/ was made) and exits. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "fuzz_files.h"
#include "toy_model.h"

static toy_table table;
static pr_program prog;
static pr_run run;
static char dir[64];
static char model_path[128], state_path[128];

/* The scratch folder goes when the fuzzer exits (libFuzzer leaves through exit()). */
static void remove_scratch(void)
{
    char path[160];
    unlink(model_path);
    unlink(state_path);
    snprintf(path, sizeof path, "%s/step_00000007", dir);
    rmdir(path);
    snprintf(path, sizeof path, "%s/latest", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/tokens.bin", dir);
    unlink(path);
    rmdir(dir);
}

/* The seed: a checkpoint the runtime itself saved, after a few steps of training. */
static void write_seed(const char *out)
{
    char err[PR_ERR_LEN], tokens[256];
    snprintf(tokens, sizeof tokens, "%s/tokens.bin", dir);
    toy_write_tokens(tokens, 997, 3);
    if (pr_tokens_load(&run.train, tokens, TOY_V, TOY_B, TOY_T, err) != 0 ||
        pr_train(&run, err) != 0) {
        fprintf(stderr, "fuzz_checkpoint: %s\n", err);
        exit(1);
    }
    size_t model_size, state_size;
    uint8_t *model = read_bytes(model_path, &model_size), *state = read_bytes(state_path, &state_size);
    write_two_parts(out, model, model_size, state, state_size);
    free(model);
    free(state);
    exit(0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char err[PR_ERR_LEN], path[128];
    // memory-backed when the machine has /dev/shm: creating and truncating files on a disk
    // file system took four fifths of the harness's time
    snprintf(dir, sizeof dir, "%s/fuzz_checkpoint_XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (!mkdtemp(dir))
        abort();
    atexit(remove_scratch);
    toy_build_stages(2);
    toy_build_table(&table, TOY_GPIPE, 2, 2, 14, 7);
    prog = toy_program(&table.t, 14);
    pr_options opt = {.steps = 7, .ckpt_dir = dir, .quiet = 1};
    if (pr_run_init(&run, &prog, &opt, err) != 0) {
        fprintf(stderr, "fuzz_checkpoint: %s\n", err);
        abort();
    }
    snprintf(path, sizeof path, "%s/latest", dir);
    write_file(path, (const uint8_t *)"step_00000007\n", 14);
    snprintf(path, sizeof path, "%s/step_00000007", dir);
    mkdir(path, 0755);
    snprintf(model_path, sizeof model_path, "%s/model.bin", path);
    snprintf(state_path, sizeof state_path, "%s/state.bin", path);
    const char *seed = getenv("FUZZ_CHECKPOINT_SEED");
    if (seed)
        write_seed(seed);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[PR_ERR_LEN];
    size_t model_size = 0;
    if (size >= 4) {
        model_size = (size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16 |
                     (size_t)data[3] << 24;
        data += 4, size -= 4;
    }
    if (model_size > size)
        model_size = size;
    write_file(model_path, data, model_size);
    write_file(state_path, data + model_size, size - model_size);
    run.step = 0;
    int rc = pr_ckpt_load_latest(&run, dir, err);
    if (rc == 0 && (run.step < 0 || run.step > table.t.total_steps))
        abort(); // an accepted checkpoint holds a step of this run
    if (rc < 0 && !strstr(err, dir))
        abort(); // every error names the file
    rc = pr_load_llmc(&run, model_path, err);
    if (rc < 0 && !strstr(err, model_path))
        abort();
    return 0;
}
