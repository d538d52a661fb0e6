/* hf.c: Hugging Face GPT-2 weights: `run --export hf DIR` writes a folder transformers'
 * GPT2LMHeadModel loads (config.json, model.safetensors), and `run --init` reads such a
 * folder or a bare .safetensors file.
 *
 * safetensors: an 8-byte little-endian header length N, N bytes of JSON mapping each tensor
 * name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets into the data that follows
 * the header) plus an optional "__metadata__" of strings, then the raw little-endian data.
 * HF's GPT-2 keeps its four matrices per block in Conv1D layout, [in, out]: the transpose of
 * llm.c's [out, in]. Every number of a file is checked before it is used.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "prt.h"

#define HEADER_LIMIT (100LL << 20) /* bytes of JSON header accepted; real GPT-2 ones are ~20 KB */

/* ---- JSON (jansson) ------------------------------------------------------------------ */

/* jansson stops on a repeated key just after its closing quote: the key is the JSON string
 * that ends there. Inside it every quote follows a backslash; its opening quote follows none. */
static char *repeated_key(const char *text, int end)
{
    for (int at = end - 2; at >= 0; at--) {
        if (text[at] != '"' || (at > 0 && text[at - 1] == '\\'))
            continue;
        json_t *key = json_loadb(text + at, (size_t)(end - at), JSON_DECODE_ANY, NULL);
        char *name = json_is_string(key) ? strdup(json_string_value(key)) : NULL;
        json_decref(key);
        return name;
    }
    return NULL;
}

/* The whole text is one JSON object (trailing spaces allowed: safetensors pads with them). A
 * repeated key is refused: jansson would otherwise keep the last. NULL with err on failure. */
static json_t *load_object(const char *text, size_t len, const char *path, const char *what, char *err)
{
    json_error_t error;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &error);
    if (!root && json_error_code(&error) == json_error_duplicate_key) {
        char *key = repeated_key(text, error.position);
        pr_fail(err, "%s: %s holds the key '%.200s' twice", path, what, key ? key : "?");
        free(key);
    } else if (!root) {
        pr_fail(err, "%s: %s is not valid JSON: %s at line %d, column %d", path, what, error.text,
                error.line, error.column);
    } else if (!json_is_object(root)) {
        pr_fail(err, "%s: %s is not a JSON object", path, what);
        json_decref(root);
        root = NULL;
    }
    return root;
}

/* ---- the tensors of a GPT-2, in HF's names, shapes and order ------------------------- */

typedef struct hf_tensor {
    char name[96];       /* without the "transformer." prefix for all but lm_head */
    int32_t ndim;
    int64_t dims[2];     /* HF's shape */
    int64_t offset;      /* floats into the flat checkpoint layout */
    int transposed;      /* Conv1D weight: HF [in, out] is llm.c's [out, in] transposed */
} hf_tensor;

static const struct {
    int32_t tensor;
    const char *suffix;
    int transposed;
} block_tensors[] = {
    {PR_CKPT_LN1W, "ln_1.weight", 0},         {PR_CKPT_LN1B, "ln_1.bias", 0},
    {PR_CKPT_QKVW, "attn.c_attn.weight", 1},  {PR_CKPT_QKVB, "attn.c_attn.bias", 0},
    {PR_CKPT_ATTPROJW, "attn.c_proj.weight", 1}, {PR_CKPT_ATTPROJB, "attn.c_proj.bias", 0},
    {PR_CKPT_LN2W, "ln_2.weight", 0},         {PR_CKPT_LN2B, "ln_2.bias", 0},
    {PR_CKPT_FCW, "mlp.c_fc.weight", 1},      {PR_CKPT_FCB, "mlp.c_fc.bias", 0},
    {PR_CKPT_FCPROJW, "mlp.c_proj.weight", 1}, {PR_CKPT_FCPROJB, "mlp.c_proj.bias", 0},
};

static hf_tensor vector_tensor(const char *name, int64_t n, int64_t offset)
{
    hf_tensor t = {.ndim = 1, .dims = {n, 0}, .offset = offset};
    snprintf(t.name, sizeof t.name, "%s", name);
    return t;
}

