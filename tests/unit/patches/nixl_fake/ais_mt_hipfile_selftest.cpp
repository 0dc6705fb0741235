/*
 * Behaviour test of the NIXL AIS_MT patch's NIXL-independent parts, run by
 * tests/unit/patches/test_nixl_patch.py: src/plugins/mt/common/mt_common.h and
 * src/plugins/mt/ais/ais_mt_hipfile.h, extracted from the patch, linked with fake_hipfile.cpp
 * (a FAKE stand-in for AMD hipFile, which cannot exist on this machine).
 *
 * Prints "ok <name>" per check and exits 1 at the first failure ("FAIL <name>: ...").
 */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "mt/ais/ais_mt_hipfile.h"

namespace {

[[noreturn]] void
fail(const std::string &name, const std::string &why) {
    std::printf("FAIL %s: %s\n", name.c_str(), why.c_str());
    std::exit(1);
}

void
check(bool cond, const std::string &name, const std::string &why = "condition is false") {
    if (!cond) {
        fail(name, why);
    }
    std::printf("ok %s\n", name.c_str());
}

void
setCompat(const char *value) {
    if (value == nullptr) {
        unsetenv("HIPFILE_ALLOW_COMPAT_MODE");
    } else {
        setenv("HIPFILE_ALLOW_COMPAT_MODE", value, 1);
    }
}

// Constructing a MemBuf over `ptr`: "registered", "compat" (unregistered, allowed) or "throws".
std::string
memBufOutcome(void *ptr, size_t len, std::string *detail = nullptr) {
    try {
        nixl::ais_mt::MemBuf buf(ptr, len);
        if (detail) {
            *detail = buf.compatReason();
        }
        return buf.registered() ? "registered" : "compat";
    }
    catch (const std::runtime_error &e) {
        if (detail) {
            *detail = e.what();
        }
        return "throws";
    }
}

std::string
tempFile() {
    char path[] = "/tmp/ais_mt_selftest_XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) {
        fail("mkstemp", std::strerror(errno));
    }
    close(fd);
    return path;
}

} // namespace

