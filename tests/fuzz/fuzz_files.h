/* fuzz_files.h: the file helpers of the harnesses that go through the file system
 * (checkpoint, safetensors). Any failure here is the harness's, so it aborts. */
#ifndef FUZZ_FILES_H
#define FUZZ_FILES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "pacic.h"

static void write_file(const char *path, const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0)
        abort();
}

/* The whole file, through the compiler's reader (the harnesses link its sources). */
static uint8_t *read_bytes(const char *path, size_t *size)
{
    char *data = read_file(path, size);
    if (!data)
        abort();
    return (uint8_t *)data;
}

/* The input format of both harnesses: the first part's length (4 bytes, little-endian), the
 * first part, then the second. */
static void write_two_parts(const char *path, const uint8_t *first, size_t first_size,
                            const uint8_t *second, size_t second_size)
{
    uint8_t len[4] = {(uint8_t)first_size, (uint8_t)(first_size >> 8), (uint8_t)(first_size >> 16),
                      (uint8_t)(first_size >> 24)};
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(len, 1, 4, f) != 4 || fwrite(first, 1, first_size, f) != first_size ||
        fwrite(second, 1, second_size, f) != second_size || fclose(f) != 0)
        abort();
}

#endif
