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

#endif
