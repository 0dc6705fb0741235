/*
 * FAKE implementation of the hipFile subset declared in hipfile.h (and of the few HIP runtime
 * calls in hip/hip_runtime_api.h) for the aic.stack unit tests. NOT AMD's hipFile.
 *
 * AMD hipFile cannot exist on a machine without ROCm and an AMD GPU. This stand-in keeps the
 * contract the NIXL AIS_MT backend relies on:
 *   - hipFileBufRegister/hipFileRead/hipFileWrite accept GPU memory only and refuse host memory
 *     with hipFileHipMemoryTypeInvalid, as hipFile does. "GPU memory" here is host memory handed
 *     out by fakeHipMalloc() and remembered in a table.
 *   - hipFileRead/hipFileWrite move buffer_base + buffer_offset through pread/pwrite on the
 *     registered descriptor and return the byte count, -1 with errno, or a negated
 *     hipFileOpError_t; the range must lie inside the allocation (or the registered length).
 *   - a descriptor can be registered once; a buffer base can be registered once.
 *   - hipFileDriverOpen/Close keep a reference count (hipFileUseCount).
 */
#include <hipfile.h>

#include <cerrno>
#include <cstdint>
#include <map>
#include <mutex>
#include <new>
#include <set>

#include <fcntl.h>
#include <unistd.h>

namespace {

std::mutex mutex;
std::map<uintptr_t, size_t> device_allocations; // base -> size
std::map<const void *, size_t> registered_buffers;
std::set<int> registered_fds;
int64_t driver_refs = 0;
thread_local int current_device = 0;

// The allocation containing [ptr, ptr + 1), or nullptr.
const std::pair<const uintptr_t, size_t> *
findAllocation(const void *ptr) {
    const auto p = reinterpret_cast<uintptr_t>(ptr);
    auto it = device_allocations.upper_bound(p);
    if (it == device_allocations.begin()) {
        return nullptr;
    }
    --it;
    return p < it->first + it->second ? &*it : nullptr;
}

struct FakeHandle {
    int fd;
};

ssize_t
io(bool read, hipFileHandle_t fh, const void *buffer_base, size_t size, hoff_t file_offset,
   hoff_t buffer_offset) {
    std::lock_guard<std::mutex> lock(mutex);
    auto *handle = static_cast<FakeHandle *>(fh);
    if (handle == nullptr || registered_fds.count(handle->fd) == 0) {
        return -hipFileHandleNotRegistered;
    }
    if (file_offset < 0 || buffer_offset < 0) {
        return -hipFileInvalidValue;
    }
    const auto *alloc = findAllocation(buffer_base);
    if (alloc == nullptr) {
        return -hipFileHipMemoryTypeInvalid;
    }
    size_t length = alloc->first + alloc->second - reinterpret_cast<uintptr_t>(buffer_base);
    if (auto reg = registered_buffers.find(buffer_base); reg != registered_buffers.end()) {
        length = reg->second;
    }
    if (static_cast<size_t>(buffer_offset) > length ||
        length - static_cast<size_t>(buffer_offset) < size) {
        return -hipFileInvalidValue;
    }
    char *data = const_cast<char *>(static_cast<const char *>(buffer_base)) + buffer_offset;
    return read ? ::pread(handle->fd, data, size, file_offset) :
                  ::pwrite(handle->fd, data, size, file_offset);
}

} // namespace

