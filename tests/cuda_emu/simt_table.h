/* simt_table.h: the kernel table tests/cuda_emu/trampolines.sh generates next to a stages.cu,
 * as both C (emu_device.c, tests/cuda_fake/driver.c) and simt.h's C++ see it. Test tooling. */
#ifndef SIMT_TABLE_H
#define SIMT_TABLE_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct simt_kernel {
    const char *name;
    /* runs the kernel now over grid x block threads; args as cuLaunchKernel takes them */
    void (*launch)(unsigned grid, unsigned block, void **args);
    /* the argument values copied now (cuLaunchKernel's contract), pointers through
     * simt_translate_pointer; run_bound runs them later and frees them */
    void *(*bind)(void **args);
    void (*run_bound)(void *bound, unsigned grid, unsigned block);
} simt_kernel;

extern const simt_kernel simt_kernels[];
extern const int simt_n_kernels;

/* Maps a pointer argument (parameter `index`) of a bound launch to host memory; set by a host
 * layer whose device addresses are not host addresses (tests/cuda_fake). NULL: kept as is. */
extern void *(*simt_translate_pointer)(const void *p, int index);

#ifdef __cplusplus
}
#endif

#endif
