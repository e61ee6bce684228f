// The receiver's resumable fetch (nodes/transfer.*), driven by hand: the test is the
// network (it answers each request from a byte string, or not), the owner thread and the
// clock. Link cuts, a receiver that dies, a part damaged on disk and a chunk damaged in
// transit, each checked on the files and on the offsets asked for.
#include <catch2/catch.hpp>

#include <deque>
#include <filesystem>
#include <functional>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>

#include "common/files.hpp"
#include "common/sha256.hpp"
#include "nodes/data/transfer.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;
using namespace vidline::nodes;
using namespace vidline::nodes::data;
namespace fs = std::filesystem;

namespace {

constexpr uint32_t chunk = 4096;

config::knobs test_knobs() {
  config::knobs k;
  k.chunk_bytes = chunk;
  k.chunk_window = 2;
  k.part_sync_bytes = 2 * chunk;  // durable every second chunk
  k.transfer_timeout_ms = 1000;
  return k;
}

std::string random_bytes(std::size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s)
    c = static_cast<char>(rng());
  return s;
}

/// One receiver and the "network" in front of it.
struct rig {
  std::string latent;
  std::string sha;
  std::deque<msg::latent_fetch> asked;      ///< requests not yet answered
  std::vector<uint64_t> offsets_asked;      ///< every request's offset, in order
  std::deque<std::function<void()>> posted; ///< the owner thread's queue
  std::vector<data::fetch_result> results;
  int64_t now = 0;
  std::unique_ptr<data::latent_fetcher> fetcher;

  explicit rig(std::string bytes, config::knobs k = test_knobs()) : latent(std::move(bytes)) {
    sha = to_hex(sha256_of(latent));
    make_fetcher(k);
  }

  void make_fetcher(config::knobs k = test_knobs()) {
    asked.clear();
    posted.clear();
    fetcher = std::make_unique<data::latent_fetcher>(
        k,
        [this](const std::string&, const msg::latent_fetch& r) {
          asked.push_back(r);
          offsets_asked.push_back(r.offset);
          return true;
        },
        [this](std::function<void()> f) {
          std::lock_guard<std::mutex> lock(posted_mutex);
          posted.push_back(std::move(f));
        },
        [this] { return now; });
  }

  void start(const std::string& dest) {
    asked.clear();  // a previous transfer's requests died with it
    fetcher->start("a", sha, latent.size(), dest,
                   [this](const fetch_result& r) { results.push_back(r); });
  }

  /// Nothing posted waits, and `n` requests are out.
  bool idle_with(std::size_t n) {
    std::lock_guard<std::mutex> lock(posted_mutex);
    return posted.empty() && asked.size() == n;
  }

  /// Runs what the worker posted until `done` holds (a deadline, never a guess).
  void pump_until(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done()) {
      std::function<void()> f;
      {
        std::lock_guard<std::mutex> lock(posted_mutex);
        if (!posted.empty()) {
          f = std::move(posted.front());
          posted.pop_front();
        }
      }
      if (f)
        f();
      else if (std::chrono::steady_clock::now() > deadline)
        FAIL("nothing happened for 10 s");
      else
        std::this_thread::yield();
    }
  }

  /// Answers the oldest request; `flip` damages one byte of it on the way.
  void answer_one(bool flip = false) {
    REQUIRE(!asked.empty());
    auto r = asked.front();
    asked.pop_front();
    auto data = std::make_shared<std::string>(latent.substr(r.offset, r.length));
    if (flip && !data->empty())
      (*data)[data->size() / 2] ^= 0x5a;
    msg::latent_chunk c;
    c.transfer_id = r.transfer_id;
    c.sha256 = r.sha256;
    c.offset = r.offset;
    c.total = latent.size();
    c.data = msgpack::type::raw_ref(data->data(), static_cast<uint32_t>(data->size()));
    CHECK(fetcher->on_chunk("a", c, data));
  }

  /// Answers requests until `n` chunks went through, running the worker's posts.
  void answer(int n) {
    for (int i = 0; i < n; ++i) {
      pump_until([&] { return !asked.empty(); });
      answer_one();
    }
  }

  std::mutex posted_mutex;
};

uint64_t recorded_durable(const std::string& dest) {
  const std::string text = files::read_all(dest + ".part.state");
  std::istringstream in(text);
  std::string sha, prefix;
  uint64_t bytes = 0, durable = 0;
  in >> sha >> bytes >> durable >> prefix;
  return durable;
}

} // namespace

TEST_CASE("resume: a link cut mid-transfer resumes from the last durable chunk") {
  testing_support::temp_dir dir("vl-resume");
  rig g(random_bytes(10 * chunk + 123, 1));
  const std::string dest = dir.path() + "/x.latent";
  g.start(dest);
  g.answer(5);
  g.pump_until([&] { return g.idle_with(2); });
  g.fetcher->fail_host("a", "link cut");
  g.pump_until([&] { return g.results.size() == 1; });
  CHECK(g.results[0].outcome == fetch_outcome::transient);
  CHECK_FALSE(fs::exists(dest));
  REQUIRE(fs::exists(dest + ".part"));
  // A failed transfer makes everything it wrote durable: all 5 chunks.
  CHECK(recorded_durable(dest) == 5 * chunk);

  g.offsets_asked.clear();
  g.start(dest);
  g.pump_until([&] { return !g.asked.empty(); });
  CHECK(g.offsets_asked.front() == 5 * chunk);
  g.answer(6);
  g.pump_until([&] { return g.results.size() == 2; });
  CHECK(g.results[1].outcome == fetch_outcome::ok);
  CHECK(files::read_all(dest) == g.latent);
  CHECK_FALSE(fs::exists(dest + ".part"));
  CHECK_FALSE(fs::exists(dest + ".part.state"));
  CHECK(g.fetcher->resumed_bytes() == 5 * chunk);
  for (uint64_t o : g.offsets_asked)
    CHECK(o >= 5 * chunk);  // nothing before the durable prefix was asked again
}

