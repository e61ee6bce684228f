// A node's data directory lock (nodes/state/node_lock.hpp): the kernel names the live holder,
// whatever config path it was started with; a second taker is refused naming that pid;
// the lock goes with its process however it ends, leaving a file that names no holder.

#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>

#include <sys/wait.h>
#include <unistd.h>

#include "nodes/state/node_lock.hpp"
#include "tests/support/processes.hpp"

using namespace vidline::nodes;
using namespace vidline::nodes::state;
using testing_support::temp_dir;

namespace {

/// A child process that takes the lock of `dir` and holds it until release() or kill().
class holder_process {
public:
  explicit holder_process(const std::string& dir) {
    int ready[2], go[2];
    REQUIRE(::pipe(ready) == 0);
    REQUIRE(::pipe(go) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::close(ready[0]);
      ::close(go[1]);
      char ok = 'n';
      try {
        node_lock lock(dir, "host_a", "digest-1", "/etc/vidline/cluster.json");
        ok = 'y';
        (void)!::write(ready[1], &ok, 1);
        char c;
        (void)!::read(go[0], &c, 1);  // until the parent closes its end
        ::_exit(0);
      } catch (...) {
        (void)!::write(ready[1], &ok, 1);
        ::_exit(1);
      }
    }
    ::close(ready[1]);
    ::close(go[0]);
    go_ = go[1];
    char c = 0;
    REQUIRE(::read(ready[0], &c, 1) == 1);
    ::close(ready[0]);
    REQUIRE(c == 'y');
  }
  ~holder_process() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      release();
    }
  }
  pid_t pid() const { return pid_; }
  /// Lets it end normally (or reaps it after kill()) and waits for it.
  void release() {
    if (go_ >= 0)
      ::close(go_);
    go_ = -1;
    if (pid_ > 0) {
      int st = 0;
      ::waitpid(pid_, &st, 0);
      pid_ = -1;
    }
  }
  void kill() { ::kill(pid_, SIGKILL); }

private:
  pid_t pid_ = -1;
  int go_ = -1;
};

/// In a forked child (the holder must not query its own lock): whether node_lock_holder
/// of `dir` names `pid`.
bool another_process_sees_holder(const std::string& dir, pid_t pid) {
  pid_t c = ::fork();
  if (c == 0) {
    auto h = node_lock_holder(dir, 0);
    ::_exit(h && h->pid == pid ? 0 : 1);
  }
  int st = 0;
  ::waitpid(c, &st, 0);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

} // namespace

TEST_CASE("no lock file, or a lock file nobody holds: no holder") {
  temp_dir dir;
  CHECK_FALSE(node_lock_holder(dir.path()));
  CHECK(node_lock_path(dir.path()) == dir.path() + "/run/node.lock");
}

TEST_CASE("the holder is named by the kernel, with the text it wrote, a second taker is refused") {
  temp_dir dir;
  holder_process h(dir.path());
  auto got = node_lock_holder(dir.path());
  REQUIRE(got);
  CHECK(got->pid == h.pid());
  CHECK(got->token.size() == 32);
  CHECK(got->host == "host_a");
  CHECK(got->config_digest == "digest-1");
  CHECK(got->config == "/etc/vidline/cluster.json");
  try {
    node_lock second(dir.path(), "host_a", "digest-1", "/tmp/copy.json");
    FAIL("a second node took a held data directory");
  } catch (const node_lock_busy& e) {
    CHECK(e.holder().pid == h.pid());
    CHECK_THAT(e.what(), Catch::Contains("pid " + std::to_string(h.pid())) &&
                           Catch::Contains(dir.path() + "/run/node.lock"));
  }
  // The refused taker changed nothing: the holder and its text stand.
  auto still = node_lock_holder(dir.path());
  REQUIRE(still);
  CHECK(still->pid == h.pid());
  CHECK(still->token == got->token);
}

TEST_CASE("the lock goes with its process, killed or not, the next life gets a new token") {
  temp_dir dir;
  std::string first;
  {
    holder_process h(dir.path());
    first = node_lock_holder(dir.path())->token;
    h.kill();
    h.release();
  }
  CHECK(std::filesystem::exists(node_lock_path(dir.path())));  // the file stays ...
  CHECK_FALSE(node_lock_holder(dir.path()));                      // ... naming no holder
  {
    holder_process h(dir.path());
    auto got = node_lock_holder(dir.path());
    REQUIRE(got);
    CHECK(got->pid == h.pid());
    CHECK(got->token != first);
    h.release();
  }
  CHECK_FALSE(node_lock_holder(dir.path()));
  // This process may take it now; another process sees it as the holder.
  node_lock mine(dir.path(), "host_b", "digest-2", "");
  CHECK(another_process_sees_holder(dir.path(), ::getpid()));
}
