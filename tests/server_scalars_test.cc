// ServerScalars (launcher/server_scalars.h) over counters set by hand and a clock given by the
// test: a point at each multiple of every_steps with the interval's mean update time, byte rates,
// the deepest queues seen and the refusals so far; a rollback as a text event; a last point at
// the end; and CountingVan (common/transport/counting_van.h), which counts the bytes.
#include "launcher/server_scalars.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "common/proto/tensorboard_event.pb.h"
#include "common/tensorboard/record_file.h"
#include "tests/test_util.h"

namespace psformer {
namespace {

namespace fs = std::filesystem;
using Clock = ServerScalars::Clock;

// Every scalar of the event files in `dir`: tag -> step -> value; and the text events as
// "STEP TEXT".
struct Events {
  std::map<std::string, std::map<int64_t, float>> scalars;
  std::vector<std::string> texts;
};

Events ReadEvents(const std::string& dir) {
  Events out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    auto records = tensorboard::ReadRecords(entry.path().string());
    EXPECT_TRUE(records.ok());
    if (!records.ok()) continue;
    for (const std::string& record : *records) {
      tensorboard::Event event;
      EXPECT_TRUE(event.ParseFromString(record));
      for (const auto& v : event.summary().value()) {
        if (v.has_simple_value()) {
          out.scalars[v.tag()][event.step()] = v.simple_value();
        } else {
          out.texts.push_back(std::to_string(event.step()) + " " + v.tensor().string_val(0));
        }
      }
    }
  }
  return out;
}

TEST(ServerScalars, APointAtEachMultipleOfEveryStepsWithTheIntervalsFigures) {
  testing::TempDir dir;
  ParameterServerStats stats;
  auto traffic = std::make_shared<VanTraffic>();
  ServerScalarsOptions options;
  options.dir = dir.File("server-0");
  options.name = "pserver-0";
  options.every_steps = 10;
  auto opened = ServerScalars::Open(options, &stats, traffic);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  ServerScalars& scalars = **opened;
  const Clock::time_point t0 = Clock::now();

  // Step 9: not a multiple yet, but its queues count towards the point at step 10.
  stats.applied_step = 9;
  stats.pending_pulls = 3;
  stats.pending_pushes = 2;
  ASSERT_TRUE(scalars.Sample(t0 + std::chrono::seconds(1)).ok());
  stats.pending_pulls = 1;
  stats.pending_pushes = 0;
  stats.applied_step = 12;  // step 10 passed between two samples: the point is still at step 10
  stats.updates = 10;
  stats.update_ns = 10 * 4'000'000;  // 4 ms an update
  traffic->bytes_in = 6000;
  traffic->bytes_out = 2000;
  stats.rejected.Count(RejectReason::kWrongJob);
  stats.rejected.Count(RejectReason::kWrongJob);
  ASSERT_TRUE(scalars.Sample(t0 + std::chrono::seconds(2)).ok());
  // Nothing new until step 20; then 10 updates of 1 ms and 1000 bytes in over 4 s.
  stats.applied_step = 19;
  ASSERT_TRUE(scalars.Sample(t0 + std::chrono::seconds(4)).ok());
  stats.applied_step = 20;
  stats.updates = 20;
  stats.update_ns = 10 * 4'000'000 + 10 * 1'000'000;
  traffic->bytes_in = 7000;
  ASSERT_TRUE(scalars.Sample(t0 + std::chrono::seconds(6)).ok());

  // A rollback to step 15 (a checkpoint's update count), then the job ends at step 23.
  stats.applied_step = 16;  // the job has gone on a step since
  stats.updates = 16;
  stats.rollback_step = 15;
  stats.rollbacks = 1;
  ASSERT_TRUE(scalars.Sample(t0 + std::chrono::seconds(7)).ok());
  stats.applied_step = 23;
  stats.updates = 24;
  stats.update_ns += 8 * 2'000'000;
  ASSERT_TRUE(scalars.Finish(t0 + std::chrono::seconds(8)).ok());

  const Events events = ReadEvents(options.dir);
  using Points = std::map<int64_t, float>;
  EXPECT_EQ(events.scalars.at("server/update_ms"), (Points{{10, 4.0f}, {20, 1.0f}, {23, 2.0f}}));
  // The first interval runs from opening (about t0) to t0 + 2 s.
  EXPECT_NEAR(events.scalars.at("server/bytes_in_per_s").at(10), 3000.0, 10.0);
  EXPECT_NEAR(events.scalars.at("server/bytes_out_per_s").at(10), 1000.0, 5.0);
  EXPECT_FLOAT_EQ(events.scalars.at("server/bytes_in_per_s").at(20), 250.0f);
  EXPECT_FLOAT_EQ(events.scalars.at("server/bytes_out_per_s").at(20), 0.0f);
  EXPECT_EQ(events.scalars.at("server/pending_pulls"), (Points{{10, 3.0f}, {20, 1.0f}, {23, 1.0f}}));
  EXPECT_EQ(events.scalars.at("server/pending_pushes"), (Points{{10, 2.0f}, {20, 0.0f}, {23, 0.0f}}));
  EXPECT_EQ(events.scalars.at("refused/wrong_job"), (Points{{10, 2.0f}, {20, 2.0f}, {23, 2.0f}}));
  EXPECT_EQ(events.scalars.count("refused/bad_checksum"), 0u);  // none refused for that
  EXPECT_EQ(events.texts, (std::vector<std::string>{"15 pserver-0 rolled back to the checkpoint of step 15"}));
}

TEST(ServerScalars, NoPointBeforeTheFirstStepAndNoneTwiceAtTheEnd) {
  testing::TempDir dir;
  ParameterServerStats stats;
  ServerScalarsOptions options;
  options.dir = dir.File("tb");
  options.every_steps = 5;
  auto opened = ServerScalars::Open(options, &stats, std::make_shared<VanTraffic>());
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  ASSERT_TRUE((*opened)->Finish().ok());  // step 0: nothing to say
  EXPECT_TRUE(ReadEvents(options.dir).scalars.empty());
  stats.applied_step = 5;
  ASSERT_TRUE((*opened)->Sample().ok());
  ASSERT_TRUE((*opened)->Finish().ok());
  EXPECT_EQ(ReadEvents(options.dir).scalars.at("server/pending_pulls").size(), 1u);
}

TEST(ServerScalars, AnUnwritableDirectoryIsAnError) {
  testing::TempDir dir;
  const std::string file = dir.Write("not-a-directory", "x");
  ParameterServerStats stats;
  ServerScalarsOptions options;
  options.dir = file + "/server-0";
  auto opened = ServerScalars::Open(options, &stats, std::make_shared<VanTraffic>());
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find(file), std::string::npos) << opened.status().message();
}

