//===- ManifestParser.h - Reading a manifest's JSON -------------*- C++ -*-===//
//
// Internal to the manifest reader (Manifest.cpp, ManifestParser.cpp,
// ManifestLaunches.cpp): the validating parser, whose every JSON access goes
// through checked helpers so that a bad value is an Error naming the field.
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CORE_MANIFESTPARSER_H
#define DHS_RUNTIME_CORE_MANIFESTPARSER_H

#include "runtime/core/Error.h"
#include "runtime/core/Manifest.h"

#include <nlohmann/json.hpp>

#include <cctype>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace dhs::runtime::manifest_detail {

using nlohmann::json;

/// Formats a shape as "[4,1,16,576]".
inline std::string formatShape(const std::vector<std::int64_t> &shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i)
      text += ",";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

/// Parses and validates one manifest's JSON; messages name its file and
/// field.
class ManifestParser {
public:
  ManifestParser(std::string sourceName, std::string directory, const ManifestLoadOptions &options)
      : source_(std::move(sourceName)), directory_(std::move(directory)), options_(options) {}

  Manifest parse(const std::string &text);
  Manifest parseRoot(const json &root);

private:
  [[noreturn]] void fail(const std::string &field, const std::string &message) const {
    throw Error("manifest " + source_ + ": " + field + ": " + message);
  }

  void requireObject(const json &value, const std::string &field) const {
    if (!value.is_object())
      fail(field, "must be a JSON object");
  }

  /// Checks that `object` has exactly the keys in `required` (plus any of
  /// `optional`), naming the first missing or unknown key.
  void checkKeys(const json &object, const std::string &field,
                 std::initializer_list<const char *> required,
                 std::initializer_list<const char *> optional = {}) const {
    requireObject(object, field);
    for (const char *key : required)
      if (!object.contains(key))
        fail(field, std::string("missing key '") + key + "'");
    for (auto it = object.begin(); it != object.end(); ++it) {
      bool known = false;
      for (const char *key : required)
        known = known || it.key() == key;
      for (const char *key : optional)
        known = known || it.key() == key;
      if (!known)
        fail(field, "unknown key '" + it.key() + "'");
    }
  }

  /// object[key], failing with the field's name when `object` is not an
  /// object or lacks the key (never a JSON library exception).
  const json &member(const json &object, const char *key, const std::string &field) const {
    requireObject(object, field);
    auto it = object.find(key);
    if (it == object.end())
      fail(field, std::string("missing key '") + key + "'");
    return *it;
  }

  std::string getString(const json &object, const char *key, const std::string &field) const {
    const json &value = member(object, key, field);
    if (!value.is_string())
      fail(field + "." + key, "must be a string");
    return value.get<std::string>();
  }

  std::int64_t getInt(const json &object, const char *key, const std::string &field) const {
    return asInt(member(object, key, field), field + "." + key);
  }

  std::int64_t asInt(const json &value, const std::string &field) const {
    if (value.is_number_unsigned()) {
      auto v = value.get<std::uint64_t>();
      if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        fail(field, "integer out of range");
      return static_cast<std::int64_t>(v);
    }
    if (!value.is_number_integer())
      fail(field, "must be an integer");
    return value.get<std::int64_t>();
  }

  bool getBool(const json &object, const char *key, const std::string &field) const {
    const json &value = member(object, key, field);
    if (!value.is_boolean())
      fail(field + "." + key, "must be true or false");
    return value.get<bool>();
  }

  double getNumber(const json &object, const char *key, const std::string &field) const {
    const json &value = member(object, key, field);
    if (!value.is_number())
      fail(field + "." + key, "must be a number");
    return value.get<double>();
  }

  std::vector<std::int64_t> getIntArray(const json &object, const char *key,
                                        const std::string &field) const {
    const json &value = member(object, key, field);
    std::string here = field + "." + key;
    if (!value.is_array())
      fail(here, "must be an array of integers");
    std::vector<std::int64_t> result;
    for (std::size_t i = 0; i < value.size(); ++i)
      result.push_back(asInt(value[i], here + "[" + std::to_string(i) + "]"));
    return result;
  }

  /// object[key] as one of the contract's names for Enum, failing with the
  /// names it may be: "unknown <what> 'x' (known: a, b)".
  template <typename Enum>
  Enum getEnum(const json &object, const char *key, const char *what,
               const std::string &field) const {
    std::string name = getString(object, key, field);
    std::optional<Enum> value = abi::parse<Enum>(name);
    if (!value)
      fail(field + "." + key, std::string("unknown ") + what + " '" + name +
                                  "' (known: " + abi::knownNames<Enum>() + ")");
    return *value;
  }

  DType getDType(const json &object, const std::string &field) const {
    return getEnum<DType>(object, "dtype", "dtype", field);
  }

  Argument parseArgument(const json &value, std::size_t position);
  void checkArgumentShapes(Manifest &manifest) const;
  /// Holds a step without attention to the shape relations between its
  /// arguments' roles (the ops' verifiers state them; the backends copy one
  /// argument by another's size): one argument a role, selections with their
  /// slots, unions, place lists, control words and accept inputs that agree.
  void checkRoleRelations(const Manifest &manifest) const;
  void parseAttentionAttributes(const json &value, const std::string &field,
                                const Manifest &manifest, Launch &launch) const;
  /// The step has attention launches.
  bool attention_ = false;
  Launch parseLaunch(const json &value, std::size_t position, const Manifest &manifest);
  LaunchParam parseParam(const json &value, const std::string &field,
                         const Manifest &manifest) const;

  std::string source_;
  std::string directory_;
  ManifestLoadOptions options_;
};

/// The roles of an attention step, each present exactly once.
inline const ArgumentRole kAllRoles[] = {
    ArgumentRole::Queries,    ArgumentRole::RowIds, ArgumentRole::Slots, ArgumentRole::HistoryStart,
    ArgumentRole::HistoryLen, ArgumentRole::KvPool, ArgumentRole::Output};

/// True for a PTX identifier: [A-Za-z_$%][A-Za-z0-9_$]*.
inline bool isPtxIdentifier(const std::string &name) {
  if (name.empty())
    return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(name[i]);
    bool ok = std::isalpha(c) || c == '_' || c == '$' || (i == 0 ? c == '%' : std::isdigit(c) != 0);
    if (!ok)
      return false;
  }
  return true;
}

} // namespace dhs::runtime::manifest_detail

#endif // DHS_RUNTIME_CORE_MANIFESTPARSER_H
