/* data.c: token files in llm.c's format (256 int32 header: magic, version, count; then
 * uint16 tokens) and the micro-batch each global micro-batch number reads. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "prt.h"

#define HEADER_INTS 256
#define HEADER_BYTES (HEADER_INTS * 4)

/* Every way a token file can be wrong is reported with the file's name; nothing is kept. */
int pr_tokens_load(pr_tokens *d, const char *path, int32_t vocab, int64_t B, int64_t T, char *err)
{
    memset(d, 0, sizeof *d);
    FILE *f = pr_open_regular(path, "token file", err);
    if (!f)
        return -1;
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fclose(f);
        return pr_fail(err, "%s: cannot read its size: %s", path, strerror(errno));
    }
    int64_t size = st.st_size;
    int32_t header[HEADER_INTS];
    if (size < HEADER_BYTES || fread(header, 4, HEADER_INTS, f) != HEADER_INTS) {
        fclose(f);
        return pr_fail(err, "%s: truncated header (%lld bytes, need %d)", path, (long long)size,
                       HEADER_BYTES);
    }
    if (header[0] != PR_TOKENS_MAGIC) {
        fclose(f);
        return pr_fail(err, "%s: wrong magic %d (expected %d): not an llm.c token file", path,
                       header[0], PR_TOKENS_MAGIC);
    }
    if (header[1] != PR_TOKENS_VERSION) {
        fclose(f);
        return pr_fail(err, "%s: unsupported version %d (expected %d)", path, header[1],
                       PR_TOKENS_VERSION);
    }
    int64_t count = header[2];
    int64_t held = (size - HEADER_BYTES) / 2;
    if (count <= 0) {
        fclose(f);
        return pr_fail(err, "%s: declares %lld tokens", path, (long long)count);
    }
    if (count != held || (size - HEADER_BYTES) % 2 != 0) {
        fclose(f);
        return pr_fail(err, "%s: header declares %lld tokens but the file holds %lld bytes of tokens",
                       path, (long long)count, (long long)(size - HEADER_BYTES));
    }
    if (count < B * T + 1) {
        fclose(f);
        return pr_fail(err, "%s: %lld tokens is too few for one micro-batch (%lld x %lld + 1): more text, a "
                       "smaller batch or seq, or for a validation file a larger `pacic tokenize --val-fraction`",
                       path, (long long)count, (long long)B, (long long)T);
    }
    uint16_t *tokens = malloc((size_t)count * 2);
    if (!tokens) {
        fclose(f);
        return pr_fail(err, "%s: out of memory for %lld tokens", path, (long long)count);
    }
    size_t got = fread(tokens, 2, (size_t)count, f);
    fclose(f);
    if ((int64_t)got != count) {
        free(tokens);
        return pr_fail(err, "%s: read failed after %zu tokens", path, got);
    }
    for (int64_t i = 0; i < count; i++) {
        if (tokens[i] >= vocab) {
            unsigned value = tokens[i];
            free(tokens);
            return pr_fail(err, "%s: token %u at byte offset %lld is outside the vocabulary (%d)",
                           path, value, (long long)(HEADER_BYTES + 2 * i), vocab);
        }
    }
    d->path = path;
    d->tokens = tokens;
    d->count = count;
    return 0;
}

void pr_tokens_free(pr_tokens *d)
{
    free(d->tokens);
    memset(d, 0, sizeof *d);
}

/* One round of the Feistel network below: a splitmix64 finaliser of the half, the key and
 * the round, cut to `bits`. */
static uint64_t feistel_round(uint64_t half, uint64_t key, int round, int bits)
{
    uint64_t z = half + key + 0x9e3779b97f4a7c15ULL * (uint64_t)(round + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return z & ((1ULL << bits) - 1);
}

/* A balanced four-round Feistel network permutes [0, 4^h) for the smallest 4^h >= n; walking
 * the cycle from i until it lands below n restricts it to a permutation of [0, n) (each
 * position takes under four walks on average, since 4^h < 4n). */
int64_t pr_shuffled_position(uint64_t key, int64_t n, int64_t i)
{
    int bits = 1;
    while ((1LL << (2 * bits)) < n)
        bits++;
    uint64_t mask = (1ULL << bits) - 1, x = (uint64_t)i;
    do {
        uint64_t left = x >> bits, right = x & mask;
        for (int round = 0; round < 4; round++) {
            uint64_t next = left ^ feistel_round(right, key, round, bits);
            left = right;
            right = next;
        }
        x = left << bits | right;
    } while (x >= (uint64_t)n);
    return (int64_t)x;
}

void pr_tokens_batch(const pr_tokens *d, int64_t g, int64_t B, int64_t T, int32_t *inputs,
                     int32_t *targets)
{
    int64_t chunks = (d->count - 1) / T;
    for (int64_t b = 0; b < B; b++) {
        int64_t i = g * B + b, chunk = i % chunks;
        if (d->shuffled) { // each epoch its own permutation: the key mixes the seed and the epoch
            pr_rng mix = {d->order_seed ^ (0xd1b54a32d192ed03ULL * (uint64_t)(i / chunks + 1))};
            chunk = pr_shuffled_position(pr_rng_next(&mix), chunks, chunk);
        }
        int64_t start = chunk * T;
        for (int64_t t = 0; t < T; t++) {
            inputs[b * T + t] = d->tokens[start + t];
            targets[b * T + t] = d->tokens[start + t + 1];
        }
    }
}
