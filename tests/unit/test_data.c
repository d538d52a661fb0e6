/* test_data.c: token files (every malformed case gives a one-line error naming the file),
 * the micro-batch positions, and `pacic tokenize`. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pacic.h"
#include "prt.h"

static char dir[] = "/tmp/pacirt_data_XXXXXX";
static char path[512];

/* A token file with the given header fields and tokens; extra_bytes of garbage at the end. */
static void write_token_file(int32_t magic, int32_t version, int32_t declared,
                             const uint16_t *tokens, int64_t n, size_t header_bytes)
{
    int32_t header[256] = {magic, version, declared};
    FILE *f = fopen(path, "wb");
    fwrite(header, 1, header_bytes, f);
    if (n > 0)
        fwrite(tokens, 2, (size_t)n, f);
    fclose(f);
}

static uint16_t *counting(int64_t n, int vocab)
{
    uint16_t *t = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++)
        t[i] = (uint16_t)(i % vocab);
    return t;
}

/* Loads path expecting failure; the message must name the file and contain `what`. */
static void expect_error(const char *what)
{
    pr_tokens d;
    char err[PR_ERR_LEN];
    assert_int_equal(pr_tokens_load(&d, path, 256, 2, 4, err), -1);
    assert_non_null(strstr(err, path));
    if (!strstr(err, what))
        fail_msg("error '%s' does not say '%s'", err, what);
    assert_null(strchr(err, '\n'));
}

static void test_missing(void **state)
{
    unlink(path);
    expect_error("cannot open");
}

static void test_empty_and_truncated_header(void **state)
{
    write_token_file(PR_TOKENS_MAGIC, 1, 0, NULL, 0, 0);
    expect_error("truncated header");
    write_token_file(PR_TOKENS_MAGIC, 1, 10, NULL, 0, 100);
    expect_error("truncated header");
}

static void test_wrong_magic_and_version(void **state)
{
    uint16_t *t = counting(100, 256);
    write_token_file(20240326, 1, 100, t, 100, 1024);
    expect_error("wrong magic 20240326");
    write_token_file(PR_TOKENS_MAGIC, 2, 100, t, 100, 1024);
    expect_error("unsupported version 2");
    free(t);
}

static void test_declared_count(void **state)
{
    uint16_t *t = counting(100, 256);
    write_token_file(PR_TOKENS_MAGIC, 1, 0, t, 100, 1024);
    expect_error("declares 0 tokens");
    write_token_file(PR_TOKENS_MAGIC, 1, 2000000000, t, 100, 1024);
    expect_error("header declares 2000000000 tokens");
    write_token_file(PR_TOKENS_MAGIC, 1, 99, t, 100, 1024); // one token too many on disk
    expect_error("header declares 99 tokens");
    free(t);
}

static void test_token_out_of_range(void **state)
{
    uint16_t *t = counting(100, 256);
    t[37] = 300;
    write_token_file(PR_TOKENS_MAGIC, 1, 100, t, 100, 1024);
    expect_error("token 300 at byte offset 1098");
    free(t);
}

static void test_too_few_tokens(void **state)
{
    uint16_t *t = counting(8, 256);
    write_token_file(PR_TOKENS_MAGIC, 1, 8, t, 8, 1024); // B*T+1 = 9 needed
    expect_error("too few for one micro-batch");
    expect_error("a larger `pacic tokenize --val-fraction`"); /* the way out for a small validation file */
    free(t);
}

/* A token part of odd length, a negative or INT32_MAX count, and a folder in place of the
 * file: each is an error naming the file, and nothing is allocated for a huge count. */
static void test_odd_size_huge_count_and_folder(void **state)
{
    uint16_t *t = counting(100, 256);
    write_token_file(PR_TOKENS_MAGIC, 1, 100, t, 100, 1024);
    FILE *f = fopen(path, "ab");
    fputc(7, f); // half a token
    fclose(f);
    expect_error("header declares 100 tokens but the file holds 201 bytes of tokens");
    write_token_file(PR_TOKENS_MAGIC, 1, -5, t, 100, 1024);
    expect_error("declares -5 tokens");
    write_token_file(PR_TOKENS_MAGIC, 1, 2147483647, t, 100, 1024);
    expect_error("header declares 2147483647 tokens");
    free(t);
    char saved[512];
    snprintf(saved, sizeof saved, "%s", path);
    snprintf(path, sizeof path, "%s", dir);
    expect_error("not a regular file");
    snprintf(path, sizeof path, "%s", saved);
}

/* Micro-batch g reads chunks (g*B + b) mod chunks; targets are inputs shifted by one. */
static void test_batch_positions(void **state)
{
    int64_t n = 101;
    uint16_t *t = counting(n, 256);
    write_token_file(PR_TOKENS_MAGIC, 1, (int32_t)n, t, n, 1024);
    pr_tokens d;
    char err[PR_ERR_LEN];
    assert_int_equal(pr_tokens_load(&d, path, 256, 2, 4, err), 0);
    assert_int_equal(d.count, n);
    int32_t in[8], tg[8];
    pr_tokens_batch(&d, 0, 2, 4, in, tg);
    assert_int_equal(in[0], 0);
    assert_int_equal(in[4], 4);
    assert_int_equal(tg[3], 4);
    pr_tokens_batch(&d, 13, 2, 4, in, tg); // 25 chunks: 26 and 27 wrap to 1 and 2
    assert_int_equal(in[0], 4);
    assert_int_equal(in[4], 8);
    assert_int_equal(tg[7], 12);
    free(t);
    pr_tokens_free(&d);
}