int
main() {
    using nixl::ais_mt::IoOp;
    using nixl::mt::envFlagEnabled;

    // -- environment flag -------------------------------------------------------------------
    for (const char *yes : {"1", "true", "TRUE", "True", "yes", "YES", " yes\n"}) {
        setCompat(yes);
        check(envFlagEnabled("HIPFILE_ALLOW_COMPAT_MODE"), std::string("env true: '") + yes + "'");
    }
    for (const char *no : {"0", "false", "no", "", "2", "on", "y", "truex"}) {
        setCompat(no);
        check(!envFlagEnabled("HIPFILE_ALLOW_COMPAT_MODE"), std::string("env false: '") + no + "'");
    }
    setCompat(nullptr);
    check(!envFlagEnabled("HIPFILE_ALLOW_COMPAT_MODE"), "env false: unset");

    // -- thread_count -----------------------------------------------------------------------
    check(nixl::mt::defaultThreadCount(16) == 8, "default threads of 16 cores is 8");
    check(nixl::mt::defaultThreadCount(1) == 1, "default threads of 1 core is 1");
    check(nixl::mt::defaultThreadCount(0) == 1, "default threads of unknown cores is 1");
    check(nixl::mt::threadCountParam(nullptr, 7) == 7, "no params gives the default");
    std::unordered_map<std::string, std::string> params;
    check(nixl::mt::threadCountParam(&params, 7) == 7, "no thread_count gives the default");
    params["thread_count"] = "12";
    check(nixl::mt::threadCountParam(&params, 7) == 12, "thread_count=12");
    params["thread_count"] = "0";
    check(nixl::mt::threadCountParam(&params, 7) == 7, "thread_count=0 gives the default");
    for (const char *bad : {"abc", "-1", "4x", " 4", "1025", "99999999999999999999999"}) {
        params["thread_count"] = bad;
        bool threw = false;
        try {
            (void)nixl::mt::threadCountParam(&params, 7);
        }
        catch (const std::invalid_argument &) {
            threw = true;
        }
        check(threw, std::string("thread_count='") + bad + "' is rejected");
    }

    // -- driver reference ---------------------------------------------------------------------
    {
        nixl::ais_mt::Driver driver;
        check(hipFileUseCount() == 1, "Driver opens hipFile once");
    }
    check(hipFileUseCount() == 0, "~Driver closes hipFile");

    // -- buffer registration and compat mode --------------------------------------------------
    std::vector<char> host(4096);
    std::string detail;
    setCompat(nullptr);
    check(memBufOutcome(host.data(), host.size(), &detail) == "throws",
          "host buffer registration fails without compat mode", detail);
    check(detail.find("hipFileBufRegister") != std::string::npos &&
              detail.find("HIPFILE_ALLOW_COMPAT_MODE") != std::string::npos,
          "the error names hipFileBufRegister and HIPFILE_ALLOW_COMPAT_MODE", detail);
    for (const char *no : {"false", "0", "no"}) {
        setCompat(no);
        check(memBufOutcome(host.data(), host.size()) == "throws",
              std::string("compat mode '") + no + "' still fails");
    }
    for (const char *yes : {"1", "TRUE", "Yes"}) {
        setCompat(yes);
        check(memBufOutcome(host.data(), host.size(), &detail) == "compat",
              std::string("compat mode '") + yes + "' continues unregistered");
    }
    check(detail.find(std::to_string(hipFileHipMemoryTypeInvalid)) != std::string::npos,
          "the compat reason carries hipFile's error code", detail);
    setCompat(nullptr);

    void *dev = nullptr;
    void *dev2 = nullptr;
    if (fakeHipMalloc(&dev, 1 << 16) != hipSuccess || fakeHipMalloc(&dev2, 1 << 16) != hipSuccess) {
        fail("fakeHipMalloc", "no fake device memory");
    }
    check(memBufOutcome(dev, 1 << 16) == "registered", "GPU buffer registers");
    {
        nixl::ais_mt::MemBuf buf(dev, 1 << 16);
        check(buf.registered(), "registered() is true");
        check(buf.deregister().empty(), "deregister succeeds");
        check(!buf.registered() && buf.deregister().empty(), "deregister is idempotent");
    }
    {
        nixl::ais_mt::MemBuf first(dev, 1 << 16);
        check(memBufOutcome(dev, 1 << 16) == "throws", "double registration fails");
    }
    check(memBufOutcome(dev, 1 << 16) == "registered", "~MemBuf deregisters");

    // -- file handles and transfers -----------------------------------------------------------
    const std::string path = tempFile();
    const int fd = open(path.c_str(), O_RDWR);
    {
        nixl::ais_mt::FileHandle file(fd);
        check(file.fd() == fd && file.get() != nullptr, "FileHandle registers the fd");
        bool threw = false;
        try {
            nixl::ais_mt::FileHandle again(fd);
        }
        catch (const std::runtime_error &e) {
            threw = std::string(e.what()).find("hipFileHandleRegister") != std::string::npos;
        }
        check(threw, "registering the same fd twice throws");

        nixl::ais_mt::MemBuf src(dev, 1 << 16);
        std::memset(dev, 0, 1 << 16);
        std::memcpy(static_cast<char *>(dev) + 100, "GPU-DATA", 8);
        std::string err = nixl::ais_mt::transfer(IoOp::write, true, file, dev, 100, 8, 4096);
        check(err.empty(), "VRAM write through hipFileWrite (base + offset)", err);
        char on_disk[8] = {};
        check(pread(fd, on_disk, 8, 4096) == 8 && std::memcmp(on_disk, "GPU-DATA", 8) == 0,
              "the bytes are in the file at the file offset");

        err = nixl::ais_mt::transfer(IoOp::read, true, file, dev2, 0, 8, 4096);
        check(err.empty() && std::memcmp(dev2, "GPU-DATA", 8) == 0,
              "VRAM read through hipFileRead", err);

        std::memcpy(host.data() + 10, "HOST", 4);
        err = nixl::ais_mt::transfer(IoOp::write, false, file, host.data(), 10, 4, 0);
        check(err.empty(), "DRAM write through pwrite", err);
        std::vector<char> back(4);
        err = nixl::ais_mt::transfer(IoOp::read, false, file, back.data(), 0, 4, 0);
        check(err.empty() && std::memcmp(back.data(), "HOST", 4) == 0, "DRAM read through pread",
              err);

        err = nixl::ais_mt::transfer(IoOp::read, true, file, host.data(), 0, 8, 0);
        check(err.find("hipFileRead failed") != std::string::npos &&
                  err.find(std::to_string(hipFileHipMemoryTypeInvalid)) != std::string::npos,
              "host memory given to hipFile is reported, with hipFile's error", err);

        err = nixl::ais_mt::transfer(IoOp::read, true, file, dev2, 0, 64, 4096);
        check(err.find("short read") != std::string::npos, "a short read is an error", err);
        err = nixl::ais_mt::transfer(IoOp::read, false, file, host.data(), 0, 64, 4096);
        check(err.find("short read") != std::string::npos, "a short DRAM read is an error", err);
    }
    close(fd);
    unlink(path.c_str());
    (void)fakeHipFree(dev);
    (void)fakeHipFree(dev2);
    std::printf("ALL OK\n");
    return 0;
}
