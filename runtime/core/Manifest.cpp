//===- Manifest.cpp - Parse and validate a step manifest ------------------===//
//
// The manifest's queries, PTX checks, and loading a step directory; the JSON
// is read by ManifestParser (ManifestParser.cpp, ManifestLaunches.cpp).
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Manifest.h"

#include "runtime/core/BoundedFile.h"
#include "runtime/core/Error.h"
#include "runtime/core/ManifestParser.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

namespace dhs::runtime {

namespace fs = std::filesystem;

std::string describeStatus(std::uint32_t status) {
  std::ostringstream out;
  out << "0x" << std::hex << status << std::dec;
  const char *separator = ": ";
  for (const abi::StatusBitInfo &bit : abi::kStatusBits) {
    if (status & bit.bit) {
      out << separator << bit.message;
      separator = ", ";
    }
  }
  if (status & ~abi::kKnownStatusBits) {
    std::ostringstream unknown;
    unknown << "unknown bits 0x" << std::hex << (status & ~abi::kKnownStatusBits);
    out << separator << unknown.str();
  }
  return out.str();
}

bool isChipName(const std::string &chip) {
  if (chip.size() < 5 || chip.compare(0, 3, "sm_") != 0)
    return false;
  std::size_t i = 3;
  while (i < chip.size() && std::isdigit(static_cast<unsigned char>(chip[i])))
    ++i;
  std::size_t digits = i - 3;
  if (digits < 2 || digits > 3)
    return false;
  return i == chip.size() || (i + 1 == chip.size() && (chip[i] == 'a' || chip[i] == 'f'));
}

std::size_t Argument::bytes() const {
  std::size_t result = abi::bytes(dtype);
  for (std::int64_t d : shape)
    result *= static_cast<std::size_t>(d);
  return result;
}

std::size_t Launch::flattenedParamCount() const {
  std::size_t count = 0;
  for (const LaunchParam &param : params)
    count += param.flattenedCount();
  return count;
}

bool Manifest::hasAttention() const {
  return std::any_of(launches.begin(), launches.end(),
                     [](const Launch &launch) { return launch.isAttention(); });
}

const Argument &Manifest::argument(ArgumentRole role) const {
  for (const Argument &arg : arguments)
    if (arg.role == role)
      return arg;
  // Validation guarantees every role is present; reaching this is a bug in a
  // hand-built Manifest, reported rather than crashing.
  throw Error(std::string("manifest ") + path + ": no argument with role '" + abi::name(role) +
              "'");
}

void Manifest::requireArgumentRoles(const std::string &what,
                                    std::initializer_list<ArgumentRole> roles) const {
  std::string wanted;
  for (ArgumentRole role : roles)
    wanted += std::string(wanted.empty() ? "" : ", ") + abi::name(role);
  for (const Argument &arg : arguments)
    if (std::find(roles.begin(), roles.end(), arg.role) == roles.end())
      throw Error(what + " " + directory + " takes argument " + std::to_string(arg.index) + " (" +
                  abi::name(arg.role) + "), which the runtime does not pass it (it passes " +
                  wanted + ")");
  for (ArgumentRole role : roles) {
    const auto count = std::count_if(arguments.begin(), arguments.end(),
                                     [&](const Argument &arg) { return arg.role == role; });
    if (count != 1)
      throw Error(what + " " + directory + " needs one argument of each of " + wanted + ", not " +
                  std::to_string(count) + " of " + abi::name(role));
  }
}

std::vector<std::string> Manifest::ptxPaths() const {
  std::vector<std::string> paths;
  for (const Launch &launch : launches) {
    bool seen = false;
    for (const std::string &known : paths)
      seen = seen || known == launch.ptxPath;
    if (!seen)
      paths.push_back(launch.ptxPath);
  }
  return paths;
}

//===----------------------------------------------------------------------===//
// PTX checks
//===----------------------------------------------------------------------===//

namespace {

/// Checks that `text` (a whole PTX file, or its first bytes when `head`)
/// starts with a .version directive after comments and blank space, and
/// returns the launches its leading comments describe (abi::kPtxLaunchMarker
/// lines, the JSON after the marker).
std::vector<std::string> checkPtxStart(const std::string &text, const std::string &name,
                                       bool head) {
  if (text.empty())
    throw Error("PTX file " + name + " is empty");
  const std::string marker = abi::kPtxLaunchMarker;
  std::vector<std::string> launches;
  // Skip blank space, `//` line comments and `/* */` block comments.
  std::size_t pos = 0;
  const std::size_t size = text.size();
  while (pos < size) {
    unsigned char c = static_cast<unsigned char>(text[pos]);
    if (std::isspace(c)) {
      ++pos;
    } else if (text.compare(pos, 2, "//") == 0) {
      std::size_t end = text.find('\n', pos);
      if (text.compare(pos, marker.size(), marker) == 0)
        launches.push_back(text.substr(pos + marker.size(), end == std::string::npos
                                                                ? std::string::npos
                                                                : end - pos - marker.size()));
      pos = end == std::string::npos ? size : end + 1;
    } else if (text.compare(pos, 2, "/*") == 0) {
      std::size_t end = text.find("*/", pos + 2);
      if (end == std::string::npos)
        throw Error("PTX file " + name +
                    (head ? " has no .version directive in its first " +
                                std::to_string(text.size()) + " bytes (a /* comment runs past them)"
                          : std::string(" has an unterminated /* comment")));
      pos = end + 2;
    } else {
      break;
    }
  }
  static const std::string directive = ".version";
  bool ok = text.compare(pos, directive.size(), directive) == 0 && pos + directive.size() < size &&
            std::isspace(static_cast<unsigned char>(text[pos + directive.size()]));
  if (!ok)
    throw Error("PTX file " + name +
                " is not PTX: PTX must start with a .version directive "
                "(after comments)");
  return launches;
}

/// The bytes of a PTX file read to check its start.
constexpr std::uint64_t kPtxHeadBytes = 64 << 10;

} // namespace

void checkPtxText(const std::string &text, const std::string &name) {
  checkPtxStart(text, name, /*head=*/false);
}

std::string readPtxFile(const std::string &path) {
  std::string text = readRegularFile(path, kMaxPtxBytes, "PTX file");
  checkPtxText(text, path);
  return text;
}

std::optional<std::vector<std::size_t>> ptxEntryParamSizes(const std::string &text,
                                                           const std::string &kernel) {
  auto isNameChar = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '%';
  };
  auto skipSpace = [&](std::size_t pos) {
    while (pos < text.size() && std::isspace(static_cast<unsigned char>(text[pos])))
      ++pos;
    return pos;
  };
  static const std::string entry = ".entry";
  for (std::size_t at = text.find(entry); at != std::string::npos;
       at = text.find(entry, at + entry.size())) {
    std::size_t pos = skipSpace(at + entry.size());
    if (text.compare(pos, kernel.size(), kernel) != 0 ||
        (pos + kernel.size() < text.size() && isNameChar(text[pos + kernel.size()])))
      continue;
    pos = skipSpace(pos + kernel.size());
    if (pos >= text.size() || text[pos] != '(')
      return std::nullopt;
    const std::size_t close = text.find(')', pos);
    if (close == std::string::npos)
      return std::nullopt;
    // Each parameter: `.param`, then directives (.align A, .ptr, ...) and
    // its type (.b8 to .f64), its name, an optional [N].
    std::vector<std::size_t> sizes;
    std::istringstream list(text.substr(pos + 1, close - pos - 1));
    std::string declaration;
    while (std::getline(list, declaration, ',')) {
      std::istringstream words(declaration);
      std::string word;
      std::size_t bits = 0, count = 1;
      bool param = false;
      while (words >> word) {
        if (word == ".param") {
          param = true;
        } else if (word.size() >= 3 && word[0] == '.' && std::strchr("busf", word[1]) &&
                   std::isdigit(static_cast<unsigned char>(word[2]))) {
          bits = std::strtoul(word.c_str() + 2, nullptr, 10);
        } else if (std::size_t open = word.find('['); open != std::string::npos) {
          count = std::strtoul(word.c_str() + open + 1, nullptr, 10);
        }
      }
      if (!param && bits == 0 && sizes.empty() &&
          declaration.find_first_not_of(" \t\r\n") == std::string::npos)
        break; // `()`: no parameters
      if (!param || bits == 0 || bits % 8 != 0 || count == 0)
        return std::nullopt;
      sizes.push_back(bits / 8 * count);
    }
    return sizes;
  }
  return std::nullopt;
}

std::vector<std::string> checkPtxFile(const std::string &path) {
  std::string head = readRegularFileHead(path, kPtxHeadBytes, kMaxPtxBytes, "PTX file");
  return checkPtxStart(head, path, /*head=*/head.size() == kPtxHeadBytes);
}

Manifest Manifest::parse(const std::string &jsonText, const std::string &directory,
                         const std::string &sourceName, const ManifestLoadOptions &options) {
  return manifest_detail::ManifestParser(sourceName, directory, options).parse(jsonText);
}

Manifest Manifest::load(const std::string &stepDirectory, const ManifestLoadOptions &options) {
  std::error_code ec;
  if (!fs::is_directory(stepDirectory, ec))
    throw Error("step directory " + stepDirectory + " does not exist");
  std::string path = (fs::path(stepDirectory) / kManifestFileName).string();
  if (!fileExists(path))
    throw Error("step directory " + stepDirectory + " has no " + kManifestFileName);
  return parse(readRegularFile(path, kMaxManifestBytes, "manifest"), stepDirectory, path, options);
}

} // namespace dhs::runtime
