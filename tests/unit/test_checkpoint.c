/* test_checkpoint.c: checkpoint round trip (also across p), bit-identical resume, atomic
 * layout, a step saved again, disk faults, shape mismatch, unwritable folder, and llm.c
 * weights with a padded vocabulary. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "toy_model.h"

static char dir[] = "/tmp/pacirt_ckpt_XXXXXX";

/* Disk faults planted here: these definitions of fsync and link stand in for libc's in the
 * whole test program, the checkpoint writer included. */
static int fail_dir_fsync, fail_link;

int fsync(int fd)
{
    struct stat st;
    if (fail_dir_fsync && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        errno = EIO;
        return -1;
    }
    return (int)syscall(SYS_fsync, fd);
}

int link(const char *from, const char *to)
{
    if (fail_link) { // as on a file system without hard links
        errno = EPERM;
        return -1;
    }
    return (int)syscall(SYS_linkat, AT_FDCWD, from, AT_FDCWD, to, 0);
}
static char tokens[600], ckpt[600];
static toy_table table;
static pr_program prog;

/* A fresh run of the toy model with seeded weights and training data. */
static void toy_run(pr_run *run, enum toy_kind kind, int p, int64_t stop)
{
    char err[PR_ERR_LEN];
    toy_build_stages(p);
    toy_build_table(&table, kind, p, 2, 14, 7);
    prog = toy_program(&table.t, 14);
    pr_options opt = {.steps = stop, .ckpt_dir = ckpt, .quiet = 1};
    assert_int_equal(pr_run_init(run, &prog, &opt, err), 0);
    assert_int_equal(pr_tokens_load(&run->train, tokens, TOY_V, TOY_B, TOY_T, err), 0);
    int64_t offsets[PR_CKPT_COUNT];
    float *flat = pr_alloc((size_t)pr_ckpt_offsets(&prog, offsets) * 4);
    pr_init_params(&prog, flat);
    pr_scatter(run, 0, flat);
    free(flat);
}

static float *gather(pr_run *run, int which, int64_t *n)
{
    int64_t offsets[PR_CKPT_COUNT];
    *n = pr_ckpt_offsets(run->prog, offsets);
    float *flat = pr_alloc((size_t)*n * 4);
    pr_gather(run, which, flat);
    return flat;
}

static void clean_ckpt(void)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", ckpt);
    assert_int_equal(system(cmd), 0);
}

/* Saved at p = 2, loaded at p = 3: the checkpoint layout does not depend on the partition. */
static void test_round_trip_across_p(void **state)
{
    char err[PR_ERR_LEN];
    clean_ckpt();
    pr_run run;
    toy_run(&run, TOY_GPIPE, 2, 7);
    assert_int_equal(pr_train(&run, err), 0);
    int64_t n;
    float *saved[3];
    for (int w = 0; w < 3; w++)
        saved[w] = gather(&run, w, &n);
    pr_run_free(&run);
    toy_run(&run, TOY_1F1B, 3, 14);
    assert_int_equal(pr_ckpt_load_latest(&run, ckpt, err), 0);
    assert_int_equal(run.step, 7);
    for (int w = 0; w < 3; w++) {
        float *loaded = gather(&run, w, &n);
        assert_memory_equal(loaded, saved[w], (size_t)n * 4);
        free(loaded);
        free(saved[w]);
    }
    pr_run_free(&run);
}

/* Params, m and v of a run, one buffer (for whole-state comparisons). */
static float *gather_state(pr_run *run, int64_t *n)
{
    int64_t one;
    float *all = NULL;
    for (int which = 0; which < 3; which++) {
        float *part = gather(run, which, &one);
        all = realloc(all, (size_t)(3 * one) * sizeof(float));
        memcpy(all + which * one, part, (size_t)one * sizeof(float));
        free(part);
    }
    *n = 3 * one;
    return all;
}

/* 14 steps straight equal 7 steps, a checkpoint, a new process-like run, 7 more: weights,
 * AdamW's m and v alike. */