/* The model's tensors (lm_head last, only when untied); returns how many (at most
 * 4 + 12 * layers + 1). */
static int32_t hf_tensors(const pr_program *prog, hf_tensor *out)
{
    int64_t L = prog->layers, C = prog->width, V = prog->vocab, T = prog->context;
    int64_t sizes[PR_CKPT_COUNT], offsets[PR_CKPT_COUNT];
    pr_ckpt_sizes(prog, sizes);
    pr_ckpt_offsets(prog, offsets);
    int32_t n = 0;
    out[n] = vector_tensor("wte.weight", V, offsets[PR_CKPT_WTE]);
    out[n].ndim = 2, out[n++].dims[1] = C;
    out[n] = vector_tensor("wpe.weight", T, offsets[PR_CKPT_WPE]);
    out[n].ndim = 2, out[n++].dims[1] = C;
    for (int64_t l = 0; l < L; l++) {
        for (size_t k = 0; k < sizeof block_tensors / sizeof block_tensors[0]; k++) {
            int32_t c = block_tensors[k].tensor;
            int64_t per_layer = sizes[c] / L;
            hf_tensor *t = &out[n++];
            *t = vector_tensor("", per_layer, offsets[c] + l * per_layer);
            snprintf(t->name, sizeof t->name, "h.%lld.%s", (long long)l, block_tensors[k].suffix);
            if (block_tensors[k].transposed) {
                // llm.c's rows are the outputs: per_layer / C of them for a C-wide input,
                // except c_proj of the MLP, whose input is 4C wide.
                int64_t in = c == PR_CKPT_FCPROJW ? 4 * C : C;
                t->ndim = 2, t->dims[0] = in, t->dims[1] = per_layer / in, t->transposed = 1;
            }
        }
    }
    out[n++] = vector_tensor("ln_f.weight", C, offsets[PR_CKPT_LNFW]);
    out[n++] = vector_tensor("ln_f.bias", C, offsets[PR_CKPT_LNFB]);
    if (!prog->tied) {
        out[n] = vector_tensor("lm_head.weight", V, offsets[PR_CKPT_LM_HEAD]);
        out[n].ndim = 2, out[n++].dims[1] = C;
    }
    return n;
}

static int64_t numel(const hf_tensor *t)
{
    return t->ndim == 1 ? t->dims[0] : t->dims[0] * t->dims[1];
}

/* The name in the file: lm_head at the top, the rest under "transformer.". */
static void file_name(const hf_tensor *t, const char *prefix, char *out, size_t size)
{
    snprintf(out, size, "%s%s", strcmp(t->name, "lm_head.weight") == 0 ? "" : prefix, t->name);
}

