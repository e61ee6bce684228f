// bench_handoff's processes: a command run to its end, free ports (the child itself is
// in child.hpp).

#include <cstdio>
#include <string>
#include <vector>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "bench/handoff/child.hpp"

namespace vidline::bench::handoff {

std::string run_capture(const std::vector<std::string>& argv, const std::string& log_path,
                        int* rc) {
  std::string cmd;
  for (auto& a : argv)
    cmd += "'" + a + "' ";
  cmd += "2>>'" + log_path + "'";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr)
    die("cannot run " + cmd);
  std::string out;
  char tmp[4096];
  std::size_t n;
  while ((n = std::fread(tmp, 1, sizeof tmp, p)) > 0)
    out.append(tmp, n);
  const int status = ::pclose(p);
  if (rc != nullptr)
    *rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return out;
}

std::vector<int> free_ports(int n) {
  std::vector<int> fds, ports;
  for (int i = 0; i < n; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      die("cannot find a free port");
    fds.push_back(fd);
    ports.push_back(ntohs(a.sin_port));
  }
  for (int fd : fds)
    ::close(fd);
  return ports;
}

} // namespace vidline::bench::handoff