/* The shuffled order's permutation: a bijection of [0, n) for every n (cycle walking lands
 * every position once), the same for the same key, another for another key, and no longer
 * the file's order. */
static void test_shuffled_permutation(void **state)
{
    const int64_t sizes[] = {1, 2, 3, 4, 5, 17, 64, 65, 1000, 4096, 4097, 100003};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        int64_t n = sizes[k], fixed = 0, moved_by_key = 0;
        char *seen = calloc((size_t)n, 1);
        for (int64_t i = 0; i < n; i++) {
            int64_t j = pr_shuffled_position(1337, n, i);
            if (j < 0 || j >= n || seen[j])
                fail_msg("n = %lld: position %lld maps to %lld, outside or taken", (long long)n, (long long)i,
                         (long long)j);
            seen[j] = 1;
            assert_int_equal(j, pr_shuffled_position(1337, n, i));
            fixed += j == i;
            moved_by_key += j != pr_shuffled_position(1338, n, i);
        }
        free(seen);
        if (n >= 64 && (fixed > n / 8 || moved_by_key < n / 2))
            fail_msg("n = %lld: %lld positions fixed, %lld differ under another key", (long long)n,
                     (long long)fixed, (long long)moved_by_key);
    }
}

/* Under the shuffled order an epoch reads every chunk once, epochs read them in other orders,
 * and the same micro-batch number reads the same tokens whoever asks (resume, replicas). */
static void test_batch_shuffled(void **state)
{
    int64_t n = 101, T = 4, chunks = (n - 1) / T;
    uint16_t *t = counting(n, 256);
    write_token_file(PR_TOKENS_MAGIC, 1, (int32_t)n, t, n, 1024);
    pr_tokens d;
    char err[PR_ERR_LEN];
    assert_int_equal(pr_tokens_load(&d, path, 256, 1, T, err), 0);
    d.shuffled = 1;
    d.order_seed = 1337;
    int32_t in[4], tg[4], first_epoch[25], same = 0;
    for (int64_t epoch = 0; epoch < 2; epoch++) {
        char seen[25] = {0};
        for (int64_t i = 0; i < chunks; i++) {
            pr_tokens_batch(&d, epoch * chunks + i, 1, T, in, tg);
            assert_int_equal(in[0] % T, 0);
            assert_int_equal(tg[0], in[0] + 1);
            int64_t c = in[0] / T;
            assert_false(seen[c]);
            seen[c] = 1;
            if (epoch == 0)
                first_epoch[i] = (int32_t)c;
            else
                same += first_epoch[i] == c;
        }
    }
    assert_true(same < chunks / 2);
    int32_t again[4], again_tg[4];
    pr_tokens_batch(&d, 7, 1, T, in, tg);
    pr_tokens_batch(&d, 7, 1, T, again, again_tg);
    assert_memory_equal(in, again, sizeof in);
    free(t);
    pr_tokens_free(&d);
}

static void test_tokenize(void **state)
{
    char text[512], prefix[512], train[600], val[600];
    snprintf(text, sizeof text, "%s/text.txt", dir);
    snprintf(prefix, sizeof prefix, "%s/out", dir);
    FILE *f = fopen(text, "wb");
    for (int i = 0; i < 1000; i++)
        fputc("abcdefghij\n"[i % 11], f);
    fclose(f);
    char *argv[] = {"tokenize", text, prefix, "--val-fraction", "0.2", NULL};
    assert_int_equal(tokenize_main(5, argv), 0);
    snprintf(train, sizeof train, "%s_train.bin", prefix);
    snprintf(val, sizeof val, "%s_val.bin", prefix);
    pr_tokens d;
    char err[PR_ERR_LEN];
    assert_int_equal(pr_tokens_load(&d, train, 256, 1, 4, err), 0);
    assert_int_equal(d.count, 800);
    assert_int_equal(d.tokens[1], 'b');
    pr_tokens_free(&d);
    assert_int_equal(pr_tokens_load(&d, val, 256, 1, 4, err), 0);
    assert_int_equal(d.count, 200);
    assert_int_equal(d.tokens[0], "abcdefghij\n"[800 % 11]);
    pr_tokens_free(&d);

    char missing[600];
    snprintf(missing, sizeof missing, "%s/nothing.txt", dir);
    char *bad_in[] = {"tokenize", missing, prefix, NULL};
    assert_int_equal(tokenize_main(3, bad_in), 1);
    char *bad_out[] = {"tokenize", text, "/nonexistent-dir/x", NULL};
    assert_int_equal(tokenize_main(3, bad_out), 1);
    char *bad_fraction[] = {"tokenize", text, prefix, "--val-fraction", "1.5", NULL};
    assert_int_equal(tokenize_main(5, bad_fraction), 1);
}

static int setup(void **state)
{
    if (!mkdtemp(dir))
        return -1;
    snprintf(path, sizeof path, "%s/tokens.bin", dir);
    return 0;
}

static int teardown(void **state)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_missing),
        cmocka_unit_test(test_empty_and_truncated_header),
        cmocka_unit_test(test_wrong_magic_and_version),
        cmocka_unit_test(test_odd_size_huge_count_and_folder),
        cmocka_unit_test(test_declared_count),
        cmocka_unit_test(test_token_out_of_range),
        cmocka_unit_test(test_too_few_tokens),
        cmocka_unit_test(test_batch_positions),
        cmocka_unit_test(test_shuffled_permutation),
        cmocka_unit_test(test_batch_shuffled),
        cmocka_unit_test(test_tokenize),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
