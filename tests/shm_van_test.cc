// ShmVan between two Vans of this process over ipc://: large frames arrive through shared memory
// with their bytes intact and their slots reused once released; without space they travel inline;
// a descriptor that cannot be honoured (a name not ours, another job's segment, a slot out of
// range, a size not the slot's, a stale slot, a truncated envelope) makes the message arrive
// refused by ParseMessage with kBadSharedMemory; segments of dead processes are found and removed.
#include "common/transport/shm_van.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <optional>
#include <thread>
#include <filesystem>
#include <numeric>

#include "common/crc32c.h"
#include "common/transport/shm_segment.h"
#include "common/transport/zmq_van.h"
#include "pserver/wire/wire_message.h"
#include "tests/test_util.h"
#include "tests/van_test_util.h"

namespace psformer {
namespace {

constexpr uint64_t kJob = 0x5eed0000c0ffee01;

bool SegmentExists(const std::string& name) { return std::filesystem::exists("/dev/shm" + name); }

using testing::RecvOne;

std::string Pattern(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed * 7) >> 3);
  return s;
}

RawMessage Message(const std::string& peer, const std::vector<std::string>& frames) {
  RawMessage m;
  m.peer = peer;
  for (const std::string& f : frames) m.frames.push_back(Frame::Copy(f));
  return m;
}

// A server ShmVan bound on ipc:// and a client ShmVan connected to it as "srv".
struct Pair {
  testing::TempDir dir;
  ShmVan* server = nullptr;
  ShmVan* client = nullptr;
  std::unique_ptr<ShmVan> server_van, client_van;

  explicit Pair(ShmVanOptions client_options = {}, ShmVanOptions server_options = {}) {
    server_options.job_id = client_options.job_id = kJob;
    server_options.ipc_endpoint = "ipc://" + dir.File("ipc/server.sock");
    server_van = std::make_unique<ShmVan>(std::make_unique<ZmqVan>(), server_options);
    client_van = std::make_unique<ShmVan>(std::make_unique<ZmqVan>(), client_options);
    server = server_van.get();
    client = client_van.get();
    EXPECT_TRUE(server->Bind("tcp://127.0.0.1:0").ok());
    EXPECT_TRUE(client->Connect("srv", server_options.ipc_endpoint).ok());
  }
};

TEST(ShmVan, LargeFramesTravelThroughSharedMemoryBothWays) {
  Pair p;
  const std::string big = Pattern(3 << 20, 1), small = "header";
  ASSERT_TRUE(p.client->Send(Message("srv", {small, big, "tail"})).ok());
  RawMessage got = RecvOne(*p.server);
  EXPECT_TRUE(got.transport_error.empty()) << got.transport_error;
  ASSERT_EQ(got.frames.size(), 3u);
  EXPECT_EQ(got.frames[0].bytes(), small);
  EXPECT_EQ(got.frames[1].bytes(), big);
  EXPECT_EQ(got.frames[2].bytes(), "tail");
  EXPECT_EQ(p.client->stats().frames_sent_shm, 1u);
  EXPECT_EQ(p.server->stats().frames_received_shm, 1u);
  // The ipc directory keeps other users off the socket.
  EXPECT_EQ(std::filesystem::status(p.dir.File("ipc")).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_all);

  // The server learned that this peer shares its host: the reply comes through its own segment.
  const std::string reply = Pattern(2 << 20, 2);
  ASSERT_TRUE(p.server->Send(Message(got.peer, {small, reply})).ok());
  RawMessage back = RecvOne(*p.client);
  ASSERT_EQ(back.frames.size(), 2u);
  EXPECT_EQ(back.frames[1].bytes(), reply);
  EXPECT_EQ(p.server->stats().frames_sent_shm, 1u);
  EXPECT_EQ(p.client->stats().frames_received_shm, 1u);
}

