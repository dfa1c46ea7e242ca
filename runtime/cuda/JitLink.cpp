//===- JitLink.cpp - dlopen nvJitLink, link PTX, inspect cubins -----------===//

#include "runtime/cuda/JitLink.h"

#include "runtime/core/DynamicLibrary.h"
#include "runtime/core/Error.h"
#include "runtime/core/FaultInjection.h"
#include "runtime/core/Manifest.h"

// Types and enums only: the header's inline wrappers would call the
// versioned symbols directly, which this file resolves with dlsym instead.
#define NVJITLINK_NO_INLINE
#include <nvJitLink.h>

#include <dlfcn.h>
#include <elf.h>

#include <cctype>
#include <cstring>
#include <initializer_list>
#include <memory>

namespace dhs::runtime {

/// nvJitLink entry points.
struct JitLink::Api {
  decltype(&::__nvJitLinkCreate_13_0) create = nullptr;
  decltype(&::__nvJitLinkDestroy_13_0) destroy = nullptr;
  decltype(&::__nvJitLinkAddData_13_0) addData = nullptr;
  decltype(&::__nvJitLinkComplete_13_0) complete = nullptr;
  decltype(&::__nvJitLinkGetLinkedCubinSize_13_0) getLinkedCubinSize = nullptr;
  decltype(&::__nvJitLinkGetLinkedCubin_13_0) getLinkedCubin = nullptr;
  decltype(&::__nvJitLinkGetErrorLogSize_13_0) getErrorLogSize = nullptr;
  decltype(&::__nvJitLinkGetErrorLog_13_0) getErrorLog = nullptr;
  decltype(&::__nvJitLinkGetInfoLogSize_13_0) getInfoLogSize = nullptr;
  decltype(&::__nvJitLinkGetInfoLog_13_0) getInfoLog = nullptr;
  decltype(&::nvJitLinkVersion) version = nullptr; // optional
};

namespace {

/// Spells an nvJitLink result code.
const char *resultName(nvJitLinkResult result) {
  switch (result) {
  case NVJITLINK_SUCCESS:
    return "NVJITLINK_SUCCESS";
  case NVJITLINK_ERROR_UNRECOGNIZED_OPTION:
    return "NVJITLINK_ERROR_UNRECOGNIZED_OPTION";
  case NVJITLINK_ERROR_MISSING_ARCH:
    return "NVJITLINK_ERROR_MISSING_ARCH";
  case NVJITLINK_ERROR_INVALID_INPUT:
    return "NVJITLINK_ERROR_INVALID_INPUT";
  case NVJITLINK_ERROR_PTX_COMPILE:
    return "NVJITLINK_ERROR_PTX_COMPILE";
  case NVJITLINK_ERROR_NVVM_COMPILE:
    return "NVJITLINK_ERROR_NVVM_COMPILE";
  case NVJITLINK_ERROR_INTERNAL:
    return "NVJITLINK_ERROR_INTERNAL";
  case NVJITLINK_ERROR_THREADPOOL:
    return "NVJITLINK_ERROR_THREADPOOL";
  case NVJITLINK_ERROR_UNRECOGNIZED_INPUT:
    return "NVJITLINK_ERROR_UNRECOGNIZED_INPUT";
  case NVJITLINK_ERROR_FINALIZE:
    return "NVJITLINK_ERROR_FINALIZE";
  case NVJITLINK_ERROR_NULL_INPUT:
    return "NVJITLINK_ERROR_NULL_INPUT";
  case NVJITLINK_ERROR_INCOMPATIBLE_OPTIONS:
    return "NVJITLINK_ERROR_INCOMPATIBLE_OPTIONS";
  case NVJITLINK_ERROR_INCORRECT_INPUT_TYPE:
    return "NVJITLINK_ERROR_INCORRECT_INPUT_TYPE";
  case NVJITLINK_ERROR_ARCH_MISMATCH:
    return "NVJITLINK_ERROR_ARCH_MISMATCH";
  case NVJITLINK_ERROR_OUTDATED_LIBRARY:
    return "NVJITLINK_ERROR_OUTDATED_LIBRARY";
  case NVJITLINK_ERROR_MISSING_FATBIN:
    return "NVJITLINK_ERROR_MISSING_FATBIN";
  case NVJITLINK_ERROR_UNRECOGNIZED_ARCH:
    return "NVJITLINK_ERROR_UNRECOGNIZED_ARCH";
  case NVJITLINK_ERROR_UNSUPPORTED_ARCH:
    return "NVJITLINK_ERROR_UNSUPPORTED_ARCH";
  case NVJITLINK_ERROR_LTO_NOT_ENABLED:
    return "NVJITLINK_ERROR_LTO_NOT_ENABLED";
  }
  return "unknown nvJitLink error";
}

/// Trims trailing NULs and blank space from a log.
std::string trimLog(std::string log) {
  while (!log.empty() &&
         (log.back() == '\0' || std::isspace(static_cast<unsigned char>(log.back()))))
    log.pop_back();
  return log;
}

} // namespace

const JitLink &JitLink::instance() {
  static const JitLink jitLink;
  return jitLink;
}

JitLink::JitLink() {
  static const char *const candidates[] = {"libnvJitLink.so.13", "libnvJitLink.so",
                                           "/usr/local/cuda/lib64/libnvJitLink.so.13"};
  void *library = nullptr;
  for (const char *candidate : candidates) {
    library = dlopen(candidate, RTLD_NOW | RTLD_LOCAL);
    if (library) {
      library_ = candidate;
      break;
    }
  }
  if (!library) {
    reason_ = "nvJitLink not found (tried libnvJitLink.so.13, libnvJitLink.so, "
              "/usr/local/cuda/lib64/libnvJitLink.so.13)";
    return;
  }

  // The instance lives for the whole process, and so does its table.
  static Api api;
  std::string missing;
  bool ok = true;
  ok &= resolveSymbol(library, api.create, {"__nvJitLinkCreate_13_0", "nvJitLinkCreate"}, missing);
  ok &=
      resolveSymbol(library, api.destroy, {"__nvJitLinkDestroy_13_0", "nvJitLinkDestroy"}, missing);
  ok &=
      resolveSymbol(library, api.addData, {"__nvJitLinkAddData_13_0", "nvJitLinkAddData"}, missing);
  ok &= resolveSymbol(library, api.complete, {"__nvJitLinkComplete_13_0", "nvJitLinkComplete"},
                      missing);
  ok &=
      resolveSymbol(library, api.getLinkedCubinSize,
                    {"__nvJitLinkGetLinkedCubinSize_13_0", "nvJitLinkGetLinkedCubinSize"}, missing);
  ok &= resolveSymbol(library, api.getLinkedCubin,
                      {"__nvJitLinkGetLinkedCubin_13_0", "nvJitLinkGetLinkedCubin"}, missing);
  ok &= resolveSymbol(library, api.getErrorLogSize,
                      {"__nvJitLinkGetErrorLogSize_13_0", "nvJitLinkGetErrorLogSize"}, missing);
  ok &= resolveSymbol(library, api.getErrorLog,
                      {"__nvJitLinkGetErrorLog_13_0", "nvJitLinkGetErrorLog"}, missing);
  ok &= resolveSymbol(library, api.getInfoLogSize,
                      {"__nvJitLinkGetInfoLogSize_13_0", "nvJitLinkGetInfoLogSize"}, missing);
  ok &= resolveSymbol(library, api.getInfoLog,
                      {"__nvJitLinkGetInfoLog_13_0", "nvJitLinkGetInfoLog"}, missing);
  if (!ok) {
    reason_ = library_ + " lacks " + missing;
    return;
  }
  api.version = reinterpret_cast<decltype(api.version)>(dlsym(library, "nvJitLinkVersion"));
  api_ = &api;
  available_ = true;
}

std::string JitLink::version() const {
  unsigned major = 0, minor = 0;
  if (!api_ || !api_->version || api_->version(&major, &minor) != NVJITLINK_SUCCESS)
    return "unknown";
  return std::to_string(major) + "." + std::to_string(minor);
}

LinkedCubin JitLink::linkPtx(const std::string &ptx, const std::string &arch,
                             const std::string &name,
                             const std::vector<std::string> &extraOptions) const {
  if (!available_)
    throw Error("cannot link " + name + ": " + reason_);
  if (!isChipName(arch))
    throw Error("cannot link " + name + ": '" + arch + "' is not an architecture like sm_90a");
  if (ptx.empty())
    throw Error("cannot link " + name + ": the PTX is empty");
  if (DHS_FAULT(JitLink))
    throw Error("cannot link " + name + " for " + arch +
                ": nvJitLinkComplete failed with NVJITLINK_ERROR_INTERNAL (injected fault)");

  std::vector<std::string> options = {"-arch=" + arch, "-O3"};
  options.insert(options.end(), extraOptions.begin(), extraOptions.end());
  std::vector<const char *> optionPointers;
  for (const std::string &option : options)
    optionPointers.push_back(option.c_str());

  nvJitLinkHandle handle = nullptr;
  nvJitLinkResult result = api_->create(&handle, static_cast<std::uint32_t>(optionPointers.size()),
                                        optionPointers.data());
  if (result != NVJITLINK_SUCCESS)
    throw Error("cannot link " + name + ": nvJitLinkCreate failed with " + resultName(result) +
                " (options: -arch=" + arch + " -O3)");
  // Destroy the handle on every path.
  auto destroy = [this](nvJitLinkHandle *h) { api_->destroy(h); };
  std::unique_ptr<nvJitLinkHandle, decltype(destroy)> guard(&handle, destroy);

  auto readLog = [&](bool errors) {
    std::size_t size = 0;
    nvJitLinkResult r =
        errors ? api_->getErrorLogSize(handle, &size) : api_->getInfoLogSize(handle, &size);
    if (r != NVJITLINK_SUCCESS || size == 0)
      return std::string();
    std::string log(size, '\0');
    r = errors ? api_->getErrorLog(handle, log.data()) : api_->getInfoLog(handle, log.data());
    return r == NVJITLINK_SUCCESS ? trimLog(log) : std::string();
  };
  auto fail = [&](const char *step, nvJitLinkResult r) {
    std::string log = readLog(true);
    std::string message =
        "cannot link " + name + " for " + arch + ": " + step + " failed with " + resultName(r);
    if (!log.empty()) {
      // Keep the message one line: fold the log's lines.
      for (char &c : log)
        if (c == '\n')
          c = ' ';
      message += ": " + log;
    }
    throw Error(message);
  };

  // nvJitLink wants the PTX NUL-terminated; std::string guarantees that.
  result = api_->addData(handle, NVJITLINK_INPUT_PTX, ptx.c_str(), ptx.size() + 1, name.c_str());
  if (result != NVJITLINK_SUCCESS)
    fail("nvJitLinkAddData", result);
  result = api_->complete(handle);
  if (result != NVJITLINK_SUCCESS)
    fail("nvJitLinkComplete", result);

  std::size_t size = 0;
  result = api_->getLinkedCubinSize(handle, &size);
  if (result != NVJITLINK_SUCCESS)
    fail("nvJitLinkGetLinkedCubinSize", result);
  if (size == 0)
    throw Error("cannot link " + name + " for " + arch + ": nvJitLink produced an empty cubin");
  LinkedCubin linked;
  linked.cubin.resize(size);
  result = api_->getLinkedCubin(handle, linked.cubin.data());
  if (result != NVJITLINK_SUCCESS)
    fail("nvJitLinkGetLinkedCubin", result);
  linked.infoLog = readLog(false);
  return linked;
}

//===----------------------------------------------------------------------===//
// Cubin inspection
//===----------------------------------------------------------------------===//

std::vector<std::string> cubinFunctionNames(const std::vector<std::uint8_t> &cubin) {
  auto bad = [](const std::string &what) -> Error { return Error("malformed cubin: " + what); };
  // Copies a T from [offset, offset + sizeof(T)) after a bounds check.
  auto read = [&](auto &out, std::uint64_t offset) {
    if (offset > cubin.size() || cubin.size() - offset < sizeof(out))
      throw bad("read past the end of the image");
    std::memcpy(&out, cubin.data() + offset, sizeof(out));
  };

  Elf64_Ehdr header;
  read(header, 0);
  if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0)
    throw bad("no ELF magic");
  if (header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_ident[EI_DATA] != ELFDATA2LSB)
    throw bad("not a 64-bit little-endian ELF image");
  if (header.e_shentsize != sizeof(Elf64_Shdr))
    throw bad("unexpected section header size");