static void check_resume(enum toy_kind kind, int p)
{
    char err[PR_ERR_LEN];
    clean_ckpt();
    pr_run run;
    toy_run(&run, kind, p, 14);
    assert_int_equal(pr_train(&run, err), 0);
    int64_t n, m;
    float *straight = gather_state(&run, &n);
    pr_run_free(&run);
    clean_ckpt();
    toy_run(&run, kind, p, 7);
    assert_int_equal(pr_train(&run, err), 0);
    pr_run_free(&run);
    toy_run(&run, kind, p, 14);
    assert_int_equal(pr_ckpt_load_latest(&run, ckpt, err), 0);
    assert_int_equal(run.step, 7);
    assert_int_equal(pr_train(&run, err), 0);
    float *resumed = gather_state(&run, &m);
    assert_int_equal(m, n);
    const char *const part[3] = {"weights", "m", "v"};
    for (int w = 0; w < 3; w++)
        if (memcmp(resumed + w * (n / 3), straight + w * (n / 3), (size_t)(n / 3) * 4))
            fail_msg("schedule %d at p = %d: resumed %s differ from the straight run's", kind, p,
                     part[w]);
    pr_run_free(&run);
    free(straight);
    free(resumed);
}

static void test_resume_bit_identical(void **state)
{
    check_resume(TOY_GPIPE, 2);
    check_resume(TOY_1F1B, 4);
    check_resume(TOY_PACI, 4); // checkpoints sit at drains, so PACI resumes exactly too
}

/* `delay_correction predict` keeps no state of its own (the prediction is W, m, v and the
 * step count's), so PACI with it resumes exactly as well: K = 2 at p = 4 predicts 1 and 2 steps. */
static void test_resume_bit_identical_predict(void **state)
{
    toy_delay_correction = DELAY_PREDICT;
    check_resume(TOY_PACI, 4);
    toy_delay_correction = DELAY_NONE;
}

/* A stop inside a segment (--steps 5 of a 7-step segment) drains there: synchronous
 * schedules then resume mid-way to exactly the uninterrupted state; PACI's state at the stop
 * is exactly that of a schedule compiled to drain at step 5. */
static void test_stop_mid_segment(void **state)
{
    char err[PR_ERR_LEN];
    int64_t n, m;
    pr_run run;
    const enum toy_kind sync_kinds[] = {TOY_GPIPE, TOY_1F1B};
    for (int k = 0; k < 2; k++) {
        clean_ckpt();
        toy_run(&run, sync_kinds[k], 3, 14);
        assert_int_equal(pr_train(&run, err), 0);
        float *straight = gather_state(&run, &n);
        pr_run_free(&run);
        clean_ckpt();
        toy_run(&run, sync_kinds[k], 3, 5);
        assert_int_equal(pr_train(&run, err), 0);
        assert_int_equal(run.step, 5);
        pr_run_free(&run);
        toy_run(&run, sync_kinds[k], 3, 14);
        assert_int_equal(pr_ckpt_load_latest(&run, ckpt, err), 0);
        assert_int_equal(run.step, 5);
        assert_int_equal(pr_train(&run, err), 0);
        float *resumed = gather_state(&run, &m);
        assert_int_equal(m, n);
        assert_memory_equal(resumed, straight, (size_t)n * sizeof(float));
        pr_run_free(&run);
        free(straight);
        free(resumed);
    }
    clean_ckpt();
    toy_run(&run, TOY_PACI, 3, 5);
    assert_int_equal(pr_train(&run, err), 0);
    float *cut = gather_state(&run, &n);
    pr_run_free(&run);
    toy_build_table(&table, TOY_PACI, 3, 2, 14, 5); // drains at 5, 10, 14
    prog = toy_program(&table.t, 14);
    pr_options opt = {.steps = 5, .ckpt_dir = ckpt, .quiet = 1};
    assert_int_equal(pr_run_init(&run, &prog, &opt, err), 0);
    assert_int_equal(pr_tokens_load(&run.train, tokens, TOY_V, TOY_B, TOY_T, err), 0);
    float *flat = pr_alloc((size_t)pr_ckpt_offsets(&prog, (int64_t[PR_CKPT_COUNT]){0}) * 4);
    pr_init_params(&prog, flat);
    pr_scatter(&run, 0, flat);
    free(flat);
    assert_int_equal(pr_train(&run, err), 0);
    float *drained = gather_state(&run, &m);
    assert_int_equal(m, n);
    assert_memory_equal(cut, drained, (size_t)n * sizeof(float));
    pr_run_free(&run);
    free(cut);
    free(drained);
}

static int count_step_dirs(void)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls -d '%s'/step_* 2>/dev/null | wc -l", ckpt);
    FILE *f = popen(cmd, "r");
    int n = -1;
    assert_int_equal(fscanf(f, "%d", &n), 1);
    pclose(f);
    return n;
}