static void shape_text(int32_t ndim, const int64_t *dims, char *out, size_t size)
{
    size_t len = (size_t)snprintf(out, size, "[");
    for (int32_t i = 0; i < ndim && len < size; i++)
        len += (size_t)snprintf(out + len, size - len, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (len < size)
        snprintf(out + len, size - len, "]");
}

/* Between HF's layout and llm.c's for one tensor: a Conv1D weight [in, out] to [out, in]
 * (to_llmc) or back; anything else is copied. */
static void convert_layout(const hf_tensor *t, const float *from, float *to, int to_llmc)
{
    if (!t->transposed) {
        memcpy(to, from, (size_t)numel(t) * sizeof(float));
        return;
    }
    int64_t in = t->dims[0], outs = t->dims[1];
    for (int64_t i = 0; i < in; i++)
        for (int64_t o = 0; o < outs; o++) {
            if (to_llmc)
                to[o * in + i] = from[i * outs + o];
            else
                to[i * outs + o] = from[o * in + i];
        }
}

/* ---- export ------------------------------------------------------------------------- */

/* A JSON text from jansson, or an internal error: jansson fails only when out of memory. */
static char *dump_json(json_t *value, size_t flags)
{
    char *text = value ? json_dumps(value, flags) : NULL;
    if (!text)
        pr_internal("out of memory for the JSON of an export");
    json_decref(value);
    return text;
}

static int open_new(const char *path, int *fd, char *err)
{
    *fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (*fd < 0)
        return pr_fail(err, "%s: cannot create: %s", path, strerror(errno));
    return 0;
}

static int close_synced(int fd, const char *path, char *err)
{
    if (fsync(fd) != 0) {
        int saved = errno;
        close(fd);
        return pr_fail(err, "%s: cannot flush to disk: %s", path, strerror(saved));
    }
    if (close(fd) != 0)
        return pr_fail(err, "%s: cannot flush to disk: %s", path, strerror(errno));
    return 0;
}

static int write_config(const pr_program *prog, const char *path, char *err)
{
    // pacic trains without dropout.
    char *config = dump_json(
        json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:n, s:s, s:f, s:f, s:f, s:f, s:f, s:b, s:b, s:s}",
                  "architectures", "GPT2LMHeadModel", "model_type", "gpt2", "vocab_size", prog->vocab,
                  "n_positions", prog->context, "n_ctx", prog->context, "n_embd", prog->width,
                  "n_layer", prog->layers, "n_head", prog->heads, "n_inner", "activation_function",
                  "gelu_new", "layer_norm_epsilon", 1e-5, "resid_pdrop", 0.0, "embd_pdrop", 0.0,
                  "attn_pdrop", 0.0, "initializer_range", 0.02, "scale_attn_weights", 1,
                  "tie_word_embeddings", prog->tied, "torch_dtype", "float32"),
        JSON_INDENT(2) | JSON_REAL_PRECISION(15));
    int fd;
    int rc = open_new(path, &fd, err);
    if (rc == 0) {
        rc = pr_write_all(fd, config, strlen(config), path, err);
        if (rc == 0)
            rc = pr_write_all(fd, "\n", 1, path, err);
        if (rc == 0)
            rc = close_synced(fd, path, err);
        else
            close(fd);
    }
    free(config);
    return rc;
}

static int write_safetensors(const pr_program *prog, const float *flat, const char *path, char *err)
{
    hf_tensor *ts = pr_alloc((size_t)(5 + 12 * (int64_t)prog->layers) * sizeof *ts);
    int32_t n = hf_tensors(prog, ts);
    json_t *tensors = json_pack("{s:{s:s}}", "__metadata__", "format", "pt");
    int64_t at = 0, largest = 0;
    for (int32_t i = 0; i < n && tensors; i++) {
        char name[128];
        file_name(&ts[i], "transformer.", name, sizeof name);
        int64_t bytes = numel(&ts[i]) * 4;
        json_t *shape = ts[i].ndim == 2 ? json_pack("[I, I]", (json_int_t)ts[i].dims[0], (json_int_t)ts[i].dims[1])
                                        : json_pack("[I]", (json_int_t)ts[i].dims[0]);
        // A failed pack is NULL, which json_pack's "o" and json_object_set_new refuse.
        json_t *entry = json_pack("{s:s, s:o, s:[I, I]}", "dtype", "F32", "shape", shape, "data_offsets",
                                  (json_int_t)at, (json_int_t)(at + bytes));
        if (json_object_set_new(tensors, name, entry) != 0) {
            json_decref(tensors);
            tensors = NULL;
        }
        at += bytes;
        largest = numel(&ts[i]) > largest ? numel(&ts[i]) : largest;
    }
    char *compact = dump_json(tensors, JSON_COMPACT);
    size_t header_len = (strlen(compact) + 7) / 8 * 8; // the data then starts 8-byte aligned, as HF's writer does
    char *header = pr_alloc(header_len);
    memset(header, ' ', header_len);
    memcpy(header, compact, strlen(compact));
    free(compact);
    unsigned char length[8];
    for (int i = 0; i < 8; i++)
        length[i] = (unsigned char)((uint64_t)header_len >> (8 * i));
    float *buffer = pr_alloc((size_t)largest * sizeof(float));
    int fd;
    int rc = open_new(path, &fd, err);
    if (rc == 0) {
        rc = pr_write_all(fd, length, 8, path, err);
        if (rc == 0)
            rc = pr_write_all(fd, header, header_len, path, err);
        for (int32_t i = 0; i < n && rc == 0; i++) {
            convert_layout(&ts[i], flat + ts[i].offset, buffer, 0);
            rc = pr_write_all(fd, buffer, (size_t)numel(&ts[i]) * 4, path, err);
        }
        if (rc == 0)
            rc = close_synced(fd, path, err);
        else
            close(fd);
    }
    free(buffer);
    free(header);
    free(ts);
    return rc;
}

