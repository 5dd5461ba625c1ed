#include "common/clock_text.h"

namespace psformer {

std::string ClockText(std::time_t when, const char* format, TimeZone zone) {
  std::tm fields{};
  if (zone == TimeZone::kUtc) {
    gmtime_r(&when, &fields);
  } else {
    localtime_r(&when, &fields);
  }
  char text[64];
  if (std::strftime(text, sizeof(text), format, &fields) == 0) return "";
  return text;
}

}  // namespace psformer
