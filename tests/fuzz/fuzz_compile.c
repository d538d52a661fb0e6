/* fuzz_compile.c: libFuzzer harness for the whole compile up to the verified schedule. Any
 * bytes go through parse, sema, plan, schedule_build and verify_schedule (no codegen);
 * a schedule the verifier rejects is a compiler bug, so it aborts. Diagnostics go to
 * /dev/null. Crashes, leaks, hangs, undefined behaviour and rejected schedules are the
 * findings. */
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
    Ast *ast = parse_source(&src);
    Config cfg;
    if (ast && sema_check(&src, ast, false, &cfg)) {
        Plan plan;
        if (plan_build(&cfg, &plan)) {
            paci_table *table = schedule_build(&cfg, &plan);
            VerifyReport report;
            if (!verify_schedule(table, &plan, &report)) {
                fprintf(stderr, "fuzz_compile: the %s schedule failed verification: %s\n",
                        paci_schedule_name(cfg.schedule), report.error);
                abort();
            }
            schedule_free(table);
        }
    }
    if (ast) {
        config_free(&cfg);
        ast_free(ast);
    }
    free(text);
    return 0;
}