// A receiver asked to register its peers' memory (a GPU worker) registers each peer segment
// once, as it maps it (one mapped before the ask at once): a frame received through shared
// memory then lies in pinned memory, an inline one or any other address does not; a pin that
// fails (null) leaves its segment unpinned. Each registration is undone when its mapping goes,
// once the van and every frame viewing it are gone.
TEST(ShmVan, PeerSegmentsAreRegisteredOnceAsTheyAreMapped) {
  int pins = 0, unpins = 0;
  bool fail = false;
  std::vector<std::pair<const void*, size_t>> pinned;
  {
    Pair p;
    const std::string big = Pattern(3 << 20, 3);
    ASSERT_TRUE(p.client->Send(Message("srv", {"h", big})).ok());
    RawMessage first = RecvOne(*p.server);  // maps the client's first segment, unasked
    ASSERT_EQ(first.frames.size(), 2u);
    EXPECT_FALSE(p.server->PeerMemoryPinned(first.frames[1].data(), first.frames[1].size()));
    p.server->PinPeerMemory([&](void* data, size_t bytes) -> std::shared_ptr<void> {
      ++pins;
      if (fail) return nullptr;
      pinned.push_back({data, bytes});
      return std::shared_ptr<void>(data, [&](void*) { ++unpins; });
    });
    EXPECT_EQ(pins, 1) << "the segment mapped already";
    EXPECT_TRUE(p.server->PeerMemoryPinned(first.frames[1].data(), first.frames[1].size()));
    EXPECT_FALSE(p.server->PeerMemoryPinned(first.frames[0].data(), first.frames[0].size())) << "an inline frame";
    EXPECT_FALSE(p.server->PeerMemoryPinned(big.data(), big.size())) << "the heap";
    ASSERT_TRUE(p.client->Send(Message("srv", {"h", big})).ok());
    RawMessage second = RecvOne(*p.server);  // the same segment: no new registration
    EXPECT_EQ(pins, 1);
    EXPECT_TRUE(p.server->PeerMemoryPinned(second.frames[1].data(), second.frames[1].size()));
    // A frame too large for its first segment makes the client a second one, pinned as mapped.
    const std::string huge = Pattern(40 << 20, 4);
    fail = true;
    ASSERT_TRUE(p.client->Send(Message("srv", {"h", huge})).ok());
    RawMessage third = RecvOne(*p.server);
    ASSERT_EQ(third.frames.size(), 2u);
    EXPECT_EQ(third.frames[1].bytes(), huge);
    EXPECT_EQ(pins, 2);
    EXPECT_FALSE(p.server->PeerMemoryPinned(third.frames[1].data(), third.frames[1].size())) << "its pin failed";
    EXPECT_EQ(unpins, 0);
  }
  EXPECT_EQ(unpins, 1) << "the one registration made, undone once its mapping went";
}

// A sender that leaves the payload's CRC-32C to the Van gets the CRC of every payload frame, in
// order, those copied into a slot (checksummed in the copy) and those inline alike, whether the
// copies run on one thread or are split over several; a plain ZeroMQ Van, never asked, still
// seals in a pass of its own.
TEST(ShmVan, ChecksumsThePayloadInTheCopyForASenderThatLeavesItToTheVan) {
  const std::vector<std::string> payload = {Pattern(3 << 20, 3), "inline", Pattern((1 << 20) + 5, 4)};
  uint32_t expected = 0;
  for (const std::string& f : payload) expected = Crc32c(expected, f.data(), f.size());
  const auto seal = [](uint32_t crc) { return Frame::Copy("crc " + std::to_string(crc)); };
  for (int threads : {1, 3}) {
    ShmVanOptions o;
    o.copy_threads = threads;
    Pair p(o);
    EXPECT_TRUE(p.client->ChecksumsPayloadTo("srv"));
    EXPECT_FALSE(p.client->ChecksumsPayloadTo("elsewhere"));
    RawMessage sealed = Message("srv", {"placeholder", payload[0], payload[1], payload[2]});
    sealed.seal_header = seal;
    ASSERT_TRUE(p.client->Send(std::move(sealed)).ok());
    RawMessage got = RecvOne(*p.server);
    ASSERT_EQ(got.frames.size(), 4u);
    EXPECT_EQ(got.frames[0].bytes(), "crc " + std::to_string(expected)) << threads << " thread(s)";
    for (size_t i = 0; i < payload.size(); ++i) EXPECT_EQ(got.frames[i + 1].bytes(), payload[i]) << i;
    EXPECT_EQ(p.client->stats().frames_sent_shm, 2u);
  }

  Pair p;
  ZmqVan plain;
  ASSERT_TRUE(plain.Connect("srv", "ipc://" + p.dir.File("ipc/server.sock")).ok());
  RawMessage unsealed = Message("srv", {"placeholder", payload[1]});
  unsealed.seal_header = seal;
  ASSERT_TRUE(plain.Send(std::move(unsealed)).ok());
  RawMessage plain_got = RecvOne(*p.server);
  ASSERT_EQ(plain_got.frames.size(), 2u);
  EXPECT_EQ(plain_got.frames[0].bytes(), "crc " + std::to_string(Crc32c(0, payload[1].data(), payload[1].size())));
}

TEST(ShmVan, ReleasedSlotsAreReusedAndHeldOnesAreNot) {
  ShmVanOptions o;
  o.segment_bytes = 4 << 20;
  o.max_bytes = 4 << 20;
  Pair p(o);
  const std::string frame = Pattern(1 << 20, 3);
  // Twenty frames through a segment that holds four: each is dropped before the next is sent.
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(p.client->Send(Message("srv", {"h", frame})).ok());
    RawMessage got = RecvOne(*p.server);
    ASSERT_EQ(got.frames.size(), 2u);
    ASSERT_EQ(got.frames[1].bytes(), frame);
  }
  EXPECT_EQ(p.client->stats().segments_created, 1u);
  EXPECT_EQ(p.client->stats().frames_sent_shm, 20u);
  EXPECT_EQ(p.client->stats().frames_sent_inline, 0u);
  // Held frames keep their slots: the fifth of these finds no space and travels inline, intact.
  std::vector<RawMessage> held;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(p.client->Send(Message("srv", {"h", Pattern(1 << 20, 10 + i)})).ok());
    held.push_back(RecvOne(*p.server));
  }
  EXPECT_EQ(p.client->stats().frames_sent_inline, 1u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(held[i].frames[1].bytes(), Pattern(1 << 20, 10 + i)) << i;
}

