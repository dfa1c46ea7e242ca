//===- DynamicLibrary.h - symbols of dlopened libraries ---------*- C++ -*-===//
//
// libcuda.so.1 and libnvJitLink.so.13 are opened at run time so that one
// binary runs with or without a GPU; both resolve their entry points so.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CORE_DYNAMICLIBRARY_H
#define DHS_RUNTIME_CORE_DYNAMICLIBRARY_H

#include <dlfcn.h>

#include <initializer_list>
#include <string>

namespace dhs::runtime {

/// Resolves the first of `names` that `library` exports into `slot`. Returns
/// false (and names the first candidate in `missing`, if still empty) when
/// none does.
template <typename Fn>
bool resolveSymbol(void *library, Fn &slot, std::initializer_list<const char *> names,
                   std::string &missing) {
  for (const char *name : names) {
    if (void *symbol = dlsym(library, name)) {
      slot = reinterpret_cast<Fn>(symbol);
      return true;
    }
  }
  if (missing.empty())
    missing = *names.begin();
  return false;
}

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CORE_DYNAMICLIBRARY_H
