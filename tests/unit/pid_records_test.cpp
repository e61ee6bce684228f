// Stage processes never outlive their node: the pid-record codec, /proc/PID/stat parsing,
// reaping what a dead node left (and never a stranger that reused a pid), and the
// parent-death signal of the spawner (common/spawn/): a "node" killed with SIGKILL takes its
// child along.

#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include "common/spawn/child.hpp"
#include "common/spawn/pid_records.hpp"
#include "tests/support/processes.hpp"

using namespace vidline::spawn;
using testing_support::temp_dir;

namespace {

bool alive(pid_t pid) {
  auto st = read_proc_stat(pid);
  return st && st->state != 'Z' && st->state != 'X';
}

template <class Pred>
bool within(double seconds, Pred p) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (p())
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return p();
}

/// A pid that belonged to a process now gone (a child started and reaped).
pid_t dead_pid() {
  pid_t p = ::fork();
  if (p == 0)
    ::_exit(0);
  int st = 0;
  ::waitpid(p, &st, 0);
  return p;
}

/// Starts `sh -c SCRIPT` in a group of its own, recorded under `dir`, and returns its pid.
pid_t start_group(const std::string& dir, const std::string& script) {
  set_pid_record_dir(dir);
  child_spec s;
  s.argv = {"/bin/sh", "-c", script};
  s.env = current_environment();
  std::string error;
  pid_t pid = spawn_child(s, error);
  REQUIRE(pid > 0);
  set_pid_record_dir("");
  return pid;
}

/// Rewrites a record as if a node now dead had written it.
void orphan_record(const std::string& dir, pid_t pid, uint64_t start_delta = 0) {
  std::string path = dir + "/" + std::to_string(pid) + ".pid";
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  auto r = parse_pid_record(text);
  REQUIRE(r);
  r->node_pid = dead_pid();
  r->start += start_delta;
  std::ofstream(path, std::ios::trunc) << format_pid_record(*r);
}

} // namespace

TEST_CASE("pid records: format and parse, garbage refused", "[pids]") {
  pid_record r{1234, 98765432100ull, 77, 555};
  auto back = parse_pid_record(format_pid_record(r));
  REQUIRE(back);
  CHECK(back->pid == 1234);
  CHECK(back->start == 98765432100ull);
  CHECK(back->node_pid == 77);
  CHECK(back->node_start == 555);
  CHECK_FALSE(parse_pid_record(""));
  CHECK_FALSE(parse_pid_record("vidline-pid/1 12 3"));            // torn
  CHECK_FALSE(parse_pid_record("vidline-pid/2 12 3 4 5"));        // another version
  CHECK_FALSE(parse_pid_record("vidline-pid/1 1 3 4 5"));         // never init
  CHECK_FALSE(parse_pid_record("vidline-pid/1 12 3 4 5 extra"));
}

TEST_CASE("pid records: /proc/PID/stat parses whatever the command name holds", "[pids]") {
  auto s = parse_proc_stat("4242 (a) b (c d) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 "
                           "1 0 987654 1000 10 18446744073709551615");
  REQUIRE(s);
  CHECK(s->state == 'S');
  CHECK(s->ppid == 1);
  CHECK(s->pgrp == 4242);
  CHECK(s->start == 987654);
  CHECK_FALSE(parse_proc_stat("4242 (x) S 1 2"));
  auto self = read_proc_stat(::getpid());
  REQUIRE(self);
  CHECK(self->start > 0);
}

TEST_CASE("reaping: a dead node's groups are ended, grandchildren too", "[pids]") {
  temp_dir dir;
  std::string pids = dir.path() + "/pids";
  std::string grandchild = dir.path() + "/grandchild";
  pid_t leader = start_group(pids, "sleep 300 & echo $! > " + grandchild + "; wait");
  REQUIRE(within(10, [&] {
    std::error_code ec;
    return std::filesystem::file_size(grandchild, ec) > 0 && !ec;
  }));
  pid_t sleeper = std::stoi(testing_support::read_file(grandchild));
  orphan_record(pids, leader);
  auto rep = reap_previous_life(pids, ::getpid());
  CHECK(rep.records == 1);
  CHECK(rep.killed == 2);
  CHECK(within(5, [&] { return !alive(sleeper); }));
  int status = 0;
  ::waitpid(leader, &status, 0);  // ours to reap: this test is its parent
  CHECK(std::filesystem::is_empty(pids));
}

TEST_CASE("reaping: a reused pid (another start time) and a live node's records are spared", "[pids]") {
  temp_dir dir;
  std::string pids = dir.path() + "/pids";
  pid_t stranger = start_group(pids, "sleep 300");
  orphan_record(pids, stranger, 1);  // the record's process started at another time
  auto rep = reap_previous_life(pids, ::getpid());
  CHECK(rep.killed == 0);
  CHECK(alive(stranger));
  CHECK(std::filesystem::is_empty(pids));  // a stale record goes

  pid_t mine = start_group(pids, "sleep 300");  // recorded by this, live, "node"
  auto rep2 = reap_previous_life(pids, 0);  // as seen by another node: this one is alive
  CHECK(rep2.left_to_live_node == 1);
  CHECK(rep2.killed == 0);
  CHECK(alive(mine));
  for (pid_t p : {stranger, mine})
    stop_child(p, std::chrono::seconds(1));
}

TEST_CASE("spawned children die with their node, even when it is SIGKILLed", "[pids]") {
  temp_dir dir;
  std::string pid_file = dir.path() + "/child";
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  pid_t node = ::fork();
  if (node == 0) {
    // A "node": a thread starts the stage and ends at once (as a stage call's thread can);
    // the child must live on until the node itself dies.
    ::close(ready[0]);
    pid_t child = -1;
    std::thread([&] {
      child_spec s;
      s.argv = {"sleep", "300"};
      s.env = current_environment();
      std::string error;
      child = spawn_child(s, error);
    }).join();
    std::ofstream(pid_file) << child;
    char c = 1;
    (void)::write(ready[1], &c, 1);
    for (;;)
      ::pause();
  }
  ::close(ready[1]);
  char c = 0;
  REQUIRE(::read(ready[0], &c, 1) == 1);
  ::close(ready[0]);
  pid_t child = std::stoi(testing_support::read_file(pid_file));
  REQUIRE(child > 0);
  // The spawning thread has ended; the child is still there.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(alive(child));
  ::kill(node, SIGKILL);
  int status = 0;
  ::waitpid(node, &status, 0);
  CHECK(within(5, [&] { return !alive(child); }));
}
