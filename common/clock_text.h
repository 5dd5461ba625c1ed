// Wall-clock times as text: the stamps of log lines, checkpoint manifests, lock files and
// run-directory names.
#ifndef PSFORMER_COMMON_CLOCK_TEXT_H_
#define PSFORMER_COMMON_CLOCK_TEXT_H_

#include <ctime>
#include <string>

namespace psformer {

enum class TimeZone { kUtc, kLocal };

// `when` written by strftime's `format` ("%Y-%m-%dT%H:%M:%SZ", ...) in `zone`; "" when the text
// would pass 63 characters.
std::string ClockText(std::time_t when, const char* format, TimeZone zone);

}  // namespace psformer

#endif  // PSFORMER_COMMON_CLOCK_TEXT_H_