// Segments grow with the need: the first is small (a process that copies a few MB a step does
// not populate 256 MB in its first step), each later one as large as all before it, up to
// segment_bytes, and always large enough for the frame that asked.
TEST(ShmVan, SegmentsStartSmallAndDoubleUpToTheirLargestSize) {
  ShmVanOptions o;
  o.first_segment_bytes = 1 << 20;
  o.segment_bytes = 4 << 20;
  o.max_bytes = 64 << 20;
  Pair p(o);
  std::vector<RawMessage> held;  // every frame held, so each needs room of its own
  const auto send_held = [&](size_t bytes) {
    ASSERT_TRUE(p.client->Send(Message("srv", {"h", Pattern(bytes, static_cast<int>(held.size()))})).ok());
    held.push_back(RecvOne(*p.server));
  };
  const uint64_t mib = 1 << 20;
  send_held(mib);  // the first segment: 1 MiB
  EXPECT_EQ(p.client->stats().segment_bytes_made, 1 * mib);
  send_held(mib);  // full: another as large as all before it (1 MiB)
  EXPECT_EQ(p.client->stats().segment_bytes_made, 2 * mib);
  send_held(mib);  // then 2 MiB, which holds this frame and the next
  send_held(mib);
  EXPECT_EQ(p.client->stats().segment_bytes_made, 4 * mib);
  EXPECT_EQ(p.client->stats().segments_created, 3u);
  send_held(mib);  // 4 MiB would be 4 MiB anyway; the largest from now on
  EXPECT_EQ(p.client->stats().segment_bytes_made, 8 * mib);
  for (int i = 0; i < 4; ++i) send_held(mib);  // three fill it, the fourth makes another 4 MiB
  EXPECT_EQ(p.client->stats().segment_bytes_made, 12 * mib);
  send_held(6 * mib);  // a frame larger than any segment gets one of its own size
  EXPECT_EQ(p.client->stats().segment_bytes_made, 18 * mib);
  EXPECT_EQ(p.client->stats().frames_sent_inline, 0u);
  for (size_t i = 0; i < held.size(); ++i) {
    ASSERT_EQ(held[i].frames.size(), 2u);
    EXPECT_EQ(held[i].frames[1].bytes(), Pattern(i + 1 < held.size() ? mib : 6 * mib, static_cast<int>(i))) << i;
  }
}

// Memory from AllocatePayload is lent, not copied: a server sends the same bytes to a same-host
// client twice (a snapshot pulled twice) and the client reads them in place each time; the Van
// holds each lent frame, and so the memory's owner, until its receiver lets it go.
TEST(ShmVan, PayloadMemoryIsLentInPlaceAndHeldUntilReleased) {
  Pair p;
  ASSERT_TRUE(p.client->Send(Message("srv", {"hello"})).ok());
  const std::string peer = RecvOne(*p.server).peer;  // the server now knows the client shares its host
  const size_t n = 3 << 20;
  std::shared_ptr<void> memory = p.server->AllocatePayload(n);
  EXPECT_EQ(p.server->stats().payload_segments, 1u);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(memory.get()) % 64, 0u);
  const std::string pattern = Pattern(n, 5);
  std::memcpy(memory.get(), pattern.data(), n);
  auto* bytes = static_cast<uint8_t*>(memory.get());
  std::weak_ptr<void> watch = memory;
  std::vector<Frame> first_half, whole;
  AppendViewFrames(bytes, n / 2, 1 << 20, 1, memory, &first_half);
  AppendViewFrames(bytes, n, 1 << 20, 1, memory, &whole);
  memory.reset();  // the frames keep it

  RawMessage a = Message(peer, {"h"});
  for (Frame& f : first_half) a.frames.push_back(std::move(f));
  ASSERT_TRUE(p.server->Send(std::move(a)).ok());
  RawMessage got_a = RecvOne(*p.client);
  RawMessage b = Message(peer, {"h"});
  for (Frame& f : whole) b.frames.push_back(std::move(f));
  ASSERT_TRUE(p.server->Send(std::move(b)).ok());
  RawMessage got_b = RecvOne(*p.client);
  EXPECT_EQ(p.server->stats().frames_lent, 5u);      // 2 + 3 frames of 1 MiB and less
  EXPECT_EQ(p.server->stats().frames_sent_shm, 0u);  // nothing copied
  EXPECT_EQ(p.server->stats().segments_created, 0u);
  EXPECT_EQ(p.client->stats().frames_received_shm, 5u);
  std::string read_a, read_b;
  for (size_t i = 1; i < got_a.frames.size(); ++i) read_a += got_a.frames[i].bytes();
  for (size_t i = 1; i < got_b.frames.size(); ++i) read_b += got_b.frames[i].bytes();
  EXPECT_EQ(read_a, pattern.substr(0, n / 2));
  EXPECT_EQ(read_b, pattern);
  // Lent frames are held while their receivers read them, and let go once released.
  ASSERT_TRUE(p.server->Send(Message(peer, {"tick"})).ok());
  EXPECT_EQ(p.server->frames_on_loan(), 5u);
  EXPECT_FALSE(watch.expired());
  got_a = RawMessage();
  got_b = RawMessage();
  ASSERT_TRUE(p.server->Send(Message(peer, {"tick"})).ok());
  EXPECT_EQ(p.server->frames_on_loan(), 0u);
  EXPECT_TRUE(watch.expired());  // the memory, and its segment, are gone with the last holder
}