  auto section = [&](std::uint64_t index) {
    if (index >= header.e_shnum)
      throw bad("section index out of range");
    Elf64_Shdr shdr;
    read(shdr, header.e_shoff + index * sizeof(Elf64_Shdr));
    return shdr;
  };
  // A NUL-terminated string at `offset` inside the string table `table`.
  auto stringAt = [&](const Elf64_Shdr &table, std::uint64_t offset) {
    if (table.sh_offset > cubin.size() || table.sh_size > cubin.size() - table.sh_offset)
      throw bad("string table outside the image");
    if (offset >= table.sh_size)
      throw bad("string offset outside its table");
    const char *begin = reinterpret_cast<const char *>(cubin.data()) + table.sh_offset;
    const void *end = std::memchr(begin + offset, '\0', table.sh_size - offset);
    if (!end)
      throw bad("unterminated string");
    return std::string(begin + offset, static_cast<const char *>(end));
  };

  std::vector<std::string> names;
  for (std::uint64_t i = 0; i < header.e_shnum; ++i) {
    Elf64_Shdr symtab = section(i);
    if (symtab.sh_type != SHT_SYMTAB)
      continue;
    if (symtab.sh_entsize != sizeof(Elf64_Sym))
      throw bad("unexpected symbol size");
    Elf64_Shdr strtab = section(symtab.sh_link);
    std::uint64_t count = symtab.sh_size / sizeof(Elf64_Sym);
    for (std::uint64_t s = 0; s < count; ++s) {
      Elf64_Sym symbol;
      read(symbol, symtab.sh_offset + s * sizeof(Elf64_Sym));
      unsigned type = ELF64_ST_TYPE(symbol.st_info);
      unsigned binding = ELF64_ST_BIND(symbol.st_info);
      if (type == STT_FUNC && symbol.st_shndx != SHN_UNDEF &&
          (binding == STB_GLOBAL || binding == STB_WEAK))
        names.push_back(stringAt(strtab, symbol.st_name));
    }
  }
  return names;
}

} // namespace dhs::runtime
