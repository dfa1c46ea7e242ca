//===- StepFiles.cpp - Finding and compiling dhs-run's steps --------------===//

#include "tools/dhs-run/StepFiles.h"

#include "runtime/core/Error.h"
#include "runtime/core/Manifest.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

namespace fs = std::filesystem;
using dhs::runtime::Error;

namespace dhs::tools {

TempDir::TempDir() {
  std::string pattern = (fs::temp_directory_path() / "dhs-run-XXXXXX").string();
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (!mkdtemp(buffer.data()))
    throw Error("cannot create a temporary directory: " + std::string(std::strerror(errno)));
  path_ = buffer.data();
}

TempDir::~TempDir() {
  if (!keep_) {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
}

namespace {

/// dhs-compile next to this executable.
std::string findCompiler() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec)
    throw Error("cannot locate dhs-run itself (/proc/self/exe): " + ec.message());
  fs::path compiler = self.parent_path() / "dhs-compile";
  if (!fs::exists(compiler, ec))
    throw Error("dhs-compile not found next to dhs-run (looked for " + compiler.string() +
                "); build it (-DDHS_BUILD_COMPILER=ON) or pass a compiled step "
                "directory");
  return compiler.string();
}

/// Runs `dhs-compile input -o outDir`; throws on failure.
void compileStep(const std::string &compiler, const std::string &input, const std::string &outDir) {
  std::cout.flush();
  pid_t pid = fork();
  if (pid < 0)
    throw Error("cannot start dhs-compile: " + std::string(std::strerror(errno)));
  if (pid == 0) {
    const char *args[] = {compiler.c_str(), input.c_str(), "-o", outDir.c_str(), nullptr};
    execv(compiler.c_str(), const_cast<char *const *>(args));
    std::fprintf(stderr, "dhs-run: cannot execute %s: %s\n", compiler.c_str(),
                 std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR)
      throw Error("waiting for dhs-compile: " + std::string(std::strerror(errno)));
  }
  if (WIFSIGNALED(status))
    throw Error("dhs-compile crashed (signal " + std::to_string(WTERMSIG(status)) + ") compiling " +
                input);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw Error("dhs-compile failed (exit status " +
                std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ") compiling " +
                input);
}

} // namespace

StepDirectories findSteps(const std::vector<std::string> &steps, bool keep) {
  StepDirectories found;
  for (const std::string &input : steps) {
    std::error_code ec;
    if (fs::is_directory(input, ec)) {
      found.directories.push_back(input);
    } else if (!fs::exists(input, ec)) {
      throw Error("step " + input + " does not exist");
    } else if (fs::path(input).filename() == runtime::kManifestFileName) {
      const std::string directory = fs::path(input).parent_path().string();
      found.directories.push_back(directory.empty() ? "." : directory);
    } else if (fs::path(input).extension() == ".mlir") {
      const std::string compiler = findCompiler();
      auto compiled = std::make_unique<TempDir>();
      if (keep)
        compiled->keep();
      compileStep(compiler, input, compiled->path());
      found.directories.push_back(compiled->path());
      found.note += (found.note.empty() ? " (compiled from " : ", ") + input;
      found.compiled.push_back(std::move(compiled));
    } else {
      throw Error("step " + input +
                  " is neither a step directory, a manifest.json nor a .mlir file");
    }
  }
  if (!found.note.empty())
    found.note += keep ? ", kept)" : ")";
  return found;
}

} // namespace dhs::tools