// A lent slot nobody claims (its receiver died, or the message was lost) is taken back after
// lend_patience_ms, which lets go of the bytes' owner; a descriptor for it that arrives later is
// refused as stale, so the bytes are never read after they were let go.
TEST(ShmVan, AnUnclaimedLoanIsTakenBackAndItsLateDescriptorRefused) {
  ShmVanOptions server_options;
  server_options.lend_patience_ms = 0;
  Pair p({}, server_options);
  ASSERT_TRUE(p.client->Send(Message("srv", {"hello"})).ok());
  const std::string peer = RecvOne(*p.server).peer;
  const size_t n = 1 << 20;
  std::shared_ptr<void> memory = p.server->AllocatePayload(n);
  std::memset(memory.get(), 7, n);
  // The frame's owner stands for the snapshot: the Van holds it while the bytes are on loan.
  auto owner = std::make_shared<int>(0);
  std::weak_ptr<int> watch = owner;
  RawMessage m = Message(peer, {"h"});
  m.frames.push_back(Frame::View(static_cast<const uint8_t*>(memory.get()), n, std::move(owner)));
  ASSERT_TRUE(p.server->Send(std::move(m)).ok());
  EXPECT_EQ(p.server->stats().frames_lent, 1u);
  EXPECT_FALSE(watch.expired());
  // The client has not read it yet; the server's next send takes the loan back.
  ASSERT_TRUE(p.server->Send(Message(peer, {"tick"})).ok());
  EXPECT_EQ(p.server->stats().lent_taken_back, 1u);
  EXPECT_EQ(p.server->frames_on_loan(), 0u);
  EXPECT_TRUE(watch.expired());
  RawMessage late = RecvOne(*p.client);
  EXPECT_NE(late.transport_error.find("stale"), std::string::npos) << late.transport_error;
  WireMessage parsed;
  const Refusal v = ParseMessage(std::move(late), &parsed);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->reason, RejectReason::kBadSharedMemory);
}

// A sender that knows no receiver will come for its unclaimed loans (every peer answered a later
// message) takes them back at once, whatever lend_patience_ms says; a claimed loan stays lent until
// released, and a sender that only receives (a worker waiting for its gradient's memory back)
// lets go of it in Recv.
TEST(ShmVan, UnclaimedLoansAreTakenBackAtOnceAndReleasedOnesLetGoInRecv) {
  Pair p;
  ASSERT_TRUE(p.client->Send(Message("srv", {"hello"})).ok());
  const std::string peer = RecvOne(*p.server).peer;
  const size_t n = 1 << 20;
  std::shared_ptr<void> memory = p.server->AllocatePayload(n);
  std::memset(memory.get(), 3, n);
  const auto send_lent = [&](std::weak_ptr<int>* watch) {
    auto owner = std::make_shared<int>(0);
    *watch = owner;
    RawMessage m = Message(peer, {"h"});
    m.frames.push_back(Frame::View(static_cast<const uint8_t*>(memory.get()), n, std::move(owner)));
    ASSERT_TRUE(p.server->Send(std::move(m)).ok());
  };
  std::weak_ptr<int> lost, read;
  send_lent(&lost);
  p.server->TakeBackUnclaimed();  // patience is 30 s: only the call takes it back
  EXPECT_TRUE(lost.expired());
  EXPECT_EQ(p.server->stats().lent_taken_back, 1u);
  const RawMessage late = RecvOne(*p.client);
  EXPECT_NE(late.transport_error.find("stale"), std::string::npos) << late.transport_error;

  send_lent(&read);
  RawMessage got = RecvOne(*p.client);  // claimed
  ASSERT_TRUE(got.transport_error.empty()) << got.transport_error;
  p.server->TakeBackUnclaimed();
  EXPECT_FALSE(read.expired());  // a live receiver is reading it
  EXPECT_EQ(p.server->frames_on_loan(), 1u);
  got = RawMessage();  // released
  ASSERT_TRUE(p.server->Recv(0).ok());
  EXPECT_EQ(p.server->frames_on_loan(), 0u);
  EXPECT_TRUE(read.expired());
  EXPECT_EQ(p.server->stats().lent_taken_back, 1u);
}