/* Only complete checkpoints are named by `latest`; a leftover .tmp folder is ignored; the
 * two newest are kept; a failed save leaves the previous one loadable. */
static void test_atomic_layout(void **state)
{
    char err[PR_ERR_LEN], path[800];
    clean_ckpt();
    pr_run run;
    toy_run(&run, TOY_GPIPE, 2, 14);
    assert_int_equal(pr_ckpt_save(&run, ckpt, err), 0);
    run.step = 7;
    assert_int_equal(pr_ckpt_save(&run, ckpt, err), 0);
    run.step = 14;
    assert_int_equal(pr_ckpt_save(&run, ckpt, err), 0);
    assert_int_equal(count_step_dirs(), 2);
    // A crash in the middle of a later save: a half-written folder is left behind.
    snprintf(path, sizeof path, "%s/step_00000099.tmp", ckpt);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/step_00000099.tmp/model.bin", ckpt);
    FILE *f = fopen(path, "w");
    fputs("garbage", f);
    fclose(f);
    // A save that fails: its .tmp name is taken by a file, so the folder cannot be made.
    snprintf(path, sizeof path, "%s/step_00000021.tmp", ckpt);
    f = fopen(path, "w");
    fclose(f);
    run.step = 21;
    assert_int_equal(pr_ckpt_save(&run, ckpt, err), -1);
    assert_non_null(strstr(err, ckpt));
    assert_non_null(strstr(err, "step_00000021.tmp: cannot create checkpoint folder: File exists"));
    pr_run_free(&run);
    toy_run(&run, TOY_GPIPE, 2, 14);
    assert_int_equal(pr_ckpt_load_latest(&run, ckpt, err), 0);
    assert_int_equal(run.step, 14);
    pr_run_free(&run);
}

static void read_text(const char *path, char *out, size_t size)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    out[0] = '\0';
    if (!fgets(out, (int)size, f))
        out[0] = '\0';
    fclose(f);
}

/* The step `latest` names, saved again (a fresh `--steps N` run in the same folder): the new
 * one takes its place and no parked copy is left, also where link() is refused (the files
 * are copied then). A folder the disk cannot flush fails the save, naming the folder, and
 * `latest` stays loadable. (tests/e2e/crash_safety.sh kills the process inside such saves.) */
static void test_same_step_saved_again(void **state)
{
    char err[PR_ERR_LEN], path[800], text[64];
    clean_ckpt();
    pr_run run;
    toy_run(&run, TOY_GPIPE, 2, 14);
    run.step = 7;
    snprintf(path, sizeof path, "%s/latest", ckpt);
    for (int round = 0; round < 3; round++) {
        fail_link = round == 2;
        int rc = pr_ckpt_save(&run, ckpt, err);
        fail_link = 0;
        if (rc != 0)
            fail_msg("save %d of step 7: %s", round + 1, err);
        read_text(path, text, sizeof text);
        assert_string_equal(text, "step_00000007\n");
        assert_int_equal(count_step_dirs(), 1);
    }
    fail_dir_fsync = 1;
    int rc = pr_ckpt_save(&run, ckpt, err);
    fail_dir_fsync = 0;
    assert_int_equal(rc, -1);
    if (!strstr(err, "step_00000007.tmp: cannot flush the folder to disk: Input/output error"))
        fail_msg("unexpected error '%s'", err);
    assert_int_equal(count_step_dirs(), 1);
    run.step = 3;
    assert_int_equal(pr_ckpt_load_latest(&run, ckpt, err), 0);
    assert_int_equal(run.step, 7);
    // `latest` naming a folder without the files (made by hand): the save replaces it.
    clean_ckpt();
    assert_int_equal(mkdir(ckpt, 0755), 0);
    snprintf(path, sizeof path, "%s/step_00000007", ckpt);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/latest", ckpt);
    FILE *f = fopen(path, "w");
    fputs("step_00000007\n", f);
    fclose(f);
    if (pr_ckpt_save(&run, ckpt, err) != 0)
        fail_msg("save over an empty step_00000007: %s", err);
    run.step = 3;
    assert_int_equal(pr_ckpt_load_latest(&run, ckpt, err), 0);
    assert_int_equal(run.step, 7);
    pr_run_free(&run);
}

