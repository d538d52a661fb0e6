/* tokenize.c: `pacic tokenize [--bpe DIR] TEXT... PREFIX [--val-fraction F] [--threads N]`:
 * text files to llm.c token files PREFIX_train.bin and PREFIX_val.bin; the last F of the
 * tokens are validation. `pacic tokenize --bpe DIR --decode TOKENS.bin` prints a token file's
 * text (the inverse, to inspect what training reads). Without --bpe one token per byte (vocabulary 256) from one file; with
 * --bpe, GPT-2's byte-level BPE from DIR's vocab.json and merges.txt (runtime/bpe.c), each
 * file a document that starts with <|endoftext|>, as llm.c's data scripts write them. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../runtime/bpe.h"
#include "../runtime/prt.h"
#include "pacic.h"

#define TOKENS_MAGIC 20240520
#define TOKENS_VERSION 1
/* The largest text read (the ids of a file must fit int32 anyway), and token file. */
#define TEXT_LIMIT ((size_t)4 << 30)
#define TOKEN_FILE_LIMIT (1024 + 2 * (size_t)INT32_MAX)
/* Below one GPT-2 sequence (1024) + 1 tokens a file is likely too short for run's micro-batch
 * (batch x seq + 1 tokens), which tokenize does not know: it warns. */
#define FEW_TOKENS 1025

typedef struct tokenize_args {
    const char *bpe_dir, *prefix, *decode;
    const char **texts;
    int n_texts, threads, help;
    double val_fraction;
} tokenize_args;

/* One llm.c token file: header of 256 int32 (magic, version, count), then uint16 tokens. */
static int write_tokens(const char *path, const int32_t *ids, size_t n)
{
    size_t bytes = 256 * 4 + n * 2;
    unsigned char *buf = xcalloc(1, bytes);
    int32_t header[256] = {TOKENS_MAGIC, TOKENS_VERSION, (int32_t)n};
    memcpy(buf, header, sizeof header);
    uint16_t *tokens = (uint16_t *)(buf + sizeof header);
    for (size_t i = 0; i < n; i++)
        tokens[i] = (uint16_t)ids[i];
    int rc = write_file_atomic(path, buf, bytes);
    free(buf);
    return rc;
}

static const char USAGE[] = "usage: pacic tokenize [--bpe DIR] TEXT... PREFIX [--val-fraction F] [--threads N]\n"
                            "       pacic tokenize --bpe DIR --decode TOKENS.bin\n";

static const char HELP[] =
    "Writes llm.c token files PREFIX_train.bin and PREFIX_val.bin from text files (docs/tokenize.md).\n"
    "  --bpe DIR           GPT-2's BPE from DIR's vocab.json and merges.txt (or encoder.json and\n"
    "                      vocab.bpe); each TEXT a document after <|endoftext|>. Without it one\n"
    "                      token per byte (vocab 256), from one TEXT\n"
    "  --val-fraction F    the last F of the tokens are the validation file (default 0.1; 0: none)\n"
    "  --threads N         encode with N threads (default: the machine's cores)\n"
    "  --decode TOKENS.bin with --bpe: print a token file's text\n";

static int usage_error(const char *fmt, const char *what)
{
    fprintf(stderr, "pacic: error: tokenize: ");
    fprintf(stderr, fmt, what);
    fprintf(stderr, "\n%s", USAGE);
    return EXIT_USER;
}