// Runs `child` in a forked process whose ShmVan has a KILL_IN_SHM armed as a worker's (halfway
// through a copy), connected to `server_endpoint` as "srv"; returns how the child ended.
int ChildWithAWorkersShmFault(const std::string& server_endpoint,
                              const std::function<void(ShmVan&)>& child) {
  const pid_t pid = fork();
  if (pid == 0) {
    ShmVanOptions o;
    o.job_id = kJob;
    o.faults = std::make_shared<ShmFaultSwitch>();
    o.faults->Arm(ShmFault{ShmFault::kHalfwayThroughCopy, 15});
    ShmVan van(std::make_unique<ZmqVan>(), o);
    if (!van.Connect("srv", server_endpoint).ok()) _exit(3);
    child(van);
    _exit(4);  // the fault did not strike
  }
  int status = 0;
  waitpid(pid, &status, 0);
  RemoveShmSegments(kJob, pid);  // what the supervisor does for a killed role
  return status;
}

// A worker's KILL_IN_SHM strikes in the copy of a payload into its segment, halfway: no
// descriptor leaves, so no receiver sees a half-written payload.
TEST(ShmVan, AWorkerKilledHalfwayThroughACopySendsNothing) {
  Pair p;
  const int status = ChildWithAWorkersShmFault("ipc://" + p.dir.File("ipc/server.sock"), [](ShmVan& van) {
    (void)van.Send(Message("srv", {"h", Pattern(1 << 20, 9)}));
  });
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  auto r = p.server->Recv(300);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_value());
}

// Where a worker's payload lies in memory it lends in place (its gradient), there is no copy to
// strike in: it dies once a server has claimed the frame, and the server still reads the whole
// payload, intact, from its mapping after the worker is gone and its segment removed.
TEST(ShmVan, AWorkerKilledWhileAServerReadsItsLentPayloadLeavesItReadable) {
  Pair p;
  const size_t n = 1 << 20;
  const std::string pattern = Pattern(n, 11);
  std::optional<RawMessage> got;
  std::thread reader([&] { got = RecvOne(*p.server); });  // the server, claiming what arrives
  const int status = ChildWithAWorkersShmFault("ipc://" + p.dir.File("ipc/server.sock"), [&](ShmVan& van) {
    std::shared_ptr<void> memory = van.AllocatePayload(n);
    std::memcpy(memory.get(), pattern.data(), n);
    RawMessage m = Message("srv", {"h"});
    m.frames.push_back(Frame::View(static_cast<const uint8_t*>(memory.get()), n, memory));
    (void)van.Send(std::move(m));
  });
  reader.join();
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  ASSERT_TRUE(got.has_value());
  ASSERT_TRUE(got->transport_error.empty()) << got->transport_error;
  ASSERT_EQ(got->frames.size(), 2u);
  EXPECT_EQ(got->frames[1].bytes(), pattern);
}

TEST(ShmVan, WithoutSharedMemoryFramesTravelInline) {
  ShmVanOptions no_space;
  no_space.max_bytes = 0;  // as a /dev/shm too small for one segment
  ShmVanOptions cannot_create;
  cannot_create.slots_per_segment = 0;  // Create fails
  for (const ShmVanOptions& o : {no_space, cannot_create}) {
    Pair p(o);
    const std::string big = Pattern(1 << 20, 4);
    ASSERT_TRUE(p.client->Send(Message("srv", {"h", big})).ok());
    RawMessage got = RecvOne(*p.server);
    EXPECT_TRUE(got.transport_error.empty());
    ASSERT_EQ(got.frames.size(), 2u);
    EXPECT_EQ(got.frames[1].bytes(), big);
    EXPECT_EQ(p.client->stats().frames_sent_inline, 1u);
    EXPECT_EQ(p.client->stats().segments_created, 0u);
  }
}

TEST(ShmVan, OwnSegmentsAreUnlinkedWhenTheVanGoes) {
  std::string name;
  {
    Pair p;
    ASSERT_TRUE(p.client->Send(Message("srv", {"h", Pattern(1 << 20, 5)})).ok());
    RawMessage got = RecvOne(*p.server);
    for (uint32_t n = 0; n < 100 && name.empty(); ++n) {
      const std::string candidate = ShmSegmentName(kJob, getpid(), ShmProcessNonce(), n);
      if (SegmentExists(candidate)) name = candidate;
    }
    EXPECT_FALSE(name.empty());
  }
  EXPECT_FALSE(SegmentExists(name));
}

