// ReadFileBytes: a whole file in bounded memory, whatever the path names.
#include "common/read_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <string>
#include <thread>

#include "tests/test_util.h"

namespace psformer {
namespace {

using testing::TempDir;

bool Contains(const Status& s, const std::string& text) { return s.message().find(text) != std::string::npos; }

// Bytes of every value, longer than the first read of a stream (64 KiB) and not a multiple of it.
std::string Pattern(size_t n) {
  std::string bytes(n, '\0');
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<char>((i * 7919) >> 3);
  return bytes;
}

TEST(ReadFileBytes, ARegularFileIsReadWhole) {
  TempDir dir;
  const std::string bytes = Pattern(300'001);
  const auto read = ReadFileBytes(dir.Write("f.bin", bytes), "model file", kAnyFileSize);
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(*read, bytes);
  const auto empty = ReadFileBytes(dir.Write("empty", ""), "model file", kAnyFileSize);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, "");
  const auto at_limit = ReadFileBytes(dir.Write("ten", "0123456789"), "config file", 10);
  ASSERT_TRUE(at_limit.ok()) << at_limit.status().message();
  EXPECT_EQ(*at_limit, "0123456789");
}

TEST(ReadFileBytes, ARegularFileOverTheLimitIsRefusedByItsSize) {
  TempDir dir;
  const std::string path = dir.Write("corpus.txt", std::string(3000, 'x'));
  const auto read = ReadFileBytes(path, "config file", 2048);
  ASSERT_FALSE(read.ok());
  EXPECT_TRUE(read.status().IsInvalidArgument());
  EXPECT_EQ(read.status().message(),
            "config file " + path + " is 2.9 KiB, more than a config file can be (2.0 KiB): is it the right file?");
}

TEST(ReadFileBytes, ADeviceThatNeverEndsIsReadNoFurtherThanTheLimit) {
  const auto read = ReadFileBytes("/dev/zero", "config file", size_t{1} << 20);
  ASSERT_FALSE(read.ok());
  EXPECT_TRUE(read.status().IsInvalidArgument());
  EXPECT_EQ(read.status().message(),
            "config file /dev/zero gave more than 1.0 MiB without ending: it is not a regular file (a device, or a "
            "pipe that does not end?)");
}

// A pipe (as a shell's <(...) gives) is read to its end, in reads of whatever size it hands out.
TEST(ReadFileBytes, APipeIsReadToItsEndOrRefusedPastTheLimit) {
  // The writer of a pipe whose reader gave up gets EPIPE, not the signal that ends the test.
  struct sigaction ignore {
  }, before{};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGPIPE, &ignore, &before), 0);
  for (const size_t limit : {size_t{1} << 20, size_t{100'000}}) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    const std::string bytes = Pattern(200'000);
    std::thread writer([&] {
      for (size_t at = 0; at < bytes.size();) {
        const ssize_t n = write(fds[1], bytes.data() + at, std::min<size_t>(4093, bytes.size() - at));
        if (n <= 0) break;  // the reader gave up (past its limit) and closed its end
        at += static_cast<size_t>(n);
      }
      close(fds[1]);
    });
    const std::string path = "/proc/self/fd/" + std::to_string(fds[0]);
    const auto read = ReadFileBytes(path, "hostfile", limit);
    close(fds[0]);
    writer.join();
    if (limit > bytes.size()) {
      ASSERT_TRUE(read.ok()) << read.status().message();
      EXPECT_EQ(*read, bytes);
    } else {
      ASSERT_FALSE(read.ok());
      EXPECT_TRUE(Contains(read.status(), "gave more than 98 KiB without ending")) << read.status().message();
    }
  }
  sigaction(SIGPIPE, &before, nullptr);
}

// A file of another kind is read no further than the magic: its first bytes say what it is.
TEST(ReadFileBytes, AFileWithoutTheMagicIsReadNoFurtherThanItsFirstBytes) {
  TempDir dir;
  const std::string magic = "PSFMODEL";
  const std::string other = dir.Write("other", "PSFSHARD" + Pattern(100'000));
  const auto read = ReadFileBytes(other, "model file", kAnyFileSize, magic);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(*read, "PSFSHARD");
  const auto zeros = ReadFileBytes("/dev/zero", "model file", kAnyFileSize, magic);
  ASSERT_TRUE(zeros.ok());
  EXPECT_EQ(*zeros, std::string(8, '\0'));
  const auto short_file = ReadFileBytes(dir.Write("short", "PSF"), "model file", kAnyFileSize, magic);
  ASSERT_TRUE(short_file.ok());
  EXPECT_EQ(*short_file, "PSF");
  const std::string whole = magic + Pattern(70'000);
  const auto model = ReadFileBytes(dir.Write("model", whole), "model file", kAnyFileSize, magic);
  ASSERT_TRUE(model.ok());
  EXPECT_EQ(*model, whole);
}

TEST(ReadFileBytes, AMissingFileAndADirectoryAreNamed) {
  TempDir dir;
  const auto missing = ReadFileBytes(dir.File("none"), "--spm", kMaxSentencePieceBytes);
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(missing.status().IsNotFound());
  EXPECT_EQ(missing.status().message(), "cannot open --spm " + dir.File("none") + ": No such file or directory");
  const auto directory = ReadFileBytes(dir.path().string(), "--spm", kMaxSentencePieceBytes);
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.status().message(),
            "cannot read --spm " + dir.path().string() + ": it is a directory, not a file");
}

}  // namespace
}  // namespace psformer
