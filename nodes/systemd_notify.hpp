#pragma once
/// The node's side of systemd's service protocol (sd_notify(3), `Type=notify`):
/// READY=1 once its bus is bound and its actors are started, WATCHDOG=1 every half
/// WATCHDOG_USEC while its loops turn, STOPPING=1 when it stops. Without NOTIFY_SOCKET
/// (not started by systemd, or by a unit without Type=notify) every call does nothing.
/// What the watchdog catches: a node whose bus I/O loop or main loop is stuck (a deadlock,
/// a callback that never returns, a livelocked disk) while the process is still there;
/// systemd kills it (SIGABRT) and, with Restart=on-failure, starts it again.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace vidline::nodes {

/// Whether the watchdog may be petted: every loop's progress counter moved since the
/// previous check. Pure; the first check compares with zero.
class watchdog_gate {
public:
  /// Takes the counters now; true when each one moved since the last call. Afterwards
  /// stalled() lists the indices of those that did not.
  bool alive(const std::vector<uint64_t>& progress);
  const std::vector<std::size_t>& stalled() const { return stalled_; }

private:
  std::vector<uint64_t> last_;
  std::vector<std::size_t> stalled_;
};

/// A loop whose progress the watchdog checks.
struct watched_loop {
  std::string name;                  ///< for the log: "bus", "main"
  std::function<uint64_t()> turns;   ///< how many times it has turned so far
};

/// The notifications of one node process.
class service_notifier {
public:
  /// Reads NOTIFY_SOCKET and WATCHDOG_USEC (through libsystemd).
  service_notifier();
  /// Stops the watchdog thread.
  ~service_notifier();
  service_notifier(const service_notifier&) = delete;
  service_notifier& operator=(const service_notifier&) = delete;

  /// Whether systemd listens (NOTIFY_SOCKET set).
  bool enabled() const { return enabled_; }
  /// The watchdog period systemd asked for, in microseconds (0 = none).
  uint64_t watchdog_usec() const { return watchdog_usec_; }

  /// READY=1, with `status` as STATUS=.
  void ready(const std::string& status);
  /// When systemd asked for a watchdog, starts the thread that checks `loops` every half
  /// period and sends WATCHDOG=1 only when every one of them turned since the last check.
  void start_watchdog(std::vector<watched_loop> loops);
  /// STOPPING=1, and the watchdog thread ends.
  void stopping(const std::string& status);

private:
  void watch(std::vector<watched_loop> loops);
  void stop_watchdog();

  bool enabled_ = false;
  uint64_t watchdog_usec_ = 0;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

} // namespace vidline::nodes
