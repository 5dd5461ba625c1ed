// The worker's data path (worker/datapath/): its stages on their threads against real servers on
// loopback. The client thread runs commands in order, off the caller's thread, and takes in
// replies between them; a pull whose pieces it took in before anyone waited still reports the
// step's tokens (the undercount of several servers); the outbound stage hands each range to the
// client only once its copy is complete, in start order, while the launching thread goes on.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/block_crcs.h"
#include "common/crc32c.h"
#include "tests/pserver_test_util.h"
#include "tests/test_util.h"
#include "worker/datapath/client_thread.h"
#include "worker/datapath/gradient_outbound.h"
#include "worker/datapath/pull_arrival.h"
#include "worker/datapath/stage_queue.h"
#include "worker/step_computer.h"

namespace psformer {
namespace {

using testing::kJobId;
using testing::MakeClient;
using testing::PsConfig;
using testing::ServerGroup;
using testing::TempDir;

constexpr uint64_t kTotal = 20000;

TEST(StageQueue, PopsInOrderAndEndsOnceClosedAndEmpty) {
  StageQueue<int> q;
  std::thread producer([&] {
    for (int i = 0; i < 100; ++i) q.Push(i);
    q.Close();
  });
  std::vector<int> popped;
  while (std::optional<int> i = q.Pop()) popped.push_back(*i);
  producer.join();
  ASSERT_EQ(popped.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(popped[i], i);
}

// Two servers, and pieces of the gradient smaller than a shard: a pull arrives in several replies.
struct TwoServers {
  TwoServers() : config(PsConfig(1, 2, proto::ClusterConfig::BSP)) {
    config.mutable_cluster()->set_piece_elements(3000);
    pieces = std::make_shared<const PieceTable>(JobPieceTable(config, kTotal, cuts));
    group = std::make_unique<ServerGroup>(config, kTotal, "", false, 2, cuts);
  }
  proto::JobConfig config;
  std::vector<uint64_t> cuts{5000, 12000};
  std::shared_ptr<const PieceTable> pieces;
  std::unique_ptr<ServerGroup> group;
};

// A range is awaited until every element of it has landed, however the pieces are cut and in
// whatever order they come; a failed pull ends every wait with its status.
TEST(PullArrival, AwaitsARangeUntilEveryPieceOfItHasLanded) {
  PullArrival arrival;
  arrival.Reset();
  std::atomic<int> awaited{0};
  std::thread reader([&] {
    EXPECT_TRUE(arrival.Await(10, 40).ok());  // three pieces, landing out of order
    awaited = 1;
    EXPECT_TRUE(arrival.Await(40, 50).ok());
    awaited = 2;
  });
  arrival.Landed(30, 45);
  arrival.Landed(10, 20);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(awaited.load(), 0) << "[20, 30) has not landed";
  arrival.Landed(20, 30);
  for (int i = 0; i < 2000 && awaited.load() < 1; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(awaited.load(), 1);
  arrival.Landed(45, 50);
  reader.join();
  EXPECT_EQ(awaited.load(), 2);
  EXPECT_TRUE(arrival.Await(0, 0).ok());  // nothing to wait for

  // A new pull forgets what landed before; its failure wakes a waiter with the pull's status.
  arrival.Reset();
  std::thread failed([&] {
    const Status s = arrival.Await(0, 10);
    EXPECT_TRUE(s.IsAborted()) << s.ToString();
  });
  arrival.Landed(0, 5);
  arrival.Finish({Status::Aborted("rolling back"), 0, 0});
  failed.join();
  EXPECT_TRUE(arrival.Await(5, 10).IsAborted());
  EXPECT_EQ(arrival.AwaitAll().status.message(), "rolling back");
}

// Pieces left where they came are reported with their frames and kept until the next pull:
// LentIn gives those that hold elements of a range, in model order, and nothing once reset.
TEST(PullArrival, KeepsTheLentPiecesUntilTheNextPull) {
  const auto lent = [](uint64_t model, uint64_t n) {
    std::vector<float> v(n, static_cast<float>(model));
    return std::make_shared<const LentParams>(LentParams{model, sizeof(float), {Frame::Copy(v.data(), n * 4)}});
  };
  PullArrival arrival;
  arrival.Reset();
  arrival.Landed(20, 30, lent(20, 10));
  arrival.Landed(0, 10, lent(0, 10));
  arrival.Landed(10, 20);  // written into params()
  arrival.Landed(30, 40, lent(30, 10));
  const auto models = [&](uint64_t b, uint64_t e) {
    std::vector<uint64_t> out;
    for (const auto& l : arrival.LentIn(b, e)) out.push_back(l->model);
    return out;
  };
  EXPECT_EQ(models(0, 40), (std::vector<uint64_t>{0, 20, 30}));
  EXPECT_EQ(models(5, 25), (std::vector<uint64_t>{0, 20}));
  EXPECT_EQ(models(10, 20), (std::vector<uint64_t>{}));
  EXPECT_EQ(models(29, 31), (std::vector<uint64_t>{20, 30}));
  EXPECT_EQ(models(40, 50), (std::vector<uint64_t>{}));
  EXPECT_TRUE(arrival.Await(0, 40).ok());
  std::weak_ptr<const LentParams> kept = arrival.LentIn(0, 1).front();
  arrival.Reset();
  EXPECT_TRUE(kept.expired()) << "a reset lets go of the last pull's frames";
  EXPECT_TRUE(arrival.LentIn(0, 40).empty());
}

TEST(ClientThread, RunsCommandsInOrderOnItsOwnThread) {
  TwoServers servers;
  ClientThread client(MakeClient(*servers.group, kTotal, 0, proto::FLOAT32, 0, proto::WORKER, servers.pieces));
  std::vector<int> order;
  std::set<std::thread::id> threads;
  for (int i = 0; i < 50; ++i) {
    client.Post([&, i](PsClient&) {
      order.push_back(i);
      threads.insert(std::this_thread::get_id());
    });
  }
  const int shards = client.Call([&](PsClient& c) {
    threads.insert(std::this_thread::get_id());
    return c.shards();
  });
  EXPECT_EQ(shards, 2);
  ASSERT_EQ(order.size(), 50u);  // the Call ran after every command posted before it
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
  ASSERT_EQ(threads.size(), 1u);
  EXPECT_NE(*threads.begin(), std::this_thread::get_id());
}

// The pieces of a pull sent early are taken in by the client thread while nobody waits (as
// during backward); the Wait that follows finds them all answered and must still report the
// tokens and loss the servers said. It reported 0 tokens for such steps, and the coordinator
// undercounted the interval's tokens by the share of steps whose pieces all came early.
TEST(ClientThread, APullTakenInBeforeItsWaitReportsTheStepsTokens) {
  TwoServers servers;
  ClientThread client(MakeClient(*servers.group, kTotal, 0, proto::FLOAT32, 0, proto::WORKER, servers.pieces));
  std::vector<float> params(kTotal), grad = testing::Gradient(0, 1, kTotal);
  ASSERT_TRUE(client
                  .Call([&](PsClient& c) -> Status {
                    PSF_ASSIGN_OR_RETURN(auto pull, c.Pull(0, params.data()));
                    return c.Wait(pull);
                  })
                  .ok());
  PsClient::Ticket push = 0, pull = 0;
  ASSERT_TRUE(client
                  .Call([&](PsClient& c) -> Status {
                    PSF_ASSIGN_OR_RETURN(push, c.BeginPush(1, grad.data(), 37, 81.5));
                    PSF_RETURN_IF_ERROR(c.PushReady(push, 0, kTotal));
                    PSF_ASSIGN_OR_RETURN(pull, c.Pull(1, params.data()));
                    return Status::Ok();
                  })
                  .ok());
  // Nobody waits: the client thread takes the replies in on its own (bounded: 20 s).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!client.Call([&](PsClient& c) { return c.Answered(pull) && c.Answered(push); }) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(client.Call([&](PsClient& c) { return c.Answered(pull); })) << "the pull was not taken in";
  ASSERT_TRUE(client.Call([&](PsClient& c) { return c.Wait(push); }).ok());
  const auto [tokens, loss] = client.Call([&](PsClient& c) {
    EXPECT_TRUE(c.Wait(pull).ok());
    return std::pair(c.last_pull_tokens(), c.last_pull_loss_sum());
  });
  EXPECT_EQ(tokens, 37u);
  EXPECT_EQ(loss, 81.5);
}

// A command queued while the client thread waits for replies ends that wait at once (a pushed
// piece, a Call of the launching thread): here the thread polls a minute at a time, with a pull in
// flight that no server answers yet (BSP holds a pull of a step not applied), so a command that
// waited for the poll to time out would take that minute.
TEST(ClientThread, ACommandQueuedWhileItWaitsForRepliesRunsAtOnce) {
  // Two workers: worker 1 never pushes, so worker 0's pull after its push of step 1 is held.
  const proto::JobConfig config = PsConfig(2, 1, proto::ClusterConfig::BSP);
  ServerGroup group(config, kTotal);
  ClientThread client(MakeClient(group, kTotal, 0), /*reply_poll_ms=*/60000);
  std::vector<float> params(kTotal), grad = testing::Gradient(0, 1, kTotal);
  ASSERT_TRUE(client
                  .Call([&](PsClient& c) -> Status {
                    PSF_ASSIGN_OR_RETURN(auto pull, c.Pull(0, params.data()));
                    PSF_RETURN_IF_ERROR(c.Wait(pull));
                    PSF_ASSIGN_OR_RETURN(auto push, c.Push(1, grad.data(), 10, 1.0));
                    return c.Wait(push);
                  })
                  .ok());
  const auto held = client.Call([&](PsClient& c) { return c.Pull(1, params.data()); });
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  using Clock = std::chrono::steady_clock;
  for (int round = 0; round < 2; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the thread is back in its wait
    const auto start = Clock::now();
    const bool waiting = client.Call([&](PsClient& c) { return c.has_requests() && !c.Answered(*held); });
    EXPECT_TRUE(waiting) << "the pull of step 1 was answered: nothing held the thread in its wait";
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(30)) << "round " << round;
  }
}

// A pull's digest is the CRC-32C of the whole vector as it travelled, combined from its pieces'
// CRCs in model order: ParameterDigest of the parameters for fp32, the CRC of their bf16 bytes
// for bf16, the same with one server as with two and pieces (an emulated GPU keys its gradients
// with it, and its runs must not depend on the server count).
TEST(ClientThread, APullsDigestIsTheCrcOfTheWholeVectorWhateverThePieces) {
  TwoServers two;
  const proto::JobConfig one_config = PsConfig(1, 1, proto::ClusterConfig::BSP);
  ServerGroup one(one_config, kTotal);
  for (const proto::DType dtype : {proto::FLOAT32, proto::BFLOAT16}) {
    std::vector<uint32_t> digests;
    for (ServerGroup* group : {two.group.get(), &one}) {
      ClientThread client(
          MakeClient(*group, kTotal, 0, proto::FLOAT32, 0, proto::WORKER, group == &one ? nullptr : two.pieces));
      std::vector<float> params(kTotal);
      const uint32_t digest = client.Call([&](PsClient& c) {
        auto pull = c.Pull(0, params.data(), dtype);
        EXPECT_TRUE(pull.ok());
        EXPECT_TRUE(c.Wait(*pull).ok());
        return c.last_pull_digest();
      });
      if (dtype == proto::FLOAT32) {
        EXPECT_EQ(digest, Crc32c(0, params.data(), params.size() * sizeof(float)));
      } else {
        std::vector<uint16_t> bf16(kTotal);
        FloatsToBf16(params.data(), kTotal, bf16.data());  // the widened values round back exactly
        EXPECT_EQ(digest, Crc32c(0, bf16.data(), bf16.size() * sizeof(uint16_t)));
      }
      digests.push_back(digest);
    }
    EXPECT_EQ(digests[0], digests[1]) << proto::DType_Name(dtype);
  }
}

// A RangeDownloader whose copies complete when the test says so.
class HeldCopies final : public RangeDownloader {
 public:
  void Start(uint64_t begin, uint64_t end) override {
    std::lock_guard<std::mutex> lock(mutex_);
    started_.push_back({begin, end});
  }
  ElementRange WaitOldest() override {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return released_ > 0; });
    --released_;
    const ElementRange r = started_.front();
    started_.pop_front();
    return r;
  }
  void Release(int copies) {
    std::lock_guard<std::mutex> lock(mutex_);
    released_ += copies;
    cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<ElementRange> started_;
  int released_ = 0;
};

TEST(GradientOutbound, HandsRangesToTheClientOnlyOnceCopiedInStartOrder) {
  TwoServers servers;
  ClientThread client(MakeClient(*servers.group, kTotal, 0, proto::FLOAT32, 0, proto::WORKER, servers.pieces));
  HeldCopies copies;
  std::mutex mutex;
  std::vector<ElementRange> pushed;  // GUARDED_BY(mutex)
  std::set<std::thread::id> threads;
  GradientOutbound outbound(&copies, &client, [&](PsClient&, ElementRange r, const StepStats& s) {
    EXPECT_EQ(s.target_tokens, 9);
    std::lock_guard<std::mutex> lock(mutex);
    pushed.push_back(r);
    threads.insert(std::this_thread::get_id());
  });
  StepStats stats;
  stats.target_tokens = 9;
  // The launching thread starts three copies and goes on at once: none has completed.
  for (const ElementRange r : {ElementRange{12000, 20000}, ElementRange{5000, 12000}, ElementRange{0, 5000}}) {
    copies.Start(r.begin, r.end);
    outbound.Copying(r, stats);
  }
  client.Call([](PsClient&) { return 0; });  // whatever was posted has run
  {
    std::lock_guard<std::mutex> lock(mutex);
    EXPECT_TRUE(pushed.empty());
  }
  copies.Release(1);
  std::thread release_rest([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    copies.Release(2);
  });
  outbound.Drain();  // returns once all three are copied and posted
  release_rest.join();
  client.Call([](PsClient&) { return 0; });
  std::lock_guard<std::mutex> lock(mutex);
  ASSERT_EQ(pushed.size(), 3u);
  EXPECT_TRUE(pushed[0] == (ElementRange{12000, 20000}));
  EXPECT_TRUE(pushed[1] == (ElementRange{5000, 12000}));
  EXPECT_TRUE(pushed[2] == (ElementRange{0, 5000}));
  ASSERT_EQ(threads.size(), 1u);
  EXPECT_NE(*threads.begin(), std::this_thread::get_id());
}

// The client reports each landed piece of a pull to its observer, those landed before it was
// observed at once, each only once its values are in place; together they are the whole vector
// (two servers, several pieces each).
TEST(PsClient, ObservedLandingsCoverThePullOnceItIsIn) {
  TwoServers servers;
  auto client = MakeClient(*servers.group, kTotal, 0, proto::FLOAT32, 0, proto::WORKER, servers.pieces);
  std::vector<float> params(kTotal, 0);
  auto pull = client->Pull(0, params.data());
  ASSERT_TRUE(pull.ok());
  ASSERT_TRUE(client->Progress(200).ok());  // some pieces may land before the observer comes
  std::vector<std::pair<uint64_t, uint64_t>> landed;
  ASSERT_TRUE(client
                  ->ObserveLandings(*pull,
                                    [&](uint64_t b, uint64_t e, const std::shared_ptr<const LentParams>& lent) {
                                      ASSERT_EQ(lent, nullptr) << "a pull without lend lends nothing";
                                      for (uint64_t i = b; i < e; ++i) {
                                        ASSERT_EQ(params[i], testing::InitValue(i)) << i << " reported, not landed";
                                      }
                                      landed.push_back({b, e});
                                    })
                  .ok());
  ASSERT_TRUE(client->Wait(*pull).ok());
  std::sort(landed.begin(), landed.end());
  EXPECT_GT(landed.size(), 2u);
  uint64_t covered = 0;
  for (const auto& [b, e] : landed) {
    EXPECT_EQ(b, covered);
    covered = e;
  }
  EXPECT_EQ(covered, kTotal);
  EXPECT_TRUE(client->ObserveLandings(*pull, [](uint64_t, uint64_t, const std::shared_ptr<const LentParams>&) {})
                  .IsInvalidArgument())
      << "waited for";
}

// A pull that lends leaves every (whole) piece where it came: each is reported with frames that
// hold the servers' values, nothing is written into the parameters, and the frames stay valid
// after the pull's Wait for as long as they are kept. A pull without lend writes every piece.
TEST(PsClient, ALendingPullLeavesEveryPieceWhereItCameAndWritesNothing) {
  TwoServers servers;
  auto client = MakeClient(*servers.group, kTotal, 0, proto::FLOAT32, 0, proto::WORKER, servers.pieces);
  std::vector<float> params(kTotal, 0);
  auto pull = client->Pull(0, params.data(), proto::FLOAT32, /*lend=*/true);
  ASSERT_TRUE(pull.ok());
  std::vector<std::shared_ptr<const LentParams>> kept;
  ASSERT_TRUE(client
                  ->ObserveLandings(*pull,
                                    [&](uint64_t b, uint64_t e, const std::shared_ptr<const LentParams>& lent) {
                                      ASSERT_NE(lent, nullptr) << "[" << b << ", " << e << ") was written";
                                      EXPECT_EQ(lent->model, b);
                                      EXPECT_EQ(lent->size(), e - b);
                                      kept.push_back(lent);
                                    })
                  .ok());
  ASSERT_TRUE(client->Wait(*pull).ok());
  EXPECT_GT(kept.size(), 2u);
  EXPECT_EQ(client->pulled_parts_lent(), kept.size());
  EXPECT_EQ(client->pulled_parts_written(), 0u);
  EXPECT_TRUE(std::all_of(params.begin(), params.end(), [](float x) { return x == 0; })) << "a lent pull wrote";
  uint64_t covered = 0;
  std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) { return a->model < b->model; });
  for (const auto& l : kept) {
    EXPECT_EQ(l->model, covered);
    l->ForEachSpan(0, kTotal, [&](uint64_t at, const uint8_t* bytes, uint64_t count) {
      for (uint64_t k = 0; k < count; ++k) {
        float x;
        std::memcpy(&x, bytes + 4 * k, 4);
        ASSERT_EQ(x, testing::InitValue(at + k)) << at + k;
      }
    });
    covered += l->size();
  }
  EXPECT_EQ(covered, kTotal);
  ASSERT_TRUE(client->Wait(*client->Pull(0, params.data())).ok());
  EXPECT_EQ(client->pulled_parts_written(), kept.size());
  for (uint64_t i = 0; i < kTotal; ++i) ASSERT_EQ(params[i], testing::InitValue(i)) << i;
}

