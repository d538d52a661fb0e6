/* bpe.c: GPT-2's byte-level BPE (Radford et al. 2019, the released encoder), as tiktoken's
 * "gpt2" encoding computes it:
 *   1. the pre-tokenizer splits the text into pieces with GPT-2's pattern (PCRE2, Unicode
 *      properties); bytes that are not UTF-8 match no part of the pattern and are a piece of
 *      their own, so every byte string encodes and decodes back to itself;
 *   2. each piece starts as one token per byte, and the adjacent pair whose merge has the
 *      lowest rank (its line in merges.txt) is merged, leftmost first, until no pair merges.
 * The files spell a token's bytes through GPT-2's byte-to-unicode map (printable bytes stand
 * for themselves, the other 68 for U+0100 onwards), which is undone when they are read. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "bpe.h"
#include "prt.h"

#include <errno.h>
#include <jansson.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The pattern of GPT-2's encoder.py (tiktoken's r50k_base/gpt2 uses the same). */
static const char PIECE_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char END_OF_TEXT[] = "<|endoftext|>";
/* GPT-2's vocab.json is 1 MB and its merges.txt 456 KB. */
#define TOKENIZER_FILE_LIMIT ((size_t)64 << 20)

typedef struct merge_slot {
    uint64_t pair; /* left id << 32 | right id */
    int32_t rank, merged;
    int used;
} merge_slot;

struct bpe_tokenizer {
    int vocab_size;
    unsigned char *token_arena;
    size_t *token_offset, *token_length;
    int32_t byte_token[256];
    int32_t end_of_text;
    merge_slot *merges;
    size_t merge_mask;
    pcre2_code *pattern;
};

static int fail(char *err, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
    return -1;
}

/* One of the tokenizer's files, read whole through the runtime's bounded reader. */
static char *read_tokenizer_file(const char *path, const char *what, size_t *len, char *err, size_t size)
{
    char why[PR_ERR_LEN];
    char *text = pr_read_regular(path, what, TOKENIZER_FILE_LIMIT, len, why);
    if (!text)
        snprintf(err, size, "%s", why);
    return text;
}

/* GPT-2's bytes_to_unicode(): the code point that stands for each byte in the files. */
static void byte_code_points(uint32_t code_point[256])
{
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        code_point[b] = printable ? (uint32_t)b : next++;
    }
}

/* Undoes the byte-to-unicode map on one UTF-8 token string; -1 when a character stands for
 * no byte. */
static long unmap_token(const char *text, const int16_t byte_of[512], unsigned char *out)
{
    long n = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p;) {
        uint32_t cp;
        if (*p < 0x80) {
            cp = *p++;
        } else if ((*p & 0xE0) == 0xC0 && (p[1] & 0xC0) == 0x80) {
            cp = (uint32_t)(p[0] & 0x1F) << 6 | (p[1] & 0x3F);
            p += 2;
        } else {
            return -1;
        }
        if (cp >= 512 || byte_of[cp] < 0)
            return -1;
        out[n++] = (unsigned char)byte_of[cp];
    }
    return n;
}

static size_t hash_pair(uint64_t pair)
{
    pair ^= pair >> 33;
    pair *= 0xff51afd7ed558ccdULL;
    pair ^= pair >> 33;
    return (size_t)pair;
}

static const merge_slot *find_merge(const bpe_tokenizer *tok, int32_t left, int32_t right)
{
    uint64_t pair = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (size_t i = hash_pair(pair) & tok->merge_mask;; i = (i + 1) & tok->merge_mask) {
        const merge_slot *slot = &tok->merges[i];
        if (!slot->used)
            return NULL;
        if (slot->pair == pair)
            return slot;
    }
}

static void add_merge(bpe_tokenizer *tok, int32_t left, int32_t right, int32_t rank, int32_t merged)
{
    uint64_t pair = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    size_t i = hash_pair(pair) & tok->merge_mask;
    while (tok->merges[i].used && tok->merges[i].pair != pair)
        i = (i + 1) & tok->merge_mask;
    if (tok->merges[i].used)
        return; /* a repeated line: the first (lower) rank stands */
    tok->merges[i] = (merge_slot){pair, rank, merged, 1};
}

/* Every token's id is a whole number, and the ids are 0..n-1, each once: otherwise names the
 * first repeated id, or an id that no token has. */
