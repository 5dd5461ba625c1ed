#include "worker/data/corpus_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <vector>

#include "common/crc32c.h"
#include "common/logging.h"

namespace psformer {
namespace {

static_assert(std::endian::native == std::endian::little, "corpus files are little-endian");

constexpr char kMagic[8] = {'P', 'S', 'F', 'C', 'O', 'R', 'P', '\0'};
constexpr size_t kHeaderCrcBytes = 48;  // the header bytes before header_crc, which it covers
constexpr size_t kDigestBytes = kCorpusHeaderBytes - kCorpusHeaderBytesVersion1;  // (version 2) spm_digest

// The version 1 header, which is also the first 64 bytes of a version 2 one (spm_digest follows).
struct Header {
  char magic[8];
  uint32_t version;
  uint32_t token_bytes;
  uint64_t pairs;
  uint64_t src_tokens;
  uint64_t tgt_tokens;
  uint32_t vocab_size;
  uint32_t body_crc;
  uint32_t header_crc;
  char padding[12];
};
static_assert(sizeof(Header) == kCorpusHeaderBytesVersion1);
static_assert(offsetof(Header, header_crc) == kHeaderCrcBytes);

size_t HeaderBytes(uint32_t version) { return version == 1 ? kCorpusHeaderBytesVersion1 : kCorpusHeaderBytes; }

// header_crc of the header at `header`: bytes 0..47, and from version 2 the digest after them.
uint32_t HeaderCrc(const unsigned char* header, uint32_t version) {
  const uint32_t crc = Crc32c(0, header, kHeaderCrcBytes);
  return version == 1 ? crc : Crc32c(crc, header + kCorpusHeaderBytesVersion1, kDigestBytes);
}

bool IsDigest(std::string_view digest) {
  return digest.size() == kDigestBytes && std::all_of(digest.begin(), digest.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// Appends to a file, keeping the body's running CRC.
class BodyWriter {
 public:
  explicit BodyWriter(std::ofstream* out) : out_(out) {}
  void Write(const void* data, size_t n) {
    out_->write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
    crc_ = Crc32c(crc_, data, n);
  }
  uint32_t crc() const { return crc_; }

 private:
  std::ofstream* out_;
  uint32_t crc_ = 0;
};

void WriteOffsets(BodyWriter* body, const ParallelCorpus& corpus, bool source) {
  uint64_t offset = 0;
  body->Write(&offset, sizeof(offset));
  for (int64_t i = 0; i < corpus.size(); ++i) {
    offset += static_cast<uint64_t>(source ? corpus.src_length(i) : corpus.tgt_length(i));
    body->Write(&offset, sizeof(offset));
  }
}

void WriteIds(BodyWriter* body, const ParallelCorpus& corpus, bool source, uint32_t token_bytes, int32_t vocab_size) {
  std::vector<int32_t> ids;      // (one sentence)
  std::vector<uint16_t> narrow;  // (one sentence), when ids are 2 bytes wide
  for (int64_t i = 0; i < corpus.size(); ++i) {
    ids.resize(source ? corpus.src_length(i) : corpus.tgt_length(i));
    if (source)
      corpus.CopySrc(i, ids.data());
    else
      corpus.CopyTgt(i, ids.data());
    for (int32_t id : ids) PSF_CHECK(id >= 0 && id < vocab_size);
    if (token_bytes == 2) {
      narrow.assign(ids.begin(), ids.end());
      body->Write(narrow.data(), narrow.size() * sizeof(uint16_t));
    } else {
      body->Write(ids.data(), ids.size() * sizeof(int32_t));
    }
  }
}

std::string Errno() { return std::strerror(errno); }

}  // namespace

Status WriteCorpusFile(const std::string& path, const ParallelCorpus& corpus, int32_t vocab_size,
                       std::string_view spm_digest) {
  PSF_CHECK(vocab_size > 0);
  PSF_CHECK(IsDigest(spm_digest));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::IoError("cannot create " + path + ": " + Errno());
  Header header{};
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.version = kCorpusFileVersion;
  header.token_bytes = vocab_size <= 65536 ? 2 : 4;
  header.pairs = static_cast<uint64_t>(corpus.size());
  for (int64_t i = 0; i < corpus.size(); ++i) {
    header.src_tokens += static_cast<uint64_t>(corpus.src_length(i));
    header.tgt_tokens += static_cast<uint64_t>(corpus.tgt_length(i));
  }
  header.vocab_size = static_cast<uint32_t>(vocab_size);
  unsigned char bytes[kCorpusHeaderBytes] = {};
  std::memcpy(bytes + kCorpusHeaderBytesVersion1, spm_digest.data(), kDigestBytes);
  out.write(reinterpret_cast<const char*>(bytes), sizeof(bytes));  // rewritten with the CRCs below
  BodyWriter body(&out);
  WriteOffsets(&body, corpus, true);
  WriteOffsets(&body, corpus, false);
  WriteIds(&body, corpus, true, header.token_bytes, vocab_size);
  WriteIds(&body, corpus, false, header.token_bytes, vocab_size);
  header.body_crc = body.crc();
  std::memcpy(bytes, &header, sizeof(header));
  const uint32_t header_crc = HeaderCrc(bytes, kCorpusFileVersion);
  std::memcpy(bytes + offsetof(Header, header_crc), &header_crc, sizeof(header_crc));
  out.seekp(0);
  out.write(reinterpret_cast<const char*>(bytes), sizeof(bytes));
  out.flush();
  if (!out) return Status::IoError("cannot write " + path + ": " + Errno());
  return Status::Ok();
}

namespace {

// What is wrong with a file of `bytes` bytes that cannot hold even a version 1 header, or "".
std::string TooShortProblem(size_t bytes) {
  if (bytes >= kCorpusHeaderBytesVersion1) return "";
  return "file of " + std::to_string(bytes) + " bytes is shorter than any corpus file header (" +
         std::to_string(kCorpusHeaderBytesVersion1) + " bytes; not a corpus file, or truncated)";
}

// `path` mapped read-only: the mapping and its size. Fails as open, fstat or mmap do, or when the
// file is too short to hold a header.
StatusOr<std::pair<void*, size_t>> MapCorpusFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    const std::string why = std::strerror(error);
    return error == ENOENT ? Status::NotFound(path + ": no such file") : Status::IoError(path + ": " + why);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string why = Errno();
    ::close(fd);
    return Status::IoError(path + ": " + why);
  }
  const auto bytes = static_cast<size_t>(st.st_size);
  if (const std::string problem = TooShortProblem(bytes); !problem.empty()) {
    ::close(fd);
    return Status::Corruption(path + ": " + problem);
  }
  void* mapping = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  const std::string map_error = Errno();
  ::close(fd);  // the mapping keeps the file open
  if (mapping == MAP_FAILED) return Status::IoError(path + ": cannot memory-map: " + map_error);
  return std::pair<void*, size_t>(mapping, bytes);
}

// The header of a file of `bytes` bytes, checked but for the data's checksum, into `*header` and
// `*digest` ("" for version 1); what is wrong with it, or "". `base` holds the file's first
// min(bytes, kCorpusHeaderBytes) bytes at least.
std::string ReadHeader(const unsigned char* base, size_t bytes, Header* header, std::string* digest) {
  std::memcpy(header, base, sizeof(*header));
  if (std::memcmp(header->magic, kMagic, sizeof(kMagic)) != 0) {
    return "bad magic number (not a corpus file written by `psformer prepare`)";
  }
  if (header->version < kCorpusFileFirstVersion || header->version > kCorpusFileVersion) {
    return "format version " + std::to_string(header->version) + ", this build reads versions " +
           std::to_string(kCorpusFileFirstVersion) + " to " + std::to_string(kCorpusFileVersion) +
           " (prepare the corpus again)";
  }
  const size_t header_bytes = HeaderBytes(header->version);
  if (bytes < header_bytes) {
    return "file of " + std::to_string(bytes) + " bytes is shorter than the " + std::to_string(header_bytes) +
           "-byte header of version " + std::to_string(header->version) + " (truncated)";
  }
  if (HeaderCrc(base, header->version) != header->header_crc) return "header checksum mismatch";
  digest->clear();
  if (header->version >= 2) {
    digest->assign(reinterpret_cast<const char*>(base) + kCorpusHeaderBytesVersion1, kDigestBytes);
    if (!IsDigest(*digest)) return "the SentencePiece digest is not 64 hex digits";
  }
  if (header->token_bytes != 2 && header->token_bytes != 4) {
    return "token width " + std::to_string(header->token_bytes) + " bytes (expected 2 or 4)";
  }
  if (header->vocab_size == 0 || header->vocab_size > static_cast<uint32_t>(INT32_MAX)) {
    return "vocabulary size " + std::to_string(header->vocab_size) + " out of range";
  }
  // Sizes in 128 bits: absurd counts in a damaged header must not wrap around.
  const unsigned __int128 expected =
      static_cast<unsigned __int128>(header_bytes) +
      static_cast<unsigned __int128>(header->pairs + 1) * 2 * sizeof(uint64_t) +
      (static_cast<unsigned __int128>(header->src_tokens) + header->tgt_tokens) * header->token_bytes;
  if (header->pairs >= (uint64_t{1} << 62) || expected != bytes) {
    return "file is " + std::to_string(bytes) + " bytes but its header counts (" + std::to_string(header->pairs) +
           " pairs, " + std::to_string(header->src_tokens) + " + " + std::to_string(header->tgt_tokens) +
           " tokens) need a different size (truncated?)";
  }
  return "";
}

}  // namespace

StatusOr<std::unique_ptr<CorpusFile>> CorpusFile::Open(const std::string& path) {
  PSF_ASSIGN_OR_RETURN(const auto mapped, MapCorpusFile(path));
  auto file = std::make_unique<CorpusFile>();
  file->mapping_ = mapped.first;  // unmapped by the destructor on every path below
  file->mapping_bytes_ = mapped.second;
  const auto* base = static_cast<const unsigned char*>(mapped.first);
  const size_t bytes = mapped.second;
  Header header;
  if (const std::string problem = ReadHeader(base, bytes, &header, &file->spm_digest_); !problem.empty()) {
    return Status::Corruption(path + ": " + problem);
  }
  const size_t header_bytes = HeaderBytes(header.version);
  if (Crc32c(0, base + header_bytes, bytes - header_bytes) != header.body_crc) {
    return Status::Corruption(path + ": data checksum mismatch (the file is damaged)");
  }
  file->pairs_ = static_cast<int64_t>(header.pairs);
  file->vocab_size_ = static_cast<int32_t>(header.vocab_size);
  file->token_bytes_ = header.token_bytes;
  file->src_offsets_ = reinterpret_cast<const uint64_t*>(base + header_bytes);
  file->tgt_offsets_ = file->src_offsets_ + header.pairs + 1;
  file->src_ids_ = reinterpret_cast<const unsigned char*>(file->tgt_offsets_ + header.pairs + 1);
  file->tgt_ids_ = file->src_ids_ + header.src_tokens * header.token_bytes;
  if (const std::string problem = file->ContentProblem(header.src_tokens, header.tgt_tokens); !problem.empty()) {
    return Status::Corruption(path + ": " + problem);
  }
  return file;
}

StatusOr<CorpusFileHeader> ReadCorpusFileHeader(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return Status::NotFound(path + ": no such file");
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return Status::IoError(path + ": " + ec.message());
  const auto bytes = static_cast<size_t>(size);
  if (const std::string problem = TooShortProblem(bytes); !problem.empty())
    return Status::Corruption(path + ": " + problem);
  unsigned char head[kCorpusHeaderBytes] = {};
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(head), static_cast<std::streamsize>(std::min(bytes, sizeof(head))));
  if (!in) return Status::IoError(path + ": cannot read the header: " + Errno());
  Header header;
  CorpusFileHeader read;
  if (const std::string problem = ReadHeader(head, bytes, &header, &read.spm_digest); !problem.empty()) {
    return Status::Corruption(path + ": " + problem);
  }
  read.version = header.version;
  read.pairs = static_cast<int64_t>(header.pairs);
  read.src_tokens = static_cast<int64_t>(header.src_tokens);
  read.tgt_tokens = static_cast<int64_t>(header.tgt_tokens);
  read.vocab_size = static_cast<int32_t>(header.vocab_size);
  read.body_crc = header.body_crc;
  return read;
}

