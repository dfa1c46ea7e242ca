//===- StepFiles.h - Finding and compiling dhs-run's steps ------*- C++ -*-===//

#ifndef DHS_TOOLS_DHSRUN_STEPFILES_H
#define DHS_TOOLS_DHSRUN_STEPFILES_H

#include <memory>
#include <string>
#include <vector>

namespace dhs::tools {

/// A temporary directory removed on destruction unless kept.
class TempDir {
public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  const std::string &path() const { return path_; }
  void keep() { keep_ = true; }

private:
  std::string path_;
  bool keep_ = false;
};

/// The step directories of the STEP arguments, compiling .mlir files with
/// the dhs-compile next to dhs-run into temporary directories.
struct StepDirectories {
  std::vector<std::string> directories;
  std::string note; ///< " (compiled from X[, kept])" for compiled steps
  std::vector<std::unique_ptr<TempDir>> compiled;
};

/// Resolves each STEP: a directory, its manifest.json, or a .mlir file to
/// compile (kept when `keep`). Throws Error naming a STEP that is none.
StepDirectories findSteps(const std::vector<std::string> &steps, bool keep);

} // namespace dhs::tools

#endif // DHS_TOOLS_DHSRUN_STEPFILES_H