static int check_vocab_ids(json_t *vocab, const char *path, char *err, size_t size)
{
    size_t n = json_object_size(vocab);
    const char **owner = calloc(n, sizeof *owner), *key, *past = NULL;
    json_t *value;
    if (!owner)
        return fail(err, size, "%s: out of memory", path);
    json_int_t past_id = 0;
    int rc = 0;
    json_object_foreach(vocab, key, value) {
        json_int_t id = json_is_integer(value) ? json_integer_value(value) : -1;
        if (id < 0) {
            rc = fail(err, size, "%s: token \"%s\" has an id that is not a whole number", path, key);
            break;
        }
        if ((size_t)id >= n) {
            if (!past)
                past = key, past_id = id;
        } else if (owner[id]) {
            rc = fail(err, size, "%s: tokens \"%s\" and \"%s\" both have id %lld", path, owner[id], key,
                      (long long)id);
            break;
        } else {
            owner[id] = key;
        }
    }
    for (size_t id = 0; rc == 0 && past && id < n; id++)
        if (!owner[id])
            rc = fail(err, size, "%s: no token has id %zu (the %zu tokens need ids 0..%zu, and \"%s\" has %lld)",
                      path, id, n, n - 1, past, (long long)past_id);
    free(owner);
    return rc;
}

/* Fills the token table from the vocabulary object (token string -> id). */
static int read_vocab(bpe_tokenizer *tok, json_t *vocab, const char *path, char *err, size_t size)
{
    if (check_vocab_ids(vocab, path, err, size) != 0)
        return -1;
    uint32_t code_point[256];
    int16_t byte_of[512];
    byte_code_points(code_point);
    memset(byte_of, 0xff, sizeof byte_of);
    for (int b = 0; b < 256; b++)
        byte_of[code_point[b]] = (int16_t)b;
    size_t n = json_object_size(vocab), arena = 0;
    const char *key;
    json_t *value;
    json_object_foreach(vocab, key, value) arena += strlen(key);
    tok->vocab_size = (int)n;
    tok->token_arena = malloc(arena + 1);
    tok->token_offset = calloc(n, sizeof *tok->token_offset);
    tok->token_length = calloc(n, sizeof *tok->token_length);
    if (!tok->token_arena || !tok->token_offset || !tok->token_length)
        return fail(err, size, "%s: out of memory", path);
    for (int b = 0; b < 256; b++)
        tok->byte_token[b] = -1;
    tok->end_of_text = -1;
    size_t used = 0;
    json_object_foreach(vocab, key, value) {
        json_int_t id = json_integer_value(value);
        long length = strcmp(key, END_OF_TEXT) == 0 ? 0 : unmap_token(key, byte_of, tok->token_arena + used);
        if (length < 0)
            return fail(err, size, "%s: token \"%s\" is not in GPT-2's byte-to-unicode alphabet", path, key);
        if (strcmp(key, END_OF_TEXT) == 0) {
            tok->end_of_text = (int32_t)id;
            memcpy(tok->token_arena + used, END_OF_TEXT, length = (long)strlen(END_OF_TEXT));
        } else if (length == 1) {
            tok->byte_token[tok->token_arena[used]] = (int32_t)id;
        }
        tok->token_offset[id] = used;
        tok->token_length[id] = (size_t)length;
        used += (size_t)length;
    }
    for (int b = 0; b < 256; b++)
        if (tok->byte_token[b] < 0)
            return fail(err, size, "%s: no token for the byte 0x%02x: not a byte-level BPE vocabulary", path, b);
    if (tok->end_of_text < 0)
        return fail(err, size, "%s: no %s token", path, END_OF_TEXT);
    return 0;
}

/* One line of merges.txt, "LEFT RIGHT" (NUL-terminated, no newline), into the table at RANK. */
static int add_merge_line(bpe_tokenizer *tok, json_t *vocab, char *line, int32_t rank, const char *path,
                          long line_no, char *err, size_t size)
{
    char joined[1024];
    char *space = strchr(line, ' ');
    if (!space || strchr(space + 1, ' ') || strlen(line) >= sizeof joined)
        return fail(err, size, "%s:%ld: expected two tokens separated by one space", path, line_no);
    *space = 0;
    snprintf(joined, sizeof joined, "%s%s", line, space + 1);
    json_t *left = json_object_get(vocab, line), *right = json_object_get(vocab, space + 1),
           *merged = json_object_get(vocab, joined);
    if (!left || !right || !merged)
        return fail(err, size, "%s:%ld: \"%s\" is not in the vocabulary", path, line_no,
                    !left ? line : !right ? space + 1 : joined);
    if ((size_t)rank >= (tok->merge_mask + 1) / 2)
        return fail(err, size, "%s:%ld: more merges than the vocabulary has tokens", path, line_no);
    add_merge(tok, (int32_t)json_integer_value(left), (int32_t)json_integer_value(right), rank,
              (int32_t)json_integer_value(merged));
    return 0;
}