std::string CorpusFile::ContentProblem(uint64_t src_tokens, uint64_t tgt_tokens) const {
  const auto pairs = static_cast<uint64_t>(pairs_);
  for (const auto& [offsets, total, side] :
       {std::tuple{src_offsets_, src_tokens, "source"}, std::tuple{tgt_offsets_, tgt_tokens, "target"}}) {
    if (offsets[0] != 0 || offsets[pairs] != total) {
      return std::string(side) + " offsets must run from 0 to the token count " + std::to_string(total);
    }
    for (uint64_t i = 0; i < pairs; ++i) {
      if (offsets[i + 1] < offsets[i] || offsets[i + 1] - offsets[i] > static_cast<uint64_t>(INT32_MAX)) {
        return std::string(side) + " offsets decrease or jump at pair " + std::to_string(i);
      }
    }
  }
  // Ids beyond the vocabulary would index past the embedding table: check each once here.
  std::vector<int32_t> ids;  // (one sentence)
  for (int64_t i = 0; i < pairs_; ++i) {
    for (bool source : {true, false}) {
      ids.resize(source ? src_length(i) : tgt_length(i));
      if (source) {
        CopySrc(i, ids.data());
      } else {
        CopyTgt(i, ids.data());
      }
      for (int32_t id : ids) {
        if (id < 0 || id >= vocab_size_) {
          return "token id " + std::to_string(id) + " in pair " + std::to_string(i) + " (" +
                 (source ? "source" : "target") + ") is outside the vocabulary of " + std::to_string(vocab_size_);
        }
      }
    }
  }
  return "";
}

