/* checkpoint.c: checkpoints as directories, written so that a crash at any moment leaves
 * the previous one loadable.
 *
 *   DIR/step_00000500/model.bin   llm.c GPT-2 weights (header 256 int32, fp32 tensors)
 *   DIR/step_00000500/state.bin   our header, AdamW m and v (checkpoint layout), lm_head
 *   DIR/step_00000500/run.txt     the run that wrote it (its id, program and step), the
 *                                 length and warmup of the lr schedule it started with, and
 *                                 each stage's noise-scale averages (hexadecimal doubles, so a
 *                                 resume continues them to the bit)
 *   DIR/step_00000500/dgc.bin     compression dgc only: every replica's residuals (and
 *                                 velocities) per stage (dgc_save; with one process per
 *                                 stage and replica rank 0 gathers them, and each rank
 *                                 resumes from its own part)
 *   DIR/latest                    the name of the newest complete checkpoint
 *   DIR/lock                      held by the training run in the folder (pr_ckpt_claim): its
 *                                 pid, host and command line
 *
 * A save writes DIR/step_N.tmp/, fsyncs every file and the folder, renames it to step_N/,
 * then replaces `latest` (temporary, fsync, rename). Loading follows `latest` (or, when a
 * kill came between the rename and `latest`, the newest complete step_N/), so a leftover
 * .tmp folder is never read. A save keeps the new checkpoint and the newest N - 1 of its own
 * run before it (`checkpoint { keep N }`, default 2: the new one and the one `latest` named),
 * and removes only older checkpoints of its own run: a run is a fresh start and every resume
 * that follows it, one id in run.txt. A run refuses to start where it would replace
 * checkpoints it did not write (pr_ckpt_guard), unless told to with --overwrite.
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
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "prt.h"

#define MODEL_HEADER_INTS 256
#define STATE_HEADER_INTS 16

/* ST_MICRO and ST_WINDOW read 0 in files of an older pacic (nothing to check them by). */
enum { ST_MAGIC, ST_VERSION, ST_LAYERS, ST_WIDTH, ST_HEADS, ST_CONTEXT, ST_VOCAB, ST_TIED,
       ST_SCHEDULE, ST_STAGES, ST_STEP, ST_FLOATS, ST_OPTIMIZER, ST_REPLICAS, ST_MICRO, ST_WINDOW };

/* Version 1 is AdamW's file (its optimizer field reads 0); version 2 adds the optimizer
 * (enum pr_optimizer), whose state fills m and v. AdamW still writes version 1, so its
 * files stay what they were and older runs keep reading them. */
#define STATE_VERSION_OPTIMIZER 2
static const char *const optimizer_names[] = {"adamw", "muon", "lamb", "lars", "nadamw", "lans"};

static const char *optimizer_name(int64_t kind)
{
    return kind >= 0 && kind <= PR_OPT_LANS ? optimizer_names[kind] : "unknown";
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
    char ignored[PR_ERR_LEN];
    FILE *f = pr_open_regular(path, "latest", ignored); // unreadable, or not a regular file: no name
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
    FILE *in = pr_open_regular(from, "a checkpoint's file", err);
    if (!in)
        return -1;
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

/* The step of a checkpoint folder's name: step_NNNNNNNN, or step_NNNNNNNN.old (a second name
 * `park` gives); -1 for any other name (a .tmp folder is never a checkpoint). */
static int64_t checkpoint_step(const char *name)
{
    if (strncmp(name, "step_", 5) != 0)
        return -1;
    const char *c = name + 5;
    int64_t step = 0;
    int digits = 0;
    for (; *c >= '0' && *c <= '9' && digits < 18; c++, digits++)
        step = step * 10 + (*c - '0');
    return digits >= 8 && (*c == '\0' || strcmp(c, ".old") == 0) ? step : -1;
}

/* What DIR/NAME/run.txt says of the run that wrote it; empty fields (lr_steps -1, noise_stages
 * 0) where the file is missing (a checkpoint of an older pacic) or says nothing of them. */
typedef struct ckpt_owner {
    char run[64];
    char program[1024];
    long long lr_steps, lr_warmup; /* the lr schedule the run started with */
    /* the noise scale's averages of stages 0 .. noise_stages - 1, in order; -1: unreadable */
    int noise_stages;
    pr_noise_ema noise[PACI_MAX_STAGES];
    /* the pipeline's devices, chunks a device and placement (enum paci_placement); a file that
     * does not say (an older pacic's) was one stage a device: chunks 1, placement loop */
    int devices, chunks, placement;
} ckpt_owner;

/* One stage's noise-scale line of run.txt into owner (in stage order, else unreadable). */
static void read_noise_line(const char *line, ckpt_owner *owner)
{
    int stage;
    long long n;
    pr_noise_ema e;
    if (owner->noise_stages < 0)
        return;
    if (sscanf(line, "noise_scale stage %d g2 %la trace %la weight %la n %lld", &stage, &e.g2, &e.trace,
               &e.weight, &n) != 5 || stage != owner->noise_stages || stage >= PACI_MAX_STAGES || n < 0 ||
        !isfinite(e.g2) || !isfinite(e.trace) || !(e.weight >= 0.0 && e.weight <= 1.0) ||
        (n > 0 && !(e.weight > 0.0))) {
        owner->noise_stages = -1;
        return;
    }
    e.n = n;
    owner->noise[owner->noise_stages++] = e;
}

/* "pipeline devices P chunks V placement NAME": an unreadable line reads as chunks -1, which
 * no program has, so a resume is refused rather than guessed. */
static void read_pipeline(const char *line, ckpt_owner *owner)
{
    char word[32];
    owner->chunks = owner->placement = -1;
    if (sscanf(line, "pipeline devices %d chunks %d placement %31s", &owner->devices, &owner->chunks, word) != 3 ||
        owner->devices < 1 || owner->chunks < 1 || owner->devices > PACI_MAX_STAGES ||
        owner->chunks > PACI_MAX_STAGES) {
        owner->chunks = -1;
        return;
    }
    for (int k = 0; k < PACI_PLACEMENT_COUNT; k++)
        if (strcmp(word, pr_placement_name(k)) == 0)
            owner->placement = k;
    if (owner->placement < 0)
        owner->chunks = -1;
}

static void read_owner(const char *dir, const char *name, ckpt_owner *owner)
{
    char path[4096 + 300], line[1100];
    owner->run[0] = owner->program[0] = '\0';
    owner->lr_steps = owner->lr_warmup = -1;
    owner->noise_stages = 0;
    owner->devices = -1;
    owner->chunks = 1;
    owner->placement = PACI_PLACEMENT_LOOP;
    snprintf(path, sizeof path, "%s/%s/run.txt", dir, name);
    char ignored[PR_ERR_LEN];
    FILE *f = pr_open_regular(path, "run.txt", ignored); // a device there (/dev/zero) would never end
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (strncmp(line, "run ", 4) == 0)
            snprintf(owner->run, sizeof owner->run, "%.63s", line + 4);
        else if (strncmp(line, "program ", 8) == 0)
            snprintf(owner->program, sizeof owner->program, "%.1023s", line + 8);
        else if (strncmp(line, "lr_schedule ", 12) == 0 &&
                 (sscanf(line, "lr_schedule steps %lld warmup %lld", &owner->lr_steps,
                         &owner->lr_warmup) != 2 ||
                  owner->lr_steps < 1 || owner->lr_steps > INT32_MAX || owner->lr_warmup < 0))
            owner->lr_steps = owner->lr_warmup = -1; // unreadable: as if not recorded
        else if (strncmp(line, "noise_scale ", 12) == 0)
            read_noise_line(line, owner);
        else if (strncmp(line, "pipeline ", 9) == 0)
            read_pipeline(line, owner);
    }
    fclose(f);
}