static void remove_export(const char *tmp)
{
    char file[4200];
    snprintf(file, sizeof file, "%s/config.json", tmp);
    unlink(file);
    snprintf(file, sizeof file, "%s/model.safetensors", tmp);
    unlink(file);
    rmdir(tmp);
}

/* DIR may be missing or an empty folder (rename replaces an empty one); anything else is
 * refused, so an export never mixes with or destroys what is there. A process killed while
 * exporting leaves DIR as it was and a DIR.tmp-PID folder to remove. */
int pr_export_hf(pr_run *run, const char *dir, char *err)
{
    char base[4000];
    if (strlen(dir) >= sizeof base - 64)
        return pr_fail(err, "%.60s...: export folder name too long", dir);
    strcpy(base, dir);
    for (size_t len = strlen(base); len > 1 && base[len - 1] == '/'; len--)
        base[len - 1] = '\0';
    struct stat st;
    if (stat(base, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return pr_fail(err, "%s: exists and is not a folder; the export needs a new or empty folder", base);
        DIR *d = opendir(base);
        struct dirent *e;
        int empty = d != NULL;
        while (d && empty && (e = readdir(d)))
            empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
        if (d)
            closedir(d);
        if (!empty)
            return pr_fail(err, "%s: exists and is not empty; the export needs a new or empty folder", base);
    }
    char tmp[4100], file[4200], parent[4000];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", base, (long)getpid());
    strcpy(parent, base);
    char *slash = strrchr(parent, '/');
    if (!slash)
        strcpy(parent, ".");
    else if (slash == parent)
        parent[1] = '\0';
    else
        *slash = '\0';
    if (mkdir(tmp, 0755) != 0)
        return pr_fail(err, "%s: cannot create the export folder %s: %s", base, tmp, strerror(errno));

    int64_t offsets[PR_CKPT_COUNT];
    float *flat = pr_alloc((size_t)pr_ckpt_offsets(run->prog, offsets) * sizeof(float));
    pr_gather(run, 0, flat);
    snprintf(file, sizeof file, "%s/config.json", tmp);
    int rc = write_config(run->prog, file, err);
    snprintf(file, sizeof file, "%s/model.safetensors", tmp);
    if (rc == 0)
        rc = write_safetensors(run->prog, flat, file, err);
    free(flat);
    if (rc == 0)
        rc = pr_fsync_dir(tmp, err);
    if (rc == 0 && rename(tmp, base) != 0)
        rc = pr_fail(err, "%s: cannot rename the export into place: %s", base, strerror(errno));
    if (rc != 0) {
        remove_export(tmp);
        return rc;
    }
    return pr_fsync_dir(parent, err);
}

/* ---- import ------------------------------------------------------------------------- */

typedef struct st_entry {
    const char *name;
    int dtype_bytes;     /* 4: F32, 2: F16 or BF16 */
    int bf16;
    int32_t ndim;
    int64_t dims[8];
    int64_t begin, end;  /* bytes into the data */
    int used;
} st_entry;

static int entry_order(const void *a, const void *b)
{
    return strcmp(((const st_entry *)a)->name, ((const st_entry *)b)->name);
}

static float from_f16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    union { uint32_t u; float f; } bits;
    if (exponent == 0x1f) {
        bits.u = sign | 0x7f800000u | (mantissa << 13);
    } else if (exponent == 0) { // zero or subnormal: mantissa * 2^-24, exact in float
        bits.f = (float)mantissa * (1.0f / 16777216.0f);
        bits.u |= sign;
    } else {
        bits.u = sign | ((exponent + 112) << 23) | (mantissa << 13);
    }
    return bits.f;
}

/* Checks one header entry: dtype, shape, and offsets that lie inside the data and span
 * exactly the bytes the shape needs. */