static int parse_args(int argc, char **argv, tokenize_args *args)
{
    *args = (tokenize_args){.val_fraction = 0.1, .texts = xcalloc((size_t)argc, sizeof(char *))};
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    args->threads = cores > 0 ? (int)cores : 1;
    for (int i = 1; i < argc; i++) {
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (strcmp(argv[i], "--val-fraction") == 0) {
            args->val_fraction = value ? strtod(value, &end) : -1;
            if (!value || *end || end == value || !(args->val_fraction >= 0 && args->val_fraction < 1))
                return usage_error("--val-fraction needs a number in [0, 1)%s", "");
            i++;
        } else if (strcmp(argv[i], "--threads") == 0) {
            long threads = value ? strtol(value, &end, 10) : 0;
            if (!value || *end || end == value || threads < 1 || threads > 256)
                return usage_error("--threads needs a whole number in 1..256, not '%s'", value ? value : "");
            args->threads = (int)threads;
            i++;
        } else if (strcmp(argv[i], "--bpe") == 0) {
            if (!value)
                return usage_error("--bpe needs the folder of vocab.json and merges.txt%s", "");
            args->bpe_dir = value;
            i++;
        } else if (strcmp(argv[i], "--decode") == 0) {
            if (!value)
                return usage_error("--decode needs a token file%s", "");
            args->decode = value;
            i++;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            args->help = 1;
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return usage_error("unknown option '%s'", argv[i]);
        } else {
            args->texts[args->n_texts++] = argv[i];
        }
    }
    if (args->decode && (!args->bpe_dir || args->n_texts > 0))
        return usage_error("--decode FILE needs --bpe DIR and no text files%s", "");
    if (args->decode)
        return 0;
    if (args->n_texts < 2)
        return usage_error("needs a text file and a prefix%s", "");
    args->prefix = args->texts[--args->n_texts];
    if (!args->bpe_dir && args->n_texts > 1)
        return usage_error("several text files need --bpe (byte-level files have no document marker), "
                           "not '%s'", args->texts[1]);
    return 0;
}

/* The token ids of every text: bytes, or BPE with <|endoftext|> before each document; BYTES
 * is the length of the texts. */
static int encode_texts(const tokenize_args *args, bpe_ids *ids, size_t *bytes)
{
    bpe_tokenizer *tok = NULL;
    char err[1024];
    if (args->bpe_dir && bpe_load(args->bpe_dir, &tok, err, sizeof err) != 0) {
        fprintf(stderr, "pacic: error: %s\n", err);
        return EXIT_USER;
    }
    int rc = 0;
    *bytes = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < args->n_texts && rc == 0; i++) {
        size_t len;
        char *text = pr_read_regular(args->texts[i], "text", TEXT_LIMIT, &len, err);
        if (!text) {
            fprintf(stderr, "pacic: error: %s\n", err);
            rc = EXIT_USER;
            break;
        }
        *bytes += len;
        if (!tok) {
            ids->ids = xcalloc(len + 1, sizeof *ids->ids);
            for (size_t j = 0; j < len; j++)
                ids->ids[j] = (unsigned char)text[j];
            ids->n = len;
        } else {
            if (ids->n == ids->cap) {
                ids->cap = ids->cap ? 2 * ids->cap : 1024;
                ids->ids = xrealloc(ids->ids, ids->cap * sizeof *ids->ids);
            }
            ids->ids[ids->n++] = bpe_end_of_text(tok);
            if (bpe_encode(tok, text, len, args->threads, ids) != 0)
                rc = EXIT_INTERNAL;
        }
        free(text);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    if (tok && rc == 0)
        printf("%zu bytes, %zu tokens (%.2f bytes a token) in %.2f s, %.1f MB/s on %d threads\n", *bytes,
               ids->n, (double)*bytes / (double)(ids->n ? ids->n : 1), seconds, (double)*bytes / 1e6 / seconds,
               args->threads);
    if (rc == EXIT_INTERNAL)
        fprintf(stderr, "pacic: error: tokenize: out of memory\n");
    bpe_free(tok);
    return rc;
}

/* Writes the bytes of every token of an llm.c token file to stdout. */
static int decode_tokens(const tokenize_args *args)
{
    bpe_tokenizer *tok = NULL;
    char err[1024];
    if (bpe_load(args->bpe_dir, &tok, err, sizeof err) != 0) {
        fprintf(stderr, "pacic: error: %s\n", err);
        return EXIT_USER;
    }
    size_t len;
    unsigned char *file = (unsigned char *)pr_read_regular(args->decode, "token file", TOKEN_FILE_LIMIT, &len, err);
    int32_t header[3] = {0};
    if (file && len >= 1024)
        memcpy(header, file, sizeof header);
    int rc = 0;
    if (!file) {
        fprintf(stderr, "pacic: error: %s\n", err);
        rc = EXIT_USER;
    } else if (len < 1024 || header[0] != TOKENS_MAGIC || header[2] < 0 || len < 1024 + 2 * (size_t)header[2]) {
        fprintf(stderr, "pacic: error: %s: not an llm.c token file (magic %d, %zu bytes)\n", args->decode,
                header[0], len);
        rc = EXIT_USER;
    }
    for (int32_t i = 0; rc == 0 && i < header[2]; i++) {
        uint16_t id;
        memcpy(&id, file + 1024 + 2 * (size_t)i, sizeof id);
        size_t n;
        const unsigned char *bytes = bpe_token_bytes(tok, id, &n);
        if (!bytes) {
            fprintf(stderr, "pacic: error: %s: token %d is %u, past the vocabulary (%d)\n", args->decode, i, id,
                    bpe_vocab_size(tok));
            rc = EXIT_USER;
        } else {
            fwrite(bytes, 1, n, stdout);
        }
    }
    free(file);
    bpe_free(tok);
    return rc;
}

