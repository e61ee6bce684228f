// The work ledger and receipts (common/stage_records.*): a reused receipt adds the ledger
// line a kill between the receipt and the line left out, and never a second one.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

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
