/* cuda_layer.h: what the files of runtime/cuda/ share (not installed). */
#ifndef PR_CUDA_LAYER_H
#define PR_CUDA_LAYER_H

#include <cuda.h>

#define PR_CUDA_WORKSPACE_BYTES ((int64_t)32 << 20) /* cuBLASLt workspace per stage */

/* Fatal on a driver error: names the stage and the call (device.c). */
void pr_cuda_check(int stage, CUresult res, const char *call);
/* The GPU stage s runs on: s mod the GPUs present. */
int pr_cuda_gpu_of(int stage);
CUstream pr_cuda_compute_stream(int stage);
/* cuBLASLt handle and workspace of a stage (gemm.c); called with its context current. */
int pr_cuda_gemm_open(int stage, char *err);
void pr_cuda_gemm_close(int stage);

#endif
