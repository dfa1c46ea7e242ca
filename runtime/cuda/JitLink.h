//===- JitLink.h - PTX to cubin with nvJitLink ------------------*- C++ -*-===//
//
// Links PTX into a cubin for one architecture with nvJitLink, which is loaded
// with dlopen (libnvJitLink.so.13, libnvJitLink.so, then
// /usr/local/cuda/lib64/libnvJitLink.so.13). nvJitLink needs no GPU: this is
// how CI assembles every compiled kernel.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CUDA_JITLINK_H
#define DHS_RUNTIME_CUDA_JITLINK_H

#include <cstdint>
#include <string>
#include <vector>

namespace dhs::runtime {

/// A linked cubin plus nvJitLink's info log (may be empty).
struct LinkedCubin {
  std::vector<std::uint8_t> cubin; ///< the ELF image, ready for cuModuleLoadData
  std::string infoLog;             ///< nvJitLink's info log
};

/// nvJitLink, loaded at run time. One process-wide instance.
class JitLink {
public:
  /// Returns the process-wide instance, loading the library on first call
  /// (thread-safe). Never throws.
  static const JitLink &instance();

  /// True when the library was loaded and all entry points resolved.
  bool available() const { return available_; }

  /// Why nvJitLink is unusable (empty when available()).
  const std::string &unavailableReason() const { return reason_; }

  /// The library file name that was loaded (empty when unavailable).
  const std::string &libraryName() const { return library_; }

  /// nvJitLink's version as "13.0" ("unknown" when it cannot say).
  std::string version() const;

  /// Links PTX text into a cubin for `arch` (e.g. "sm_90a"), with "-O3" and
  /// any `extraOptions`. `name` names the input in messages and logs.
  /// Throws Error with nvJitLink's error log on failure.
  LinkedCubin linkPtx(const std::string &ptx, const std::string &arch, const std::string &name,
                      const std::vector<std::string> &extraOptions = {}) const;

  JitLink(const JitLink &) = delete;
  JitLink &operator=(const JitLink &) = delete;

private:
  JitLink();
  ~JitLink() = default;

  struct Api;
  bool available_ = false;
  std::string reason_;
  std::string library_;
  const Api *api_ = nullptr;
};

/// Returns the names of the kernel entry points (STT_FUNC symbols with a
/// section, global binding) in a cubin ELF image. Bounds-checked: throws
/// Error if the image is not a well-formed 64-bit little-endian ELF file.
std::vector<std::string> cubinFunctionNames(const std::vector<std::uint8_t> &cubin);

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CUDA_JITLINK_H
