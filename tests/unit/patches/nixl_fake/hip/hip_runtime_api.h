/*
 * FAKE hip/hip_runtime_api.h for the aic.stack unit tests. NOT AMD's HIP runtime.
 *
 * AMD's HIP runtime (libamdhip64) needs ROCm and an AMD GPU, neither of which exists on the
 * machines that run these tests. This header declares only the few HIP names that the NIXL
 * AIS_MT patch (patches/nixl/v1.3.2) and the fake hipfile.h use, with the real signatures, so the
 * patch's host code compiles. fake_hipfile.cpp implements them: "device memory" is host memory
 * that fakeHipMalloc() hands out and remembers, so hipFile's device-memory-only rule can be
 * exercised.
 */
#pragma once

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hipError_t {
    hipSuccess = 0,
    hipErrorInvalidValue = 1,
    hipErrorOutOfMemory = 2,
    hipErrorInvalidDevice = 101,
} hipError_t;

typedef struct ihipStream_t *hipStream_t;

hipError_t hipGetDevice(int *device);
hipError_t hipSetDevice(int device);
const char *hipGetErrorString(hipError_t error);

/* Fake-only: allocate/free "device" memory (plain host memory the fake treats as a GPU's). */
hipError_t fakeHipMalloc(void **ptr, size_t size);
hipError_t fakeHipFree(void *ptr);
/* Fake-only: number of fake GPUs (hipSetDevice accepts 0 .. n-1). */
#define FAKE_HIP_DEVICE_COUNT 2

#ifdef __cplusplus
}
#endif