static int read_entry(const char *path, const char *name, const json_t *v, int64_t data_bytes,
                      st_entry *e, char *err)
{
    memset(e, 0, sizeof *e);
    e->name = name;
    const json_t *shape = json_object_get(v, "shape"), *offsets = json_object_get(v, "data_offsets");
    const char *dtype = json_string_value(json_object_get(v, "dtype"));
    if (!json_object_get(v, "dtype") || !shape || !offsets || json_object_size(v) != 3)
        return pr_fail(err, "%s: tensor '%s': needs exactly dtype, shape and data_offsets", path, name);
    if (!dtype)
        return pr_fail(err, "%s: tensor '%s': dtype is not a string", path, name);
    if (strcmp(dtype, "F32") == 0)
        e->dtype_bytes = 4;
    else if (strcmp(dtype, "F16") == 0 || strcmp(dtype, "BF16") == 0)
        e->dtype_bytes = 2, e->bf16 = dtype[0] == 'B';
    else
        return pr_fail(err, "%s: tensor '%s': dtype %.20s, expected F32, BF16 or F16", path, name, dtype);
    if (!json_is_array(shape) || json_array_size(shape) > 8)
        return pr_fail(err, "%s: tensor '%s': shape is not a list of at most 8 sizes", path, name);
    int64_t count = 1;
    e->ndim = (int32_t)json_array_size(shape);
    for (int32_t i = 0; i < e->ndim; i++) {
        const json_t *d = json_array_get(shape, (size_t)i);
        int64_t size = json_integer_value(d);
        if (!json_is_integer(d) || size < 0 || size > (INT64_C(1) << 40))
            return pr_fail(err, "%s: tensor '%s': shape holds a size that is not an integer in [0, 2^40]",
                           path, name);
        e->dims[i] = size;
        count = count > (INT64_C(1) << 60) / (size + 1) ? INT64_C(1) << 60 : count * size;
    }
    if (!json_is_array(offsets) || json_array_size(offsets) != 2)
        return pr_fail(err, "%s: tensor '%s': data_offsets is not [begin, end]", path, name);
    if (!json_is_integer(json_array_get(offsets, 0)) || !json_is_integer(json_array_get(offsets, 1)))
        return pr_fail(err, "%s: tensor '%s': data_offsets is not two integers", path, name);
    e->begin = json_integer_value(json_array_get(offsets, 0));
    e->end = json_integer_value(json_array_get(offsets, 1));
    if (e->begin < 0 || e->end < e->begin || e->end > data_bytes)
        return pr_fail(err, "%s: tensor '%s': data_offsets [%lld, %lld] lie outside the %lld bytes of "
                       "data (truncated or corrupt)", path, name, (long long)e->begin,
                       (long long)e->end, (long long)data_bytes);
    if (count >= (INT64_C(1) << 60) || e->end - e->begin != count * e->dtype_bytes)
        return pr_fail(err, "%s: tensor '%s': data_offsets span %lld bytes, its shape and dtype need %lld",
                       path, name, (long long)(e->end - e->begin), (long long)(count * e->dtype_bytes));
    return 0;
}

/* An attention mask older GPT-2 files store as a buffer: not a weight. */
static int is_mask_buffer(const char *name)
{
    size_t len = strlen(name);
    return (len > 10 && strcmp(name + len - 10, ".attn.bias") == 0) ||
           (len > 17 && strcmp(name + len - 17, ".attn.masked_bias") == 0);
}

static int read_at(int fd, void *out, size_t bytes, int64_t offset)
{
    char *p = out;
    while (bytes > 0) {
        ssize_t r = pread(fd, p, bytes, (off_t)offset);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        bytes -= (size_t)r;
        offset += r;
    }
    return 0;
}

/* Reads the tensor the program needs from entry e into flat (llm.c layout). */
static int load_tensor(int fd, int64_t data_start, const st_entry *e, const hf_tensor *t,
                       float *flat, float *buffer, const char *path, char *err)
{
    char want[64], got[64];
    shape_text(t->ndim, t->dims, want, sizeof want);
    shape_text(e->ndim, e->dims, got, sizeof got);
    if (strcmp(want, got) != 0)
        return pr_fail(err, "%s: tensor '%s': shape %s, the program needs %s", path, e->name, got, want);
    int64_t n = numel(t);
    if (read_at(fd, buffer, (size_t)(n * e->dtype_bytes), data_start + e->begin) != 0)
        return pr_fail(err, "%s: tensor '%s': read failed (truncated?)", path, e->name);
    if (e->dtype_bytes == 2) { // widen in place from the back: each float overwrites halves already read
        const uint16_t *halves = (const uint16_t *)buffer;
        for (int64_t i = n - 1; i >= 0; i--) {
            uint16_t h = halves[i];
            buffer[i] = e->bf16 ? pr_from_bf16(h) : from_f16(h);
        }
    }
    convert_layout(t, buffer, flat + t->offset, 1);
    return 0;
}

