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
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "prt.h"

#define HEADER_LIMIT (100LL << 20) /* bytes of JSON header accepted; real GPT-2 ones are ~20 KB */
#define JSON_DEPTH 64

/* ---- JSON: a small strict parser for the header and config.json ---------------------- */

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_kind;

typedef struct json {
    json_kind kind;
    int boolean;
    double number;
    int integral;        /* the number is written as an integer and fits int64 */
    int64_t integer;
    char *string;        /* STRING */
    int32_t n;           /* ARRAY, OBJECT: items */
    struct json *items;
    char **keys;         /* OBJECT */
} json;

typedef struct json_parser {
    const char *begin, *at, *end;
    const char *problem;
    const char *top_key; /* the top-level key whose value is being parsed, for errors */
} json_parser;

static void json_free(json *v)
{
    if (v->kind == JSON_ARRAY || v->kind == JSON_OBJECT) {
        for (int32_t i = 0; i < v->n; i++) {
            json_free(&v->items[i]);
            if (v->keys)
                free(v->keys[i]);
        }
        free(v->items);
        free(v->keys);
    }
    free(v->string);
    memset(v, 0, sizeof *v);
}

static int json_error(json_parser *p, const char *problem)
{
    if (!p->problem)
        p->problem = problem;
    return -1;
}

static void skip_space(json_parser *p)
{
    while (p->at < p->end && (*p->at == ' ' || *p->at == '\t' || *p->at == '\n' || *p->at == '\r'))
        p->at++;
}

