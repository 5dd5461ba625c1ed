// Durations for people: "42s", "3m07s", "2h05m" (progress lines, ETAs, `psformer status`).
#ifndef PSFORMER_COMMON_DURATION_TEXT_H_
#define PSFORMER_COMMON_DURATION_TEXT_H_

#include <string>

namespace psformer {

// `seconds` rounded to whole seconds under an hour, to whole minutes above; negative reads as 0.
std::string DurationText(double seconds);

}  // namespace psformer

#endif  // PSFORMER_COMMON_DURATION_TEXT_H_
