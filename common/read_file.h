// The one way psformer reads a whole file that a user names or a run holds (a config, a model, a
// SentencePiece model, a checkpoint shard, a hostfile): in bounded memory whatever the path is.
//
// A regular file is read in one allocation of its size, and one larger than `max_bytes` is
// refused before anything is read.
//
// Anything else (a pipe or process substitution, a character device) is read until its end,
// but never past `max_bytes`, so /dev/zero given by mistake fails at once instead of taking
// every byte of memory. With a `magic`, a file whose first bytes are not that magic is read no
// further: its first bytes are returned for the caller's "wrong magic" error, so a 50 GB corpus
// given as --model is not read whole to be refused.
#ifndef PSFORMER_COMMON_READ_FILE_H_
#define PSFORMER_COMMON_READ_FILE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace psformer {

// No bound but memory: for files whose size the program itself wrote and checks (a model, a
// checkpoint shard). A stream that is not a regular file still ends at kMaxStreamBytes.
inline constexpr size_t kAnyFileSize = SIZE_MAX;
// The most read from a pipe or device without a smaller `max_bytes`: 64 GiB.
inline constexpr size_t kMaxStreamBytes = size_t{64} << 30;
// Text a person writes (a config, a hostfile, a checkpoint's manifest): a few KB.
inline constexpr size_t kMaxTextFileBytes = size_t{16} << 20;
// A SentencePiece model: ~1 MB for the paper's 37,000 pieces.
inline constexpr size_t kMaxSentencePieceBytes = size_t{1} << 30;

// The bytes of the file at `path`, named "WHAT PATH" in errors: NotFound "cannot open WHAT PATH:
// why"; InvalidArgument when it is a directory or holds more than `max_bytes`; IoError when a
// read fails. With `magic` not empty, a file whose first magic.size() bytes differ (or that is
// shorter) returns only those bytes.
StatusOr<std::string> ReadFileBytes(const std::string& path, const std::string& what, size_t max_bytes,
                                    std::string_view magic = {});

}  // namespace psformer

#endif  // PSFORMER_COMMON_READ_FILE_H_
