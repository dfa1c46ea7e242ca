//===- SanitizerDefaults.cpp - Sanitizer options built into dhs's binaries ===//
//
// Linked into every target of a sanitized build (-DDHS_SANITIZE=...), so that
// the binaries behave the same whoever runs them (ctest, lit, a build step
// running dhs-compile, libFuzzer); ASAN_OPTIONS, UBSAN_OPTIONS and
// LSAN_OPTIONS still override.
//
//  - allow_user_poisoning=0: LLVM's BumpPtrAllocator poisons its slabs when
//    its headers see AddressSanitizer, but Debian's LLVM/MLIR libraries were
//    built without it and never unpoison what they hand out; without this,
//    every MLIR tool reports use-after-poison in MLIRContext setup.
//  - every report is fatal (abort, so that ctest and libFuzzer see a crash),
//    leaks are checked at exit.
//  - libraries dhs does not build (nvJitLink, the CUDA driver) are not
//    blamed for memory they keep for the process's lifetime.
//
//===----------------------------------------------------------------------===//

extern "C" {

const char *__asan_default_options() {
  return "allow_user_poisoning=0:detect_leaks=1:abort_on_error=1:halt_on_error=1:"
         "strict_string_checks=1:check_initialization_order=1:protect_shadow_gap=0";
}

const char *__ubsan_default_options() {
  return "print_stacktrace=1:halt_on_error=1:abort_on_error=1";
}

const char *__lsan_default_suppressions() { return "leak:libnvJitLink\nleak:libcuda\n"; }

} // extern "C"