/* The checkpoint a resume starts from: the one `latest` names, or, when there is no `latest`
 * (a kill between a first save's rename and its `latest`), the newest complete step_N/.
 * "" when the folder holds none. */
static void find_latest(const char *dir, char *name, size_t size)
{
    read_latest(dir, name, size);
    if (name[0])
        return;
    DIR *d = opendir(dir);
    struct dirent *e;
    int64_t newest = -1;
    while (d && (e = readdir(d))) {
        int64_t step = checkpoint_step(e->d_name);
        if (step > newest && !strchr(e->d_name, '.') && complete(dir, e->d_name)) {
            newest = step;
            snprintf(name, size, "%s", e->d_name);
        }
    }
    if (d)
        closedir(d);
}

/* Gives the checkpoint DIR/NAME a second name, DIR/NAME.old, and points `latest` there, so
 * that NAME can be replaced while `latest` names a complete checkpoint all along. */
static int park(const char *dir, const char *name, char *err)
{
    static const char *const files[4] = {"model.bin", "state.bin", "run.txt", "dgc.bin"};
    char parked_name[300], parked[4096], from[4096], to[4096 + 16];
    snprintf(parked_name, sizeof parked_name, "%s.old", name);
    snprintf(parked, sizeof parked, "%s/%s", dir, parked_name);
    remove_dir(parked);
    if (mkdir(parked, 0755) != 0)
        return pr_fail(err, "%s: cannot create: %s", parked, strerror(errno));
    int rc = 0;
    for (int i = 0; i < 4 && rc == 0; i++) {
        snprintf(from, sizeof from, "%s/%s/%s", dir, name, files[i]);
        snprintf(to, sizeof to, "%s/%s", parked, files[i]);
        struct stat st;
        if (i >= 2 && stat(from, &st) != 0)
            continue; // a checkpoint of an older pacic has no run.txt; a dense one no dgc.bin
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

/* The step below which a save of this run's step prunes its own checkpoints: it keeps the
 * new one and the keep - 1 newest of its own before it (those at step >= the returned one). */
static int64_t oldest_kept_step(const pr_run *run, const char *dir, int64_t keep)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int64_t *steps = NULL, n = 0, cap = 0, oldest = run->step;
    while (d && (e = readdir(d))) {
        int64_t step = checkpoint_step(e->d_name);
        if (step < 0 || step >= run->step || strchr(e->d_name, '.') || !complete(dir, e->d_name))
            continue;
        ckpt_owner owner;
        read_owner(dir, e->d_name, &owner);
        if (strcmp(owner.run, run->run_id) != 0)
            continue;
        if (n == cap) {
            int64_t *grown = pr_alloc((size_t)(cap = cap ? 2 * cap : 16) * sizeof *steps);
            if (n)
                memcpy(grown, steps, (size_t)n * sizeof *steps);
            free(steps);
            steps = grown;
        }
        steps[n++] = step;
    }
    if (d)
        closedir(d);
    // the (keep - 1)-th newest: a selection over the few folders a run leaves
    for (int64_t kept = 0; kept < keep - 1 && kept < n; kept++) {
        int64_t newest = 0;
        for (int64_t i = 1; i < n - kept; i++)
            newest = steps[i] > steps[newest] ? i : newest;
        oldest = steps[newest];
        steps[newest] = steps[n - kept - 1];
    }
    free(steps);
    return oldest;
}

/* After a save of NAME: keeps it and the newest `checkpoint { keep N }` - 1 checkpoints of
 * this run before it (by default 1: the one `latest` named), and removes this run's older ones
 * and the leftovers of saves that never finished (.tmp, or a folder a killed removal left
 * without its files). Other runs' checkpoints stay, PREVIOUS among them, unless this run was
 * started with --overwrite. */
static void prune(const pr_run *run, const char *dir, const char *name, const char *previous)
{
    int64_t keep = run->prog->ckpt_keep > 0 ? run->prog->ckpt_keep : 2;
    int64_t oldest_kept = oldest_kept_step(run, dir, keep);
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[4096];
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, "step_", 5) != 0 || strcmp(e->d_name, name) == 0)
            continue;
        int64_t step = checkpoint_step(e->d_name);
        if (step >= 0 && complete(dir, e->d_name)) {
            ckpt_owner owner;
            read_owner(dir, e->d_name, &owner);
            int ours = strcmp(owner.run, run->run_id) == 0, parked = strchr(e->d_name, '.') != NULL;
            if (strcmp(e->d_name, previous) == 0 && !ours && !run->opt.overwrite)
                continue;
            if (ours && !parked && step >= oldest_kept && step < run->step)
                continue;
            // later ones of its own: what a kill between a save's rename and `latest` left
            if (!run->opt.overwrite && (!ours || (step > run->step && !parked)))
                continue;
        }
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        remove_dir(path);
    }
    if (d)
        closedir(d);
}