typedef struct hf_config {
    int present;         /* read from a folder's config.json */
    int tied;            /* tie_word_embeddings (HF's default: true) */
} hf_config;

static int config_int(const json_t *config, const char *key, int required, int64_t want,
                      const char *path, char *err)
{
    const json_t *v = json_object_get(config, key);
    if (!v || json_is_null(v)) {
        if (required)
            return pr_fail(err, "%s: %s is missing (the program has %lld)", path, key, (long long)want);
        return 0;
    }
    if (!json_is_integer(v))
        return pr_fail(err, "%s: %s is not an integer", path, key);
    if (json_integer_value(v) != want)
        return pr_fail(err, "%s: %s is %lld, the program has %lld", path, key, (long long)json_integer_value(v),
                       (long long)want);
    return 0;
}

/* config.json of an HF folder against the program: the shape (heads are only here), GELU's
 * tanh form, LayerNorm's epsilon, and whether the head is tied. */
static int read_config(const pr_program *prog, const char *path, hf_config *cfg, char *err)
{
    FILE *f = pr_open_regular(path, "the config", err);
    if (!f)
        return -1;
    // a config is a few hundred bytes: the buffer grows as it fills, up to 1 MiB
    size_t cap = 4096, len = 0;
    char *data = malloc(cap);
    while (data) {
        len += fread(data + len, 1, cap - len, f);
        if (len < cap || cap == 1 << 20)
            break;
        char *grown = realloc(data, 2 * cap);
        if (!grown) {
            free(data);
            data = NULL;
        } else {
            data = grown;
            cap *= 2;
        }
    }
    int too_big = data && len == 1 << 20 && fgetc(f) != EOF;
    fclose(f);
    if (!data || too_big) {
        free(data);
        return pr_fail(err, "%s: larger than 1 MiB: not a GPT-2 config", path);
    }
    json_t *config = load_object(data, len, path, "the file", err);
    free(data);
    if (!config)
        return -1;
    const json_t *type = json_object_get(config, "model_type"), *eps = json_object_get(config, "layer_norm_epsilon"),
                 *tie = json_object_get(config, "tie_word_embeddings");
    const char *act = json_string_value(json_object_get(config, "activation_function"));
    int rc = 0;
    if (type && (!json_is_string(type) || strcmp(json_string_value(type), "gpt2") != 0))
        rc = pr_fail(err, "%s: model_type is not \"gpt2\"", path);
    if (rc == 0)
        rc = config_int(config, "n_layer", 1, prog->layers, path, err);
    if (rc == 0)
        rc = config_int(config, "n_embd", 1, prog->width, path, err);
    if (rc == 0)
        rc = config_int(config, "n_head", 1, prog->heads, path, err);
    if (rc == 0)
        rc = config_int(config, "vocab_size", 1, prog->vocab, path, err);
    if (rc == 0)
        rc = config_int(config, "n_positions", 0, prog->context, path, err);
    if (rc == 0)
        rc = config_int(config, "n_inner", 0, 4 * (int64_t)prog->width, path, err);
    if (rc == 0 && json_object_get(config, "activation_function") &&
        (!act || (strcmp(act, "gelu_new") != 0 && strcmp(act, "gelu_pytorch_tanh") != 0)))
        rc = pr_fail(err, "%s: activation_function is not gelu_new (GELU's tanh form, which pacic computes)",
                     path);
    if (rc == 0 && eps && (!json_is_number(eps) || json_number_value(eps) < 0.99e-5 ||
                           json_number_value(eps) > 1.01e-5))
        rc = pr_fail(err, "%s: layer_norm_epsilon is not 1e-5 (pacic's)", path);
    if (rc == 0 && tie && !json_is_boolean(tie))
        rc = pr_fail(err, "%s: tie_word_embeddings is not true or false", path);
    cfg->present = 1;
    cfg->tied = tie ? json_is_true(tie) : 1;
    json_decref(config);
    return rc;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* A safetensors file into flat: every tensor the program needs present, of its shape, and
 * nothing else but attention-mask buffers. The head: lm_head.weight, else wte (GPT-2 as
 * distributed is tied). */
/* Opens a safetensors file and reads its JSON header: the root object, with *fd open and
 * *data_start, *data_bytes the data section's place; NULL (and nothing open) on an error. */
static json_t *read_header(const char *path, int *fd_out, int64_t *data_start, int64_t *data_bytes, char *err)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK); // a pipe named *.safetensors: no wait in open
    if (fd < 0) {
        pr_fail(err, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    unsigned char length[8];
    uint64_t header_len = 0;
    char *header = NULL;
    json_t *root = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        pr_fail(err, "%s: not a regular file", path);
    } else if (st.st_size < 8 || read_at(fd, length, 8, 0) != 0) {
        pr_fail(err, "%s: %lld bytes: too short for a safetensors header", path, (long long)st.st_size);
    } else {
        for (int i = 7; i >= 0; i--)
            header_len = header_len << 8 | length[i];
        if (header_len > (uint64_t)(st.st_size - 8) || header_len > (uint64_t)HEADER_LIMIT)
            pr_fail(err, "%s: header length %llu runs past the end of the file (%lld bytes)%s", path,
                    (unsigned long long)header_len, (long long)st.st_size,
                    header_len > (uint64_t)HEADER_LIMIT ? " or the 100 MiB limit" : "");
        else if (!(header = malloc(header_len + 1)) || read_at(fd, header, header_len, 8) != 0)
            pr_fail(err, "%s: cannot read the %llu-byte header", path, (unsigned long long)header_len);
        else
            root = load_object(header, header_len, path, "the header", err);
    }
    free(header);
    if (!root) {
        close(fd);
        return NULL;
    }
    *fd_out = fd;
    *data_start = 8 + (int64_t)header_len;
    *data_bytes = st.st_size - *data_start;
    return root;
}

