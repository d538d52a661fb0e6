/* checkpoint.c: checkpoints as directories, written so that a crash at any moment leaves
 * the previous one loadable.
 *
 *   DIR/step_00000500/model.bin   llm.c GPT-2 weights (header 256 int32, fp32 tensors)
 *   DIR/step_00000500/state.bin   our header, AdamW m and v (checkpoint layout), lm_head
 *   DIR/latest                    the name of the newest complete checkpoint
 *
 * A save writes DIR/step_N.tmp/, fsyncs every file and the folder, renames it to step_N/,
 * then replaces `latest` (temporary, fsync, rename). Loading follows `latest` only, so a
 * leftover .tmp folder is never read. The two newest checkpoints are kept.
 *
 * `latest` never names a missing folder, not even when step_N/ is saved again (a fresh
 * `--steps N` run in the same folder): if `latest` names the step_N/ being replaced, it is
 * first pointed at step_N.old/, a second name of the same files (hard links, or a copy
 * where the file system has none), and moved back once the new step_N/ is in place.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "prt.h"

#define MODEL_HEADER_INTS 256
#define STATE_HEADER_INTS 16

enum { ST_MAGIC, ST_VERSION, ST_LAYERS, ST_WIDTH, ST_HEADS, ST_CONTEXT, ST_VOCAB, ST_TIED,
       ST_SCHEDULE, ST_STAGES, ST_STEP, ST_FLOATS, ST_OPTIMIZER, ST_REPLICAS };

/* Version 1 is AdamW's file (its optimizer field reads 0); version 2 adds the optimizer
 * (enum pr_optimizer), whose state fills m and v. AdamW still writes version 1, so its
 * files stay what they were and older runs keep reading them. */
#define STATE_VERSION_OPTIMIZER 2
static const char *const optimizer_names[] = {"adamw", "muon", "lamb", "lars", "nadamw"};

static const char *optimizer_name(int64_t kind)
{
    return kind >= 0 && kind <= PR_OPT_NADAMW ? optimizer_names[kind] : "unknown";
}

typedef struct part {
    const void *data;
    size_t bytes;
} part;

/* The file is complete on disk (fsync'ed) when this returns 0. */
static int write_parts(const char *path, const part *parts, int n, char *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return pr_fail(err, "%s: cannot create: %s", path, strerror(errno));
    for (int i = 0; i < n; i++)
        if (pr_write_all(fd, parts[i].data, parts[i].bytes, path, err) != 0) {
            close(fd);
            return -1;
        }
    if (fsync(fd) != 0 || close(fd) != 0)
        return pr_fail(err, "%s: cannot flush to disk: %s", path, strerror(errno));
    return 0;
}

/* Checkpoint folders hold plain files only. */
static void remove_dir(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char file[4096];
        snprintf(file, sizeof file, "%s/%s", path, e->d_name);
        unlink(file);
    }
    closedir(d);
    rmdir(path);
}

/* The folder name in DIR/latest, or "" when there is none. */
static void read_latest(const char *dir, char *name, size_t size)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/latest", dir);
    name[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (!fgets(name, (int)size, f))
        name[0] = '\0';
    fclose(f);
    name[strcspn(name, "\r\n")] = '\0';
}

/* Points DIR/latest at NAME: a temporary file, fsync, rename, fsync of the folder. */
static int set_latest(const char *dir, const char *name, char *err)
{
    char latest_tmp[4096], latest[4096], line[300];
    snprintf(latest_tmp, sizeof latest_tmp, "%s/latest.tmp", dir);
    snprintf(latest, sizeof latest, "%s/latest", dir);
    snprintf(line, sizeof line, "%s\n", name);
    part text[] = {{line, strlen(line)}};
    if (write_parts(latest_tmp, text, 1, err) != 0)
        return -1;
    if (rename(latest_tmp, latest) != 0)
        return pr_fail(err, "%s: cannot replace: %s", latest, strerror(errno));
    return pr_fsync_dir(dir, err);
}