void pr_ckpt_new_run(pr_run *run)
{
    time_t now = time(NULL);
    struct tm utc;
    char when[32] = "?";
    if (gmtime_r(&now, &utc))
        strftime(when, sizeof when, "%Y%m%dT%H%M%SZ", &utc);
    uint32_t nonce = 0;
    if (getrandom(&nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce)
        nonce = (uint32_t)clock();
    snprintf(run->run_id, sizeof run->run_id, "%s-%ld-%08x", when, (long)getpid(), nonce);
}

static void fresh_route(const char *dir, const char *name, char *route, size_t size);

/* dgc.bin: the header, each stage's parameter count, then for replica 0..D-1 and stage
 * 0..p-1 its residual and (under momentum correction) its velocity, in the stage's layout. */
#define DGC_MAGIC 0x50444743 /* "PDGC" */
#define DGC_VERSION 1
enum { DG_MAGIC, DG_VERSION, DG_REPLICAS, DG_STAGES, DG_STEP, DG_VELOCITY, DG_WARMUP, DG_INTS };
typedef struct dgc_header {
    int64_t i[DG_INTS];
    double density, clip;
    int64_t n[PACI_MAX_STAGES];
} dgc_header;

static void dgc_header_of(const pr_run *run, dgc_header *h)
{
    memset(h, 0, sizeof *h);
    h->i[DG_MAGIC] = DGC_MAGIC;
    h->i[DG_VERSION] = DGC_VERSION;
    h->i[DG_REPLICAS] = run->replicas;
    h->i[DG_STAGES] = run->p;
    h->i[DG_STEP] = run->step;
    h->i[DG_VELOCITY] = pr_dgc_momentum_correction(run->prog);
    h->i[DG_WARMUP] = run->prog->dgc_warmup_steps;
    h->density = run->prog->dgc_density;
    h->clip = run->prog->dgc_clip;
    for (int s = 0; s < run->p; s++)
        h->n[s] = run->stage[s].code->n_params;
}

/* The floats of every replica's residuals (and velocities) in dgc.bin, after the header. */
static size_t dgc_floats(const pr_run *run)
{
    size_t stages = 0;
    for (int s = 0; s < run->p; s++)
        stages += (size_t)run->stage[s].code->n_params;
    return stages * (size_t)run->replicas * (size_t)(1 + pr_dgc_momentum_correction(run->prog));
}

static int dgc_save(const pr_run *run, const char *path, char *err)
{
    int D = run->replicas, parts_n = 0, vel = pr_dgc_momentum_correction(run->prog);
    dgc_header h;
    dgc_header_of(run, &h);
    if (!run->replica_runs) { // one process per stage and replica: rank 0 gathered them in file order
        if (!run->dgc_gathered)
            pr_internal("rank 0 saves a compressed checkpoint without the ranks' residuals");
        part file[] = {{&h, sizeof h}, {run->dgc_gathered, dgc_floats(run) * sizeof(float)}};
        return write_parts(path, file, 2, err);
    }
    part *parts = pr_alloc((size_t)(1 + 2 * D * run->p) * sizeof *parts);
    parts[parts_n++] = (part){&h, sizeof h};
    for (int r = 0; r < D; r++)
        for (int s = 0; s < run->p; s++) {
            const pr_stage_rt *st = &run->replica_runs[r]->stage[s];
            size_t bytes = (size_t)st->code->n_params * sizeof(float);
            parts[parts_n++] = (part){st->dgc.residual, bytes};
            if (vel)
                parts[parts_n++] = (part){st->dgc.velocity, bytes};
        }
    int rc = write_parts(path, parts, parts_n, err);
    free(parts);
    return rc;
}

/* One process per stage and replica: this rank's part of dgc.bin (past its header, at f),
 * found by the parts of the ranks before it; the file must hold every rank's, no more. */
static int dgc_load_own(pr_run *run, FILE *f, const char *path, char *err)
{
    int parts = 1 + pr_dgc_momentum_correction(run->prog), rank = run->opt.rank;
    size_t before = 0;
    for (int r = 0; r < rank; r++)
        before += (size_t)run->stage[r % run->p].code->n_params * (size_t)parts;
    pr_stage_rt *st = &run->stage[rank % run->p];
    size_t n = (size_t)st->code->n_params;
    struct stat info;
    if (fstat(fileno(f), &info) != 0 ||
        (size_t)info.st_size != sizeof(dgc_header) + dgc_floats(run) * sizeof(float))
        return pr_fail(err, "%s: not the size of data %d x %d stages' residuals (truncated or corrupt)",
                       path, run->replicas, run->p);
    if (fseek(f, (long)(sizeof(dgc_header) + before * sizeof(float)), SEEK_SET) != 0)
        return pr_fail(err, "%s: read failed (rank %d's residuals)", path, rank);
    // a GPU's residuals (runtime/cuda/dgc.c) through a host buffer, the CPU's in place
    float *host = run->dev->host_memory ? NULL : pr_alloc(n * sizeof(float));
    int rc = 0;
    for (int part = 0; part < parts && rc == 0; part++) {
        float *to = part == 0 ? st->dgc.residual : st->dgc.velocity;
        if (fread(host ? host : to, sizeof(float), n, f) != n)
            rc = pr_fail(err, "%s: read failed (rank %d's residuals)", path, rank);
        else if (host)
            run->dev->upload(rank % run->p, to, host, n * sizeof(float));
    }
    free(host);
    return rc;
}

/* A compressed run resumes only from a checkpoint of the same compression, replicas and
 * stages: the residuals are each replica's gradient not yet sent under those settings. */
static int dgc_load(pr_run *run, const char *dir, const char *name, char *err)
{
    char path[4096 + 300], route[9000];
    snprintf(path, sizeof path, "%s/%s/dgc.bin", dir, name);
    fresh_route(dir, name, route, sizeof route);
    FILE *f = fopen(path, "rb");
    int processes = !run->replica_runs && run->opt.world > 1;
    int compressed = run->prog->dgc_density > 0 && (run->replica_runs || processes);
    if (!f && !compressed)
        return 0;
    if (!f)
        return pr_fail(err, "%s/%s: written without compression dgc (no dgc.bin), the program compresses: "
                       "there are no residuals to resume with; %s", dir, name, route);
    dgc_header h, want;
    dgc_header_of(run, &want);
    int rc = 0;
    if (!compressed)
        rc = pr_fail(err, "%s: written with compression dgc, the program has none: its residuals (gradient "
                     "not yet sent) would be lost; resume with the same compression block, or %s", path, route);
    else if (fread(&h, sizeof h, 1, f) != 1 || h.i[DG_MAGIC] != DGC_MAGIC || h.i[DG_VERSION] != DGC_VERSION)
        rc = pr_fail(err, "%s: not a dgc.bin of this pacic (truncated or corrupt)", path);
    else if (h.i[DG_REPLICAS] != want.i[DG_REPLICAS] || h.i[DG_STAGES] != want.i[DG_STAGES] ||
             h.density != want.density || h.clip != want.clip || h.i[DG_WARMUP] != want.i[DG_WARMUP] ||
             h.i[DG_VELOCITY] != want.i[DG_VELOCITY] || memcmp(h.n, want.n, sizeof h.n) != 0)
        rc = pr_fail(err, "%s: written with data %lld, %lld stages, compression dgc { density %g; warmup_steps "
                     "%lld; clip %g }, the program has data %lld, %lld stages, { density %g; warmup_steps %lld; "
                     "clip %g } (or another split or optimizer): each replica's residuals belong to those "
                     "settings; resume with them, or %s", path, (long long)h.i[DG_REPLICAS],
                     (long long)h.i[DG_STAGES], h.density, (long long)h.i[DG_WARMUP], h.clip,
                     (long long)want.i[DG_REPLICAS], (long long)want.i[DG_STAGES], want.density,
                     (long long)want.i[DG_WARMUP], want.clip, route);
    if (rc == 0 && processes) {
        rc = dgc_load_own(run, f, path, err);
        fclose(f);
        return rc;
    }
    for (int r = 0; rc == 0 && r < run->replicas; r++)
        for (int s = 0; rc == 0 && s < run->p; s++) {
            pr_stage_rt *st = &run->replica_runs[r]->stage[s];
            size_t n = (size_t)st->code->n_params;
            if (fread(st->dgc.residual, sizeof(float), n, f) != n ||
                (st->dgc.velocity && fread(st->dgc.velocity, sizeof(float), n, f) != n))
                rc = pr_fail(err, "%s: truncated", path);
        }
    if (rc == 0 && fgetc(f) != EOF)
        rc = pr_fail(err, "%s: oversized (corrupt)", path);
    fclose(f);
    return rc;
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

/* The one lock of this process: a POSIX record lock lives as long as a descriptor of its file
 * stays open in the process (closing any would drop it), so it is opened once and never closed;
 * the kernel drops it when the process ends, kill -9 included. */
static int lock_fd = -1;

/* "pid 123 on host h: ./run --steps 10" into text, the command line's bytes as it was typed,
 * control characters as spaces so that a refusal stays one line. */
static void holder_text(char *const *argv, char *text, size_t size)
{
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    size_t n = (size_t)snprintf(text, size, "pid %ld on host %s:", (long)getpid(), host);
    for (int i = 0; argv && argv[i] && n + 2 < size; i++)
        n += (size_t)snprintf(text + n, size - n, " %s", argv[i]);
    for (char *c = text; *c; c++)
        if ((unsigned char)*c < ' ')
            *c = ' ';
}

/* The holder of a lock, as its file says, else as the kernel says (a holder between its
 * lock and its write). */
static void read_holder(int fd, char *text, size_t size)
{
    ssize_t got = pread(fd, text, size - 1, 0);
    text[got > 0 ? got : 0] = '\0';
    text[strcspn(text, "\n")] = '\0';
    for (char *c = text; *c; c++) // a file written by hand may hold anything: the message stays one plain line
        if ((unsigned char)*c < ' ' || *c == 0x7f)
            *c = '?';
    struct flock held = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (!text[0] && fcntl(fd, F_GETLK, &held) == 0 && held.l_type != F_UNLCK)
        snprintf(text, size, "pid %ld, which has not yet written its name", (long)held.l_pid);
    else if (!text[0])
        snprintf(text, size, "a run that has not yet written its name");
}

/* Takes dir's lock for this process: 0 held (or, where the file system gives no locks, warned
 * and gone on), -1 with err when another run holds it or the file cannot be opened. */
static int take_lock(const char *dir, char *const *argv, char *err)
{
    if (lock_fd >= 0) // taken already: a record lock belongs to the process
        return 0;
    char path[3100], text[1200];
    snprintf(path, sizeof path, "%s/lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return pr_fail(err, "%s: cannot write in the checkpoint folder: %s", dir, strerror(errno));
    struct flock whole = {.l_type = F_WRLCK, .l_whence = SEEK_SET}; // l_len 0: the whole file
    if (fcntl(fd, F_SETLK, &whole) != 0) {
        int saved = errno;
        if (saved == EACCES || saved == EAGAIN) {
            read_holder(fd, text, sizeof text);
            close(fd);
            return pr_fail(err, "%s: in use by another run (%s), which holds %s: one training run per "
                           "checkpoint folder; wait for it to end, or train in another folder (--ckpt-dir "
                           "DIR)", dir, text, path);
        }
        // No locks on this file system (Lustre without -o flock, NFS without lockd): a refusal
        // would stop every run there, so the run goes on, unprotected, and says so.
        fprintf(stderr, "run: warning: %s: cannot lock %s (%s): the file system gives no locks here, "
                "so a second run started in this folder would not be refused\n", dir, path, strerror(saved));
        close(fd);
        return 0;
    }
    holder_text(argv, text, sizeof text);
    strcat(text, "\n");
    if (ftruncate(fd, 0) != 0 || pr_write_all(fd, text, strlen(text), path, err) != 0) {
        close(fd);
        return pr_fail(err, "%s: cannot write in the checkpoint folder: %s", dir, strerror(errno));
    }
    lock_fd = fd;
    return 0;
}

/* A file made, synced and removed: a folder that takes no writes (read-only, full, no
 * permission) fails here with the system's reason, before step 1. */
static int probe_writes(const char *dir, char *err)
{
    char path[3100];
    snprintf(path, sizeof path, "%s/probe", dir); // one name: the lock's holder alone writes it
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int rc = fd >= 0 && pr_write_all(fd, "probe\n", 6, path, err) == 0 && fsync(fd) == 0 ? 0 : -1;
    int saved = errno;
    if (fd >= 0)
        close(fd);
    unlink(path);
    if (rc != 0)
        return pr_fail(err, "%s: cannot write in the checkpoint folder: %s", dir, strerror(saved));
    return 0;
}

/* Bytes of one checkpoint: model.bin and state.bin (dgc.bin, only under compression dgc, is
 * left out: the figure is a floor). */
static int64_t checkpoint_bytes(const pr_program *prog)
{
    int64_t offsets[PR_CKPT_COUNT], total = pr_ckpt_offsets(prog, offsets);
    return (int64_t)(MODEL_HEADER_INTS * 4 + STATE_HEADER_INTS * 8) + 4 * (offsets[PR_CKPT_LM_HEAD] + 2 * total) +
           4 * (total - offsets[PR_CKPT_LM_HEAD]);
}

/* Refuses a folder without room for one checkpoint: every save writes a whole new one before
 * it removes an old one, so the first save would fail, and the steps since the start with it. */
static int check_room(const pr_program *prog, const char *dir, char *err)
{
    struct statvfs fs;
    if (statvfs(dir, &fs) != 0 || fs.f_blocks == 0) // a file system that does not say: nothing to compare
        return 0;
    double free_bytes = (double)fs.f_bavail * (double)fs.f_frsize, need = (double)checkpoint_bytes(prog);
    if (free_bytes >= need)
        return 0;
    return pr_fail(err, "%s: %.1f MB free, one checkpoint of this model needs %.1f MB (weights and "
                   "optimizer state): make room, or train in another folder (--ckpt-dir DIR)", dir,
                   free_bytes / 1e6, need / 1e6);
}

/* The folder this process's claim made, and the first of its parents it made (mkdir -p): ""
 * when the folder was there before. */
static char made_dir[3001], made_top[3001];

/* made_top: the shortest leading part of dir (cut at a slash) that does not exist. */
static void first_missing(const char *dir)
{
    struct stat st;
    snprintf(made_top, sizeof made_top, "%s", dir);
    for (char *slash = strchr(made_top + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        if (stat(made_top, &st) != 0)
            return;
        *slash = '/';
    }
}

int pr_ckpt_claim(const pr_run *run, const char *dir, char *const *argv, char *err)
{
    struct stat st;
    int existed = stat(dir, &st) == 0;
    if (run->opt.resume && !existed) // nothing to resume from: loading says so
        return 0;
    if (!existed)
        first_missing(dir);
    if (pr_ckpt_prepare(dir, err) != 0)
        return -1;
    if (!existed)
        snprintf(made_dir, sizeof made_dir, "%s", dir);
    if (take_lock(dir, argv, err) != 0 || probe_writes(dir, err) != 0)
        return -1;
    return check_room(run->prog, dir, err);
}

void pr_ckpt_unclaim(void)
{
    char path[3100];
    // Only the lock's holder: two runs started at once both find no folder and both make it;
    // the one the lock refused must leave the folder, and the lock file, to the one that holds it.
    if (!made_dir[0] || lock_fd < 0)
        return;
    snprintf(path, sizeof path, "%s/lock", made_dir);
    unlink(path);
    // leaf first, up to the first level made; rmdir fails, as it should, where anything else is
    for (char *slash = made_dir + strlen(made_dir); rmdir(made_dir) == 0 && strcmp(made_dir, made_top) != 0;) {
        while (slash > made_dir && *slash != '/')
            slash--;
        if (slash == made_dir)
            break;
        *slash = '\0';
    }
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
        [ST_REPLICAS] = prog->replicas > 1 ? prog->replicas : 0,
        [ST_MICRO] = prog->micro, [ST_WINDOW] = run->tab->window};
    part model[] = {{mh, sizeof mh}, {params, (size_t)offsets[PR_CKPT_LM_HEAD] * 4}};
    part state[] = {{sh, sizeof sh}, {m, (size_t)total * 4}, {v, (size_t)total * 4},
                    {params + offsets[PR_CKPT_LM_HEAD], (size_t)sizes[PR_CKPT_LM_HEAD] * 4}};
    char owner[1200 + PACI_MAX_STAGES * 160];
    int at = snprintf(owner, 1200, "run %s\nprogram %.1000s\nstep %lld\nlr_schedule steps %lld warmup %lld\n"
                      "pipeline devices %d chunks %d placement %s\n", run->run_id, prog->source ? prog->source : "?",
                      (long long)run->step, (long long)run->lr_steps, (long long)run->lr_warmup, run->tab->devices,
                      run->tab->chunks, pr_placement_name(run->tab->placement));
    for (int s = 0; s < run->p && pr_run_noise_estimated(run); s++) {
        const pr_noise_ema *e = &run->stage[s].noise;
        at += snprintf(owner + at, 160, "noise_scale stage %d g2 %a trace %a weight %a n %lld\n", s, e->g2,
                       e->trace, e->weight, (long long)e->n);
    }
    part owner_text[] = {{owner, strlen(owner)}};
    snprintf(file, sizeof file, "%s/model.bin", tmp);
    int rc = write_parts(file, model, 2, err);
    snprintf(file, sizeof file, "%s/state.bin", tmp);
    if (rc == 0)
        rc = write_parts(file, state, 4, err);
    snprintf(file, sizeof file, "%s/run.txt", tmp);
    if (rc == 0)
        rc = write_parts(file, owner_text, 1, err);
    snprintf(file, sizeof file, "%s/dgc.bin", tmp);
    if (rc == 0 && prog->dgc_density > 0 && (run->replica_runs || run->opt.world > 1))
        rc = dgc_save(run, file, err);
    free(run->dgc_gathered); // D copies of the model's size: held only for the save
    run->dgc_gathered = NULL;
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
    find_latest(ckpt_dir, previous, sizeof previous);
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

    prune(run, ckpt_dir, name, previous);
    return 0;
}

static const char *const model_fields[8] = {"magic", "version", "context", "vocab", "layers",
                                            "heads", "width", "padded vocab"};

/* Reads an llm.c GPT-2 file into the first offsets[LM_HEAD] floats of flat; rows of wte
 * past the vocabulary (llm.c pads it) are skipped. */
static int read_model(const pr_program *prog, const char *path, float *flat, int allow_padding,
                      char *err)
{
    FILE *f = pr_open_regular(path, "checkpoint", err);
    if (!f)
        return -1;
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

/* The route every refused resume points to: a new run from the checkpoint's whole model
 * (--init reads the head from the state.bin beside model.bin), in a folder of its own so that
 * the checkpoints it starts from stay. */
static void fresh_route(const char *dir, const char *name, char *route, size_t size)
{
    snprintf(route, size, "start a new run from its weights, head included, in another folder: "
             "--init %s/%s/model.bin --ckpt-dir %s-from-%s", dir, name, dir, name);
}

/* The state header against the program: shape, optimizer, and the global batch in sequences
 * (micro x window x data), on which the compiled lr and the data position depend. */
static int check_state_header(const pr_run *run, const int64_t sh[STATE_HEADER_INTS], int64_t total,
                              const char *path, const char *dir, const char *name, char *err)
{
    const pr_program *prog = run->prog;
    char route[9000];
    fresh_route(dir, name, route, sizeof route);
    int64_t want[STATE_HEADER_INTS] = {PR_STATE_MAGIC, PR_STATE_VERSION, prog->layers, prog->width,
                                       prog->heads, prog->context, prog->vocab, prog->tied};
    // Either version, as long as the optimizer that wrote it is the program's.
    int64_t written_by = sh[ST_VERSION] == STATE_VERSION_OPTIMIZER ? sh[ST_OPTIMIZER] : PR_OPT_ADAMW;
    if (sh[ST_MAGIC] == want[ST_MAGIC] && sh[ST_VERSION] == STATE_VERSION_OPTIMIZER) {
        want[ST_VERSION] = STATE_VERSION_OPTIMIZER;
        if (written_by != prog->optimizer)
            return pr_fail(err, "%s: written by optimizer %s (%lld), the program uses %s: its state "
                           "does not carry over; %s", path, optimizer_name(written_by),
                           (long long)written_by, optimizer_name(prog->optimizer), route);
    } else if (sh[ST_MAGIC] == want[ST_MAGIC] && sh[ST_VERSION] == PR_STATE_VERSION &&
               prog->optimizer != PR_OPT_ADAMW) {
        return pr_fail(err, "%s: state version %d holds AdamW's moments, the program uses %s: its "
                       "state does not carry over; %s", path, PR_STATE_VERSION,
                       optimizer_name(prog->optimizer), route);
    }
    for (int i = 0; i <= ST_TIED; i++)
        if (sh[i] != want[i])
            return pr_fail(err, "%s: %s is %lld, the program has %lld", path, state_fields[i],
                           (long long)sh[i], (long long)want[i]);
    // The data position is the step times the global batch (pr_tokens_batch), and the lr was
    // derived from that batch: another one would skip or repeat data under the saved moments.
    // (the DSL's ranges: micro and window at most 1e6, data at most 1024)
    if (sh[ST_MICRO] < 0 || sh[ST_MICRO] > 1000000 || sh[ST_WINDOW] < 0 || sh[ST_WINDOW] > 1000000 ||
        sh[ST_REPLICAS] < 0 || sh[ST_REPLICAS] > 1024)
        return pr_fail(err, "%s: micro %lld, window %lld or data %lld is out of range (corrupt)", path,
                       (long long)sh[ST_MICRO], (long long)sh[ST_WINDOW], (long long)sh[ST_REPLICAS]);
    int64_t written_d = sh[ST_REPLICAS] > 1 ? sh[ST_REPLICAS] : 1;
    int64_t program_d = prog->replicas > 1 ? prog->replicas : 1;
    int64_t written_k = sh[ST_WINDOW] > 0 ? sh[ST_WINDOW] : run->tab->window;
    int64_t written_b = sh[ST_MICRO] > 0 ? sh[ST_MICRO] : prog->micro;
    if (written_b * written_k * written_d != (int64_t)prog->micro * run->tab->window * program_d)
        return pr_fail(err, "%s: written with micro %lld x window %lld x data %lld = %lld sequences "
                       "a step, the program has micro %d x window %d x data %lld = %lld: the data "
                       "position (step x sequences a step) and the lr derived from the batch would "
                       "change; resume with a program of %lld sequences a step, or %s", path,
                       (long long)written_b, (long long)written_k, (long long)written_d,
                       (long long)(written_b * written_k * written_d), prog->micro, run->tab->window,
                       (long long)program_d, (long long)prog->micro * run->tab->window * program_d,
                       (long long)(written_b * written_k * written_d), route);
    if (sh[ST_FLOATS] != total || sh[ST_STEP] < 0 || sh[ST_STEP] > run->tab->total_steps)
        return pr_fail(err, "%s: step %lld or size %lld does not fit the program (%d steps, %lld floats)",
                       path, (long long)sh[ST_STEP], (long long)sh[ST_FLOATS], run->tab->total_steps,
                       (long long)total);
    return 0;
}

/* Reads DIR/NAME/state.bin after its header: the moments into m and v, the head into its
 * place in params. */
static int read_state(const pr_run *run, const char *dir, const char *name, int64_t sh[STATE_HEADER_INTS],
                      float *params, float *m, float *v, char *err)
{
    int64_t sizes[PR_CKPT_COUNT], offsets[PR_CKPT_COUNT];
    pr_ckpt_sizes(run->prog, sizes);
    int64_t total = pr_ckpt_offsets(run->prog, offsets);
    char path[4096 + 300];
    snprintf(path, sizeof path, "%s/%s/state.bin", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return pr_fail(err, "%s: cannot open checkpoint state: %s", path, strerror(errno));
    int rc = 0;
    if (fread(sh, 8, STATE_HEADER_INTS, f) != STATE_HEADER_INTS)
        rc = pr_fail(err, "%s: truncated header", path);
    if (rc == 0)
        rc = check_state_header(run, sh, total, path, dir, name, err);
    size_t n = (size_t)total, head = (size_t)sizes[PR_CKPT_LM_HEAD];
    if (rc == 0 && (fread(m, 4, n, f) != n || fread(v, 4, n, f) != n ||
                    fread(params + offsets[PR_CKPT_LM_HEAD], 4, head, f) != head ||
                    fgetc(f) != EOF))
        rc = pr_fail(err, "%s: truncated or oversized state", path);
    fclose(f);
    return rc;
}

/* The noise scale's averages continue from the checkpoint's; a checkpoint without them (an
 * older pacic's, or one of another stage count) restarts them, said in one line. */
static void resume_noise(pr_run *run, const ckpt_owner *owner)
{
    if (!pr_run_noise_estimated(run) || run->opt.sample > 0)
        return;
    if (owner->noise_stages == run->p) {
        for (int s = 0; s < run->p; s++)
            pr_run_noise_restore(run, s, &owner->noise[s]);
        return;
    }
    if (run->opt.world <= 1 || run->opt.rank == 0)
        fprintf(stderr, "run: note: %s/run.txt %s, so the noise scale's averages start afresh\n",
                run->resumed_from, owner->noise_stages < 0 ? "has an unreadable noise_scale line"
                : owner->noise_stages == 0 ? "records no noise-scale averages"
                : "records the noise-scale averages of another number of stages");
}

/* Virtual stages: a resume keeps the chunks a device and their placement (the devices may
 * change, as the stages may without chunks). Refused before anything is read; the folder
 * stays as it is. */
static int check_chunks(const pr_run *run, const char *dir, const char *name, char *err)
{
    ckpt_owner owner;
    read_owner(dir, name, &owner);
    const paci_table *tab = run->tab;
    if (owner.chunks == tab->chunks && owner.placement == tab->placement)
        return 0;
    char route[9000];
    fresh_route(dir, name, route, sizeof route);
    if (owner.chunks < 0)
        return pr_fail(err, "%s/%s/run.txt: its pipeline line (devices, chunks, placement) cannot be read; %s",
                       dir, name, route);
    return pr_fail(err, "%s/%s: written by a run of %d chunk%s a device in placement %s, the program runs %d in "
                   "placement %s: a resume keeps the chunks and their placement; resume with a program of "
                   "chunks %d and placement %s, or %s", dir, name, owner.chunks, owner.chunks == 1 ? "" : "s",
                   pr_placement_name(owner.placement), tab->chunks, pr_placement_name(tab->placement),
                   owner.chunks, pr_placement_name(owner.placement), route);
}

int pr_ckpt_load_latest(pr_run *run, const char *ckpt_dir, char *err)
{
    char name[256], path[4096];
    find_latest(ckpt_dir, name, sizeof name);
    if (!name[0])
        return 1;
    if (strchr(name, '/'))
        return pr_fail(err, "%s/latest: names '%s', not a checkpoint folder", ckpt_dir, name);
    if (check_chunks(run, ckpt_dir, name, err) != 0)
        return -1;
    int64_t offsets[PR_CKPT_COUNT];
    int64_t total = pr_ckpt_offsets(run->prog, offsets);
    float *params = pr_alloc((size_t)total * 4), *m = pr_alloc((size_t)total * 4),
          *v = pr_alloc((size_t)total * 4);
    int64_t sh[STATE_HEADER_INTS];
    snprintf(path, sizeof path, "%s/%s/model.bin", ckpt_dir, name);
    int rc = read_model(run->prog, path, params, 0, err);
    if (rc == 0)
        rc = read_state(run, ckpt_dir, name, sh, params, m, v, err);
    if (rc == 0)
        rc = dgc_load(run, ckpt_dir, name, err);
    if (rc == 0) {
        pr_scatter(run, 0, params);
        pr_scatter(run, 1, m);
        pr_scatter(run, 2, v);
        run->step = sh[ST_STEP];
        for (int s = 0; s < run->p; s++)
            run->stage[s].t = run->step;
        // The resumed run is the one that wrote the checkpoint: its older ones are its own.
        ckpt_owner owner;
        read_owner(ckpt_dir, name, &owner);
        if (owner.run[0])
            snprintf(run->run_id, sizeof run->run_id, "%s", owner.run);
        // The lr continues on the schedule the run started with (run.c may --reschedule).
        run->lr_recorded = owner.lr_steps > 0;
        if (run->lr_recorded) {
            run->lr_steps = owner.lr_steps;
            run->lr_warmup = owner.lr_warmup;
        }
        snprintf(run->resumed_from, sizeof run->resumed_from, "%s/%s", ckpt_dir, name);
        resume_noise(run, &owner);
    }
    free(params);
    free(m);
    free(v);
    return rc;
}

/* An untied head beside an llm.c file: DIR/state.bin of one of our checkpoints, when its
 * header is the program's shape (the moments are not read: any optimizer, D or batch will
 * do). 1 when there is no such file (said when `say`), or it is of a tied model (wte is its
 * head). */
static int read_head_beside(const pr_program *prog, const char *model_path, float *head,
                            int64_t head_floats, int64_t total, bool say, char *err)
{
    char path[4200];
    const char *slash = strrchr(model_path, '/');
    snprintf(path, sizeof path, "%.*sstate.bin", slash ? (int)(slash - model_path + 1) : 0, model_path);
    struct stat beside;
    if (stat(path, &beside) == 0 && !S_ISREG(beside.st_mode))
        return pr_fail(err, "%s: beside %s, but not a regular file: the untied head it would hold cannot be "
                       "read (move it away to start with wte as the head)", path, model_path);
    FILE *f = fopen(path, "rb");
    if (!f) {
        // a pacic model.bin copied without its state.bin has lost its trained head
        if (say)
            fprintf(stderr, "run: note: --init %s: no state.bin beside it, so the untied LM head starts as "
                            "a copy of wte; a pacic checkpoint of a model with stages > 1 keeps its trained "
                            "head in the state.bin beside model.bin: copy it along to keep the head\n",
                    model_path);
        return 1;
    }
    int64_t sh[STATE_HEADER_INTS];
    int rc = 0;
    struct stat st;
    if (fread(sh, 8, STATE_HEADER_INTS, f) != STATE_HEADER_INTS || sh[ST_MAGIC] != PR_STATE_MAGIC ||
        fstat(fileno(f), &st) != 0)
        rc = pr_fail(err, "%s: beside %s, but not a pacic state file: the untied head it would "
                     "hold cannot be read (move it away to start with wte as the head)", path, model_path);
    int64_t shape[] = {prog->layers, prog->width, prog->heads, prog->context, prog->vocab};
    for (int i = ST_LAYERS; rc == 0 && i <= ST_VOCAB; i++)
        if (sh[i] != shape[i - ST_LAYERS])
            rc = pr_fail(err, "%s: %s is %lld, the program has %lld (the state beside %s, which "
                         "holds its head)", path, state_fields[i], (long long)sh[i],
                         (long long)shape[i - ST_LAYERS], model_path);
    if (rc == 0 && sh[ST_TIED])
        rc = 1;
    int64_t expect = STATE_HEADER_INTS * 8 + (2 * total + head_floats) * 4;
    if (rc == 0 && st.st_size != expect)
        rc = pr_fail(err, "%s: %lld bytes, the shape needs %lld (the state beside %s, which holds "
                     "its head: truncated or corrupt)", path, (long long)st.st_size,
                     (long long)expect, model_path);
    if (rc == 0 && (fseek(f, (long)(expect - head_floats * 4), SEEK_SET) != 0 ||
                    fread(head, 4, (size_t)head_floats, f) != (size_t)head_floats))
        rc = pr_fail(err, "%s: read failed (the state beside %s, which holds its head)", path, model_path);
    fclose(f);
    return rc;
}

int pr_load_llmc(pr_run *run, const char *path, char *err)
{
    int64_t sizes[PR_CKPT_COUNT], offsets[PR_CKPT_COUNT];
    pr_ckpt_sizes(run->prog, sizes);
    int64_t total = pr_ckpt_offsets(run->prog, offsets);
    float *params = pr_alloc((size_t)total * 4);
    int rc = read_model(run->prog, path, params, 1, err);
    // Our checkpoint of an untied model keeps its head in the state.bin beside model.bin;
    // an llm.c file (or a tied model's) has none, and its head is wte.
    if (rc == 0 && !run->prog->tied)
        rc = read_head_beside(run->prog, path, params + offsets[PR_CKPT_LM_HEAD], sizes[PR_CKPT_LM_HEAD],
                              total, run->opt.world <= 1 || run->opt.rank == 0, err);
    if (rc == 1) {
        memcpy(params + offsets[PR_CKPT_LM_HEAD], params + offsets[PR_CKPT_WTE],
               (size_t)sizes[PR_CKPT_LM_HEAD] * 4);
        rc = 0;
    }
    if (rc == 0)
        pr_scatter(run, 0, params);
    free(params);
    return rc;
}

/* The shape in DIR/NAME/model.bin against the program's: "" when they agree (--resume can
 * continue it), else "layers 4, the program has 2". */
static void shape_difference(const pr_program *prog, const char *dir, const char *name, char *out,
                             size_t size)
{
    char path[4096 + 300];
    int32_t h[MODEL_HEADER_INTS], want[MODEL_HEADER_INTS];
    snprintf(path, sizeof path, "%s/%s/model.bin", dir, name);
    out[0] = '\0';
    FILE *f = fopen(path, "rb");
    int got = f && fread(h, 4, MODEL_HEADER_INTS, f) == MODEL_HEADER_INTS;
    if (f)
        fclose(f);
    if (!got) {
        snprintf(out, size, "its model.bin cannot be read");
        return;
    }
    model_header(prog, want);
    for (int i = 2; i < 7; i++)
        if (h[i] != want[i]) {
            snprintf(out, size, "%s %d, the program has %d", model_fields[i], h[i], want[i]);
            return;
        }
}

int pr_ckpt_guard(const pr_run *run, const char *dir, char *err)
{
    if (run->opt.overwrite)
        return 0;
    // A fresh run would replace any checkpoint; a resumed one those of other runs after its
    // step (its own, a kill between a save's rename and its `latest` can leave: the resumed
    // run writes them again, the same bits).
    int64_t after = run->opt.resume ? run->step : -1, first = -1, last = -1;
    int count = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int64_t step = checkpoint_step(e->d_name);
        ckpt_owner owner = {.run = ""};
        if (step > after && run->opt.resume)
            read_owner(dir, e->d_name, &owner);
        if (step > after && complete(dir, e->d_name) && strcmp(owner.run, run->run_id) != 0) {
            first = count == 0 || step < first ? step : first;
            last = step > last ? step : last;
            count++;
        }
    }
    if (d)
        closedir(d);
    if (count == 0)
        return 0;
    static const char overwrite[] = "--overwrite to replace them (this run deletes them once it "
                                    "has saved its first checkpoint)";
    if (run->opt.resume)
        return pr_fail(err, "%s: holds %d checkpoint%s of steps %lld to %lld, later than step %lld "
                       "that --resume continues from (%s): resuming would replace them; move them "
                       "out of the folder, or pass %s", dir, count, count > 1 ? "s" : "",
                       (long long)first, (long long)last, (long long)run->step, run->resumed_from,
                       overwrite);
    char latest[256], shape[160];
    ckpt_owner owner;
    find_latest(dir, latest, sizeof latest);
    if (!latest[0] || strchr(latest, '/'))
        snprintf(latest, sizeof latest, "step_%08lld", (long long)last);
    read_owner(dir, latest, &owner);
    shape_difference(run->prog, dir, latest, shape, sizeof shape);
    char whose[1200];
    snprintf(whose, sizeof whose, "%s%.1000s", owner.program[0] ? "of " : "",
             owner.program[0] ? owner.program : "of a run that did not say its program");
    if (!shape[0])
        return pr_fail(err, "%s: holds the checkpoints of a run %s (steps %lld to %lld, latest "
                       "%s), which a new run here would replace: continue it with --resume; or "
                       "train in another folder (--ckpt-dir DIR, or `checkpoint { dir ... }` in "
                       "the program); or pass %s", dir, whose, (long long)first, (long long)last,
                       latest, overwrite);
    return pr_fail(err, "%s: holds the checkpoints of a run %s (steps %lld to %lld, latest %s), "
                   "another model (%s), which a new run here would replace: train in another "
                   "folder (--ckpt-dir DIR, or `checkpoint { dir ... }` in the program), or pass %s",
                   dir, whose, (long long)first, (long long)last, latest, shape, overwrite);
}