// A Van that hands back what it sends.
class LoopbackVan : public Van {
 public:
  StatusOr<std::string> Bind(const std::string& endpoint) override { return endpoint; }
  Status Connect(const std::string&, const std::string&) override { return Status::Ok(); }
  Status Send(RawMessage message) override {
    if (message.peer == "nobody") return Status::Unavailable("no peer nobody");
    queued_.push_back(std::move(message));
    return Status::Ok();
  }
  StatusOr<std::optional<RawMessage>> Recv(int) override {
    if (queued_.empty()) return std::optional<RawMessage>();
    RawMessage m = std::move(queued_.front());
    queued_.erase(queued_.begin());
    return std::optional<RawMessage>(std::move(m));
  }

 private:
  std::vector<RawMessage> queued_;
};

TEST(CountingVan, CountsTheFramesBytesOfWhatGoesThrough) {
  auto traffic = std::make_shared<VanTraffic>();
  CountingVan van(std::make_unique<LoopbackVan>(), traffic);
  RawMessage m;
  m.peer = "p";
  m.frames = {Frame::Copy("header"), Frame::Copy(std::string(1000, 'x'))};
  ASSERT_TRUE(van.Send(m).ok());
  m.peer = "nobody";  // refused by the inner Van: not sent, not counted
  EXPECT_FALSE(van.Send(m).ok());
  EXPECT_EQ(traffic->messages_out.load(), 1u);
  EXPECT_EQ(traffic->bytes_out.load(), 1006u);
  EXPECT_EQ(traffic->bytes_in.load(), 0u);
  auto received = van.Recv(0);
  ASSERT_TRUE(received.ok() && received->has_value());
  EXPECT_EQ(traffic->messages_in.load(), 1u);
  EXPECT_EQ(traffic->bytes_in.load(), 1006u);
  received = van.Recv(0);  // nothing there: nothing counted
  ASSERT_TRUE(received.ok());
  EXPECT_FALSE(received->has_value());
  EXPECT_EQ(traffic->messages_in.load(), 1u);
}

}  // namespace
}  // namespace psformer
