/* nccl_load.c: built and run by tests/e2e/cuda_build.sh against libpacirt_cuda.a. Loads
 * the NCCL named on the command line ("-": the default, libnccl.so.2) the way `run` does
 * and prints its version code, or the one-line error `run` would give. Exit 0 loaded, 1 not. */
#include <stdio.h>
#include <string.h>

#include "prt.h"
#include "cuda/cuda_layer.h"

int main(int argc, char **argv)
{
    char err[PR_ERR_LEN] = "";
    const char *library = argc > 1 && strcmp(argv[1], "-") != 0 ? argv[1] : NULL;
    int version = pr_nccl_load(library, err);
    if (version < 0) {
        printf("error: %s\n", err);
        return 1;
    }
    printf("version %d\n", version);
    return 0;
}
