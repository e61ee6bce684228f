// The work ledger and receipts (common/stage_records.*): a reused receipt adds the ledger
// line a kill between the receipt and the line left out, and never a second one.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

#include "common/crash_points.hpp"
#include "common/sha256.hpp"
#include "common/stage_records.hpp"

using namespace vidline;
namespace fs = std::filesystem;

namespace {

struct temp_dir {
  fs::path path;
  temp_dir() {
    std::string tmpl = (fs::temp_directory_path() / "vidline-records-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

int lines_of(const fs::path& ledger) {
  std::ifstream in(ledger);
  std::string l;
  int n = 0;
  while (std::getline(in, l))
    ++n;
  return n;
}

} // namespace

TEST_CASE("a reused receipt adds its missing ledger line once", "[records]") {
  temp_dir d;
  const std::string dir = d.path.string();
  CHECK_FALSE(records::ledger_has(dir, "sampled", "run-1", 3));  // no ledger yet
  records::ledger_append(dir, {"sampled", "run-1", 3, 1, "aaaa"});
  CHECK(records::ledger_has(dir, "sampled", "run-1", 3));
  CHECK_FALSE(records::ledger_has(dir, "sampled", "run-1", 30));  // index 30 is not 3
  CHECK_FALSE(records::ledger_has(dir, "decoded", "run-1", 3));
  CHECK_FALSE(records::ledger_has(dir, "sampled", "run-10", 3));

  // Reused with its line present: nothing added.
  records::ledger_record_reuse(dir, {"sampled", "run-1", 3, 2, "aaaa"});
  CHECK(lines_of(d.path / "ledger.log") == 1);
  // Reused with its line missing (the kill came between receipt and line): added once.
  records::ledger_record_reuse(dir, {"decoded", "run-1", 3, 1, "bbbb"});
  records::ledger_record_reuse(dir, {"decoded", "run-1", 3, 2, "bbbb"});
  CHECK(lines_of(d.path / "ledger.log") == 2);
  std::ifstream in(d.path / "ledger.log");
  std::string first;
  std::getline(in, first);
  CHECK(first == "sampled run-1 3 1 aaaa");  // the format the chaos checker reads
  CHECK(records::ledger_has(dir, "decoded", "run-1", 3));
}

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Runs `publish` in a child with `point` armed to fire; its exit code.
int publish_crashing_at(const records::publication& p, const char* point) {
  pid_t pid = ::fork();
  if (pid == 0) {
    crash::arm(1, 1.0, {point});
    try {
      records::publish(p);
    } catch (...) {
      ::_exit(1);
    }
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

} // namespace

TEST_CASE("publish: rename then receipt then ledger, reuse and retract", "[records]") {
  temp_dir t;
  const std::string data = t.path.string();
  fs::create_directories(t.path / "work" / "7");
  fs::create_directories(t.path / "outputs" / "r");
  const std::string staged = data + "/work/7/video", product = data + "/outputs/r/v.mp4";
  std::ofstream(staged) << "video bytes";
  const std::string sha = to_hex(sha256_of("video bytes")), latent(64, 'e');
  records::publication p{data, "decoded", "r", 3, 7, staged, product, sha, latent};
  CHECK(records::publish(p) == 11);
  CHECK_FALSE(fs::exists(staged));
  CHECK(read_text(product) == "video bytes");
  auto receipt = records::receipt_path(data + "/receipts", "r", 3, "decoded");
  auto r = records::valid_receipt(receipt);
  REQUIRE(r);
  CHECK(r->product == product);
  CHECK(r->source == latent);
  CHECK(read_text(t.path / "ledger.log") == "decoded r 3 7 " + sha + "\n");

  // Reused by a later attempt: the receipt, no second ledger line; not from another latent.
  auto again = records::reuse(data, "decoded", "r", 3, 9, latent);
  REQUIRE(again);
  CHECK(again->sha256 == sha);
  CHECK(lines_of(t.path / "ledger.log") == 1);
  CHECK_FALSE(records::reuse(data, "decoded", "r", 3, 9, std::string(64, 'f')));

  // Another attempt's video won: this one goes, with its receipt, and the ledger says so.
  records::retract(data, "decoded", "r", 3, 7, product, true);
  CHECK_FALSE(fs::exists(product));
  CHECK_FALSE(fs::exists(receipt));
  CHECK(lines_of(t.path / "ledger.log") == 2);
  CHECK(read_text(t.path / "ledger.log").find("removed-decoded r 3 7 -\n") != std::string::npos);

  // Fenced before publication: the work directory goes, counted as fenced.
  std::ofstream(data + "/work/7/latent") << "x";
  records::retract(data, "sampled", "r", 4, 8, data + "/work/7", false);
  CHECK_FALSE(fs::exists(t.path / "work" / "7"));
  CHECK(read_text(t.path / "ledger.log").find("fenced-sampled r 4 8 -\n") != std::string::npos);
}

TEST_CASE("publish: a crash at either point leaves a state a restart mends", "[records]") {
  temp_dir t;
  const std::string data = t.path.string();
  fs::create_directories(t.path / "work");
  const std::string staged = data + "/work/latent", product = data + "/l.latent";
  std::ofstream(staged) << "latent bytes";
  const std::string sha = to_hex(sha256_of("latent bytes"));
  records::publication p{data, "sampled", "r", 0, 1, staged, product, sha, ""};

  // Before: nothing published, the staged file still there, no receipt, no line.
  CHECK(publish_crashing_at(p, "latent.before_commit") == crash::exit_code);
  CHECK(fs::exists(staged));
  CHECK_FALSE(fs::exists(product));
  CHECK_FALSE(records::reuse(data, "sampled", "r", 0, 2));
  CHECK_FALSE(fs::exists(t.path / "ledger.log"));

  // After: product, receipt and line all durable; the next attempt reuses, adds no line.
  CHECK(publish_crashing_at(p, "latent.after_commit") == crash::exit_code);
  CHECK_FALSE(fs::exists(staged));
  auto r = records::reuse(data, "sampled", "r", 0, 2);
  REQUIRE(r);
  CHECK(r->product == product);
  CHECK(lines_of(t.path / "ledger.log") == 1);
}
