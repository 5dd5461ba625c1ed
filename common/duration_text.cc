#include "common/duration_text.h"

#include <cstdio>

namespace psformer {

std::string DurationText(double seconds) {
  const long long s = seconds > 0 ? static_cast<long long>(seconds + 0.5) : 0;
  char text[32];
  if (s < 60) {
    std::snprintf(text, sizeof(text), "%llds", s);
  } else if (s < 3600) {
    std::snprintf(text, sizeof(text), "%lldm%02llds", s / 60, s % 60);
  } else {
    std::snprintf(text, sizeof(text), "%lldh%02lldm", s / 3600, s / 60 % 60);
  }
  return text;
}

}  // namespace psformer
