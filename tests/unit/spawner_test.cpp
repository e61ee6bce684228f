// The one spawner (common/spawn/child.hpp) in the roles beside stage programs: a node a
// service command starts (a session of its own), a bench child on pipes, a test's child
// with its outputs in two files.

#include <catch2/catch.hpp>

#include <unistd.h>
#include <sys/wait.h>

#include "common/spawn/child.hpp"
#include "common/files.hpp"
#include "tests/support/processes.hpp"

using namespace vidline;
using namespace vidline::spawn;
using testing_support::temp_dir;

namespace {

int wait_exit(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

} // namespace

TEST_CASE("spawner: new_session gives the child a session of its own", "[exec]") {
  temp_dir dir;
  child_spec cs;
  // /proc/self/stat: pid (comm) state ppid pgrp session ...
  cs.argv = {"/bin/sh", "-c", "read -r pid comm state ppid pgrp sid rest < /proc/$$/stat; echo $sid $pgrp"};
  cs.env = current_environment();
  cs.stdout_path = dir.path() + "/out";
  cs.new_session = true;
  std::string error;
  pid_t pid = spawn_child(cs, error);
  REQUIRE(pid > 0);
  CHECK(wait_exit(pid) == 0);
  std::istringstream in(files::read_all(dir.path() + "/out"));
  pid_t sid = 0, pgid = 0;
  in >> sid >> pgid;
  CHECK(sid == pid);
  CHECK(pgid == pid);
  CHECK(::getsid(0) != pid);

  cs.new_session = false;  // the default: its own group, in the caller's session
  pid = spawn_child(cs, error);
  REQUIRE(pid > 0);
  CHECK(wait_exit(pid) == 0);
  std::istringstream in2(files::read_all(dir.path() + "/out"));
  in2 >> sid >> pgid;
  CHECK(sid == ::getsid(0));
  CHECK(pgid == pid);
}

TEST_CASE("spawner: stdin and stdout on pipes, stderr to its own file", "[exec]") {
  temp_dir dir;
  int in_pipe[2], out_pipe[2];
  REQUIRE(::pipe2(in_pipe, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(out_pipe, O_CLOEXEC) == 0);
  child_spec cs;
  cs.argv = {"sh", "-c", "read line; echo \"got $line\"; echo oops >&2"};  // sh from PATH
  cs.env = current_environment();
  cs.stderr_path = dir.path() + "/err";
  cs.stdin_fd = in_pipe[0];
  cs.stdout_fd = out_pipe[1];
  std::string error;
  pid_t pid = spawn_child(cs, error);
  REQUIRE(pid > 0);
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  REQUIRE(::write(in_pipe[1], "hello\n", 6) == 6);
  ::close(in_pipe[1]);
  std::string got;
  char buf[64];
  for (ssize_t n; (n = ::read(out_pipe[0], buf, sizeof buf)) > 0;)
    got.append(buf, static_cast<std::size_t>(n));
  ::close(out_pipe[0]);
  CHECK(wait_exit(pid) == 0);
  CHECK(got == "got hello\n");
  CHECK(files::read_all(dir.path() + "/err") == "oops\n");
}

TEST_CASE("spawner: a test's process keeps stdout and stderr apart", "[exec]") {
  temp_dir dir;
  testing_support::process p({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"},
                             dir.path() + "/p.out");
  CHECK(p.wait(10) == 3);
  CHECK(p.out() == "out\n");
  CHECK(p.err() == "err\n");
}
