// A node's logger (nodes/node_log.hpp): node.log rotates at the size cap and keeps the
// configured number of older files, each line once; a standard error that is a regular
// file (node.out under `vidline start`) gets only critical lines, never a copy of the log.

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <spdlog/spdlog.h>

#include "nodes/node_log.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;
using testing_support::read_file;
using testing_support::temp_dir;
namespace fs = std::filesystem;

namespace {

/// Standard error sent to `path` while it lives, then put back.
class stderr_to {
public:
  explicit stderr_to(const std::string& path) : saved_(::dup(2)) {
    std::fflush(stderr);
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~stderr_to() {
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
  }

private:
  int saved_;
};

/// How often each "line <n>" occurs in the text.
void count_lines(const std::string& text, std::map<int, int>& seen) {
  static const std::regex line_re("line (\\d+) ");
  for (std::sregex_iterator it(text.begin(), text.end(), line_re), end; it != end; ++it)
    ++seen[std::stoi((*it)[1])];
}

} // namespace

TEST_CASE("node.log rotates at log_file_bytes and keeps log_files older files", "[log]") {
  temp_dir dir;
  const uint32_t cap = 4096;
  const int kept = 3;
  {
    stderr_to err(dir.path() + "/node.out");
    auto log = nodes::make_node_logger(dir.path(), "host_a", cap, kept, nodes::is_regular_file(2));
    std::string pad(80, 'x');
    for (int i = 0; i < 400; ++i)  // about 48 KB: a dozen files' worth
      log->info("line {} {}", i, pad);
    log->flush();
  }
  // spdlog names the older files node.1.log (the newest), node.2.log, ...
  const std::string base = dir.path() + "/node.log";
  auto older = [&](int i) { return dir.path() + "/node." + std::to_string(i) + ".log"; };
  REQUIRE(fs::exists(base));
  for (int i = 1; i <= kept; ++i) {
    INFO(older(i));
    CHECK(fs::exists(older(i)));
  }
  CHECK(!fs::exists(older(kept + 1)));
  std::map<int, int> seen;
  for (const std::string& f : {base, older(1), older(2), older(3)}) {
    INFO(f);
    CHECK(fs::file_size(f) <= cap);
    if (f != base)  // a rotated file was full: the next line would have passed the cap
      CHECK(fs::file_size(f) > cap - 200);
    count_lines(read_file(f), seen);
  }
  // What is kept is the newest lines, each once, none missing between them.
  REQUIRE(!seen.empty());
  CHECK(seen.rbegin()->first == 399);
  for (int i = seen.begin()->first; i <= 399; ++i) {
    INFO("line " << i);
    CHECK(seen[i] == 1);
  }
  CHECK(read_file(base).find("line 399 ") != std::string::npos);
  // Nothing went to the standard error file.
  CHECK(read_file(dir.path() + "/node.out").empty());
}

TEST_CASE("a standard error that is a file gets only critical lines, a pipe gets every line", "[log]") {
  temp_dir dir;
  {
    stderr_to err(dir.path() + "/node.out");
    REQUIRE(nodes::is_regular_file(2));
    auto log = nodes::make_node_logger(dir.path(), "host_a", 1 << 20, 2, nodes::is_regular_file(2));
    log->info("an ordinary line");
    log->warn("a warning");
    log->critical("cannot start the bus: Address already in use");
    log->flush();
  }
  std::string out = read_file(dir.path() + "/node.out");
  std::string file = read_file(dir.path() + "/node.log");
  CHECK(out.find("an ordinary line") == std::string::npos);
  CHECK(out.find("a warning") == std::string::npos);
  CHECK(out.find("Address already in use") != std::string::npos);
  CHECK(file.find("an ordinary line") != std::string::npos);
  CHECK(file.find("a warning") != std::string::npos);
  CHECK(file.find("Address already in use") != std::string::npos);

  int p[2];
  REQUIRE(::pipe(p) == 0);
  CHECK(!nodes::is_regular_file(p[0]));
  CHECK(!nodes::is_regular_file(p[1]));
  ::close(p[0]);
  ::close(p[1]);
}