// A plain ZmqVan that forges envelopes, and the ShmVan receiving them.
struct Forger {
  testing::TempDir dir;
  ShmVan receiver{std::make_unique<ZmqVan>(), [] {
                    ShmVanOptions o;
                    o.job_id = kJob;
                    return o;
                  }()};
  ZmqVan sender;
  Forger() {
    auto bound = receiver.Bind("ipc://" + dir.File("r.sock"));
    EXPECT_TRUE(bound.ok());
    EXPECT_TRUE(sender.Connect("r", *bound).ok());
  }
  // Sends [envelope, header, placeholder] and returns ParseMessage's verdict on what arrives.
  Refusal Deliver(const ShmDescriptor& d) {
    RawMessage m;
    m.peer = "r";
    m.frames.push_back(EncodeShmEnvelope({d}));
    proto::Header h;
    h.set_job_id(kJob);
    m.frames.push_back(Frame::Own(h.SerializeAsString()));
    m.frames.push_back(Frame());
    EXPECT_TRUE(sender.Send(std::move(m)).ok());
    WireMessage msg;
    return ParseMessage(RecvOne(receiver), &msg);
  }
};

void ExpectRefused(const Refusal& v, const std::string& why) {
  ASSERT_TRUE(v.has_value()) << "accepted; expected: " << why;
  EXPECT_EQ(v->reason, RejectReason::kBadSharedMemory) << v->ToString();
  EXPECT_NE(v->detail.find(why), std::string::npos) << v->detail;
}

TEST(ShmVan, BadDescriptorsAreRefusedWithTheirReason) {
  Forger f;
  auto seg = ShmSegment::Create(kJob, 77, 1 << 20, 8);
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  auto slot = (*seg)->Reserve(100);
  ASSERT_TRUE(slot.has_value());
  std::memset((*seg)->SlotData(*slot), 'x', 100);
  (*seg)->Publish(*slot);
  const ShmDescriptor good{1, slot->index, slot->generation, slot->offset, 100, (*seg)->name()};

  // A slot whose owner is still copying into it (or was killed doing so) cannot be claimed.
  auto writing = (*seg)->Reserve(100);
  ASSERT_TRUE(writing.has_value());
  ExpectRefused(f.Deliver({1, writing->index, writing->generation, writing->offset, 100, (*seg)->name()}),
                "holds no payload of generation");

  ShmDescriptor d = good;
  d.segment = "/etc-passwd";
  ExpectRefused(f.Deliver(d), "is not a psformer segment");
  d.segment = ShmSegmentName(kJob + 1, getpid(), ShmProcessNonce(), 77);
  ExpectRefused(f.Deliver(d), "belongs to another job");
  d = good;
  d.slot = 5000;
  ExpectRefused(f.Deliver(d), "slot 5000 is out of range");
  d = good;
  d.generation = good.generation + 1;
  ExpectRefused(f.Deliver(d), "stale, repeated or forged");
  d = good;
  d.frame = 7;
  ExpectRefused(f.Deliver(d), "names frame 7");

  // The good descriptor is honoured once; the same again is stale.
  {
    WireMessage msg;
    RawMessage m;
    m.peer = "r";
    m.frames.push_back(EncodeShmEnvelope({good}));
    proto::Header h;
    m.frames.push_back(Frame::Own(h.SerializeAsString()));
    m.frames.push_back(Frame());
    ASSERT_TRUE(f.sender.Send(std::move(m)).ok());
    RawMessage got = RecvOne(f.receiver);
    EXPECT_TRUE(got.transport_error.empty()) << got.transport_error;
    ASSERT_EQ(got.frames.size(), 2u);
    EXPECT_EQ(got.frames[1].bytes(), std::string(100, 'x'));
    EXPECT_FALSE(ParseMessage(std::move(got), &msg).has_value());
    ExpectRefused(f.Deliver(good), "stale, repeated or forged");
  }  // released: the slot is free and can be reserved again

  auto again = (*seg)->Reserve(200);
  ASSERT_TRUE(again.has_value());
  (*seg)->Publish(*again);
  d = ShmDescriptor{1, again->index, again->generation, again->offset, 300, (*seg)->name()};
  ExpectRefused(f.Deliver(d), "says 300 bytes");

  RawMessage truncated;
  truncated.peer = "r";
  truncated.frames.push_back(Frame::Copy(EncodeShmEnvelope({good}).bytes().substr(0, 30)));
  truncated.frames.push_back(Frame::Copy("h"));
  ASSERT_TRUE(f.sender.Send(std::move(truncated)).ok());
  WireMessage msg;
  ExpectRefused(ParseMessage(RecvOne(f.receiver), &msg), "does not hold 1 descriptor");
}

TEST(ShmVan, NoWireHeaderLooksLikeAnEnvelope) {
  proto::Header h;
  h.set_job_id(kJob);
  h.set_type(proto::PUSH);
  const RawMessage raw = EncodeMessage("p", h, {});
  EXPECT_FALSE(IsShmEnvelope(raw.frames[0]));
  EXPECT_TRUE(IsShmEnvelope(EncodeShmEnvelope({})));
}