// A client whose device reads registered memory only (PsClient::PinPeerMemory) leaves a piece
// where it came only if it lies in a peer's shared memory that registered: from same-host
// servers (their snapshots lent in place) every piece, unless the registration failed; from
// servers over TCP none. What is not left is written, and the values are the servers' either way.
TEST(PsClient, APinnedOnlyLendingPullLeavesWhatLiesInRegisteredSharedMemory) {
  TempDir dir;
  // Replies in frames large enough for shared memory (ShmVanOptions::threshold_bytes).
  constexpr uint64_t kBig = 200000;
  proto::JobConfig config = PsConfig(1, 2, proto::ClusterConfig::BSP);
  config.mutable_cluster()->set_frame_bytes(1 << 20);
  ServerGroup group(config, kBig, "", false, 2, {}, dir.path().string());
  ServerGroup tcp(config, kBig);
  struct Case {
    const char* name;
    bool shm;
    bool pin_ok;
    bool lends;
  };
  for (const Case& c : {Case{"shm, registered", true, true, true}, Case{"shm, registration failed", true, false, false},
                        Case{"tcp", false, true, false}}) {
    SCOPED_TRACE(c.name);
    ShmVan* van = nullptr;
    std::unique_ptr<PsClient> client =
        c.shm ? testing::MakeShmClient(group, kBig, 0, /*threshold_bytes=*/1024, &van) : MakeClient(tcp, kBig, 0);
    ASSERT_NE(client, nullptr);
    int pins = 0;
    client->PinPeerMemory([&](void* data, size_t) -> std::shared_ptr<void> {
      ++pins;
      return c.pin_ok ? std::shared_ptr<void>(data, [](void*) {}) : nullptr;
    });
    std::vector<float> params(kBig, 0);
    auto pull = client->Pull(0, params.data(), proto::FLOAT32, /*lend=*/true);
    ASSERT_TRUE(pull.ok());
    std::vector<std::shared_ptr<const LentParams>> kept;
    ASSERT_TRUE(client
                    ->ObserveLandings(*pull,
                                      [&](uint64_t, uint64_t, const std::shared_ptr<const LentParams>& lent) {
                                        if (lent) kept.push_back(lent);
                                      })
                    .ok());
    ASSERT_TRUE(client->Wait(*pull).ok());
    EXPECT_EQ(pins > 0, c.shm) << "a peer segment mapped, and registered once";
    if (c.lends) {
      EXPECT_EQ(client->pulled_parts_written(), 0u);
      EXPECT_EQ(client->pulled_parts_lent(), kept.size());
      uint64_t covered = 0;
      for (const auto& l : kept) covered += l->size();
      EXPECT_EQ(covered, kBig);
    } else {
      EXPECT_TRUE(kept.empty());
      EXPECT_GT(client->pulled_parts_written(), 0u);
      for (uint64_t i = 0; i < kBig; ++i) ASSERT_EQ(params[i], testing::InitValue(i)) << i;
    }
  }
}

