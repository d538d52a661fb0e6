/* fake.h: what the three libraries of the fake CUDA stack share (test tooling, never part of
 * pacic or run).
 *
 * tests/cuda_fake builds libcuda.so.1 (driver.c), libcublasLt.so.13 (cublaslt.c) and
 * libnccl.so.2 (nccl.c) that run the real `run`'s GPU layer (runtime/cuda/) on the CPU:
 * "device memory" is host memory whose addresses carry FAKE_TAG, so a host dereference of a
 * device pointer faults; every stream is a worker thread that runs its queue in order;
 * events, contexts and streams keep CUDA's rules and a broken rule ends the process with a
 * message that starts "fake cuda:". The two other libraries link against libcuda.so.1 for
 * these functions.
 */
#ifndef PACI_FAKE_H
#define PACI_FAKE_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

/* Device address = host address | FAKE_TAG: non-canonical on x86-64 and AArch64. */
#define FAKE_TAG 0x4000000000000000ull

/* Prints "fake cuda: MESSAGE" on stderr and aborts: a broken rule of the CUDA stack. */
void fake_die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* The host memory behind device bytes [p, p + bytes): dies naming `what` unless they lie in one
 * live allocation (of GPU `gpu` when gpu >= 0). bytes 0 checks only p. */
void *fake_device_range(CUdeviceptr p, size_t bytes, int gpu, const char *what);

/* 1 if p carries FAKE_TAG (device memory, live or not), else 0 (host memory). */
int fake_is_device(const void *p);

/* Queues run(arg) on stream s's worker thread, after everything queued before; the worker
 * calls free(arg) after run returns. Dies on a stream that is not live. */
void fake_stream_enqueue(CUstream s, void (*run)(void *arg), void *arg);

/* The GPU (device ordinal) stream s belongs to; dies if s is not live. */
int fake_stream_gpu(CUstream s);

/* The GPU of the calling thread's current context, or -1 when none is current. */
int fake_current_gpu(void);

/* Counts of what the driver has done, for the test's summary (FAKE_CUDA_REPORT=1). */
void fake_count(const char *what);

#endif
