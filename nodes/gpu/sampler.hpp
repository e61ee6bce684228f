#pragma once
/// A node's GPU sampler: reads every card each gpu_sample_interval_ms on a thread of its
/// own (an NVML call may block for milliseconds: never on the CAF scheduler), applies the
/// health rule (actors/gpu/health.hpp) on the node's monotonic clock, puts the figures in
/// the node's metrics registry and sends them to the coordinator (gpu_report).

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "actors/gpu/health.hpp"
#include "actors/outbox.hpp"
#include "config/config.hpp"
#include "nodes/gpu/telemetry.hpp"

namespace vidline::nodes::gpu {

class sampler {
public:
  /// Starts sampling (`out` nullptr: no reports, metrics only). `o`: where to read.
  sampler(std::shared_ptr<const config::cluster> c, std::string host,
          std::shared_ptr<actors::outbox> out, reader_options o, bool start_thread = true);
  ~sampler();
  sampler(const sampler&) = delete;
  sampler& operator=(const sampler&) = delete;

  /// One round: read, judge, record, report. `unix_now` stamps the readings, `mono_now`
  /// (seconds) drives the health rule. The thread calls it; tests call it directly.
  msg::gpu_report sample_once(double unix_now, double mono_now);

private:
  void loop();
  std::shared_ptr<const config::cluster> c_;
  std::string host_;
  std::shared_ptr<actors::outbox> out_;
  reader reader_;
  vidline::actors::gpu::health_params params_;
  std::map<std::string, vidline::actors::gpu::health_state> health_;   ///< by card key
  std::map<std::string, double> energy_seen_;         ///< card key -> its counter last read
  std::map<std::string, std::pair<double, double>> power_seen_;  ///< (mono, watts) last read
  std::map<std::string, int64_t> xid_seen_;           ///< card key -> its Xid count last read
  uint64_t seq_ = 0;
  std::mutex m_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

} // namespace vidline::nodes::gpu
