// Names of enumerators from a table: the idiom behind psformer's XxxName() functions
// (RejectReasonName, FaultActionName, ...), whose enums number their values 0, 1, 2, ...
#ifndef PSFORMER_COMMON_ENUM_NAME_H_
#define PSFORMER_COMMON_ENUM_NAME_H_

#include <cstddef>
#include <type_traits>

namespace psformer {

// `names[value]`: `names` holds the enum's names in the order of its values. A value past the
// table's end (a number cast from the wire or a file) gives `unknown`. The caller checks the
// table's length against the enum at compile time, e.g.
//   static_assert(std::size(kNames) == static_cast<size_t>(Reason::kCount));
template <typename Enum, std::size_t N>
constexpr const char* EnumName(Enum value, const char* const (&names)[N], const char* unknown) {
  static_assert(std::is_enum_v<Enum>);
  const auto index = static_cast<std::size_t>(value);
  return index < N ? names[index] : unknown;
}

}  // namespace psformer

#endif  // PSFORMER_COMMON_ENUM_NAME_H_
