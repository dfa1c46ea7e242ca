//===- BoundedFile.cpp - Reading input files safely -----------------------===//

#include "runtime/core/BoundedFile.h"

#include "runtime/core/Error.h"
#include "runtime/core/HostMemory.h"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dhs::runtime {

namespace {

/// Closes a descriptor on scope exit.
class FileDescriptor {
public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0)
      ::close(fd_);
  }
  FileDescriptor(const FileDescriptor &) = delete;
  FileDescriptor &operator=(const FileDescriptor &) = delete;
  int get() const { return fd_; }

private:
  int fd_;
};

const char *kindOf(mode_t mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISSOCK(mode))
    return "a socket";
  return "not a regular file";
}

std::string read(const std::string &path, std::uint64_t headBytes, std::uint64_t maxBytes,
                 const std::string &what) {
  // O_NONBLOCK: opening a FIFO without a writer returns at once (and is
  // then refused below) instead of waiting for one forever.
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (fd.get() < 0) {
    const int error = errno;
    if (error == ENOENT)
      throw Error(what + " " + path + " does not exist");
    throw Error(what + " " + path + " cannot be opened: " + std::strerror(error));
  }
  struct stat info{};
  if (::fstat(fd.get(), &info) != 0)
    throw Error(what + " " + path + " cannot be examined: " + std::strerror(errno));
  if (!S_ISREG(info.st_mode))
    throw Error(what + " " + path + " is " + kindOf(info.st_mode) + ", not a regular file");
  const std::uint64_t size = static_cast<std::uint64_t>(info.st_size);
  if (size > maxBytes)
    throw Error(what + " " + path + " is " + formatSize(size) + " (" + std::to_string(size) +
                " bytes), more than the " + formatSize(maxBytes) + " this runtime reads");
  // Reads are blocking from here on (regular files never block for long).
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags >= 0)
    (void)::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  // A head: at most headBytes. The whole file: until the end, but one byte
  // past maxBytes tells a file that grew past the limit while it was read.
  const bool whole = headBytes >= maxBytes;
  const std::uint64_t cap = whole ? maxBytes + 1 : headBytes;
  std::string text;
  text.resize(static_cast<std::size_t>(std::min(size, cap)));
  std::size_t have = 0;
  while (true) {
    if (have == text.size()) {
      if (!whole || have >= cap)
        break;
      text.resize(static_cast<std::size_t>(std::min<std::uint64_t>(cap, have + 65536)));
    }
    ssize_t n = ::read(fd.get(), text.data() + have, text.size() - have);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      throw Error(what + " " + path + ": read error: " + std::strerror(errno));
    }
    if (n == 0)
      break;
    have += static_cast<std::size_t>(n);
  }
  if (whole && have > maxBytes)
    throw Error(what + " " + path + " grew past the " + formatSize(maxBytes) +
                " this runtime reads while it was read");
  text.resize(have);
  return text;
}

} // namespace

bool fileExists(const std::string &path) {
  struct stat info{};
  return ::stat(path.c_str(), &info) == 0;
}

std::string readRegularFile(const std::string &path, std::uint64_t maxBytes,
                            const std::string &what) {
  return read(path, maxBytes, maxBytes, what);
}

std::string readRegularFileHead(const std::string &path, std::uint64_t headBytes,
                                std::uint64_t maxBytes, const std::string &what) {
  return read(path, headBytes, maxBytes, what);
}

} // namespace dhs::runtime
