/* fuzz_frontend.c: libFuzzer harness for the front end. Any bytes go through the parser
 * and, when they parse, through every semantic check and the dumps; diagnostics go to
 * /dev/null. Crashes, leaks and undefined behaviour are the findings. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pacic.h"

static FILE *sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!sink)
        sink = fopen("/dev/null", "w");
    diag_set_stream(sink);
    diag_reset();
    /* a copy, so that a read past the end is caught by the sanitizer */
    char *text = malloc(size ? size : 1);
    memcpy(text, data, size);
    Source src = {"fuzz.paci", text, size};
    lex_dump(sink, &src);
    Ast *ast = parse_source(&src);
    if (ast) {
        ast_dump(sink, &src, ast);
        Config cfg;
        for (int need_data = 0; need_data < 2; need_data++) {
            if (sema_check(&src, ast, need_data, &cfg))
                config_dump(sink, &cfg);
            config_free(&cfg);
        }
        ast_free(ast);
    }
    free(text);
    return 0;
}
