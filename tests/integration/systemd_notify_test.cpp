// sd_notify for real: the test plays systemd. It binds a unix datagram socket, starts a
// node with NOTIFY_SOCKET pointing at it and WATCHDOG_USEC set, and reads what the node
// sends: READY=1 once its bus answers on its port, WATCHDOG=1 every half period, then
// STOPPING=1 on SIGTERM. Without NOTIFY_SOCKET the other integration tests run the node
// as before.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/support/cluster.hpp"
#include "tests/support/processes.hpp"

using testing_support::temp_dir;
using nlohmann::json;

namespace {

/// systemd's end of the notify socket.
class notify_listener {
public:
  explicit notify_listener(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    REQUIRE(path.size() < sizeof(a.sun_path));
    path.copy(a.sun_path, path.size());
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  }
  ~notify_listener() { ::close(fd_); }

  /// The next datagram within `seconds`, or "" when none came.
  std::string next(double seconds) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(seconds * 1000)) <= 0)
      return "";
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
  }

  /// Reads datagrams until one contains `what`, for at most `seconds`; all it read.
  std::vector<std::string> until(const std::string& what, double seconds) {
    std::vector<std::string> got;
    const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < deadline) {
      auto left = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now());
      auto m = next(left.count());
      if (m.empty())
        break;
      got.push_back(m);
      if (m.find(what) != std::string::npos)
        break;
    }
    return got;
  }

private:
  int fd_ = -1;
};

bool port_accepts(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

bool has(const std::vector<std::string>& got, const std::string& what) {
  for (const auto& m : got)
    if (m.find(what) != std::string::npos)
      return true;
  return false;
}

} // namespace

TEST_CASE("a node under NOTIFY_SOCKET says READY=1, pets the watchdog and says STOPPING=1") {
  temp_dir tmp("vl-notify");
  const std::string& dir = tmp.path();
  const std::string config = testing_support::write_reference_config(dir, 0.01);
  const int port = json::parse(testing_support::read_file(config))["hosts"][0]["port"];
  notify_listener systemd(dir + "/notify.sock");

  // The environment systemd gives a Type=notify service with WatchdogSec=3.
  ::setenv("NOTIFY_SOCKET", (dir + "/notify.sock").c_str(), 1);
  ::setenv("WATCHDOG_USEC", "3000000", 1);
  auto node = testing_support::start_node(dir, config, "host_a");
  ::unsetenv("NOTIFY_SOCKET");
  ::unsetenv("WATCHDOG_USEC");
  INFO("node output under " << dir);

  auto got = systemd.until("READY=1", 30);
  REQUIRE(has(got, "READY=1"));
  CHECK(port_accepts(port));            // ready means bound
  CHECK_FALSE(has(got, "WATCHDOG=1"));  // no pet before it is ready
  CHECK(has(got, "STATUS=node host_a up on"));

  // Two pets, each within the period (1.5 s) plus slack for a loaded machine.
  for (int i = 0; i < 2; ++i) {
    auto pets = systemd.until("WATCHDOG=1", 10);
    REQUIRE(has(pets, "WATCHDOG=1"));
  }

  node->signal(SIGTERM);
  got = systemd.until("STOPPING=1", 30);
  CHECK(has(got, "STOPPING=1"));
  CHECK(node->wait(30) == 0);
}
