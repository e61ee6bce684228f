#pragma once
// Two hosts for data-plane tests: two network namespaces joined by a veth pair (root only).
// Names are unique per test process and pair; the destructor removes both namespaces (and
// so the veth pair and every nftables rule inside), also when the test fails, and the
// constructor first removes pairs left by test processes that no longer exist.
//
// Faults, all inside the namespaces: a shaped link (`tc tbf`), a link cut (nftables drop
// of everything on the veth) and random packet loss (nftables `numgen random`).

#include <csignal>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <sched.h>
#include <stdexcept>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "tests/support/processes.hpp"

namespace testing_support {

/// Runs a command line through the shell, quietly; its exit status.
inline int shell(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); }

/// Path of the `ip` program.
inline std::string ip_program() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
    if (::access(p, X_OK) == 0)
      return p;
  return "ip";
}

/// True when this process can make namespaces and nftables rules.
inline bool netns_available() {
  return ::geteuid() == 0 && shell("ip netns list") == 0 && shell("nft --version") == 0;
}

class netns_pair {
public:
  static constexpr const char* prefix = "vlt";

  netns_pair() {
    sweep_stale();
    static int counter = 0;
    const std::string id = std::to_string(::getpid()) + "-" + std::to_string(counter++);
    a_ = std::string(prefix) + id + "a";
    b_ = std::string(prefix) + id + "b";
    for (auto& ns : {a_, b_})
      if (shell("ip netns add " + ns) != 0)
        throw std::runtime_error("cannot add network namespace " + ns);
    created_ = true;
    must("ip link add veth_a netns " + a_ + " type veth peer name veth_b netns " + b_);
    must(in_a("ip addr add " + address_a() + "/24 dev veth_a"));
    must(in_b("ip addr add " + address_b() + "/24 dev veth_b"));
    for (auto& ns : {a_, b_}) {
      must("ip -n " + ns + " link set lo up");
    }
    must(in_a("ip link set veth_a up"));
    must(in_b("ip link set veth_b up"));
  }
  ~netns_pair() {
    if (created_) {
      shell("ip netns del " + a_);
      shell("ip netns del " + b_);
    }
  }
  netns_pair(const netns_pair&) = delete;
  netns_pair& operator=(const netns_pair&) = delete;

  const std::string& a() const { return a_; }
  const std::string& b() const { return b_; }
  static std::string address_a() { return "10.77.0.1"; }
  static std::string address_b() { return "10.77.0.2"; }

  std::string in_a(const std::string& cmd) const { return "ip netns exec " + a_ + " " + cmd; }
  std::string in_b(const std::string& cmd) const { return "ip netns exec " + b_ + " " + cmd; }

  /// Argv that runs `args` inside namespace `ns`.
  static std::vector<std::string> exec_in(const std::string& ns, std::vector<std::string> args) {
    std::vector<std::string> out{ip_program(), "netns", "exec", ns};
    out.insert(out.end(), args.begin(), args.end());
    return out;
  }

  /// Shapes what A sends to B (the latents' direction) to `rate` (tc syntax, e.g. "40mbit").
  void shape_a_to_b(const std::string& rate) {
    must(in_a("tc qdisc replace dev veth_a root tbf rate " + rate + " burst 64kb latency 50ms"));
  }

  /// Drops every packet on the link, both ways, until restore_link().
  void cut_link() {
    for (auto& ns : {a_, b_}) {
      must("ip netns exec " + ns + " nft add table inet vlcut");
      must("ip netns exec " + ns +
           " nft 'add chain inet vlcut in { type filter hook input priority 0 ; policy drop ; }'");
      must("ip netns exec " + ns +
           " nft 'add chain inet vlcut out { type filter hook output priority 0 ; policy drop ; }'");
    }
  }
  void restore_link() {
    for (auto& ns : {a_, b_})
      shell("ip netns exec " + ns + " nft delete table inet vlcut");
  }

  /// Drops `per_mille` / 1000 of the packets each side receives, at random.
  void lose_packets(int per_mille) {
    for (auto& ns : {a_, b_}) {
      must("ip netns exec " + ns + " nft add table inet vlloss");
      must("ip netns exec " + ns +
           " nft 'add chain inet vlloss in { type filter hook input priority 0 ; }'");
      must("ip netns exec " + ns + " nft add rule inet vlloss in iifname veth_b numgen random mod 1000 '<' " +
           std::to_string(per_mille) + " drop");
      must("ip netns exec " + ns + " nft add rule inet vlloss in iifname veth_a numgen random mod 1000 '<' " +
           std::to_string(per_mille) + " drop");
    }
  }

  /// Moves the calling thread into namespace A (threads it starts later follow) until
  /// the guard ends: how an in-process client talks to a node inside it.
  class entered {
  public:
    explicit entered(const std::string& ns) {
      home_ = ::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
      const int fd = ::open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
      if (home_ < 0 || fd < 0 || ::setns(fd, CLONE_NEWNET) != 0)
        throw std::runtime_error("cannot enter network namespace " + ns);
      ::close(fd);
    }
    ~entered() {
      ::setns(home_, CLONE_NEWNET);
      ::close(home_);
    }
    entered(const entered&) = delete;
    entered& operator=(const entered&) = delete;

  private:
    int home_ = -1;
  };

private:
  static void must(const std::string& cmd) {
    if (shell(cmd) != 0)
      throw std::runtime_error("failed: " + cmd);
  }

  /// Removes pairs whose test process is gone (killed before its destructor ran).
  static void sweep_stale() {
    std::error_code ec;
    for (auto& e : std::filesystem::directory_iterator("/var/run/netns", ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(prefix, 0) != 0)
        continue;
      const std::string rest = name.substr(std::string(prefix).size());
      const auto dash = rest.find('-');
      if (dash == std::string::npos)
        continue;
      const std::string pid = rest.substr(0, dash);
      if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos)
        continue;
      if (std::stoi(pid) != ::getpid() && !std::filesystem::exists("/proc/" + pid))
        shell("ip netns del " + name);
    }
  }

  std::string a_, b_;
  bool created_ = false;
};

} // namespace testing_support
