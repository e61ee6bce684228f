#include "nodes/systemd_notify.hpp"

#include <chrono>
#include <cstdlib>
#include <cstring>

#include <systemd/sd-daemon.h>

#include <spdlog/spdlog.h>

namespace vidline::nodes {

bool watchdog_gate::alive(const std::vector<uint64_t>& progress) {
  stalled_.clear();
  last_.resize(progress.size(), 0);
  for (std::size_t i = 0; i < progress.size(); ++i) {
    if (progress[i] == last_[i])
      stalled_.push_back(i);
    last_[i] = progress[i];
  }
  return stalled_.empty();
}

service_notifier::service_notifier() {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  enabled_ = socket != nullptr && *socket != '\0';
  uint64_t usec = 0;
  // > 0: a watchdog for this process (WATCHDOG_USEC set, WATCHDOG_PID absent or ours).
  if (enabled_ && sd_watchdog_enabled(0, &usec) > 0)
    watchdog_usec_ = usec;
}

service_notifier::~service_notifier() { stop_watchdog(); }

void service_notifier::ready(const std::string& status) {
  if (!enabled_)
    return;
  const int rc = sd_notifyf(0, "READY=1\nSTATUS=%s", status.c_str());
  if (rc < 0)
    spdlog::warn("sd_notify READY=1 failed: {}", std::strerror(-rc));
}

void service_notifier::stopping(const std::string& status) {
  stop_watchdog();
  if (enabled_)
    sd_notifyf(0, "STOPPING=1\nSTATUS=%s", status.c_str());
}

void service_notifier::start_watchdog(std::vector<watched_loop> loops) {
  if (watchdog_usec_ == 0 || thread_.joinable())
    return;
  spdlog::info("systemd watchdog: every {} ms, while the {} loops turn", watchdog_usec_ / 2000,
               loops.size());
  thread_ = std::thread([this, l = std::move(loops)]() mutable { watch(std::move(l)); });
}

void service_notifier::stop_watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

void service_notifier::watch(std::vector<watched_loop> loops) {
  const auto period = std::chrono::microseconds(watchdog_usec_ / 2);
  watchdog_gate gate;
  bool was_stalled = false;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    std::vector<uint64_t> progress;
    for (const auto& l : loops)
      progress.push_back(l.turns());
    if (gate.alive(progress)) {
      sd_notify(0, "WATCHDOG=1");
      if (was_stalled)
        spdlog::info("systemd watchdog: every loop turns again");
      was_stalled = false;
    } else if (!was_stalled) {
      std::string names;
      for (auto i : gate.stalled())
        names += (names.empty() ? "" : ", ") + loops[i].name;
      spdlog::error("systemd watchdog: the {} loop has not turned in {} ms: not petting "
                    "(systemd kills the node after {} ms of this)",
                    names, watchdog_usec_ / 2000, watchdog_usec_ / 1000);
      was_stalled = true;
    }
    if (wake_.wait_for(lock, period, [this] { return stop_; }))
      return;
  }
}

} // namespace vidline::nodes
