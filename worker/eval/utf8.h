// UTF-8 validation for text that is scored or tokenized: the 13a tokenizer works on bytes and is
// only equal to sacreBLEU's code-point rules on well-formed input, and a user deserves to hear
// which line of which file is broken rather than get a silently different score.
#ifndef PSFORMER_WORKER_EVAL_UTF8_H_
#define PSFORMER_WORKER_EVAL_UTF8_H_

#include <cstddef>
#include <string_view>

namespace psformer {

// Whether `s` is well-formed UTF-8 as Python's strict decoder accepts it: no overlong forms,
// no surrogates (U+D800..U+DFFF), nothing above U+10FFFF, no truncated sequences. On false,
// `*bad_offset` (if given) receives the byte offset of the first bad sequence.
bool IsValidUtf8(std::string_view s, size_t* bad_offset = nullptr);

}  // namespace psformer

#endif  // PSFORMER_WORKER_EVAL_UTF8_H_
