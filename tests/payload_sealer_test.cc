// AES-256-GCM sealing of frames (common/transport/payload_sealer.h, cluster.encryption): what is
// sealed opens to the same bytes under the job's key and under no other; a flipped bit or a cut
// frame does not open; two processes never seal alike; two ZmqVans that seal talk, and a Van
// without the key is refused with its reason.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "common/transport/payload_sealer.h"
#include "common/transport/zmq_van.h"

namespace psformer {
namespace {

std::string Key(uint8_t seed) { return std::string(PayloadSealer::kKeyBytes, static_cast<char>(seed)); }

Frame Bytes(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  std::mt19937 rng(seed);
  for (char& c : s) c = static_cast<char>(rng());
  return Frame::Own(std::move(s));
}

TEST(PayloadSealer, WhatIsSealedOpensToTheSameBytesAndOnlyUnderTheJobsKey) {
  auto sender = PayloadSealer::Create(Key(1));
  auto receiver = PayloadSealer::Create(Key(1));  // another process of the job
  auto stranger = PayloadSealer::Create(Key(2));
  ASSERT_TRUE(sender.ok() && receiver.ok() && stranger.ok());
  for (size_t n : {size_t{0}, size_t{1}, size_t{100}, size_t{1} << 20}) {
    SCOPED_TRACE(n);
    const Frame plain = Bytes(n, static_cast<uint32_t>(n));
    const Frame sealed = (*sender)->Seal(plain);
    ASSERT_EQ(sealed.size(), n + PayloadSealer::kOverhead);
    if (n >= 100) {
      EXPECT_EQ(sealed.bytes().find(plain.bytes().substr(0, 32)), std::string::npos);  // not in the clear
    }
    auto opened = (*receiver)->Open(sealed);
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    EXPECT_EQ(opened->bytes(), plain.bytes());
    EXPECT_FALSE((*stranger)->Open(sealed).ok());
  }
}

TEST(PayloadSealer, AFlippedBitOrACutFrameDoesNotOpen) {
  auto sealer = PayloadSealer::Create(Key(3));
  ASSERT_TRUE(sealer.ok());
  const Frame sealed = (*sealer)->Seal(Bytes(4096, 7));
  for (size_t at : {size_t{0}, size_t{20}, size_t{30}, sealed.size() / 2, sealed.size() - 1}) {
    std::string damaged(sealed.bytes());
    damaged[at] = static_cast<char>(damaged[at] ^ 0x10);
    EXPECT_FALSE((*sealer)->Open(Frame::Own(damaged)).ok()) << "bit flipped at " << at;
  }
  EXPECT_FALSE((*sealer)->Open(Frame::Copy(sealed.bytes().substr(0, sealed.size() - 1))).ok());
  const auto short_frame = (*sealer)->Open(Frame::Copy("too short"));
  ASSERT_FALSE(short_frame.ok());
  EXPECT_NE(short_frame.status().message().find("too short to be sealed"), std::string::npos);
  auto key = PayloadSealer::Create("short key");
  ASSERT_FALSE(key.ok());
  EXPECT_NE(key.status().message().find("not 32"), std::string::npos);
}

TEST(PayloadSealer, NoTwoSealsAlikeWithinAProcessOrAcrossProcesses) {
  auto a = PayloadSealer::Create(Key(4));
  auto b = PayloadSealer::Create(Key(4));
  ASSERT_TRUE(a.ok() && b.ok());
  const Frame plain = Bytes(64, 9);
  const Frame a1 = (*a)->Seal(plain), a2 = (*a)->Seal(plain), b1 = (*b)->Seal(plain);
  EXPECT_NE(a1.bytes(), a2.bytes());  // the counter moved on
  EXPECT_NE(a1.bytes(), b1.bytes());  // another salt, so another key
  EXPECT_NE(a1.bytes().substr(0, PayloadSealer::kSaltBytes), b1.bytes().substr(0, PayloadSealer::kSaltBytes));
  // Many frames at once, on several threads: each opens, in its place.
  std::vector<Frame> frames;
  for (uint32_t i = 0; i < 64; ++i) frames.push_back(Bytes(1000 + i, i));
  auto opened = (*b)->OpenAll((*a)->SealAll(frames, 4), 4);
  ASSERT_TRUE(opened.ok());
  for (size_t i = 0; i < frames.size(); ++i) EXPECT_EQ((*opened)[i].bytes(), frames[i].bytes()) << i;
}

std::optional<RawMessage> ReceiveWithin(ZmqVan& van, int ms) {
  for (int waited = 0; waited < ms; waited += 50) {
    auto got = van.Recv(50);
    EXPECT_TRUE(got.ok());
    if (got.ok() && got->has_value()) return std::move(**got);
  }
  return std::nullopt;
}

TEST(PayloadSealer, SealingVansTalkAndAVanWithoutTheKeyIsRefused) {
  ZmqVanOptions sealed;
  sealed.sealer = *PayloadSealer::Create(Key(5));
  sealed.seal_threads = 2;
  ZmqVan server(sealed);
  auto endpoint = server.Bind("tcp://127.0.0.1:0");
  ASSERT_TRUE(endpoint.ok());
  ZmqVanOptions client_options;
  client_options.sealer = *PayloadSealer::Create(Key(5));
  ZmqVan client(client_options);
  ASSERT_TRUE(client.Connect("server", *endpoint).ok());
  RawMessage hello;
  hello.peer = "server";
  hello.frames = {Frame::Copy("header"), Bytes(3 << 20, 11)};
  ASSERT_TRUE(client.Send(hello).ok());
  auto got = ReceiveWithin(server, 10000);
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(got->unsealed);
  ASSERT_EQ(got->frames.size(), 2u);
  EXPECT_EQ(got->frames[0].bytes(), "header");
  EXPECT_EQ(got->frames[1].bytes(), hello.frames[1].bytes());
  // An answer the same way back.
  RawMessage answer;
  answer.peer = got->peer;
  answer.frames = {Frame::Copy("answer")};
  ASSERT_TRUE(server.Send(answer).ok());
  auto back = ReceiveWithin(client, 10000);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->frames[0].bytes(), "answer");
  // A Van of another job (or none) reaches the socket, but what it sends does not open.
  for (bool other_key : {true, false}) {
    ZmqVanOptions foreign_options;
    if (other_key) foreign_options.sealer = *PayloadSealer::Create(Key(6));
    ZmqVan foreign(foreign_options);
    ASSERT_TRUE(foreign.Connect("server", *endpoint).ok());
    RawMessage forged;
    forged.peer = "server";
    forged.frames = {Frame::Copy("a forged header that is long enough to be taken for a sealed one")};
    ASSERT_TRUE(foreign.Send(forged).ok());
    auto refused = ReceiveWithin(server, 10000);
    ASSERT_TRUE(refused.has_value());
    EXPECT_TRUE(refused->unsealed);
    EXPECT_NE(refused->transport_error.find("does not open under the job's payload key"), std::string::npos)
        << refused->transport_error;
  }
}

}  // namespace
}  // namespace psformer