/* Enough tokens for both files, or the reason there are not (0 or EXIT_USER). */
static int check_split(const tokenize_args *args, size_t bytes, size_t n, size_t n_train, size_t n_val)
{
    if (bytes == 0 && args->n_texts == 1)
        fprintf(stderr, "pacic: error: %s: the file is empty: no text to tokenize\n", args->texts[0]);
    else if (bytes == 0)
        fprintf(stderr, "pacic: error: %s and the other text files are all empty: no text to tokenize\n",
                args->texts[0]);
    else if (n > (size_t)INT32_MAX)
        fprintf(stderr, "pacic: error: %s: %zu tokens, more than a token file holds (%d)\n", args->texts[0], n,
                INT32_MAX);
    else if (n_train < 2)
        fprintf(stderr, "pacic: error: %s: %zu bytes are %zu tokens, too few: the training file needs 2 or more\n",
                args->texts[0], bytes, n);
    else if (args->val_fraction > 0 && n_val < 2)
        fprintf(stderr, "pacic: error: %s: %zu tokens: the last %g of them (--val-fraction) are %zu, and a "
                "validation file needs 2 or more: a longer text, a larger --val-fraction, or --val-fraction 0 "
                "for no validation file\n", args->texts[0], n, args->val_fraction, n_val);
    else
        return 0;
    return EXIT_USER;
}

/* A file run is likely to refuse (it needs batch x seq + 1 tokens, unknown here). */
static void warn_if_few(const char *path, size_t n, const char *remedy)
{
    if (n > 0 && n < FEW_TOKENS)
        fprintf(stderr, "pacic: warning: %s: only %zu tokens, fewer than one sequence of 1024 + 1: run needs "
                "batch x seq + 1 tokens in it (%s)\n", path, n, remedy);
}

int tokenize_main(int argc, char **argv)
{
    tokenize_args args;
    bpe_ids ids = {0};
    size_t bytes = 0;
    int rc = parse_args(argc, argv, &args);
    if (rc == 0 && args.help) {
        printf("%s%s", USAGE, HELP);
        free(args.texts);
        return 0;
    }
    if (rc == 0 && args.decode) {
        free(args.texts);
        return decode_tokens(&args);
    }
    if (rc == 0)
        rc = encode_texts(&args, &ids, &bytes);
    size_t n_val = (size_t)((double)ids.n * args.val_fraction), n_train = ids.n - n_val;
    if (rc == 0)
        rc = check_split(&args, bytes, ids.n, n_train, n_val);
    char *train = xasprintf("%s_train.bin", args.prefix ? args.prefix : ""),
         *val = xasprintf("%s_val.bin", args.prefix ? args.prefix : "");
    if (rc == 0 && write_tokens(train, ids.ids, n_train) != 0) {
        fprintf(stderr, "pacic: error: %s: cannot write: %s\n", train, strerror(errno));
        rc = EXIT_USER;
    } else if (rc == 0 && n_val > 0 && write_tokens(val, ids.ids + n_train, n_val) != 0) {
        fprintf(stderr, "pacic: error: %s: cannot write: %s\n", val, strerror(errno));
        rc = EXIT_USER;
    } else if (rc == 0) {
        printf("%s: %zu tokens\n", train, n_train);
        if (n_val > 0)
            printf("%s: %zu tokens\n", val, n_val);
        warn_if_few(train, n_train, "more text");
        warn_if_few(val, n_val, "a larger --val-fraction, or more text");
    }
    free(train);
    free(val);
    free(args.texts);
    bpe_ids_free(&ids);
    return rc;
}
