/* cuda/layer.c: the CUDA device layer as the runtime selects it (pr_device_cuda): device.c's
 * calls, with the NCCL transport between processes and GPUs (nccl_transport.c). The files
 * of runtime/cuda/ form layers: device.c (the driver, contexts, streams, memory, launches) at
 * the bottom; gemm.c (cuBLASLt), optim.c (the optimizers' steps), dgc.c (compression dgc's selection
 * and sum) and nccl_transport.c on it;
 * this table on top. No file calls one above it.
 */
#include "../prt.h"
#include "cuda_layer.h"

const pr_device pr_device_cuda = {
    .name = "cuda",
    .host_memory = 0,
    .probe = pr_cuda_dev_probe,
    .open_stage = pr_cuda_dev_open_stage,
    .check_memory = pr_cuda_dev_check_memory,
    .alloc = pr_cuda_dev_alloc,
    .release = pr_cuda_dev_release,
    .upload = pr_cuda_dev_queue_copy,
    .download = pr_cuda_dev_download,
    .copy = pr_cuda_dev_queue_copy,
    .zero = pr_cuda_dev_zero,
    .sumsq = pr_cuda_dev_sumsq,
    .sumsq_hold = pr_cuda_dev_sumsq_hold,
    .sumsq_held = pr_cuda_dev_sumsq_held,
    .forward = pr_cuda_dev_forward,
    .backward = pr_cuda_dev_backward,
    .backward_part = pr_cuda_dev_backward_part,
    .adamw = pr_cuda_dev_adamw,
    .predict = pr_cuda_dev_predict,
    .dc_asgd_add = pr_cuda_dev_dc_asgd_add,
    .close_stage = pr_cuda_dev_close_stage,
    .pin = pr_cuda_dev_pin,
    .links = &pr_nccl_links,
    .op_timer = &pr_cuda_dev_op_timer,
    .weight_copy = pr_cuda_dev_weight_copy,
    .follow = pr_cuda_dev_follow,
    .finish = pr_cuda_dev_finish,
    .event_create = pr_cuda_dev_event_create,
    .event_destroy = pr_cuda_dev_event_destroy,
    .event_record = pr_cuda_dev_event_record,
    .event_wait = pr_cuda_dev_event_wait,
    .dgc_open = pr_cuda_dgc_open,
    .dgc_compress = pr_cuda_dgc_compress,
    .dgc_sum = pr_cuda_dgc_sum,
    .dgc_undo = pr_cuda_dgc_undo,
    .dgc_close = pr_cuda_dgc_close,
};