/* Reads merges.txt: an optional "#version" line, then "LEFT RIGHT" per line, by rank. */
static int read_merges(bpe_tokenizer *tok, json_t *vocab, const char *path, char *err, size_t size)
{
    size_t len;
    char *text = read_tokenizer_file(path, "merges file", &len, err, size);
    if (!text)
        return -1;
    size_t slots = 1;
    while (slots < 2 * (size_t)tok->vocab_size)
        slots <<= 1;
    tok->merges = calloc(slots, sizeof *tok->merges);
    tok->merge_mask = slots - 1;
    int rc = tok->merges ? 0 : fail(err, size, "%s: out of memory", path);
    int32_t rank = 0;
    char *line = text;
    for (long line_no = 1; rc == 0 && line < text + len; line_no++) {
        char *end = memchr(line, '\n', (size_t)(text + len - line));
        end = end ? end : text + len;
        *end = 0;
        line[strcspn(line, "\r")] = 0;
        if (!(line_no == 1 && strncmp(line, "#version", 8) == 0) && line[0])
            rc = add_merge_line(tok, vocab, line, rank++, path, line_no, err, size);
        line = end + 1;
    }
    free(text);
    if (rc == 0 && rank == 0)
        rc = fail(err, size, "%s: no merges: without them every byte would be a token of its own", path);
    return rc;
}

static char *first_existing(const char *dir, const char *name, const char *other)
{
    size_t n = strlen(dir) + 32;
    char *path = malloc(n);
    if (!path)
        return NULL;
    snprintf(path, n, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (f) {
        fclose(f);
        return path;
    }
    snprintf(path, n, "%s/%s", dir, other);
    return path;
}

static int compile_pattern(bpe_tokenizer *tok, char *err, size_t size)
{
    int code;
    PCRE2_SIZE offset;
    tok->pattern = pcre2_compile((PCRE2_SPTR)PIECE_PATTERN, PCRE2_ZERO_TERMINATED,
                                 PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &offset, NULL);
    if (!tok->pattern) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(code, message, sizeof message);
        return fail(err, size, "the pre-tokenizer pattern does not compile: %s", (char *)message);
    }
    pcre2_jit_compile(tok->pattern, PCRE2_JIT_COMPLETE); /* without a JIT it only runs slower */
    return 0;
}

int bpe_load(const char *dir, bpe_tokenizer **out, char *err, size_t err_size)
{
    *out = NULL;
    bpe_tokenizer *tok = calloc(1, sizeof *tok);
    char *vocab_path = first_existing(dir, "vocab.json", "encoder.json");
    char *merges_path = first_existing(dir, "merges.txt", "vocab.bpe");
    if (!tok || !vocab_path || !merges_path) {
        free(tok), free(vocab_path), free(merges_path);
        return fail(err, err_size, "%s: out of memory", dir);
    }
    json_error_t json_err;
    json_t *vocab = NULL;
    size_t vocab_len;
    char *vocab_text = NULL;
    int rc = 0;
    if (access(vocab_path, F_OK) != 0)
        rc = fail(err, err_size, "%s: cannot open vocab.json or encoder.json: %s (a GPT-2 tokenizer's folder; "
                  "examples/data/get-gpt2-vocab.sh fetches one)", dir, strerror(errno));
    else if (!(vocab_text = read_tokenizer_file(vocab_path, "vocabulary", &vocab_len, err, err_size)))
        rc = -1;
    else if (!(vocab = json_loadb(vocab_text, vocab_len, 0, &json_err)))
        rc = fail(err, err_size, "%s:%d:%d: %s", vocab_path, json_err.line, json_err.column, json_err.text);
    else if (!json_is_object(vocab))
        rc = fail(err, err_size, "%s: expected an object of token -> id", vocab_path);
    else
        rc = read_vocab(tok, vocab, vocab_path, err, err_size);
    if (rc == 0)
        rc = read_merges(tok, vocab, merges_path, err, err_size);
    if (rc == 0)
        rc = compile_pattern(tok, err, err_size);
    json_decref(vocab);
    free(vocab_text);
    free(vocab_path);
    free(merges_path);
    if (rc != 0) {
        bpe_free(tok);
        return rc;
    }
    *out = tok;
    return 0;
}