extern "C" {

hipError_t
hipGetDevice(int *device) {
    if (device == nullptr) {
        return hipErrorInvalidValue;
    }
    *device = current_device;
    return hipSuccess;
}

hipError_t
hipSetDevice(int device) {
    if (device < 0 || device >= FAKE_HIP_DEVICE_COUNT) {
        return hipErrorInvalidDevice;
    }
    current_device = device;
    return hipSuccess;
}

const char *
hipGetErrorString(hipError_t error) {
    switch (error) {
    case hipSuccess:
        return "no error";
    case hipErrorInvalidValue:
        return "invalid argument";
    case hipErrorOutOfMemory:
        return "out of memory";
    case hipErrorInvalidDevice:
        return "invalid device ordinal";
    }
    return "unknown error";
}

hipError_t
fakeHipMalloc(void **ptr, size_t size) {
    if (ptr == nullptr || size == 0) {
        return hipErrorInvalidValue;
    }
    void *mem = ::operator new(size, std::nothrow);
    if (mem == nullptr) {
        return hipErrorOutOfMemory;
    }
    std::lock_guard<std::mutex> lock(mutex);
    device_allocations[reinterpret_cast<uintptr_t>(mem)] = size;
    *ptr = mem;
    return hipSuccess;
}

hipError_t
fakeHipFree(void *ptr) {
    std::lock_guard<std::mutex> lock(mutex);
    if (device_allocations.erase(reinterpret_cast<uintptr_t>(ptr)) == 0) {
        return hipErrorInvalidValue;
    }
    ::operator delete(ptr);
    return hipSuccess;
}

const char *
hipFileGetOpErrorString(hipFileOpError_t status) {
    switch (status) {
    case hipFileSuccess:
        return "hipFile success";
    case hipFileDriverNotInitialized:
        return "GPU IO driver is not loaded";
    case hipFileHipMemoryTypeInvalid:
        return "Memory type backing pointer is incompatible with hipFile";
    case hipFileInvalidValue:
        return "One or more arguments have an invalid value";
    case hipFileMemoryAlreadyRegistered:
        return "Device pointer is already registered";
    case hipFileMemoryNotRegistered:
        return "Device pointer is not registered";
    case hipFileHandleNotRegistered:
        return "File handle for GPU IO is not registered";
    case hipFileHandleAlreadyRegistered:
        return "File handle for GPU IO is already registered";
    default:
        return "Unknown hipFile error";
    }
}

hipFileError_t
hipFileDriverOpen(void) {
    std::lock_guard<std::mutex> lock(mutex);
    ++driver_refs;
    return {hipFileSuccess, hipSuccess};
}

hipFileError_t
hipFileDriverClose(void) {
    std::lock_guard<std::mutex> lock(mutex);
    if (driver_refs == 0) {
        return {hipFileDriverNotInitialized, hipSuccess};
    }
    --driver_refs;
    return {hipFileSuccess, hipSuccess};
}

int64_t
hipFileUseCount(void) {
    std::lock_guard<std::mutex> lock(mutex);
    return driver_refs;
}

hipFileError_t
hipFileHandleRegister(hipFileHandle_t *fh, hipFileDescr_t *descr) {
    if (fh == nullptr || descr == nullptr) {
        return {hipFileInvalidValue, hipSuccess};
    }
    if (descr->type != hipFileHandleTypeOpaqueFD) {
        return {hipFileIONotSupported, hipSuccess};
    }
    if (::fcntl(descr->handle.fd, F_GETFD) < 0) {
        return {hipFileInvalidValue, hipSuccess};
    }
    std::lock_guard<std::mutex> lock(mutex);
    if (!registered_fds.insert(descr->handle.fd).second) {
        return {hipFileHandleAlreadyRegistered, hipSuccess};
    }
    *fh = new FakeHandle{descr->handle.fd};
    return {hipFileSuccess, hipSuccess};
}

void
hipFileHandleDeregister(hipFileHandle_t fh) {
    auto *handle = static_cast<FakeHandle *>(fh);
    if (handle == nullptr) {
        return;
    }
    std::lock_guard<std::mutex> lock(mutex);
    registered_fds.erase(handle->fd);
    delete handle;
}

hipFileError_t
hipFileBufRegister(const void *buffer_base, size_t length, int flags) {
    (void)flags;
    std::lock_guard<std::mutex> lock(mutex);
    if (buffer_base == nullptr) {
        return {hipFileInvalidValue, hipSuccess};
    }
    const auto *alloc = findAllocation(buffer_base);
    if (alloc == nullptr) {
        return {hipFileHipMemoryTypeInvalid, hipSuccess};
    }
    if (reinterpret_cast<uintptr_t>(buffer_base) + length > alloc->first + alloc->second) {
        return {hipFileHipPointerRangeError, hipSuccess};
    }
    if (!registered_buffers.emplace(buffer_base, length).second) {
        return {hipFileMemoryAlreadyRegistered, hipSuccess};
    }
    return {hipFileSuccess, hipSuccess};
}

hipFileError_t
hipFileBufDeregister(const void *buffer_base) {
    std::lock_guard<std::mutex> lock(mutex);
    if (registered_buffers.erase(buffer_base) == 0) {
        return {hipFileMemoryNotRegistered, hipSuccess};
    }
    return {hipFileSuccess, hipSuccess};
}

ssize_t
hipFileRead(hipFileHandle_t fh, void *buffer_base, size_t size, hoff_t file_offset,
            hoff_t buffer_offset) {
    return io(true, fh, buffer_base, size, file_offset, buffer_offset);
}

ssize_t
hipFileWrite(hipFileHandle_t fh, const void *buffer_base, size_t size, hoff_t file_offset,
             hoff_t buffer_offset) {
    return io(false, fh, buffer_base, size, file_offset, buffer_offset);
}

} // extern "C"
