//===- main.cpp - Catch2 entry point of dhs-unittests ---------------------===//
//
// Catch2's own main, with a crash's call stack on stderr: Catch reports a
// fatal signal by the test case and line it had reached, then restores the
// handlers it found and raises the signal again, which lands here. The
// frames are `binary(+offset)` lines (`addr2line -f -C -e BINARY OFFSET`
// names them), so that a crash seen only on the GPU machine (under
// compute-sanitizer, say) can be placed from its log alone.
//
//===----------------------------------------------------------------------===//

#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <csignal>
#include <execinfo.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define DHS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DHS_ASAN 1
#endif
#endif

namespace {

/// Writes the call stack to stderr, then dies of `signal` as it would have.
void printCallStack(int signal) {
  static const char header[] = "dhs-unittests: fatal signal; call stack:\n";
  ssize_t written = write(STDERR_FILENO, header, sizeof(header) - 1);
  (void)written;
  void *frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

} // namespace

int main(int argc, char *argv[]) {
#ifndef DHS_ASAN // (AddressSanitizer prints its own, symbolized)
  // (backtrace loads its unwinder on first use: not inside a handler.)
  void *frame[1];
  backtrace(frame, 1);
  for (int signal : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT})
    std::signal(signal, printCallStack);
#endif
  return Catch::Session().run(argc, argv);
}
