// The node's GPU sampler (sampler.hpp).
#include "nodes/gpu/sampler.hpp"

#include <algorithm>
#include <chrono>

#include <spdlog/spdlog.h>

#include "common/metrics.hpp"

namespace vidline::nodes::gpu {
namespace {

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double mono_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

} // namespace

sampler::sampler(std::shared_ptr<const config::cluster> c, std::string host,
                 std::shared_ptr<actors::outbox> out, reader_options o, bool start_thread)
    : c_(std::move(c)), host_(std::move(host)), out_(std::move(out)), reader_(std::move(o)) {
  params_.hot_s = c_->knobs.gpu_hot_s;
  params_.recover_s = c_->knobs.gpu_recover_s;
  if (!reader_.nvml())
    spdlog::info("gpu telemetry: {}; NVIDIA cards read as unknown", reader_.nvml_status());
  else if (!reader_.xid_status().empty())
    spdlog::info("gpu telemetry: {}; Xid events unknown", reader_.xid_status());
  if (start_thread)
    thread_ = std::thread([this] { loop(); });
}

sampler::~sampler() {
  {
    std::lock_guard<std::mutex> l(m_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

void sampler::loop() {
  const auto interval = std::chrono::milliseconds(c_->knobs.gpu_sample_interval_ms);
  std::unique_lock<std::mutex> l(m_);
  while (!stop_) {
    l.unlock();
    try {
      sample_once(unix_seconds(), mono_seconds());
    } catch (const std::exception& e) {
      spdlog::warn("gpu telemetry: a reading failed: {}", e.what());
    }
    l.lock();
    cv_.wait_for(l, interval, [this] { return stop_; });
  }
}

msg::gpu_report sampler::sample_once(double unix_now, double mono_now) {
  const auto t0 = std::chrono::steady_clock::now();
  const config::host* h = c_->find_host(host_);
  static const std::vector<config::gpu> none;
  msg::gpu_report rep;
  rep.host = host_;
  rep.seq = ++seq_;
  rep.gpus = reader_.read(h != nullptr ? h->gpus : none, unix_now);
  // The pools and decoders on each card, for the metrics' `pool` label.
  std::map<std::string, std::string> pool_of;
  for (auto& p : c_->pools)
    if (p.host == host_)
      for (auto& g : p.gpus)
        pool_of[g] += (pool_of[g].empty() ? "" : "+") + p.name;
  auto& reg = metrics::global();
  for (const char* name : {"vidline_gpu_telemetry", "vidline_gpu_healthy"})
    reg.clear(name);
  for (auto& g : rep.gpus) {
    const std::string key = g.id.empty() ? "#" + std::to_string(g.index) : g.id;
    auto& hs = health_[key];
    if (vidline::actors::gpu::step(hs, g, params_, mono_now))
      spdlog::log(g.health == "sick" ? spdlog::level::warn : spdlog::level::info,
                  "gpu {} ({}): {}", key, g.name,
                  g.health == "sick" ? "sick: " + g.health_reason : "well again");
    reg.set("vidline_gpu_telemetry", {{"host", host_}, {"gpu", key}, {"source", g.source}}, 1);
    if (g.source == "unknown")
      continue;
    const metrics::labels l{{"host", host_}, {"gpu", key}, {"pool", pool_of[g.id]}};
    auto put = [&](const char* name, double v, double scale = 1) {
      if (v >= 0)
        reg.set(name, l, v * scale);
    };
    put("vidline_gpu_temperature_celsius", g.temperature_c);
    put("vidline_gpu_memory_temperature_celsius", g.memory_temperature_c);
    put("vidline_gpu_slowdown_celsius", g.slowdown_c);
    put("vidline_gpu_power_watts", g.power_w);
    put("vidline_gpu_utilization_ratio", g.utilization, 0.01);
    put("vidline_gpu_memory_used_bytes", g.memory_used_mib, 1 << 20);
    put("vidline_gpu_memory_total_bytes", g.memory_total_mib, 1 << 20);
    put("vidline_gpu_sm_clock_hertz", g.sm_clock_mhz, 1e6);
    put("vidline_gpu_memory_clock_hertz", g.memory_clock_mhz, 1e6);
    put("vidline_gpu_throttle_reasons", static_cast<double>(g.throttle_reasons));
    put("vidline_gpu_ecc_uncorrected_errors", static_cast<double>(g.ecc_uncorrected));
    put("vidline_gpu_pcie_link_width", g.pcie_width);
    put("vidline_gpu_pcie_link_generation", g.pcie_gen);
    reg.set("vidline_gpu_healthy", l, g.health == "sick" ? 0 : 1);
    if (g.xid_events >= 0) {
      // The counter from 0 at the card's first reading; each new event logged once.
      auto seen = xid_seen_.find(key);
      const int64_t before = seen == xid_seen_.end() ? 0 : seen->second;
      if (g.xid_events > before) {
        const char* meaning = vidline::actors::gpu::xid_meaning(g.xid_last);
        spdlog::warn("gpu {} ({}): Xid {}{}{}; Xids since the node started: {}", key, g.name,
                     g.xid_last, *meaning != '\0' ? ", " : "", meaning, g.xid_events);
      }
      reg.add("vidline_gpu_xid_events_total", l,
              static_cast<double>(std::max<int64_t>(g.xid_events - before, 0)));
      xid_seen_[key] = g.xid_events;
      if (g.xid_last >= 0) {
        reg.set("vidline_gpu_xid_last_code", l, g.xid_last);
        reg.set("vidline_gpu_xid_last_timestamp_seconds", l, g.xid_last_unix_s);
      }
    }
    // Energy: the card's own counter where it has one, else power held between readings.
    double joules = 0;
    if (g.energy_j >= 0) {
      auto seen = energy_seen_.find(key);
      if (seen != energy_seen_.end() && g.energy_j >= seen->second)
        joules = g.energy_j - seen->second;
      energy_seen_[key] = g.energy_j;
    } else if (g.power_w >= 0) {
      auto seen = power_seen_.find(key);
      if (seen != power_seen_.end() && mono_now > seen->second.first)
        joules = seen->second.second * (mono_now - seen->second.first);
    }
    if (g.power_w >= 0)
      power_seen_[key] = {mono_now, g.power_w};
    reg.add("vidline_gpu_energy_joules_total", l, joules);
  }
  reg.add("vidline_gpu_samples_total", {});
  reg.add("vidline_gpu_sample_seconds_total", {},
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  if (out_ && !c_->coordinator.empty())
    out_->send(c_->coordinator, "coordinator", rep);
  return rep;
}

} // namespace vidline::nodes::gpu