CorpusFile::~CorpusFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_bytes_);
}

int32_t CorpusFile::src_length(int64_t pair) const {
  PSF_CHECK(pair >= 0 && pair < pairs_);
  return static_cast<int32_t>(src_offsets_[pair + 1] - src_offsets_[pair]);
}

int32_t CorpusFile::tgt_length(int64_t pair) const {
  PSF_CHECK(pair >= 0 && pair < pairs_);
  return static_cast<int32_t>(tgt_offsets_[pair + 1] - tgt_offsets_[pair]);
}

void CorpusFile::CopyIds(uint64_t begin, uint64_t end, const unsigned char* ids, int32_t* out) const {
  // memcpy per id: the ids need not be aligned for their width, and compilers turn it into a load.
  if (token_bytes_ == 2) {
    for (uint64_t i = begin; i < end; ++i) {
      uint16_t id;
      std::memcpy(&id, ids + i * 2, 2);
      *out++ = id;
    }
  } else {
    std::memcpy(out, ids + begin * 4, (end - begin) * 4);
  }
}

void CorpusFile::CopySrc(int64_t pair, int32_t* out) const {
  PSF_CHECK(pair >= 0 && pair < pairs_);
  CopyIds(src_offsets_[pair], src_offsets_[pair + 1], src_ids_, out);
}

void CorpusFile::CopyTgt(int64_t pair, int32_t* out) const {
  PSF_CHECK(pair >= 0 && pair < pairs_);
  CopyIds(tgt_offsets_[pair], tgt_offsets_[pair + 1], tgt_ids_, out);
}

}  // namespace psformer
