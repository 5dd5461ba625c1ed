// The host link board (common/transport/host_link_board.h, cluster.sums_first): what one
// mapping publishes another mapping of the same file reads; a slot says "sums of step s or
// earlier are on their way" only while it has some, of such a step, and has changed within
// kStaleMs; bad places for the file are refused with their path. And a server's Van with
// yield_answer reading the board: a ranked answer to a tcp:// peer waits while the host's sums of
// its step (or an earlier one) are on their way, then leaves; answers without a payload, and
// answers of an earlier step than the sums', never wait.
#include "common/transport/host_link_board.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "common/transport/zmq_van.h"
#include "tests/test_util.h"
#include "tests/van_test_util.h"

namespace psformer::testing {
namespace {

std::shared_ptr<HostLinkBoard> OpenBoard(const std::string& path, int slots) {
  auto board = HostLinkBoard::Open(path, slots);
  EXPECT_TRUE(board.ok()) << board.status().ToString();
  return board.ok() ? *board : nullptr;
}

TEST(HostLinkBoard, LivesBesideTheServersSocket) {
  auto path = HostLinkBoard::PathFor("ipc:///run/job/ipc/pserver-3.sock");
  ASSERT_TRUE(path.ok());
  EXPECT_EQ(*path, "/run/job/ipc/pserver-3.sock.link");
  EXPECT_FALSE(HostLinkBoard::PathFor("tcp://10.0.0.1:5000").ok());
  EXPECT_FALSE(HostLinkBoard::PathFor("ipc://").ok());
}

TEST(HostLinkBoard, WhatOneMappingPublishesAnotherReads) {
  TempDir dir;
  const std::string path = dir.File("pserver-0.sock.link");
  auto aggregator = OpenBoard(path, 3);  // makes the file
  auto server = OpenBoard(path, 3);      // maps the same one
  ASSERT_NE(aggregator, nullptr);
  ASSERT_NE(server, nullptr);
  EXPECT_FALSE(server->SumsPending(100, 0)) << "a new board has nothing on its way";

  aggregator->Publish(1, 7, 0, 2);  // group 1: two sums, the oldest of step 7
  EXPECT_FALSE(server->SumsPending(6, 0)) << "sums of step 7 do not hold back answers of step 6";
  EXPECT_TRUE(server->SumsPending(7, 0));
  EXPECT_TRUE(server->SumsPending(8, 0));

  aggregator->Publish(2, 5, 0, 1);  // another group's slot: the oldest over both counts
  EXPECT_TRUE(server->SumsPending(5, 0));
  aggregator->Publish(2, 0, 0, 0);
  EXPECT_FALSE(server->SumsPending(6, 0));

  aggregator->Publish(1, 7, 500, 2);  // within a step: by where they begin in their shard
  EXPECT_FALSE(server->SumsPending(7, 499)) << "an answer forward needs before the sums goes first";
  EXPECT_TRUE(server->SumsPending(7, 500));
  aggregator->Publish(1, 7, 0, 0);  // none on its way any more
  EXPECT_FALSE(server->SumsPending(1000, 0));

  // A slot out of range is ignored, not written past the mapping.
  aggregator->Publish(3, 1, 0, 1);
  aggregator->Publish(-1, 1, 0, 1);
  EXPECT_FALSE(server->SumsPending(1000, 0));
}

TEST(HostLinkBoard, ASlotThatDoesNotChangeGoesStale) {
  TempDir dir;
  auto board = OpenBoard(dir.File("b.link"), 1);
  ASSERT_NE(board, nullptr);
  board->Publish(0, 4, 0, 1);
  EXPECT_TRUE(board->SumsPending(4, 0));
  // Publishing the same again is no news: it does not keep the slot fresh.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(HostLinkBoard::kStaleMs + 100);
  while (std::chrono::steady_clock::now() < until) {
    board->Publish(0, 4, 0, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_FALSE(board->SumsPending(4, 0)) << "an aggregator with no progress for kStaleMs should hold nothing back";
  board->Publish(0, 4, 0, 2);  // progress: fresh again
  EXPECT_TRUE(board->SumsPending(4, 0));
}

TEST(HostLinkBoard, RefusesWhatIsNotARegularFileOrSlotsOutOfRange) {
  TempDir dir;
  std::filesystem::create_directory(dir.File("a-directory"));
  auto refused = HostLinkBoard::Open(dir.File("a-directory"), 2);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(dir.File("a-directory")), std::string::npos) << refused.status().message();
  std::filesystem::create_symlink(dir.File("elsewhere"), dir.File("a-link"));
  EXPECT_FALSE(HostLinkBoard::Open(dir.File("a-link"), 2).ok()) << "a symlink must not be followed";
  EXPECT_FALSE(std::filesystem::exists(dir.File("elsewhere")));
  EXPECT_FALSE(HostLinkBoard::Open(dir.File("missing-dir/b.link"), 2).ok());
  EXPECT_FALSE(HostLinkBoard::Open(dir.File("b.link"), 0).ok());
  // A file from an earlier job's smaller board grows to this one's size.
  dir.Write("small.link", "xy");
  auto grown = HostLinkBoard::Open(dir.File("small.link"), 4);
  ASSERT_TRUE(grown.ok()) << grown.status().ToString();
  (*grown)->Publish(3, 2, 0, 1);
  EXPECT_TRUE((*grown)->SumsPending(2, 0));
}

// An answer to `peer` of step `step`, named `name`, with a payload where `payload`.
RawMessage Answer(const std::string& peer, const std::string& name, int64_t step, bool payload) {
  RawMessage m;
  m.peer = peer;
  m.frames.push_back(Frame::Copy(name));
  if (payload) {
    m.frames.push_back(Frame::Copy(std::string(64 * 1024, 'p')));
    m.rank = SendRank{step, 0};
  }
  return m;
}

// What `client` receives within `ms` while `server` is polled (which retries held answers).
std::optional<std::string> ReceiveWhilePolling(ZmqVan& server, Van& client, int ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < until) {
    EXPECT_TRUE(server.Recv(2).ok());
    auto in = client.Recv(2);
    EXPECT_TRUE(in.ok());
    if (in.ok() && in->has_value()) return std::string((*in)->frames[0].bytes());
  }
  return std::nullopt;
}

TEST(HostLinkBoard, AServersAnswersWaitForItsHostsSums) {
  TempDir dir;
  const std::string path = dir.File("pserver-0.sock.link");
  auto aggregator = OpenBoard(path, 2);
  ASSERT_NE(aggregator, nullptr);
  auto board = OpenBoard(path, 2);
  ASSERT_NE(board, nullptr);
  ZmqVanOptions o;
  o.send_window = 1;
  o.hold_answers = true;
  o.yield_answer = [board](const SendRank& rank) { return board->SumsPending(rank.step, rank.begin); };
  ZmqVan server(o);
  auto bound = server.Bind("tcp://127.0.0.1:0");
  ASSERT_TRUE(bound.ok()) << bound.status().ToString();
  ZmqVan client;
  ASSERT_TRUE(client.Connect("srv", *bound).ok());
  RawMessage hello;
  hello.peer = "srv";
  hello.frames.push_back(Frame::Copy(std::string("hello")));
  ASSERT_TRUE(client.Send(std::move(hello)).ok());
  const std::string peer = RecvOne(server).peer;

  aggregator->Publish(0, 3, 0, 1);  // a sum of step 3 on its way from this host
  ASSERT_TRUE(server.Send(Answer(peer, "params-3", 3, true)).ok());
  EXPECT_EQ(server.held(), 1u) << "an answer of step 3 should wait for the host's sum of step 3";
  ASSERT_TRUE(server.Send(Answer(peer, "ack", 3, false)).ok());
  EXPECT_EQ(ReceiveWhilePolling(server, client, 2000), "ack") << "an answer without a payload never waits";
  ASSERT_TRUE(server.Send(Answer(peer, "params-2", 2, true)).ok());
  EXPECT_EQ(ReceiveWhilePolling(server, client, 2000), "params-2") << "an earlier step's answer goes first";
  EXPECT_EQ(ReceiveWhilePolling(server, client, 200), std::nullopt) << "step 3's answer should still wait";
  EXPECT_EQ(server.held(), 1u);

  aggregator->Publish(0, 4, 0, 1);  // the sum crossed; one of the next step is on its way
  EXPECT_EQ(ReceiveWhilePolling(server, client, 2000), "params-3");
  EXPECT_EQ(server.held(), 0u);
  aggregator->Publish(0, 0, 0, 0);

  // An aggregator that stops making progress holds nothing back for longer than kStaleMs.
  aggregator->Publish(1, 4, 0, 1);
  ASSERT_TRUE(server.Send(Answer(peer, "params-4", 4, true)).ok());
  EXPECT_EQ(server.held(), 1u);
  const auto sent = std::chrono::steady_clock::now();
  EXPECT_EQ(ReceiveWhilePolling(server, client, 5000), "params-4");
  EXPECT_GE(std::chrono::steady_clock::now() - sent, std::chrono::milliseconds(HostLinkBoard::kStaleMs - 50));
}

}  // namespace
}  // namespace psformer::testing