static void test_unwritable_folder(void **state)
{
    char err[PR_ERR_LEN], bad[800], file[700];
    snprintf(file, sizeof file, "%s/plainfile", dir);
    FILE *f = fopen(file, "w");
    fclose(f);
    snprintf(bad, sizeof bad, "%s/ckpt", file);
    pr_run run;
    toy_run(&run, TOY_GPIPE, 1, 14);
    assert_int_equal(pr_ckpt_save(&run, bad, err), -1);
    assert_non_null(strstr(err, bad));
    assert_non_null(strstr(err, "cannot create checkpoint folder"));
    assert_int_equal(pr_ckpt_load_latest(&run, bad, err), 1); // nothing there, no crash
    pr_run_free(&run);
}

static void test_shape_mismatch(void **state)
{
    char err[PR_ERR_LEN], path[800];
    clean_ckpt();
    pr_run run;
    toy_run(&run, TOY_GPIPE, 2, 14);
    assert_int_equal(pr_ckpt_save(&run, ckpt, err), 0);
    pr_run_free(&run);
    toy_run(&run, TOY_GPIPE, 2, 14);
    prog.heads = 2;
    assert_int_equal(pr_ckpt_load_latest(&run, ckpt, err), -1);
    assert_non_null(strstr(err, "model.bin: heads is 1, the program has 2"));
    prog.heads = 1;
    // The context field of model.bin altered on disk.
    snprintf(path, sizeof path, "%s/step_00000000/model.bin", ckpt);
    FILE *f = fopen(path, "r+b");
    int32_t context = 99;
    fseek(f, 8, SEEK_SET);
    fwrite(&context, 4, 1, f);
    fclose(f);
    assert_int_equal(pr_ckpt_load_latest(&run, ckpt, err), -1);
    assert_non_null(strstr(err, "context is 99, the program has 4"));
    // A truncated state file.
    snprintf(path, sizeof path, "%s/step_00000000/model.bin", ckpt);
    f = fopen(path, "r+b");
    context = TOY_T;
    fseek(f, 8, SEEK_SET);
    fwrite(&context, 4, 1, f);
    fclose(f);
    snprintf(path, sizeof path, "%s/step_00000000/state.bin", ckpt);
    assert_int_equal(truncate(path, 500), 0);
    assert_int_equal(pr_ckpt_load_latest(&run, ckpt, err), -1);
    assert_non_null(strstr(err, "state.bin"));
    pr_run_free(&run);
}

/* ---- malformed checkpoints: every reader error path, one case each ------------------- */

static unsigned char *pristine[2];
static long pristine_size[2];
static const char *const ckpt_files[2] = {"model.bin", "state.bin"};

static void file_path(char *out, size_t size, int which)
{
    snprintf(out, size, "%s/step_00000007/%s", ckpt, ckpt_files[which]);
}

static unsigned char *slurp(const char *path, long *size)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *data = malloc((size_t)*size);
    assert_int_equal(fread(data, 1, (size_t)*size, f), (size_t)*size);
    fclose(f);
    return data;
}

/* Writes file `which` as the pristine bytes, cut to `size` (or grown with zeros), with
 * `bytes` bytes of `value` (little-endian) at `offset` when bytes > 0. */
static void write_variant(int which, long size, long offset, int64_t value, int bytes)
{
    char path[800];
    file_path(path, sizeof path, which);
    FILE *f = fopen(path, "wb");
    for (long i = 0; i < size; i++) {
        unsigned char byte = i < pristine_size[which] ? pristine[which][i] : 0;
        if (bytes > 0 && i >= offset && i < offset + bytes)
            byte = (unsigned char)((uint64_t)value >> (8 * (i - offset)));
        fputc(byte, f);
    }
    fclose(f);
}

static void restore(void)
{
    for (int which = 0; which < 2; which++)
        write_variant(which, pristine_size[which], 0, 0, 0);
}

/* The load fails with one line that names a file of the checkpoint folder and says `what`,
 * and leaves the run as it was. */
static void expect_load_error(pr_run *run, const char *what)
{
    char err[PR_ERR_LEN];
    run->step = 3;
    assert_int_equal(pr_ckpt_load_latest(run, ckpt, err), -1);
    if (!strstr(err, ckpt) || !strstr(err, what))
        fail_msg("error '%s' does not name %s and say '%s'", err, ckpt, what);
    assert_null(strchr(err, '\n'));
    assert_int_equal(run->step, 3);
    restore();
}