/* Copies a file to a new one, complete on disk when this returns 0. */
static int copy_file(const char *from, const char *to, char *err)
{
    FILE *in = fopen(from, "rb");
    if (!in)
        return pr_fail(err, "%s: cannot open: %s", from, strerror(errno));
    int fd = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        fclose(in);
        return pr_fail(err, "%s: cannot create: %s", to, strerror(errno));
    }
    char buffer[1 << 16];
    size_t got;
    int rc = 0;
    while (rc == 0 && (got = fread(buffer, 1, sizeof buffer, in)) > 0)
        rc = pr_write_all(fd, buffer, got, to, err);
    if (rc == 0 && ferror(in))
        rc = pr_fail(err, "%s: read failed", from);
    if (rc == 0 && fsync(fd) != 0)
        rc = pr_fail(err, "%s: cannot flush to disk: %s", to, strerror(errno));
    fclose(in);
    if (close(fd) != 0 && rc == 0)
        rc = pr_fail(err, "%s: cannot flush to disk: %s", to, strerror(errno));
    return rc;
}

/* Whether DIR/NAME holds both files of a checkpoint: one without them (a folder left by hand,
 * say) has nothing to keep while it is replaced. */
static int complete(const char *dir, const char *name)
{
    char path[4096 + 300];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s/model.bin", dir, name);
    if (stat(path, &st) != 0)
        return 0;
    snprintf(path, sizeof path, "%s/%s/state.bin", dir, name);
    return stat(path, &st) == 0;
}

/* Gives the checkpoint DIR/NAME a second name, DIR/NAME.old, and points `latest` there, so
 * that NAME can be replaced while `latest` names a complete checkpoint all along. */
static int park(const char *dir, const char *name, char *err)
{
    static const char *const files[2] = {"model.bin", "state.bin"};
    char parked_name[300], parked[4096], from[4096], to[4096 + 16];
    snprintf(parked_name, sizeof parked_name, "%s.old", name);
    snprintf(parked, sizeof parked, "%s/%s", dir, parked_name);
    remove_dir(parked);
    if (mkdir(parked, 0755) != 0)
        return pr_fail(err, "%s: cannot create: %s", parked, strerror(errno));
    int rc = 0;
    for (int i = 0; i < 2 && rc == 0; i++) {
        snprintf(from, sizeof from, "%s/%s/%s", dir, name, files[i]);
        snprintf(to, sizeof to, "%s/%s", parked, files[i]);
        if (link(from, to) != 0)
            rc = copy_file(from, to, err);
    }
    if (rc == 0 && (pr_fsync_dir(parked, err) != 0 || pr_fsync_dir(dir, err) != 0))
        rc = -1;
    if (rc != 0) {
        remove_dir(parked);
        return -1;
    }
    return set_latest(dir, parked_name, err);
}

static void model_header(const pr_program *prog, int32_t h[MODEL_HEADER_INTS])
{
    memset(h, 0, MODEL_HEADER_INTS * sizeof(int32_t));
    h[0] = PR_MODEL_MAGIC;
    h[1] = PR_MODEL_VERSION;
    h[2] = prog->context;
    h[3] = prog->vocab;
    h[4] = prog->layers;
    h[5] = prog->heads;
    h[6] = prog->width;
    h[7] = prog->vocab;
}