// A push whose gradient's writer recorded its blocks' CRCs (PsClient::KnowPushCrcs) is sent with
// them, and the servers check them against the bytes: right ones are accepted (the parts whose
// blocks were recorded counted), and a wrong entry gets its part refused as a bad checksum. So
// the record is what travels, and the servers still check every byte.
TEST(PsClient, APushIsSentWithTheCrcsItsWriterRecordedAndTheServersCheckThem) {
  std::vector<float> grad(kTotal);
  for (uint64_t i = 0; i < kTotal; ++i) grad[i] = 0.001f * static_cast<float>(i % 97) - 0.03f;
  const size_t bytes = kTotal * sizeof(float);
  for (const bool wrong : {false, true}) {
    SCOPED_TRACE(wrong ? "one entry wrong" : "entries right");
    TwoServers servers;
    auto client = MakeClient(*servers.group, kTotal, 0, proto::FLOAT32, 0, proto::WORKER, servers.pieces);
    std::vector<BlockCrcs::Entry> entries(BlockCrcs::Blocks(bytes), BlockCrcs::Entry{0, 0});
    BlockCrcs record(grad.data(), bytes, entries.data());
    const auto* base = reinterpret_cast<const uint8_t*>(grad.data());
    for (size_t b = 0; b < entries.size(); ++b) record.Record(b, Crc32c(0, base + b * kCrcBlockBytes, kCrcBlockBytes));
    if (wrong) entries[5].crc ^= 0x10;
    client->KnowPushCrcs(&record);
    auto push = client->Push(1, grad.data(), 100, 1.0);
    ASSERT_TRUE(push.ok()) << push.status().ToString();
    const Status waited = client->Wait(*push);
    EXPECT_GT(client->push_parts_known_crc(), 2u);
    if (wrong) {
      EXPECT_FALSE(waited.ok());
      EXPECT_NE(waited.ToString().find("checksum"), std::string::npos) << waited.ToString();
    } else {
      EXPECT_TRUE(waited.ok()) << waited.ToString();
      std::vector<float> params(kTotal, 0);
      ASSERT_TRUE(client->Wait(*client->Pull(1, params.data())).ok()) << "the push was applied";
    }
  }
}

