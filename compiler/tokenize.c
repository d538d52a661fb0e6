/* tokenize.c: `pacic tokenize TEXT PREFIX [--val-fraction F]`: a text file to llm.c token
 * files PREFIX_train.bin and PREFIX_val.bin, one token per byte (vocabulary 256); the last
 * F of the text is validation. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pacic.h"

#define TOKENS_MAGIC 20240520
#define TOKENS_VERSION 1

/* One llm.c token file: header of 256 int32 (magic, version, count), then uint16 tokens. */
static int write_tokens(const char *path, const unsigned char *text, size_t n)
{
    size_t bytes = 256 * 4 + n * 2;
    unsigned char *buf = xcalloc(1, bytes);
    int32_t header[256] = {TOKENS_MAGIC, TOKENS_VERSION, (int32_t)n};
    memcpy(buf, header, sizeof header);
    uint16_t *tokens = (uint16_t *)(buf + sizeof header);
    for (size_t i = 0; i < n; i++)
        tokens[i] = text[i];
    int rc = write_file_atomic(path, buf, bytes);
    free(buf);
    return rc;
}

int tokenize_main(int argc, char **argv)
{
    const char *text_path = NULL, *prefix = NULL;
    double fraction = 0.1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--val-fraction") == 0) {
            char *end;
            fraction = i + 1 < argc ? strtod(argv[i + 1], &end) : -1;
            if (i + 1 >= argc || *end || end == argv[i + 1] || !(fraction >= 0 && fraction < 1)) {
                fprintf(stderr, "pacic: error: --val-fraction needs a number in [0, 1)\n");
                return EXIT_USER;
            }
            i++;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "pacic: error: tokenize: unknown option '%s'\n", argv[i]);
            return EXIT_USER;
        } else if (!text_path) {
            text_path = argv[i];
        } else if (!prefix) {
            prefix = argv[i];
        } else {
            fprintf(stderr, "pacic: error: tokenize: unexpected argument '%s'\n", argv[i]);
            return EXIT_USER;
        }
    }
    if (!prefix) {
        fprintf(stderr, "usage: pacic tokenize TEXT PREFIX [--val-fraction F]\n");
        return EXIT_USER;
    }
    size_t len;
    char *text = read_file(text_path, &len);
    if (!text) {
        fprintf(stderr, "pacic: error: %s: cannot read: %s\n", text_path, strerror(errno));
        return EXIT_USER;
    }
    size_t n_val = (size_t)((double)len * fraction), n_train = len - n_val;
    if (n_train < 2 || (fraction > 0 && n_val < 2) || len > (size_t)INT32_MAX) {
        fprintf(stderr, "pacic: error: %s: %zu bytes cannot make a training and a validation "
                "file\n", text_path, len);
        free(text);
        return EXIT_USER;
    }
    const unsigned char *bytes = (const unsigned char *)text;
    char *train = xasprintf("%s_train.bin", prefix), *val = xasprintf("%s_val.bin", prefix);
    int rc = 0;
    if (write_tokens(train, bytes, n_train) != 0) {
        fprintf(stderr, "pacic: error: %s: cannot write: %s\n", train, strerror(errno));
        rc = EXIT_USER;
    } else if (n_val > 0 && write_tokens(val, bytes + n_train, n_val) != 0) {
        fprintf(stderr, "pacic: error: %s: cannot write: %s\n", val, strerror(errno));
        rc = EXIT_USER;
    } else {
        printf("%s: %zu tokens\n", train, n_train);
        if (n_val > 0)
            printf("%s: %zu tokens\n", val, n_val);
    }
    free(train);
    free(val);
    free(text);
    return rc;
}