int pr_ckpt_prepare(const char *ckpt_dir, char *err)
{
    if (strlen(ckpt_dir) > 3000)
        return pr_fail(err, "%.60s...: checkpoint folder name too long", ckpt_dir);
    // Every missing level, as mkdir -p does: a folder like checkpoints/gpt2-medium-8.
    char path[3001];
    strcpy(path, ckpt_dir);
    for (char *slash = strchr(path + 1, '/');; slash = strchr(slash + 1, '/')) {
        if (slash)
            *slash = '\0';
        if (path[0] && mkdir(path, 0755) != 0 && errno != EEXIST)
            return pr_fail(err, "%s: cannot create checkpoint folder: %s", path, strerror(errno));
        if (!slash)
            break;
        *slash = '/';
    }
    struct stat st;
    if (stat(ckpt_dir, &st) != 0)
        return pr_fail(err, "%s: cannot create checkpoint folder: %s", ckpt_dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return pr_fail(err, "%s: cannot create checkpoint folder: a file is in the way", ckpt_dir);
    return 0;
}

int pr_ckpt_save(pr_run *run, const char *ckpt_dir, char *err)
{
    const pr_program *prog = run->prog;
    if (pr_ckpt_prepare(ckpt_dir, err) != 0)
        return -1;
    char name[64], tmp[3900], final[3900], file[4096];
    snprintf(name, sizeof name, "step_%08lld", (long long)run->step);
    snprintf(tmp, sizeof tmp, "%s/%s.tmp", ckpt_dir, name);
    snprintf(final, sizeof final, "%s/%s", ckpt_dir, name);
    remove_dir(tmp);
    if (mkdir(tmp, 0755) != 0)
        return pr_fail(err, "%s: cannot create checkpoint folder: %s", tmp, strerror(errno));

    int64_t sizes[PR_CKPT_COUNT], offsets[PR_CKPT_COUNT];
    pr_ckpt_sizes(prog, sizes);
    int64_t total = pr_ckpt_offsets(prog, offsets);
    float *params = pr_alloc((size_t)total * 4), *m = pr_alloc((size_t)total * 4),
          *v = pr_alloc((size_t)total * 4);
    pr_gather(run, 0, params);
    pr_gather(run, 1, m);
    pr_gather(run, 2, v);
    int32_t mh[MODEL_HEADER_INTS];
    model_header(prog, mh);
    int64_t sh[STATE_HEADER_INTS] = {
        [ST_MAGIC] = PR_STATE_MAGIC,
        [ST_VERSION] = prog->optimizer == PR_OPT_ADAMW ? PR_STATE_VERSION : STATE_VERSION_OPTIMIZER,
        [ST_OPTIMIZER] = prog->optimizer, [ST_LAYERS] = prog->layers,
        [ST_WIDTH] = prog->width, [ST_HEADS] = prog->heads, [ST_CONTEXT] = prog->context,
        [ST_VOCAB] = prog->vocab, [ST_TIED] = prog->tied, [ST_SCHEDULE] = run->tab->schedule,
        [ST_STAGES] = prog->stages, [ST_STEP] = run->step, [ST_FLOATS] = total,
        // data D > 1 only: a one-pipeline file keeps the zero it always had there
        [ST_REPLICAS] = prog->replicas > 1 ? prog->replicas : 0};
    part model[] = {{mh, sizeof mh}, {params, (size_t)offsets[PR_CKPT_LM_HEAD] * 4}};
    part state[] = {{sh, sizeof sh}, {m, (size_t)total * 4}, {v, (size_t)total * 4},
                    {params + offsets[PR_CKPT_LM_HEAD], (size_t)sizes[PR_CKPT_LM_HEAD] * 4}};
    snprintf(file, sizeof file, "%s/model.bin", tmp);
    int rc = write_parts(file, model, 2, err);
    snprintf(file, sizeof file, "%s/state.bin", tmp);
    if (rc == 0)
        rc = write_parts(file, state, 4, err);
    free(params);
    free(m);
    free(v);
    if (rc != 0) {
        remove_dir(tmp);
        return rc;
    }
    if (pr_fsync_dir(tmp, err) != 0) {
        remove_dir(tmp);
        return -1;
    }
    char previous[256];
    read_latest(ckpt_dir, previous, sizeof previous);
    struct stat st;
    if (stat(final, &st) == 0) { // a checkpoint of the same step from an earlier run
        if (strcmp(previous, name) == 0 && complete(ckpt_dir, name) && park(ckpt_dir, name, err) != 0) {
            remove_dir(tmp);
            return -1;
        }
        remove_dir(final);
    }
    if (rename(tmp, final) != 0) {
        int saved = errno;
        remove_dir(tmp);
        return pr_fail(err, "%s: cannot rename checkpoint into place: %s", final, strerror(saved));
    }
    if (pr_fsync_dir(ckpt_dir, err) != 0 || set_latest(ckpt_dir, name, err) != 0)
        return -1;

    // Keep the new checkpoint and the one `latest` named before it; drop older ones.
    DIR *d = opendir(ckpt_dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "step_", 5) != 0 || strcmp(e->d_name, name) == 0 ||
            strcmp(e->d_name, previous) == 0)
            continue;
        snprintf(file, sizeof file, "%s/%s", ckpt_dir, e->d_name);
        remove_dir(file);
    }
    if (d)
        closedir(d);
    return 0;
}

static const char *const model_fields[8] = {"magic", "version", "context", "vocab", "layers",
                                            "heads", "width", "padded vocab"};