TEST_CASE("resume: a receiver that dies resumes from its last fsync, not from zero") {
  testing_support::temp_dir dir("vl-resume");
  rig g(random_bytes(12 * chunk, 2));
  const std::string dest = dir.path() + "/x.latent";
  g.start(dest);
  g.answer(5);  // durable at 4 chunks (every second one); the fifth is written, not synced
  g.pump_until([&] { return g.idle_with(2); });
  g.fetcher.reset();  // no shutdown: like kill -9, nothing is tidied
  REQUIRE(fs::exists(dest + ".part"));
  CHECK(recorded_durable(dest) == 4 * chunk);
  CHECK(fs::file_size(dest + ".part") == 5 * chunk);

  g.make_fetcher();
  g.offsets_asked.clear();
  g.start(dest);
  g.pump_until([&] { return !g.asked.empty(); });
  CHECK(g.offsets_asked.front() == 4 * chunk);  // the unsynced fifth chunk is not trusted
  g.answer(8);
  g.pump_until([&] { return g.results.size() == 1; });
  CHECK(g.results[0].outcome == fetch_outcome::ok);
  CHECK(files::read_all(dest) == g.latent);
}

TEST_CASE("resume: a durable prefix damaged on disk restarts the whole latent, counted corrupt") {
  testing_support::temp_dir dir("vl-resume");
  rig g(random_bytes(8 * chunk, 3));
  const std::string dest = dir.path() + "/x.latent";
  g.start(dest);
  g.answer(4);
  g.pump_until([&] { return g.idle_with(2); });
  g.fetcher->fail_host("a", "link cut");
  g.pump_until([&] { return g.results.size() == 1; });
  REQUIRE(recorded_durable(dest) == 4 * chunk);
  {
    std::fstream f(dest + ".part", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(chunk + 7);
    f.put('\x42' ^ g.latent[chunk + 7]);
  }
  g.start(dest);
  g.pump_until([&] { return g.results.size() == 2; });
  CHECK(g.results[1].outcome == fetch_outcome::corrupt);
  CHECK_THAT(g.results[1].error, Catch::Contains("no longer hash as recorded"));
  CHECK_FALSE(fs::exists(dest + ".part"));
  CHECK_FALSE(fs::exists(dest + ".part.state"));

  g.offsets_asked.clear();
  g.start(dest);
  g.answer(8);
  g.pump_until([&] { return g.results.size() == 3; });
  CHECK(g.offsets_asked.front() == 0);
  CHECK(g.results[2].outcome == fetch_outcome::ok);
  CHECK(files::read_all(dest) == g.latent);
}

TEST_CASE("resume: a chunk damaged in transit before a cut fails the whole latent at the end") {
  testing_support::temp_dir dir("vl-resume");
  rig g(random_bytes(6 * chunk, 4));
  const std::string dest = dir.path() + "/x.latent";
  g.start(dest);
  g.pump_until([&] { return !g.asked.empty(); });
  g.answer_one(true);  // the first chunk arrives damaged: its hash is in the prefix record
  g.answer(2);
  g.pump_until([&] { return g.idle_with(2); });
  g.fetcher->fail_host("a", "link cut");
  g.pump_until([&] { return g.results.size() == 1; });
  REQUIRE(fs::exists(dest + ".part"));

  g.start(dest);  // resumes (the record is true to the bytes on disk) ...
  g.answer(3);
  g.pump_until([&] { return g.results.size() == 2; });
  CHECK(g.results[1].outcome == fetch_outcome::corrupt);  // ... and the digest catches it
  CHECK_FALSE(fs::exists(dest));
  CHECK_FALSE(fs::exists(dest + ".part"));
  CHECK_FALSE(fs::exists(dest + ".part.state"));
}

TEST_CASE("resume: a record for another latent, or none, starts from zero") {
  testing_support::temp_dir dir("vl-resume");
  rig g(random_bytes(3 * chunk, 5));
  const std::string dest = dir.path() + "/x.latent";
  files::write_atomic(dest + ".part", random_bytes(2 * chunk, 6));
  files::write_atomic(dest + ".part.state",
                      std::string(64, 'b') + " " + std::to_string(g.latent.size()) + " " +
                          std::to_string(2 * chunk) + " " + std::string(64, 'c') + "\n");
  g.start(dest);
  g.answer(3);
  g.pump_until([&] { return g.results.size() == 1; });
  CHECK(g.offsets_asked.front() == 0);
  CHECK(g.results[0].outcome == fetch_outcome::ok);
  CHECK(files::read_all(dest) == g.latent);
}
