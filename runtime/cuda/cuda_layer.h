/* cuda_layer.h: what the files of runtime/cuda/ share (not installed). */
#ifndef PR_CUDA_LAYER_H
#define PR_CUDA_LAYER_H

#include <cuda.h>

#include "../prt.h"

#define PR_CUDA_WORKSPACE_BYTES ((int64_t)32 << 20) /* cuBLASLt workspace per stage */

/* Fatal on a driver error: names the stage and the call (device.c). */
void pr_cuda_check(int stage, CUresult res, const char *call);
/* The GPU stage s runs on: s mod the GPUs present, or the pinned GPU (one process per
 * stage: the local rank's). */
int pr_cuda_gpu_of(int stage);
CUstream pr_cuda_compute_stream(int stage);
/* Makes the stage's context current on the calling thread (and fails if it is not open). */
void pr_cuda_enter(int stage);
/* The NCCL transport (nccl_transport.c). pr_nccl_load loads `library` (NULL: libnccl.so.2)
 * once and returns its version code, or -1 with the reason in err. */
extern const pr_link_ops pr_nccl_links;
int pr_nccl_load(const char *library, char *err);
/* cuBLASLt handle and workspace of a stage (gemm.c); called with its context current. */
int pr_cuda_gemm_open(int stage, char *err);
void pr_cuda_gemm_close(int stage);

#endif