/* Reads an llm.c GPT-2 file into the first offsets[LM_HEAD] floats of flat; rows of wte
 * past the vocabulary (llm.c pads it) are skipped. */
static int read_model(const pr_program *prog, const char *path, float *flat, int allow_padding,
                      char *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return pr_fail(err, "%s: cannot open checkpoint: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        int saved = errno;
        fclose(f);
        return pr_fail(err, "%s: cannot read its size: %s", path, strerror(saved));
    }
    int32_t h[MODEL_HEADER_INTS], want[MODEL_HEADER_INTS];
    if (fread(h, 4, MODEL_HEADER_INTS, f) != MODEL_HEADER_INTS) {
        fclose(f);
        return pr_fail(err, "%s: truncated header", path);
    }
    model_header(prog, want);
    for (int i = 0; i < 8; i++) {
        if (i == 7 && allow_padding && h[7] >= h[3])
            continue;
        if (h[i] != want[i]) {
            fclose(f);
            return pr_fail(err, "%s: %s is %d, the program has %d%s", path, model_fields[i], h[i],
                           want[i], i >= 2 ? " (a checkpoint of another model shape)" : "");
        }
    }
    int64_t sizes[PR_CKPT_COUNT], offsets[PR_CKPT_COUNT];
    pr_ckpt_sizes(prog, sizes);
    pr_ckpt_offsets(prog, offsets);
    int64_t pad_floats = (int64_t)(h[7] - h[3]) * prog->width;
    int64_t expect = MODEL_HEADER_INTS * 4 + (offsets[PR_CKPT_LM_HEAD] + pad_floats) * 4;
    if (st.st_size != expect) {
        fclose(f);
        return pr_fail(err, "%s: %lld bytes, the shape needs %lld (truncated or corrupt)", path,
                       (long long)st.st_size, (long long)expect);
    }
    size_t wte = (size_t)sizes[PR_CKPT_WTE], rest = (size_t)(offsets[PR_CKPT_LM_HEAD] - sizes[PR_CKPT_WTE]);
    int ok = fread(flat, 4, wte, f) == wte && fseek(f, (long)pad_floats * 4, SEEK_CUR) == 0 &&
             fread(flat + wte, 4, rest, f) == rest;
    fclose(f);
    if (!ok)
        return pr_fail(err, "%s: read failed", path);
    return 0;
}

static const char *const state_fields[STATE_HEADER_INTS] = {
    "magic", "version", "layers", "width", "heads", "context", "vocab", "tied"};

