//===- Checked.h - Overflow-checked arithmetic on sizes and positions -*- C++ -*-===//
//
// Every product of sizes, sum of a position and a count, and difference of
// an end and a count that comes from a caller or a file goes through these
// helpers: they use the compiler's overflow builtins, so an overflow is
// detected exactly (never wrapped, never undefined). The try* forms return
// std::nullopt on overflow; the checked* forms throw an exception of the
// caller's choice whose message names the quantity.
//
//   if (!tryAdd(position, count)) throw InputError(...);
//   std::size_t bytes = checkedBytes<CapacityError>({rows, layers, rowBytes}, "host store");
//
//===----------------------------------------------------------------------===//

#ifndef DHS_RUNTIME_CORE_CHECKED_H
#define DHS_RUNTIME_CORE_CHECKED_H

#include "runtime/core/Error.h"

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

namespace dhs::runtime {

/// a + b, or std::nullopt when it does not fit T.
template <typename T> [[nodiscard]] std::optional<T> tryAdd(T a, T b) {
  static_assert(std::is_integral_v<T>);
  T result;
  if (__builtin_add_overflow(a, b, &result))
    return std::nullopt;
  return result;
}

/// a - b, or std::nullopt when it does not fit T.
template <typename T> [[nodiscard]] std::optional<T> trySub(T a, T b) {
  static_assert(std::is_integral_v<T>);
  T result;
  if (__builtin_sub_overflow(a, b, &result))
    return std::nullopt;
  return result;
}

/// a * b, or std::nullopt when it does not fit T.
template <typename T> [[nodiscard]] std::optional<T> tryMul(T a, T b) {
  static_assert(std::is_integral_v<T>);
  T result;
  if (__builtin_mul_overflow(a, b, &result))
    return std::nullopt;
  return result;
}

/// The product of non-negative factors, or std::nullopt when a factor is
/// negative or the product does not fit an int64.
[[nodiscard]] inline std::optional<std::int64_t>
tryProduct(std::initializer_list<std::int64_t> factors) {
  std::int64_t result = 1;
  for (std::int64_t factor : factors) {
    if (factor < 0 || __builtin_mul_overflow(result, factor, &result))
      return std::nullopt;
  }
  return result;
}

namespace detail {
template <typename E>
[[noreturn]] void overflowAs(const char *what, const std::string &expression) {
  throw E(std::string(what) + ": " + expression + " overflows 64-bit arithmetic");
}
} // namespace detail

/// The product of non-negative factors (element counts, bytes) as an int64;
/// throws E naming `what` and the factors when one is negative or the
/// product does not fit.
template <typename E = InputError>
std::int64_t checkedProduct(std::initializer_list<std::int64_t> factors, const char *what) {
  if (std::optional<std::int64_t> product = tryProduct(factors))
    return *product;
  std::string expression;
  for (std::int64_t factor : factors)
    expression += (expression.empty() ? "" : " * ") + std::to_string(factor);
  detail::overflowAs<E>(what, expression + " (or a negative factor)");
}

/// As checkedProduct, as a size_t (for allocations and offsets).
template <typename E = InputError>
std::size_t checkedBytes(std::initializer_list<std::int64_t> factors, const char *what) {
  const std::int64_t product = checkedProduct<E>(factors, what);
  if (static_cast<std::uint64_t>(product) > std::numeric_limits<std::size_t>::max())
    detail::overflowAs<E>(what, std::to_string(product) + " bytes");
  return static_cast<std::size_t>(product);
}

/// x mod m in [0, m) for m > 0, for any x (also negative ones); the slot of
/// a logical position in a ring of m entries.
inline std::int64_t floorMod(std::int64_t x, std::int64_t m) {
  const std::int64_t r = x % m;
  return r < 0 ? r + m : r;
}

} // namespace dhs::runtime

#endif // DHS_RUNTIME_CORE_CHECKED_H
