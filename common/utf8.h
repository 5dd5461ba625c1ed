// UTF-8 validation for text that is prepared, scored or tokenized: a corpus with a bad byte is
// reported with its file and line instead of trained on, and the 13a tokenizer works on bytes
// and equals sacreBLEU's code-point rules only on well-formed input, so a user deserves to hear
// which line of which file is broken rather than get a silently different score.
#ifndef PSFORMER_COMMON_UTF8_H_
#define PSFORMER_COMMON_UTF8_H_

#include <cstddef>
#include <string_view>

namespace psformer {

// Whether `s` is well-formed UTF-8 as Python's strict decoder accepts it: no overlong forms,
// no surrogates (U+D800..U+DFFF), nothing above U+10FFFF, no truncated sequences. On false,
// `*bad_offset` (if given) receives the byte offset of the first bad sequence.
bool IsValidUtf8(std::string_view s, size_t* bad_offset = nullptr);

}  // namespace psformer

#endif  // PSFORMER_COMMON_UTF8_H_