TEST(ShmSegment, NamesParseBackAndOthersDoNot) {
  auto parts = ParseShmSegmentName(ShmSegmentName(kJob, 4321, 0x9e3779b97f4a7c15, 9));
  ASSERT_TRUE(parts.has_value());
  EXPECT_EQ(parts->job_id, kJob);
  EXPECT_EQ(parts->pid, 4321);
  EXPECT_EQ(parts->nonce, 0x9e3779b97f4a7c15u);
  EXPECT_EQ(parts->n, 9u);
  // The longest name a segment can have (a 7-digit pid, the largest n) fits the envelope's field.
  EXPECT_LE(ShmSegmentName(~0ull, 4194304, ~0ull, ~0u).size(), 63u);
  for (const char* bad :
       {"/psformer-", "/psformer-xyz-1-2", "/other-5eed0000c0ffee01-1-2", "/psformer-5eed0000c0ffee01-1-2/x",
        "/psformer-5eed0000c0ffee01--2", "/psformer-5eed0000c0ffee01-1-",
        // the names before the nonce: a segment left by an older psformer is not ours
        "/psformer-5eed0000c0ffee01-1-2", "/psformer-5eed0000c0ffee01-1-9e3779b97f4a7c1-2",
        "/psformer-5eed0000c0ffee01-1-9e3779b97f4a7c15-", "/psformer-5eed0000c0ffee01-1-9e3779b97f4a7c15x2"}) {
    EXPECT_FALSE(ParseShmSegmentName(bad).has_value()) << bad;
  }
}

// A child process (in a new PID namespace of its own when `own_pid_namespace`, where it is pid 1)
// that makes segment `n` and dies without unlinking it, as a killed role would; its name, or ""
// when the child failed (with `own_pid_namespace`: when this process may not make namespaces).
std::string SegmentOfADeadChild(uint32_t n, bool own_pid_namespace = false) {
  int fds[2];
  if (pipe(fds) != 0) return "";
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    // unshare(CLONE_NEWPID) puts the children made after it in the new namespace, not the caller.
    if (own_pid_namespace && (unshare(CLONE_NEWPID) != 0 || fork() != 0)) {
      int status = 0;
      wait(&status);
      _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
    }
    auto seg = ShmSegment::Create(kJob, n, 1 << 16, 4);
    if (!seg.ok()) _exit(1);
    const std::string name = (*seg)->name();
    (void)seg->release();  // never unlinked
    _exit(write(fds[1], name.data(), name.size()) == static_cast<ssize_t>(name.size()) ? 0 : 1);
  }
  close(fds[1]);
  char name[128] = {};
  const ssize_t got = child > 0 ? read(fds[0], name, sizeof(name) - 1) : -1;
  close(fds[0]);
  int status = 0;
  if (child > 0) waitpid(child, &status, 0);
  if (got <= 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return "";
  return std::string(name, got);
}

TEST(ShmSegment, SegmentsOfDeadProcessesAreRemoved) {
  const std::string name = SegmentOfADeadChild(0);
  ASSERT_FALSE(name.empty());
  ASSERT_TRUE(SegmentExists(name));
  auto mine = ShmSegment::Create(kJob, 1, 1 << 16, 4);  // alive: must stay
  ASSERT_TRUE(mine.ok());
  EXPECT_GE(RemoveOrphanShmSegments(), 1);
  EXPECT_FALSE(SegmentExists(name));
  EXPECT_TRUE(SegmentExists((*mine)->name()));
  EXPECT_EQ(RemoveShmSegments(kJob + 1, std::nullopt), 0);
  EXPECT_EQ(RemoveShmSegments(kJob, getpid()), 1);
  EXPECT_FALSE(SegmentExists((*mine)->name()));
}

// What a supervisor removes when its roles are gone (RemoveJobSegments): its job's segments of
// dead processes only; a live process's (another rank's role on the same host) and another
// job's stay.
TEST(ShmSegment, AJobsOrphansAreRemovedAndItsLiveSegmentsKept) {
  const std::string name = SegmentOfADeadChild(0);
  ASSERT_FALSE(name.empty());
  auto live = ShmSegment::Create(kJob, 1, 1 << 16, 4);
  ASSERT_TRUE(live.ok());
  EXPECT_EQ(RemoveOrphanShmSegments(kJob + 1), 0);
  EXPECT_TRUE(SegmentExists(name)) << "another job's orphan is not this job's to remove";
  EXPECT_EQ(RemoveOrphanShmSegments(kJob), 1);
  EXPECT_FALSE(SegmentExists(name));
  EXPECT_TRUE(SegmentExists((*live)->name())) << "a live process's segment must stay";
  EXPECT_EQ(RemoveShmSegments(kJob, getpid()), 1);
}

