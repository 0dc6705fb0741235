/*
 * FAKE hipfile.h for the aic.stack unit tests. NOT AMD's hipFile.
 *
 * AMD hipFile (ROCm's GPU-direct file I/O library, the counterpart of NVIDIA cuFile) needs ROCm,
 * an AMD GPU and the amdgpu P2P DMA path, none of which can exist on the machines that run these
 * tests. This header restates the subset of hipFile's public API that the NIXL AIS_MT patch
 * (patches/nixl/v1.3.2/01-ais-mt-hipfile-backend.patch) calls, with the names, values and
 * signatures of hipFile's public header, so the patch's code compiles against it unchanged.
 * fake_hipfile.cpp implements it with pread/pwrite on host memory.
 */
#pragma once

#include <hip/hip_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef off_t hoff_t;

#define HIPFILE_BASE_ERR 5000

typedef enum hipFileOpError {
    hipFileSuccess = 0,
    hipFileDriverNotInitialized = HIPFILE_BASE_ERR + 1,
    hipFileIONotSupported = HIPFILE_BASE_ERR + 8,
    hipFileHipDriverError = HIPFILE_BASE_ERR + 11,
    hipFileHipMemoryTypeInvalid = HIPFILE_BASE_ERR + 13,
    hipFileHipPointerRangeError = HIPFILE_BASE_ERR + 14,
    hipFileInvalidValue = HIPFILE_BASE_ERR + 22,
    hipFileMemoryAlreadyRegistered = HIPFILE_BASE_ERR + 23,
    hipFileMemoryNotRegistered = HIPFILE_BASE_ERR + 24,
    hipFileHandleNotRegistered = HIPFILE_BASE_ERR + 27,
    hipFileHandleAlreadyRegistered = HIPFILE_BASE_ERR + 28,
    hipFileInternalError = HIPFILE_BASE_ERR + 30,
} hipFileOpError_t;

const char *hipFileGetOpErrorString(hipFileOpError_t status);

/* As in hipFile: ignoring a returned status is a warning (an error under -Werror) in C++17+. */
#if defined(__cplusplus) && __cplusplus >= 201703L
#define __HIPFILE_NODISCARD [[nodiscard]]
#else
#define __HIPFILE_NODISCARD
#endif

typedef struct __HIPFILE_NODISCARD hipFileError {
    hipFileOpError_t err;
    hipError_t hip_drv_err;
} hipFileError_t;

#define IS_HIPFILE_ERR(hip_op_err) (abs(hip_op_err) > HIPFILE_BASE_ERR)
#define IS_HIP_DRV_ERR(hip_err) (hip_err.err == hipFileHipDriverError)
#define HIP_DRV_ERR(hip_err) (hip_err.hip_drv_err)

typedef struct hipFileFSOps hipFileFSOps_t; /* opaque here: only userspace-FS handles use it */

typedef enum hipFileFileHandleType {
    hipFileHandleTypeOpaqueFD = 1,
    hipFileHandleTypeOpaqueWin32 = 2,
    hipFileHandleTypeUserspaceFS = 3,
} hipFileFileHandleType_t;

typedef struct hipFileDescr {
    hipFileFileHandleType_t type;
    union {
        int fd;
        void *hFile;
    } handle;
    const hipFileFSOps_t *fs_ops;
} hipFileDescr_t;

typedef void *hipFileHandle_t;

hipFileError_t hipFileHandleRegister(hipFileHandle_t *fh, hipFileDescr_t *descr);
void hipFileHandleDeregister(hipFileHandle_t fh);
hipFileError_t hipFileBufRegister(const void *buffer_base, size_t length, int flags);
hipFileError_t hipFileBufDeregister(const void *buffer_base);
ssize_t hipFileRead(hipFileHandle_t fh, void *buffer_base, size_t size, hoff_t file_offset,
                    hoff_t buffer_offset);
ssize_t hipFileWrite(hipFileHandle_t fh, const void *buffer_base, size_t size, hoff_t file_offset,
                     hoff_t buffer_offset);
hipFileError_t hipFileDriverOpen(void);
hipFileError_t hipFileDriverClose(void);
int64_t hipFileUseCount(void);

#ifdef __cplusplus
}
#endif
