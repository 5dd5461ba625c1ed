// The "13a" tokenizer of mteval-v13a.pl, as sacreBLEU applies it before BLEU (its default).
//
// Rules, in order (each regex pass scans left to right with non-overlapping matches):
//   1. strip trailing whitespace; drop "<skipped>"; join "-\n"; "\n" becomes a space;
//   2. unescape &quot; &amp; &lt; &gt; (in that order, each a single pass); pad with a space each side;
//   3. every character of { | } ~ [ \ ] ^ _ ` space ! " # $ % & ( ) * + : ; < = > ? @ / stands alone;
//   4. "." and "," split from a preceding non-digit, then from a following non-digit;
//   5. "-" splits from a preceding digit;
//   6. split on whitespace as Python's str.split() defines it (Unicode: NBSP, U+2000..U+200A,
//      U+3000, U+0085, U+001C..U+001F, ...) and join with single spaces.
// "Digit" means ASCII 0-9 only, as in sacreBLEU's patterns. Non-ASCII letters are untouched.
#ifndef PSFORMER_WORKER_TRANSLATE_TOKENIZER_13A_H_
#define PSFORMER_WORKER_TRANSLATE_TOKENIZER_13A_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace psformer {

// Tokenizes one segment. Returns the tokens joined by single ASCII spaces, with no space at either
// end; tokens never contain whitespace. REQUIRES: `line` is valid UTF-8 (common/utf8.h), which
// is what makes working on bytes equal to sacreBLEU working on code points.
std::string Tokenize13a(std::string_view line);

// The length in bytes of the character at `s[i]` if Python's str.isspace() holds for it, else 0.
// REQUIRES: i < s.size() and `s` valid UTF-8.
size_t PythonSpaceLength(std::string_view s, size_t i);

}  // namespace psformer

#endif  // PSFORMER_WORKER_TRANSLATE_TOKENIZER_13A_H_
