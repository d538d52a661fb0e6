/* fuzz_tokens.c: libFuzzer harness for the token-file reader. The bytes become a file (an
 * in-memory one, reached through /proc/self/fd) that pr_tokens_load reads for a small
 * model; when it loads, every micro-batch position is drawn from it. Crashes, leaks, reads
 * out of bounds and an accepted file that breaks the batch rule are the findings. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "prt.h"

enum { FUZZ_B = 2, FUZZ_T = 4, FUZZ_VOCAB = 50 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("fuzz_tokens", 0);
    if (fd < 0)
        abort();
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0)
            abort();
        done += (size_t)w;
    }
    char path[64], err[PR_ERR_LEN];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    pr_tokens d;
    if (pr_tokens_load(&d, path, FUZZ_VOCAB, FUZZ_B, FUZZ_T, err) == 0) {
        if (d.count < FUZZ_B * FUZZ_T + 1)
            abort(); // the reader promised one micro-batch at least
        int32_t inputs[FUZZ_B * FUZZ_T], targets[FUZZ_B * FUZZ_T];
        for (int64_t g = 0; g < 64; g++) {
            pr_tokens_batch(&d, g, FUZZ_B, FUZZ_T, inputs, targets);
            for (int i = 0; i < FUZZ_B * FUZZ_T; i++)
                if (inputs[i] < 0 || inputs[i] >= FUZZ_VOCAB || targets[i] < 0 ||
                    targets[i] >= FUZZ_VOCAB)
                    abort();
        }
        pr_tokens_free(&d);
    } else if (!strstr(err, path)) {
        abort(); // every error names the file
    }
    close(fd);
    return 0;
}