/* The header's tensor entries (its metadata and attention-mask buffers left out), sorted by
 * name; the count, or -1 at the first bad entry (in the file's order). */
static int32_t read_entries(const char *path, json_t *root, int64_t data_bytes, st_entry *entries, char *err)
{
    int32_t n = 0;
    const char *name;
    json_t *value;
    json_object_foreach(root, name, value) {
        if (strcmp(name, "__metadata__") == 0 || is_mask_buffer(name))
            continue;
        if (read_entry(path, name, value, data_bytes, &entries[n++], err) != 0)
            return -1;
    }
    qsort(entries, (size_t)n, sizeof *entries, entry_order);
    return n;
}

/* After the tensors: none left unused, and the head as config.json says it is (a tied file's
 * head only where it is wte; an untied program without one starts it as a copy of wte). */
static int settle_head(const pr_program *prog, const hf_config *cfg, const st_entry *entries, int32_t n,
                       int has_head, const hf_tensor *wte, float *flat, const char *path, char *err)
{
    for (int32_t i = 0; i < n; i++)
        if (!entries[i].used)
            return pr_fail(err, "%s: tensor '%s' is not a weight of the program's GPT-2 (%d layers)", path,
                           entries[i].name, prog->layers);
    if (cfg->present && !cfg->tied && !has_head)
        return pr_fail(err, "%s: tensor 'lm_head.weight' is missing (config.json says tie_word_embeddings false)",
                       path);
    int64_t offsets[PR_CKPT_COUNT];
    pr_ckpt_offsets(prog, offsets);
    size_t head_bytes = (size_t)wte->dims[0] * (size_t)wte->dims[1] * sizeof(float);
    // transformers would tie it to wte: take it only when it is wte.
    if (cfg->present && cfg->tied && has_head && !prog->tied &&
        memcmp(flat + offsets[PR_CKPT_LM_HEAD], flat + offsets[PR_CKPT_WTE], head_bytes) != 0)
        return pr_fail(err, "%s: tensor 'lm_head.weight' differs from wte, but config.json says "
                       "tie_word_embeddings true", path);
    if (!prog->tied && !has_head)
        memcpy(flat + offsets[PR_CKPT_LM_HEAD], flat + offsets[PR_CKPT_WTE], head_bytes);
    return 0;
}