static void put_utf8(char *out, size_t *len, uint32_t c)
{
    if (c < 0x80) {
        out[(*len)++] = (char)c;
    } else if (c < 0x800) {
        out[(*len)++] = (char)(0xc0 | (c >> 6));
        out[(*len)++] = (char)(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
        out[(*len)++] = (char)(0xe0 | (c >> 12));
        out[(*len)++] = (char)(0x80 | ((c >> 6) & 0x3f));
        out[(*len)++] = (char)(0x80 | (c & 0x3f));
    } else {
        out[(*len)++] = (char)(0xf0 | (c >> 18));
        out[(*len)++] = (char)(0x80 | ((c >> 12) & 0x3f));
        out[(*len)++] = (char)(0x80 | ((c >> 6) & 0x3f));
        out[(*len)++] = (char)(0x80 | (c & 0x3f));
    }
}

static int hex4(json_parser *p, uint32_t *out)
{
    if (p->end - p->at < 4)
        return json_error(p, "a short \\u escape");
    uint32_t c = 0;
    for (int i = 0; i < 4; i++) {
        char h = *p->at++;
        int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
              : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (d < 0)
            return json_error(p, "a bad \\u escape");
        c = c * 16 + (uint32_t)d;
    }
    *out = c;
    return 0;
}

/* A string after its opening quote; NUL and lone surrogates are refused (names are C strings). */
static int parse_string(json_parser *p, char **out)
{
    const char *start = p->at;
    while (p->at < p->end && *p->at != '"')
        p->at += *p->at == '\\' && p->at + 1 < p->end ? 2 : 1;
    if (p->at >= p->end)
        return json_error(p, "an unterminated string");
    // Escapes only shrink: the raw length bounds the decoded one.
    char *s = malloc((size_t)(p->at - start) + 1);
    if (!s)
        return json_error(p, "out of memory");
    size_t len = 0;
    p->at = start;
    while (*p->at != '"') {
        unsigned char c = (unsigned char)*p->at++;
        if (c < 0x20) {
            free(s);
            return json_error(p, "a control character in a string");
        }
        if (c != '\\') {
            s[len++] = (char)c;
            continue;
        }
        char e = *p->at++;
        uint32_t code;
        switch (e) {
        case '"': case '\\': case '/': s[len++] = e; break;
        case 'b': s[len++] = '\b'; break;
        case 'f': s[len++] = '\f'; break;
        case 'n': s[len++] = '\n'; break;
        case 'r': s[len++] = '\r'; break;
        case 't': s[len++] = '\t'; break;
        case 'u':
            if (hex4(p, &code) != 0) {
                free(s);
                return -1;
            }
            if (code >= 0xd800 && code < 0xdc00) {
                uint32_t low;
                if (p->end - p->at < 6 || p->at[0] != '\\' || p->at[1] != 'u') {
                    free(s);
                    return json_error(p, "a lone surrogate in a \\u escape");
                }
                p->at += 2;
                if (hex4(p, &low) != 0 || low < 0xdc00 || low >= 0xe000) {
                    free(s);
                    return json_error(p, "a lone surrogate in a \\u escape");
                }
                code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
            } else if ((code >= 0xdc00 && code < 0xe000) || code == 0) {
                free(s);
                return json_error(p, code ? "a lone surrogate in a \\u escape" : "a NUL in a string");
            }
            put_utf8(s, &len, code);
            break;
        default:
            free(s);
            return json_error(p, "an unknown escape in a string");
        }
    }
    p->at++;
    s[len] = '\0';
    *out = s;
    return 0;
}

/* RFC 8259's number grammar; integers that fit int64 are kept exactly. */
static int parse_number(json_parser *p, json *v)
{
    const char *start = p->at;
    int negative = p->at < p->end && *p->at == '-', integral = 1;
    if (negative)
        p->at++;
    if (p->at >= p->end || *p->at < '0' || *p->at > '9')
        return json_error(p, "a bad number");
    if (*p->at == '0')
        p->at++;
    else
        while (p->at < p->end && *p->at >= '0' && *p->at <= '9')
            p->at++;
    if (p->at < p->end && *p->at == '.') {
        integral = 0;
        p->at++;
        if (p->at >= p->end || *p->at < '0' || *p->at > '9')
            return json_error(p, "a bad number");
        while (p->at < p->end && *p->at >= '0' && *p->at <= '9')
            p->at++;
    }
    if (p->at < p->end && (*p->at == 'e' || *p->at == 'E')) {
        integral = 0;
        p->at++;
        if (p->at < p->end && (*p->at == '+' || *p->at == '-'))
            p->at++;
        if (p->at >= p->end || *p->at < '0' || *p->at > '9')
            return json_error(p, "a bad number");
        while (p->at < p->end && *p->at >= '0' && *p->at <= '9')
            p->at++;
    }
    char text[400];
    size_t len = (size_t)(p->at - start);
    if (len >= sizeof text)
        return json_error(p, "a number too long");
    memcpy(text, start, len);
    text[len] = '\0';
    v->kind = JSON_NUMBER;
    v->number = strtod(text, NULL);
    if (integral) {
        uint64_t magnitude = 0;
        int fits = 1;
        for (const char *d = text + negative; *d; d++) {
            if (magnitude > (UINT64_C(1) << 63) / 10) {
                fits = 0;
                break;
            }
            magnitude = magnitude * 10 + (uint64_t)(*d - '0');
        }
        fits = fits && magnitude < (UINT64_C(1) << 63);
        v->integral = fits;
        v->integer = fits ? (negative ? -(int64_t)magnitude : (int64_t)magnitude) : 0;
    }
    return 0;
}

static int parse_value(json_parser *p, json *v, int depth);

/* An array or an object after its opening bracket. */
static int parse_items(json_parser *p, json *v, int depth, int object)
{
    char close = object ? '}' : ']';
    v->kind = object ? JSON_OBJECT : JSON_ARRAY;
    int32_t capacity = 0;
    skip_space(p);
    if (p->at < p->end && *p->at == close) {
        p->at++;
        return 0;
    }
    for (;;) {
        if (v->n == capacity) {
            if (capacity >= (1 << 24))
                return json_error(p, "too many items");
            capacity = capacity ? 2 * capacity : 8;
            json *items = realloc(v->items, (size_t)capacity * sizeof *items);
            if (items)
                v->items = items;
            char **keys = object ? realloc(v->keys, (size_t)capacity * sizeof *keys) : NULL;
            if (keys)
                v->keys = keys;
            if (!items || (object && !keys))
                return json_error(p, "out of memory");
        }
        json *item = &v->items[v->n];
        memset(item, 0, sizeof *item);
        skip_space(p);
        if (object) {
            v->keys[v->n] = NULL;
            if (p->at >= p->end || *p->at != '"')
                return json_error(p, "a key that is not a string");
            p->at++;
            if (parse_string(p, &v->keys[v->n]) != 0)
                return -1;
            skip_space(p);
            if (p->at >= p->end || *p->at != ':') {
                free(v->keys[v->n]);
                return json_error(p, "a missing ':'");
            }
            p->at++;
        }
        v->n++;
        if (object && depth == 0)
            p->top_key = v->keys[v->n - 1];
        if (parse_value(p, item, depth + 1) != 0)
            return -1;
        skip_space(p);
        if (p->at < p->end && *p->at == ',') {
            p->at++;
            continue;
        }
        if (p->at < p->end && *p->at == close) {
            p->at++;
            return 0;
        }
        return json_error(p, object ? "a missing ',' or '}'" : "a missing ',' or ']'");
    }
}

static int parse_word(json_parser *p, const char *word)
{
    size_t len = strlen(word);
    if ((size_t)(p->end - p->at) < len || memcmp(p->at, word, len) != 0)
        return json_error(p, "an unexpected character");
    p->at += len;
    return 0;
}

static int parse_value(json_parser *p, json *v, int depth)
{
    if (depth > JSON_DEPTH)
        return json_error(p, "nesting too deep");
    skip_space(p);
    if (p->at >= p->end)
        return json_error(p, "an unexpected end");
    switch (*p->at) {
    case '{': p->at++; return parse_items(p, v, depth, 1);
    case '[': p->at++; return parse_items(p, v, depth, 0);
    case '"': p->at++; v->kind = JSON_STRING; return parse_string(p, &v->string);
    case 't': v->kind = JSON_BOOL; v->boolean = 1; return parse_word(p, "true");
    case 'f': v->kind = JSON_BOOL; return parse_word(p, "false");
    case 'n': v->kind = JSON_NULL; return parse_word(p, "null");
    default: return parse_number(p, v);
    }
}

/* The whole text is one JSON object (trailing spaces allowed: safetensors pads with them). */
static int json_parse_object(const char *text, size_t len, json *out, const char *path,
                             const char *what, char *err)
{
    json_parser p = {text, text, text + len, NULL, NULL};
    memset(out, 0, sizeof *out);
    skip_space(&p);
    int rc = p.at < p.end && *p.at == '{' ? parse_value(&p, out, 0) : json_error(&p, "not an object");
    if (rc == 0) {
        skip_space(&p);
        if (p.at != p.end)
            rc = json_error(&p, "text after the object");
    }
    if (rc != 0) {
        // The key's text is freed with the tree: the message is made first.
        pr_fail(err, "%s: %s is not valid JSON: %s at byte %lld%s%.200s%s", path, what, p.problem,
                (long long)(p.at - p.begin), p.top_key ? " (in '" : "", p.top_key ? p.top_key : "",
                p.top_key ? "')" : "");
        json_free(out);
        return -1;
    }
    return 0;
}

static const json *json_get(const json *object, const char *key)
{
    for (int32_t i = 0; object->kind == JSON_OBJECT && i < object->n; i++)
        if (strcmp(object->keys[i], key) == 0)
            return &object->items[i];
    return NULL;
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

typedef struct text {
    char *data;
    size_t len, cap;
} text;

static void append(text *b, const char *fmt, ...) PR_PRINTF_LIKE(2, 3);
static void append(text *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->data ? b->data + b->len : NULL, b->data ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (b->data && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap : 4096;
        while (cap <= b->len + (size_t)n)
            cap *= 2;
        char *grown = realloc(b->data, cap);
        if (!grown)
            pr_internal("out of memory for %zu bytes of JSON", cap);
        b->data = grown;
        b->cap = cap;
    }
}

static int write_all(int fd, const void *data, size_t bytes, const char *path, char *err)
{
    const char *p = data;
    while (bytes > 0) {
        ssize_t w = write(fd, p, bytes);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return pr_fail(err, "%s: write failed: %s", path, strerror(errno));
        p += w;
        bytes -= (size_t)w;
    }
    return 0;
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

static int fsync_folder(const char *path, char *err)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0 || fsync(fd) != 0) {
        int saved = errno;
        if (fd >= 0)
            close(fd);
        return pr_fail(err, "%s: cannot flush the folder to disk: %s", path, strerror(saved));
    }
    close(fd);
    return 0;
}

static int write_config(const pr_program *prog, const char *path, char *err)
{
    text b = {0};
    append(&b, "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n");
    append(&b, "  \"vocab_size\": %d,\n  \"n_positions\": %d,\n  \"n_ctx\": %d,\n", prog->vocab,
           prog->context, prog->context);
    append(&b, "  \"n_embd\": %d,\n  \"n_layer\": %d,\n  \"n_head\": %d,\n  \"n_inner\": null,\n",
           prog->width, prog->layers, prog->heads);
    append(&b, "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n");
    // pacic trains without dropout.
    append(&b, "  \"resid_pdrop\": 0.0,\n  \"embd_pdrop\": 0.0,\n  \"attn_pdrop\": 0.0,\n");
    append(&b, "  \"initializer_range\": 0.02,\n  \"scale_attn_weights\": true,\n");
    append(&b, "  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"float32\"\n}\n",
           prog->tied ? "true" : "false");
    int fd;
    int rc = open_new(path, &fd, err);
    if (rc == 0) {
        rc = write_all(fd, b.data, b.len, path, err);
        if (rc == 0)
            rc = close_synced(fd, path, err);
        else
            close(fd);
    }
    free(b.data);
    return rc;
}

static int write_safetensors(const pr_program *prog, const float *flat, const char *path, char *err)
{
    hf_tensor *ts = pr_alloc((size_t)(5 + 12 * (int64_t)prog->layers) * sizeof *ts);
    int32_t n = hf_tensors(prog, ts);
    text header = {0};
    append(&header, "{\"__metadata__\":{\"format\":\"pt\"}");
    int64_t at = 0, largest = 0;
    for (int32_t i = 0; i < n; i++) {
        char name[128], shape[64];
        file_name(&ts[i], "transformer.", name, sizeof name);
        shape_text(ts[i].ndim, ts[i].dims, shape, sizeof shape);
        int64_t bytes = numel(&ts[i]) * 4;
        append(&header, ",\"%s\":{\"dtype\":\"F32\",\"shape\":%s,\"data_offsets\":[%lld,%lld]}", name,
               shape, (long long)at, (long long)(at + bytes));
        at += bytes;
        largest = numel(&ts[i]) > largest ? numel(&ts[i]) : largest;
    }
    append(&header, "}");
    while (header.len % 8) // the data then starts 8-byte aligned, as HF's writer does
        append(&header, " ");
    unsigned char length[8];
    for (int i = 0; i < 8; i++)
        length[i] = (unsigned char)((uint64_t)header.len >> (8 * i));
    float *buffer = pr_alloc((size_t)largest * sizeof(float));
    int fd;
    int rc = open_new(path, &fd, err);
    if (rc == 0) {
        rc = write_all(fd, length, 8, path, err);
        if (rc == 0)
            rc = write_all(fd, header.data, header.len, path, err);
        for (int32_t i = 0; i < n && rc == 0; i++) {
            convert_layout(&ts[i], flat + ts[i].offset, buffer, 0);
            rc = write_all(fd, buffer, (size_t)numel(&ts[i]) * 4, path, err);
        }
        if (rc == 0)
            rc = close_synced(fd, path, err);
        else
            close(fd);
    }
    free(buffer);
    free(header.data);
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
        rc = fsync_folder(tmp, err);
    if (rc == 0 && rename(tmp, base) != 0)
        rc = pr_fail(err, "%s: cannot rename the export into place: %s", base, strerror(errno));
    if (rc != 0) {
        remove_export(tmp);
        return rc;
    }
    return fsync_folder(parent, err);
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
static int read_entry(const char *path, const char *name, const json *v, int64_t data_bytes,
                      st_entry *e, char *err)
{
    memset(e, 0, sizeof *e);
    e->name = name;
    const json *dtype = json_get(v, "dtype"), *shape = json_get(v, "shape"),
               *offsets = json_get(v, "data_offsets");
    if (v->kind != JSON_OBJECT || !dtype || !shape || !offsets || v->n != 3)
        return pr_fail(err, "%s: tensor '%s': needs exactly dtype, shape and data_offsets", path, name);
    if (dtype->kind != JSON_STRING)
        return pr_fail(err, "%s: tensor '%s': dtype is not a string", path, name);
    if (strcmp(dtype->string, "F32") == 0)
        e->dtype_bytes = 4;
    else if (strcmp(dtype->string, "F16") == 0 || strcmp(dtype->string, "BF16") == 0)
        e->dtype_bytes = 2, e->bf16 = dtype->string[0] == 'B';
    else
        return pr_fail(err, "%s: tensor '%s': dtype %.20s, expected F32, BF16 or F16", path, name,
                       dtype->string);
    if (shape->kind != JSON_ARRAY || shape->n > 8)
        return pr_fail(err, "%s: tensor '%s': shape is not a list of at most 8 sizes", path, name);
    int64_t count = 1;
    e->ndim = shape->n;
    for (int32_t i = 0; i < shape->n; i++) {
        const json *d = &shape->items[i];
        if (d->kind != JSON_NUMBER || !d->integral || d->integer < 0 || d->integer > (INT64_C(1) << 40))
            return pr_fail(err, "%s: tensor '%s': shape holds a size that is not an integer in [0, 2^40]",
                           path, name);
        e->dims[i] = d->integer;
        count = count > (INT64_C(1) << 60) / (d->integer + 1) ? INT64_C(1) << 60 : count * d->integer;
    }
    if (offsets->kind != JSON_ARRAY || offsets->n != 2)
        return pr_fail(err, "%s: tensor '%s': data_offsets is not [begin, end]", path, name);
    for (int i = 0; i < 2; i++)
        if (offsets->items[i].kind != JSON_NUMBER || !offsets->items[i].integral)
            return pr_fail(err, "%s: tensor '%s': data_offsets is not two integers", path, name);
    e->begin = offsets->items[0].integer;
    e->end = offsets->items[1].integer;
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

static int config_int(const json *config, const char *key, int required, int64_t want,
                      const char *path, char *err)
{
    const json *v = json_get(config, key);
    if (!v || v->kind == JSON_NULL) {
        if (required)
            return pr_fail(err, "%s: %s is missing (the program has %lld)", path, key, (long long)want);
        return 0;
    }
    if (v->kind != JSON_NUMBER || !v->integral)
        return pr_fail(err, "%s: %s is not an integer", path, key);
    if (v->integer != want)
        return pr_fail(err, "%s: %s is %lld, the program has %lld", path, key, (long long)v->integer,
                       (long long)want);
    return 0;
}

/* config.json of an HF folder against the program: the shape (heads are only here), GELU's
 * tanh form, LayerNorm's epsilon, and whether the head is tied. */
static int read_config(const pr_program *prog, const char *path, hf_config *cfg, char *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return pr_fail(err, "%s: cannot open: %s", path, strerror(errno));
    char *data = malloc(1 << 20);
    size_t len = data ? fread(data, 1, 1 << 20, f) : 0;
    int too_big = data && len == 1 << 20 && fgetc(f) != EOF;
    fclose(f);
    if (!data || too_big) {
        free(data);
        return pr_fail(err, "%s: larger than 1 MiB: not a GPT-2 config", path);
    }
    json config;
    int rc = json_parse_object(data, len, &config, path, "the file", err);
    free(data);
    if (rc != 0)
        return rc;
    const json *type = json_get(&config, "model_type"), *act = json_get(&config, "activation_function"),
               *eps = json_get(&config, "layer_norm_epsilon"), *tie = json_get(&config, "tie_word_embeddings");
    if (type && (type->kind != JSON_STRING || strcmp(type->string, "gpt2") != 0))
        rc = pr_fail(err, "%s: model_type is not \"gpt2\"", path);
    if (rc == 0)
        rc = config_int(&config, "n_layer", 1, prog->layers, path, err);
    if (rc == 0)
        rc = config_int(&config, "n_embd", 1, prog->width, path, err);
    if (rc == 0)
        rc = config_int(&config, "n_head", 1, prog->heads, path, err);
    if (rc == 0)
        rc = config_int(&config, "vocab_size", 1, prog->vocab, path, err);
    if (rc == 0)
        rc = config_int(&config, "n_positions", 0, prog->context, path, err);
    if (rc == 0)
        rc = config_int(&config, "n_inner", 0, 4 * (int64_t)prog->width, path, err);
    if (rc == 0 && act && (act->kind != JSON_STRING || (strcmp(act->string, "gelu_new") != 0 &&
                                                        strcmp(act->string, "gelu_pytorch_tanh") != 0)))
        rc = pr_fail(err, "%s: activation_function is not gelu_new (GELU's tanh form, which pacic computes)",
                     path);
    if (rc == 0 && eps && (eps->kind != JSON_NUMBER || eps->number < 0.99e-5 || eps->number > 1.01e-5))
        rc = pr_fail(err, "%s: layer_norm_epsilon is not 1e-5 (pacic's)", path);
    if (rc == 0 && tie && tie->kind != JSON_BOOL)
        rc = pr_fail(err, "%s: tie_word_embeddings is not true or false", path);
    cfg->present = 1;
    cfg->tied = tie ? tie->boolean : 1;
    json_free(&config);
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
static int read_safetensors(const pr_program *prog, const char *path, const hf_config *cfg,
                            float *flat, char *err)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return pr_fail(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return pr_fail(err, "%s: not a regular file", path);
    }
    int64_t size = st.st_size;
    unsigned char length[8];
    if (size < 8 || read_at(fd, length, 8, 0) != 0) {
        close(fd);
        return pr_fail(err, "%s: %lld bytes: too short for a safetensors header", path, (long long)size);
    }
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; i--)
        header_len = header_len << 8 | length[i];
    if (header_len > (uint64_t)(size - 8) || header_len > (uint64_t)HEADER_LIMIT) {
        close(fd);
        return pr_fail(err, "%s: header length %llu runs past the end of the file (%lld bytes)%s", path,
                       (unsigned long long)header_len, (long long)size,
                       header_len > (uint64_t)HEADER_LIMIT ? " or the 100 MiB limit" : "");
    }
    char *header = malloc(header_len + 1);
    if (!header || read_at(fd, header, header_len, 8) != 0) {
        free(header);
        close(fd);
        return pr_fail(err, "%s: cannot read the %llu-byte header", path, (unsigned long long)header_len);
    }
    json root;
    int rc = json_parse_object(header, header_len, &root, path, "the header", err);
    free(header);
    if (rc != 0) {
        close(fd);
        return rc;
    }
    int64_t data_start = 8 + (int64_t)header_len, data_bytes = size - data_start;
    st_entry *entries = calloc((size_t)root.n + 1, sizeof *entries);
    int32_t n = 0;
    for (int32_t i = 0; rc == 0 && i < root.n; i++) {
        if (strcmp(root.keys[i], "__metadata__") == 0 || is_mask_buffer(root.keys[i]))
            continue;
        rc = read_entry(path, root.keys[i], &root.items[i], data_bytes, &entries[n++], err);
    }
    if (rc == 0)
        qsort(entries, (size_t)n, sizeof *entries, entry_order);
    for (int32_t i = 1; rc == 0 && i < n; i++)
        if (strcmp(entries[i - 1].name, entries[i].name) == 0)
            rc = pr_fail(err, "%s: tensor '%s' appears twice", path, entries[i].name);

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
    for (int32_t i = 0; rc == 0 && i < n; i++)
        if (!entries[i].used)
            rc = pr_fail(err, "%s: tensor '%s' is not a weight of the program's GPT-2 (%d layers)", path,
                         entries[i].name, prog->layers);
    if (rc == 0 && cfg->present && !cfg->tied && !has_head)
        rc = pr_fail(err, "%s: tensor 'lm_head.weight' is missing (config.json says tie_word_embeddings false)",
                     path);
    if (rc == 0 && cfg->present && cfg->tied && has_head && !prog->tied) {
        // transformers would tie it to wte: take it only when it is wte.
        int64_t offsets[PR_CKPT_COUNT];
        pr_ckpt_offsets(prog, offsets);
        if (memcmp(flat + offsets[PR_CKPT_LM_HEAD], flat + offsets[PR_CKPT_WTE],
                   (size_t)ts[0].dims[0] * (size_t)ts[0].dims[1] * sizeof(float)) != 0)
            rc = pr_fail(err, "%s: tensor 'lm_head.weight' differs from wte, but config.json says "
                         "tie_word_embeddings true", path);
    }
    if (rc == 0 && !prog->tied && !has_head) {
        int64_t offsets[PR_CKPT_COUNT];
        pr_ckpt_offsets(prog, offsets);
        memcpy(flat + offsets[PR_CKPT_LM_HEAD], flat + offsets[PR_CKPT_WTE],
               (size_t)ts[0].dims[0] * (size_t)ts[0].dims[1] * sizeof(float));
    }
    free(buffer);
    free(ts);
    free(entries);
    json_free(&root);
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