void bpe_free(bpe_tokenizer *tok)
{
    if (!tok)
        return;
    free(tok->token_arena);
    free(tok->token_offset);
    free(tok->token_length);
    free(tok->merges);
    pcre2_code_free(tok->pattern);
    free(tok);
}

int bpe_vocab_size(const bpe_tokenizer *tok) { return tok->vocab_size; }
int32_t bpe_end_of_text(const bpe_tokenizer *tok) { return tok->end_of_text; }

const unsigned char *bpe_token_bytes(const bpe_tokenizer *tok, int32_t id, size_t *len)
{
    if (id < 0 || id >= tok->vocab_size)
        return NULL;
    *len = tok->token_length[id];
    return tok->token_arena + tok->token_offset[id];
}

void bpe_ids_free(bpe_ids *ids)
{
    free(ids->ids);
    *ids = (bpe_ids){0};
}

static int push_ids(bpe_ids *out, const int32_t *ids, size_t n)
{
    if (n == 0) // an empty text's ids: none, and no buffer yet to copy into
        return 0;
    if (out->n + n > out->cap) {
        size_t cap = out->cap ? out->cap : 1024;
        while (cap < out->n + n)
            cap *= 2;
        int32_t *grown = realloc(out->ids, cap * sizeof *grown);
        if (!grown)
            return -1;
        out->ids = grown;
        out->cap = cap;
    }
    memcpy(out->ids + out->n, ids, n * sizeof *ids);
    out->n += n;
    return 0;
}

/* ---- the merges of one piece ------------------------------------------------------- */

/* A candidate merge of the part starting at byte AT with the part after it, whose ids were
 * LEFT and RIGHT when it was pushed. */
typedef struct pair_entry {
    int32_t rank;
    uint32_t at;
    int32_t left, right;
} pair_entry;

/* A piece's workspace: its parts as a doubly linked list indexed by their first byte
 * (part_id -1: merged into the part before it), and a min-heap of candidate pairs. */
typedef struct merge_work {
    int32_t *part_id, *next, *prev;
    pair_entry *heap;
    size_t cap, n_heap;
} merge_work;

/* Lower rank first; on equal ranks the leftmost pair (so "aaa" becomes "aa" "a", not "a" "aa"). */
static int entry_before(const pair_entry *a, const pair_entry *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->at < b->at);
}

static void heap_push(merge_work *w, pair_entry e)
{
    size_t i = w->n_heap++;
    while (i > 0 && entry_before(&e, &w->heap[(i - 1) / 2])) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = e;
}

static pair_entry heap_pop(merge_work *w)
{
    pair_entry top = w->heap[0], last = w->heap[--w->n_heap];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= w->n_heap)
            break;
        if (child + 1 < w->n_heap && entry_before(&w->heap[child + 1], &w->heap[child]))
            child++;
        if (!entry_before(&w->heap[child], &last))
            break;
        w->heap[i] = w->heap[child];
        i = child;
    }
    if (w->n_heap > 0)
        w->heap[i] = last;
    return top;
}

/* Pushes the pair of the part at AT and the part after it, if they merge. */
static void push_pair(const bpe_tokenizer *tok, merge_work *w, int32_t at)
{
    if (at < 0 || w->next[at] < 0)
        return;
    int32_t left = w->part_id[at], right = w->part_id[w->next[at]];
    const merge_slot *m = find_merge(tok, left, right);
    if (m)
        heap_push(w, (pair_entry){m->rank, (uint32_t)at, left, right});
}

/* The merges of one piece, the lowest-ranked adjacent pair first, leftmost on ties, in
 * O(n log n) (a rescan of every pair per merge took 21 s on a 40 KB word): every adjacent
 * pair is in the heap, and an entry whose parts have merged since it was pushed is skipped
 * when it comes out (its left part is gone or holds another id, or the part after it holds
 * another id). Faster than the rescans on short pieces too (random words of 2-30 letters:
 * 9.4 against 6.6 MB/s). */