// A computer that records, each time its gradient is moved (MoveGradientTo), whether the array it
// held before is still allocated: its copies are re-aimed (GradientMoved) before it goes.
class MovingComputer final : public StepComputer {
 public:
  MovingComputer() : StepComputer(1024) {}
  int vocab_size() const override { return 0; }
  StepStats Compute(int64_t, const GradientCopying&) override { return {}; }
  RangeDownloader& gradient_copies() override { return copies_; }
  double last_device_s() override { return 0; }
  bool validates() const override { return false; }
  StatusOr<ValidationResult> Validate(std::vector<std::string>*) override {
    return Status::Unimplemented("nothing to validate");
  }
  const std::vector<std::string>* bleu_references() const override { return nullptr; }
  std::function<void()> on_moved;

 private:
  class NoCopies final : public RangeDownloader {
    void Start(uint64_t, uint64_t) override {}
    ElementRange WaitOldest() override { return {}; }
  };
  Status GradientMoved() override {
    on_moved();
    return Status::Ok();
  }
  NoCopies copies_;
};

// The gradient's old array is freed only once the copies are aimed at the new one: a GPU's
// downloader undoes its registration of the old array then, which must still be mapped.
TEST(StepComputer, MovingTheGradientFreesTheOldArrayOnlyOnceTheCopiesAreAimedAtTheNew) {
  MovingComputer computer;
  bool first_alive = false;
  const auto memory = [](bool* alive) {
    *alive = true;
    return std::shared_ptr<void>(new float[1024](), [alive](void* p) {
      delete[] static_cast<float*>(p);
      *alive = false;
    });
  };
  computer.on_moved = [] {};
  ASSERT_TRUE(computer.MoveGradientTo(memory(&first_alive)).ok());
  EXPECT_TRUE(first_alive);
  bool alive_while_moving = false, second_alive = false;
  computer.on_moved = [&] { alive_while_moving = first_alive; };
  ASSERT_TRUE(computer.MoveGradientTo(memory(&second_alive)).ok());
  EXPECT_TRUE(alive_while_moving) << "the old array was freed before the copies were aimed away from it";
  EXPECT_FALSE(first_alive) << "and freed once they were";
  EXPECT_TRUE(second_alive);
}

}  // namespace
}  // namespace psformer