static void write_latest(const char *text)
{
    char path[800];
    snprintf(path, sizeof path, "%s/latest", ckpt);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static void test_malformed_checkpoints(void **state)
{
    char err[PR_ERR_LEN], path[800];
    clean_ckpt();
    pr_run run;
    toy_run(&run, TOY_GPIPE, 2, 14);
    run.step = 7;
    assert_int_equal(pr_ckpt_save(&run, ckpt, err), 0);
    for (int which = 0; which < 2; which++) {
        file_path(path, sizeof path, which);
        pristine[which] = slurp(path, &pristine_size[which]);
    }
    long model = pristine_size[0], state_bytes = pristine_size[1];
    enum { MODEL, STATE };
    // model.bin
    write_variant(MODEL, 0, 0, 0, 0);
    expect_load_error(&run, "model.bin: truncated header");
    write_variant(MODEL, 1000, 0, 0, 0);
    expect_load_error(&run, "model.bin: truncated header");
    write_variant(MODEL, model, 0, 1234, 4);
    expect_load_error(&run, "model.bin: magic is 1234");
    write_variant(MODEL, model, 4, 2, 4);
    expect_load_error(&run, "model.bin: version is 2");
    write_variant(MODEL, model, 28, 20, 4); // a padded vocabulary: llm.c init only
    expect_load_error(&run, "model.bin: padded vocab is 20");
    write_variant(MODEL, model - 4, 0, 0, 0);
    expect_load_error(&run, "the shape needs");
    write_variant(MODEL, model + 4, 0, 0, 0);
    expect_load_error(&run, "the shape needs");
    file_path(path, sizeof path, MODEL);
    unlink(path);
    expect_load_error(&run, "model.bin: cannot open checkpoint");
    // state.bin: 16 int64 header fields, then m, v, lm_head
    write_variant(STATE, 0, 0, 0, 0);
    expect_load_error(&run, "state.bin: truncated header");
    write_variant(STATE, 100, 0, 0, 0);
    expect_load_error(&run, "state.bin: truncated header");
    write_variant(STATE, state_bytes, 0, 7, 8);
    expect_load_error(&run, "state.bin: magic is 7");
    write_variant(STATE, state_bytes, 8, 9, 8);
    expect_load_error(&run, "state.bin: version is 9");
    // version 2 names the optimizer that wrote the state (field 12); AdamW's program reads
    // only AdamW's
    pristine[STATE][96] = PR_OPT_MUON;
    write_variant(STATE, state_bytes, 8, 2, 8);
    expect_load_error(&run, "state.bin: written by optimizer muon (1), the program uses adamw: its "
                      "state does not carry over");
    pristine[STATE][96] = PR_OPT_ADAMW;
    write_variant(STATE, state_bytes, 8, 2, 8);
    run.step = 3;
    assert_int_equal(pr_ckpt_load_latest(&run, ckpt, err), 0);
    assert_int_equal(run.step, 7);
    restore();
    write_variant(STATE, state_bytes, 56, 1, 8);
    expect_load_error(&run, "state.bin: tied is 1");
    write_variant(STATE, state_bytes, 80, 1000000000000, 8);
    expect_load_error(&run, "step 1000000000000");
    write_variant(STATE, state_bytes, 80, -1, 8);
    expect_load_error(&run, "step -1");
    write_variant(STATE, state_bytes, 88, (int64_t)1 << 40, 8);
    expect_load_error(&run, "size 1099511627776 does not fit");
    write_variant(STATE, state_bytes - 4, 0, 0, 0);
    expect_load_error(&run, "state.bin: truncated or oversized state");
    write_variant(STATE, state_bytes + 1, 0, 0, 0);
    expect_load_error(&run, "state.bin: truncated or oversized state");
    file_path(path, sizeof path, STATE);
    unlink(path);
    expect_load_error(&run, "state.bin: cannot open checkpoint state");
    // latest
    write_latest("../elsewhere\n");
    expect_load_error(&run, "not a checkpoint folder");
    write_latest("step_00000099\n");
    expect_load_error(&run, "step_00000099/model.bin: cannot open checkpoint");
    write_latest(""); // an empty name: as none, the newest complete step folder is loaded
    run.step = 3;
    assert_int_equal(pr_ckpt_load_latest(&run, ckpt, err), 0);
    assert_int_equal(run.step, 7);
    write_latest("step_00000007\n");
    assert_int_equal(pr_ckpt_load_latest(&run, ckpt, err), 0);
    assert_int_equal(run.step, 7);
    free(pristine[0]);
    free(pristine[1]);
    pr_run_free(&run);
}

/* A disk that fills up (here: a file-size limit, EFBIG, as ENOSPC would) during a save:
 * one error naming the file, no half-written folder left, the previous checkpoint still
 * `latest` and loadable. */
static void test_disk_full_during_save(void **state)
{
    char err[PR_ERR_LEN], path[800];
    clean_ckpt();
    pr_run run;
    toy_run(&run, TOY_GPIPE, 2, 14);
    assert_int_equal(pr_ckpt_save(&run, ckpt, err), 0);
    run.step = 7;
    struct rlimit saved, small;
    getrlimit(RLIMIT_FSIZE, &saved);
    small = saved;
    small.rlim_cur = 2000; // model.bin of the toy model is 5 KB
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    int rc = pr_ckpt_save(&run, ckpt, err);
    setrlimit(RLIMIT_FSIZE, &saved);
    signal(SIGXFSZ, SIG_DFL);
    assert_int_equal(rc, -1);
    if (!strstr(err, "step_00000007.tmp/model.bin: write failed: File too large"))
        fail_msg("unexpected error '%s'", err);
    snprintf(path, sizeof path, "%s/step_00000007.tmp", ckpt);
    struct stat st;
    assert_int_not_equal(stat(path, &st), 0);
    pr_run_free(&run);
    toy_run(&run, TOY_GPIPE, 2, 14);
    run.step = 5;
    assert_int_equal(pr_ckpt_load_latest(&run, ckpt, err), 0);
    assert_int_equal(run.step, 0);
    pr_run_free(&run);
}

/* llm.c pads the vocabulary: only the first V rows of wte are ours; lm_head copies wte. */
static void test_llmc_init_padded(void **state)
{
    char err[PR_ERR_LEN], path[800];
    pr_run run;
    toy_run(&run, TOY_GPIPE, 2, 14);
    int64_t sizes[PR_CKPT_COUNT], offsets[PR_CKPT_COUNT];
    pr_ckpt_sizes(&prog, sizes);
    int64_t total = pr_ckpt_offsets(&prog, offsets), pad = 3 * TOY_C;
    int64_t body = offsets[PR_CKPT_LM_HEAD];
    float *values = pr_alloc((size_t)(body + pad) * 4);
    for (int64_t i = 0; i < body + pad; i++)
        values[i] = (float)i;
    int32_t header[256] = {PR_MODEL_MAGIC, 3, TOY_T, TOY_V, TOY_L, 1, TOY_C, TOY_V + 3};
    snprintf(path, sizeof path, "%s/gpt2.bin", dir);
    FILE *f = fopen(path, "wb");
    fwrite(header, 4, 256, f);
    fwrite(values, 4, (size_t)(body + pad), f);
    fclose(f);
    assert_int_equal(pr_load_llmc(&run, path, err), 0);
    int64_t n;
    float *flat = gather(&run, 0, &n);
    assert_int_equal(n, total);
    assert_memory_equal(flat, values, (size_t)sizes[PR_CKPT_WTE] * 4);
    assert_memory_equal(flat + sizes[PR_CKPT_WTE], values + sizes[PR_CKPT_WTE] + pad,
                        (size_t)(body - sizes[PR_CKPT_WTE]) * 4);
    assert_memory_equal(flat + offsets[PR_CKPT_LM_HEAD], values, (size_t)sizes[PR_CKPT_WTE] * 4);
    free(flat);
    header[1] = 5;
    f = fopen(path, "r+b");
    fwrite(header, 4, 2, f);
    fclose(f);
    assert_int_equal(pr_load_llmc(&run, path, err), -1);
    assert_non_null(strstr(err, "version is 5"));
    free(values);
    pr_run_free(&run);
}

static int setup(void **state)
{
    if (!mkdtemp(dir))
        return -1;
    snprintf(tokens, sizeof tokens, "%s/tokens.bin", dir);
    snprintf(ckpt, sizeof ckpt, "%s/ckpt", dir);
    toy_write_tokens(tokens, 997, 3);
    pr_blas_threads(1, 1);
    return 0;
}

static int teardown(void **state)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_across_p),
        cmocka_unit_test(test_resume_bit_identical),
        cmocka_unit_test(test_resume_bit_identical_predict),
        cmocka_unit_test(test_stop_mid_segment),
        cmocka_unit_test(test_atomic_layout),
        cmocka_unit_test(test_same_step_saved_again),
        cmocka_unit_test(test_unwritable_folder),
        cmocka_unit_test(test_shape_mismatch),
        cmocka_unit_test(test_llmc_init_padded),
        cmocka_unit_test(test_malformed_checkpoints),
        cmocka_unit_test(test_disk_full_during_save),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