static size_t merge_piece(const bpe_tokenizer *tok, merge_work *w, const unsigned char *piece, size_t n,
                               int32_t *ids)
{
    w->n_heap = 0;
    for (size_t i = 0; i < n; i++) {
        w->part_id[i] = tok->byte_token[piece[i]];
        w->next[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
        w->prev[i] = (int32_t)i - 1;
    }
    for (size_t i = 0; i + 1 < n; i++)
        push_pair(tok, w, (int32_t)i);
    while (w->n_heap > 0) {
        pair_entry e = heap_pop(w);
        int32_t at = (int32_t)e.at, right = w->next[at];
        if (w->part_id[at] != e.left || right < 0 || w->part_id[right] != e.right)
            continue; /* stale */
        w->part_id[at] = find_merge(tok, e.left, e.right)->merged;
        w->part_id[right] = -1;
        w->next[at] = w->next[right];
        if (w->next[at] >= 0)
            w->prev[w->next[at]] = at;
        push_pair(tok, w, w->prev[at]);
        push_pair(tok, w, at);
    }
    size_t n_ids = 0;
    for (int32_t at = 0; at >= 0; at = w->next[at])
        ids[n_ids++] = w->part_id[at];
    return n_ids;
}

/* Grows the workspace to N bytes: n - 1 pairs at first, and each merge pushes at most two. */
static int reserve_merge_work(merge_work *w, size_t n)
{
    if (n <= w->cap)
        return 0;
    int32_t *part_id = realloc(w->part_id, n * sizeof *part_id);
    if (part_id)
        w->part_id = part_id;
    int32_t *next = realloc(w->next, n * sizeof *next);
    if (next)
        w->next = next;
    int32_t *prev = realloc(w->prev, n * sizeof *prev);
    if (prev)
        w->prev = prev;
    pair_entry *heap = realloc(w->heap, 3 * n * sizeof *heap);
    if (heap)
        w->heap = heap;
    if (!part_id || !next || !prev || !heap)
        return -1;
    w->cap = n;
    return 0;
}

static void free_merge_work(merge_work *w)
{
    free(w->part_id), free(w->next), free(w->prev), free(w->heap);
}

/* ---- one thread's encoder: the piece cache and the match state ------------------------ */

enum { CACHE_SLOTS = 1 << 16, CACHE_PIECE = 24, CACHE_IDS = 12 };

/* Pieces repeat (words): short ones remember their ids. */
typedef struct cache_slot {
    unsigned char piece[CACHE_PIECE];
    uint8_t piece_len, n_ids; /* piece_len 0: empty */
    int32_t ids[CACHE_IDS];
} cache_slot;

typedef struct encoder {
    const bpe_tokenizer *tok;
    pcre2_match_data *match;
    cache_slot *cache;
    int32_t *work;
    size_t work_cap;
    merge_work merges;
} encoder;

static size_t hash_piece(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return (size_t)(h ^ h >> 29);
}

static int encode_piece(encoder *enc, const unsigned char *piece, size_t n, bpe_ids *out)
{
    cache_slot *slot = NULL;
    if (n <= CACHE_PIECE) {
        slot = &enc->cache[hash_piece(piece, n) & (CACHE_SLOTS - 1)];
        if (slot->piece_len == n && memcmp(slot->piece, piece, n) == 0)
            return push_ids(out, slot->ids, slot->n_ids);
    }
    if (n > enc->work_cap) {
        int32_t *grown = realloc(enc->work, n * sizeof *grown);
        if (!grown)
            return -1;
        enc->work = grown;
        enc->work_cap = n;
    }
    if (n > INT32_MAX || reserve_merge_work(&enc->merges, n) != 0)
        return -1;
    size_t n_ids = merge_piece(enc->tok, &enc->merges, piece, n, enc->work);
    if (slot && n_ids <= CACHE_IDS) {
        memcpy(slot->piece, piece, n);
        slot->piece_len = (uint8_t)n;
        slot->n_ids = (uint8_t)n_ids;
        memcpy(slot->ids, enc->work, n_ids * sizeof *enc->work);
    }
    return push_ids(out, enc->work, n_ids);
}

/* Ordinary text (no special tokens): the pattern's matches, and the bytes between them that
 * no part of it matches (not UTF-8), each a piece. */
static int encode_ordinary(encoder *enc, const unsigned char *text, size_t len, bpe_ids *out)
{
    size_t at = 0;
    while (at < len) {
        int rc = pcre2_match(enc->tok->pattern, text, len, at, 0, enc->match, NULL);
        size_t start = len, end = len;
        if (rc >= 0) {
            PCRE2_SIZE *span = pcre2_get_ovector_pointer(enc->match);
            start = span[0], end = span[1];
        } else if (rc != PCRE2_ERROR_NOMATCH) {
            return -1;
        }
        if (start > at && encode_piece(enc, text + at, start - at, out) != 0)
            return -1;
        if (end > start && encode_piece(enc, text + start, end - start, out) != 0)
            return -1;
        at = end > start ? end : len;
    }
    return 0;
}

/* Text with "<|endoftext|>" in it: the special token where it stands, ordinary text between. */
static int encode_text(encoder *enc, const char *text, size_t len, bpe_ids *out)
{
    const size_t special = sizeof END_OF_TEXT - 1;
    size_t at = 0;
    while (at < len) {
        const char *hit = memmem(text + at, len - at, END_OF_TEXT, special);
        size_t stop = hit ? (size_t)(hit - text) : len;
        if (encode_ordinary(enc, (const unsigned char *)text + at, stop - at, out) != 0)
            return -1;
        if (!hit)
            break;
        if (push_ids(out, &enc->tok->end_of_text, 1) != 0)
            return -1;
        at = stop + special;
    }
    return 0;
}

typedef struct chunk_job {
    const bpe_tokenizer *tok;
    const char *text;
    size_t len;
    bpe_ids ids;
    int rc;
} chunk_job;

static void *encode_chunk(void *arg)
{
    chunk_job *job = arg;
    encoder enc = {job->tok, pcre2_match_data_create_from_pattern(job->tok->pattern, NULL),
                   calloc(CACHE_SLOTS, sizeof(cache_slot)), NULL, 0, {0}};
    job->rc = enc.match && enc.cache ? encode_text(&enc, job->text, job->len, &job->ids) : -1;
    pcre2_match_data_free(enc.match);
    free(enc.cache);
    free(enc.work);
    free_merge_work(&enc.merges);
    return NULL;
}

/* A border at or after AT where the pre-tokenizer splits whatever the rest says: just after
 * a newline followed by a printable ASCII character (no piece holds both), and not inside an
 * "<|endoftext|>" (which starts with '<', printable, so it begins a chunk whole). */
static size_t next_border(const char *text, size_t len, size_t at)
{
    for (size_t i = at; i + 1 < len; i++)
        if (text[i] == '\n' && text[i + 1] > ' ' && text[i + 1] < 0x7f)
            return i + 1;
    return len;
}

enum { MIN_CHUNK = 1 << 20 }; /* below a MiB a thread costs more than it saves */

int bpe_encode(const bpe_tokenizer *tok, const char *text, size_t len, int threads, bpe_ids *out)
{
    if (threads < 1)
        threads = 1;
    if ((size_t)threads > len / MIN_CHUNK + 1)
        threads = (int)(len / MIN_CHUNK + 1);
    chunk_job *jobs = calloc((size_t)threads, sizeof *jobs);
    pthread_t *ids = calloc((size_t)threads, sizeof *ids);
    if (!jobs || !ids)
        return free(jobs), free(ids), -1;
    size_t at = 0;
    for (int t = 0; t < threads; t++) {
        size_t end = t == threads - 1 ? len : next_border(text, len, len / (size_t)threads * (size_t)(t + 1));
        if (end < at)
            end = at;
        jobs[t] = (chunk_job){tok, text + at, end - at, {0}, 0};
        at = end;
    }
    for (int t = 1; t < threads; t++)
        if (pthread_create(&ids[t], NULL, encode_chunk, &jobs[t]) != 0)
            jobs[t].rc = -2; /* not started: encode it here */
    encode_chunk(&jobs[0]);
    int rc = jobs[0].rc;
    for (int t = 1; t < threads; t++) {
        if (jobs[t].rc == -2)
            encode_chunk(&jobs[t]);
        else
            pthread_join(ids[t], NULL);
    }
    for (int t = 0; t < threads; t++) {
        if (rc == 0 && (jobs[t].rc != 0 || push_ids(out, jobs[t].ids.ids, jobs[t].ids.n) != 0))
            rc = -1;
        bpe_ids_free(&jobs[t].ids);
    }
    free(jobs);
    free(ids);
    return rc;
}