// The kernel reuses pids: a restarted role may get its predecessor's. Two processes that are each
// pid 1 of a PID namespace of their own make the same segment number one after the other (the
// second while the first one's segment still exists, as receivers' mappings keep it): the names
// differ, and neither is refused.
TEST(ShmSegment, AProcessWithItsPredecessorsPidMakesOtherNames) {
  const std::string first = SegmentOfADeadChild(20, /*own_pid_namespace=*/true);
  if (first.empty()) GTEST_SKIP() << "cannot make a PID namespace here (unshare(CLONE_NEWPID) needs CAP_SYS_ADMIN)";
  const std::string second = SegmentOfADeadChild(20, /*own_pid_namespace=*/true);
  ASSERT_FALSE(second.empty());
  EXPECT_EQ(ParseShmSegmentName(first)->pid, 1);
  EXPECT_EQ(ParseShmSegmentName(second)->pid, 1);
  EXPECT_NE(first, second);
  EXPECT_TRUE(SegmentExists(first));
  EXPECT_TRUE(SegmentExists(second));
  shm_unlink(first.c_str());
  shm_unlink(second.c_str());
}

// A receiver that holds a mapping of a segment that was removed, and meets another one made since
// under the same name (a name that came back), maps the new one instead of refusing every
// descriptor for it against the old one's slot table (which, resent, would be refused forever).
TEST(ShmVan, AReceiverRemapsASegmentThatWasReplacedUnderItsName) {
  Forger f;
  const auto deliver = [&](ShmSegment& seg, char fill) -> std::string {
    auto slot = seg.Reserve(100);
    EXPECT_TRUE(slot.has_value());
    if (!slot) return std::string("no slot");
    std::memset(seg.SlotData(*slot), fill, 100);
    seg.Publish(*slot);
    RawMessage m;
    m.peer = "r";
    m.frames.push_back(EncodeShmEnvelope({{1, slot->index, slot->generation, slot->offset, 100, seg.name()}}));
    m.frames.push_back(Frame::Own(proto::Header().SerializeAsString()));
    m.frames.push_back(Frame());
    EXPECT_TRUE(f.sender.Send(std::move(m)).ok());
    RawMessage got = RecvOne(f.receiver);
    if (!got.transport_error.empty()) return got.transport_error;
    return got.frames.size() == 2 ? std::string(got.frames[1].bytes()) : std::string("frames lost");
  };
  std::string name;
  {
    auto old = ShmSegment::Create(kJob, 90, 1 << 20, 8);
    ASSERT_TRUE(old.ok()) << old.status().ToString();
    name = (*old)->name();
    EXPECT_EQ(deliver(**old, 'a'), std::string(100, 'a'));
  }  // unlinked; the receiver still holds its mapping
  auto replacement = ShmSegment::Create(kJob, 90, 1 << 20, 8);
  ASSERT_TRUE(replacement.ok()) << replacement.status().ToString();
  ASSERT_EQ((*replacement)->name(), name);
  // Slot 0 of generation 1 again: the old mapping's slot 0 is free at generation 1.
  EXPECT_EQ(deliver(**replacement, 'b'), std::string(100, 'b'));
  EXPECT_EQ(deliver(**replacement, 'c'), std::string(100, 'c'));
}

// A pid means a process only in its PID namespace: a segment whose creator is no process here but
// was made in another namespace (a job in another container on the same /dev/shm) may be alive
// and is left alone; one made here is removed.
TEST(ShmSegment, ASegmentOfAnotherPidNamespaceIsNeverTakenForAnOrphan) {
  ASSERT_NE(CurrentPidNamespace(), 0u);
  std::vector<std::string> names;
  for (uint32_t n : {10u, 11u}) {
    names.push_back(SegmentOfADeadChild(n));
    ASSERT_FALSE(names.back().empty());
    EXPECT_EQ(ShmSegmentPidNamespace(names.back()), CurrentPidNamespace());
  }
  // The first as a process of another PID namespace would have made it: its header says so.
  const int fd = shm_open(names[0].c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  char header[128];
  ASSERT_EQ(pread(fd, header, sizeof(header), 0), static_cast<ssize_t>(sizeof(header)));
  const uint64_t here = CurrentPidNamespace(), elsewhere = here + 1;
  void* at = memmem(header, sizeof(header), &here, sizeof(here));
  ASSERT_NE(at, nullptr);
  std::memcpy(at, &elsewhere, sizeof(elsewhere));
  ASSERT_EQ(pwrite(fd, header, sizeof(header), 0), static_cast<ssize_t>(sizeof(header)));
  close(fd);
  EXPECT_EQ(ShmSegmentPidNamespace(names[0]), elsewhere);
  RemoveOrphanShmSegments();
  EXPECT_TRUE(SegmentExists(names[0]));
  EXPECT_FALSE(SegmentExists(names[1]));
  EXPECT_EQ(RemoveShmSegments(kJob, ParseShmSegmentName(names[0])->pid), 1);
}

}  // namespace
}  // namespace psformer