int pr_ckpt_load_latest(pr_run *run, const char *ckpt_dir, char *err)
{
    const pr_program *prog = run->prog;
    char name[256], path[4096];
    read_latest(ckpt_dir, name, sizeof name);
    if (!name[0])
        return 1;
    if (strchr(name, '/'))
        return pr_fail(err, "%s/latest: names '%s', not a checkpoint folder", ckpt_dir, name);
    int64_t sizes[PR_CKPT_COUNT], offsets[PR_CKPT_COUNT];
    pr_ckpt_sizes(prog, sizes);
    int64_t total = pr_ckpt_offsets(prog, offsets);
    float *params = pr_alloc((size_t)total * 4), *m = pr_alloc((size_t)total * 4),
          *v = pr_alloc((size_t)total * 4);
    snprintf(path, sizeof path, "%s/%s/model.bin", ckpt_dir, name);
    int rc = read_model(prog, path, params, 0, err);
    int64_t sh[STATE_HEADER_INTS];
    FILE *f = NULL;
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/%s/state.bin", ckpt_dir, name);
        f = fopen(path, "rb");
        if (!f)
            rc = pr_fail(err, "%s: cannot open checkpoint state: %s", path, strerror(errno));
    }
    if (rc == 0 && fread(sh, 8, STATE_HEADER_INTS, f) != STATE_HEADER_INTS)
        rc = pr_fail(err, "%s: truncated header", path);
    int64_t want[STATE_HEADER_INTS] = {PR_STATE_MAGIC, PR_STATE_VERSION, prog->layers, prog->width,
                                       prog->heads, prog->context, prog->vocab, prog->tied};
    // Either version, as long as the optimizer that wrote it is the program's.
    int64_t written_by = rc == 0 && sh[ST_VERSION] == STATE_VERSION_OPTIMIZER ? sh[ST_OPTIMIZER] : PR_OPT_ADAMW;
    if (rc == 0 && sh[ST_MAGIC] == want[ST_MAGIC] && sh[ST_VERSION] == STATE_VERSION_OPTIMIZER) {
        want[ST_VERSION] = STATE_VERSION_OPTIMIZER;
        if (written_by != prog->optimizer)
            rc = pr_fail(err, "%s: written by optimizer %s (%lld), the program uses %s: its state "
                         "does not carry over (start from the weights with --init %s/%s/model.bin)",
                         path, optimizer_name(written_by), (long long)written_by,
                         optimizer_name(prog->optimizer), ckpt_dir, name);
    } else if (rc == 0 && sh[ST_MAGIC] == want[ST_MAGIC] && sh[ST_VERSION] == PR_STATE_VERSION &&
               prog->optimizer != PR_OPT_ADAMW) {
        rc = pr_fail(err, "%s: state version %d holds AdamW's moments, the program uses %s: its "
                     "state does not carry over (start from the weights with --init %s/%s/model.bin)",
                     path, PR_STATE_VERSION, optimizer_name(prog->optimizer), ckpt_dir, name);
    }
    for (int i = 0; rc == 0 && i <= ST_TIED; i++)
        if (sh[i] != want[i])
            rc = pr_fail(err, "%s: %s is %lld, the program has %lld", path, state_fields[i],
                         (long long)sh[i], (long long)want[i]);
    // Another D changes the global batch and the lr the compiler derived from it: the moments
    // would continue under another schedule, so resume refuses (docs/launch.md).
    int64_t written_d = rc == 0 && sh[ST_REPLICAS] > 1 ? sh[ST_REPLICAS] : 1;
    int64_t program_d = prog->replicas > 1 ? prog->replicas : 1;
    if (rc == 0 && written_d != program_d)
        rc = pr_fail(err, "%s: written with data %lld (replicas), the program has data %lld: the global "
                     "batch (micro x window x data) and the lr derived from it would change; resume "
                     "with data %lld, or start from the weights with --init %s/%s/model.bin",
                     path, (long long)written_d, (long long)program_d, (long long)written_d, ckpt_dir, name);
    if (rc == 0 && (sh[ST_FLOATS] != total || sh[ST_STEP] < 0 || sh[ST_STEP] > run->tab->total_steps))
        rc = pr_fail(err, "%s: step %lld or size %lld does not fit the program (%d steps, %lld floats)",
                     path, (long long)sh[ST_STEP], (long long)sh[ST_FLOATS], run->tab->total_steps,
                     (long long)total);
    size_t n = (size_t)total, head = (size_t)sizes[PR_CKPT_LM_HEAD];
    if (rc == 0 && (fread(m, 4, n, f) != n || fread(v, 4, n, f) != n ||
                    fread(params + offsets[PR_CKPT_LM_HEAD], 4, head, f) != head ||
                    fgetc(f) != EOF))
        rc = pr_fail(err, "%s: truncated or oversized state", path);
    if (f)
        fclose(f);
    if (rc == 0) {
        pr_scatter(run, 0, params);
        pr_scatter(run, 1, m);
        pr_scatter(run, 2, v);
        run->step = sh[ST_STEP];
        for (int s = 0; s < run->p; s++)
            run->stage[s].t = run->step;
    }
    free(params);
    free(m);
    free(v);
    return rc;
}

int pr_load_llmc(pr_run *run, const char *path, char *err)
{
    int64_t sizes[PR_CKPT_COUNT], offsets[PR_CKPT_COUNT];
    pr_ckpt_sizes(run->prog, sizes);
    int64_t total = pr_ckpt_offsets(run->prog, offsets);
    float *params = pr_alloc((size_t)total * 4);
    int rc = read_model(run->prog, path, params, 1, err);
    if (rc == 0) {
        memcpy(params + offsets[PR_CKPT_LM_HEAD], params + offsets[PR_CKPT_WTE],
               (size_t)sizes[PR_CKPT_LM_HEAD] * 4);
        pr_scatter(run, 0, params);
    }
    free(params);
    return rc;
}
