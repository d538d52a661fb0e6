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
/* device.c's side of struct pr_device (runtime/prt.h says what each does); layer.c puts them
 * in pr_device_cuda, and the files above device.c call them directly. */
int pr_cuda_dev_probe(char *err);
int pr_cuda_dev_open_stage(const pr_program *prog, int stage, char *err);
void pr_cuda_dev_close_stage(int stage);
int pr_cuda_dev_check_memory(const pr_program *prog, const int64_t *stage_bytes, char *err);
int pr_cuda_dev_pin(int gpu, char *err);
void *pr_cuda_dev_alloc(int stage, size_t bytes);
void pr_cuda_dev_release(int stage, void *p);
void pr_cuda_dev_queue_copy(int stage, void *dst, const void *src, size_t bytes);
void pr_cuda_dev_download(int stage, void *dst, const void *src, size_t bytes);
void pr_cuda_dev_zero(int stage, void *dst, size_t bytes);
void pr_cuda_dev_sumsq(int stage, const float *base, const pr_tensor *tensors, int n, double *sums);
void pr_cuda_dev_sumsq_hold(int stage, const float *x, int64_t size);
int pr_cuda_dev_sumsq_held(int stage, double *sum);
void pr_cuda_dev_forward(const pr_program *prog, int stage, const pr_fwd_args *args);
void pr_cuda_dev_backward(const pr_program *prog, int stage, const pr_bwd_args *args);
void pr_cuda_dev_backward_part(const pr_program *prog, int stage, int part, const pr_bwd_args *args);
void pr_cuda_dev_adamw(const pr_program *prog, int stage, const pr_adamw_args *args);
void pr_cuda_dev_predict(const pr_program *prog, int stage, const pr_optim_rule *rule, const pr_predict_args *args);
void pr_cuda_dev_dc_asgd_add(int stage, float *sum, const float *g, const float *w, const float *w_prev, int64_t n,
                             float coef);
void pr_cuda_dev_weight_copy(const pr_program *prog, int stage, const float *params, pr_bf16 *params_h);
void pr_cuda_dev_follow(int stage, int other);
void pr_cuda_dev_finish(int stage);
void *pr_cuda_dev_event_create(int stage);
void pr_cuda_dev_event_destroy(int stage, void *event);
void pr_cuda_dev_event_record(int stage, void *event);
void pr_cuda_dev_event_wait(int stage, void *event);
extern const pr_op_timer pr_cuda_dev_op_timer;
/* A kernel of the stage's unit by name, NULL with err when there is none; its launch over
 * `threads` indices in blocks of `block` on the compute stream. */
CUfunction pr_cuda_function(int stage, const char *name, char *err);
void pr_cuda_launch_function(int stage, CUfunction f, int64_t threads, int block, void **args);
/* compression dgc on the GPU (dgc.c): struct pr_device's dgc_* calls (runtime/prt.h). */
int pr_cuda_dgc_open(const pr_program *prog, int stage, pr_dgc_buffers *b, int D, char *err);
uint32_t *pr_cuda_dgc_compress(int stage, pr_dgc_buffers *b, const float *grads, int64_t k, float scale,
                               float mu, int replica);
void pr_cuda_dgc_sum(int stage, float *grads, const uint32_t *slots, int64_t k);
void pr_cuda_dgc_undo(int stage, pr_dgc_buffers *b);
void pr_cuda_dgc_close(int stage, pr_dgc_buffers *b);
/* The NCCL transport (nccl_transport.c). pr_nccl_load loads `library` (NULL: libnccl.so.2)
 * once and returns its version code, or -1 with the reason in err. */
extern const pr_link_ops pr_nccl_links;
int pr_nccl_load(const char *library, char *err);
/* cuBLASLt handle and workspace of a stage (gemm.c), on GPU `gpu`; its products go on
 * `stream` and its memory comes from `memory`'s calls. Called with the context current. */
int pr_cuda_gemm_open(int stage, int gpu, CUstream stream, const pr_device *memory, char *err);
void pr_cuda_gemm_close(int stage);

#endif
