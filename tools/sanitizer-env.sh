# Sourced by tools/sanitize.sh and tools/fuzz.sh. The sanitized binaries carry
# their defaults (tools/sanitizer/SanitizerDefaults.cpp: every report fatal,
# leaks checked, MLIR's allocator poisoning ignored); this only adds what a
# run wants on top (symbolized stacks when llvm-symbolizer is there).
if [ -x /usr/lib/llvm-22/bin/llvm-symbolizer ]; then
  export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-/usr/lib/llvm-22/bin/llvm-symbolizer}
fi
