//===- BoundedFile.h - Reading input files safely ---------------*- C++ -*-===//
//
// Every file the runtime reads (a step's manifest.json and PTX) comes from
// outside and may be anything: a FIFO that never delivers, a link to
// /dev/zero, a huge sparse file. These readers accept only regular files
// (after following links) no larger than a limit, open them without
// blocking, and read at most the limit: the file's size is checked before a
// byte is read and again while reading (a file that grows is cut off).
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CORE_BOUNDEDFILE_H
#define DHS_RUNTIME_CORE_BOUNDEDFILE_H

#include <cstdint>
#include <string>

namespace dhs::runtime {

/// The largest manifest.json the runtime reads (16 MiB; compiled steps'
/// manifests are a few KiB).
inline constexpr std::uint64_t kMaxManifestBytes = std::uint64_t(16) << 20;
/// The largest PTX file the runtime reads (256 MiB; the largest generated
/// step's PTX is well under 1 MiB).
inline constexpr std::uint64_t kMaxPtxBytes = std::uint64_t(256) << 20;

/// Whether `path` names an existing file system entry (following links;
/// false for a dangling link). Never blocks, never throws.
bool fileExists(const std::string &path);

/// Reads the whole regular file `path`, of at most `maxBytes` bytes. Throws
/// Error("<what> <path> ...") when it does not exist, is not a regular file
/// (a FIFO, a device, a directory, a socket), is larger than `maxBytes`, or
/// cannot be read.
std::string readRegularFile(const std::string &path, std::uint64_t maxBytes,
                            const std::string &what);

/// Reads the first `headBytes` bytes (or fewer, if the file is shorter) of
/// the regular file `path`, which may be at most `maxBytes` long; otherwise
/// as readRegularFile.
std::string readRegularFileHead(const std::string &path, std::uint64_t headBytes,
                                std::uint64_t maxBytes, const std::string &what);

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CORE_BOUNDEDFILE_H