static int read_safetensors(const pr_program *prog, const char *path, const hf_config *cfg,
                            float *flat, char *err)
{
    int fd;
    int64_t data_start, data_bytes;
    json_t *root = read_header(path, &fd, &data_start, &data_bytes, err);
    if (!root)
        return -1;
    st_entry *entries = pr_alloc((json_object_size(root) + 1) * sizeof *entries);
    int32_t n = read_entries(path, root, data_bytes, entries, err);
    int rc = n < 0 ? -1 : 0;

    // Names under "transformer." (GPT2LMHeadModel) or without it (GPT2Model, the hub's gpt2).
    const char *prefix = "transformer.";
    st_entry key = {.name = "wte.weight"};
    if (rc == 0 && bsearch(&key, entries, (size_t)n, sizeof *entries, entry_order))
        prefix = "";
    hf_tensor *ts = pr_alloc((size_t)(5 + 12 * (int64_t)prog->layers) * sizeof *ts);
    int32_t count = hf_tensors(prog, ts);
    int64_t largest = 0;
    for (int32_t i = 0; i < count; i++)
        largest = numel(&ts[i]) > largest ? numel(&ts[i]) : largest;
    float *buffer = pr_alloc((size_t)largest * sizeof(float));
    int has_head = 0;
    for (int32_t i = 0; rc == 0 && i < count + prog->tied; i++) {
        // A tied program reads a stored head only to check it is wte.
        hf_tensor head = ts[0];
        strcpy(head.name, "lm_head.weight");
        const hf_tensor *t = i < count ? &ts[i] : &head;
        char name[128], want[64];
        file_name(t, prefix, name, sizeof name);
        key.name = name;
        st_entry *e = bsearch(&key, entries, (size_t)n, sizeof *entries, entry_order);
        int is_head = strcmp(t->name, "lm_head.weight") == 0;
        if (!e && is_head)
            continue;
        if (!e) {
            shape_text(t->ndim, t->dims, want, sizeof want);
            rc = pr_fail(err, "%s: tensor '%s' is missing (the program needs %s)", path, name, want);
            break;
        }
        e->used = 1;
        has_head |= is_head;
        if (i < count) {
            rc = load_tensor(fd, data_start, e, t, flat, buffer, path, err);
            continue;
        }
        float *stored = pr_alloc((size_t)numel(t) * sizeof(float));
        head.offset = 0;
        rc = load_tensor(fd, data_start, e, &head, stored, buffer, path, err);
        if (rc == 0 && memcmp(stored, flat + ts[0].offset, (size_t)numel(t) * sizeof(float)) != 0)
            rc = pr_fail(err, "%s: tensor '%s' differs from '%swte.weight', and the program's head is "
                         "tied (tied true)", path, name, prefix);
        free(stored);
    }
    if (rc == 0)
        rc = settle_head(prog, cfg, entries, n, has_head, &ts[0], flat, path, err);
    free(buffer);
    free(ts);
    free(entries);
    json_decref(root);
    close(fd);
    return rc;
}

int pr_load_init(pr_run *run, const char *path, char *err)
{
    struct stat st;
    int folder = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    if (!folder && !ends_with(path, ".safetensors"))
        return pr_load_llmc(run, path, err);
    char file[4200];
    hf_config cfg = {0};
    if (folder) {
        snprintf(file, sizeof file, "%s/config.json", path);
        if (read_config(run->prog, file, &cfg, err) != 0)
            return -1;
        snprintf(file, sizeof file, "%s/model.safetensors", path);
    } else {
        snprintf(file, sizeof file, "%s", path);
    }
    int64_t offsets[PR_CKPT_COUNT];
    float *flat = pr_alloc((size_t)pr_ckpt_offsets(run->prog, offsets) * sizeof(float));
    int rc = read_safetensors(run->prog, file, &cfg, flat, err);
    if (rc == 0)
        pr_scatter(run, 0, flat);
    free(flat);
    return rc;
}
