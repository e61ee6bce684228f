#include "common/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>
#include <sstream>

namespace vidline::metrics {

namespace {

/// Stage durations span a cached conditioning (a fraction of a second) to a long sampling
/// (tens of minutes).
const std::vector<double> stage_buckets{0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600};

} // namespace

const std::vector<definition>& definitions() {
  static const std::vector<definition> defs{
    {"vidline_build_info", kind::gauge, "Always 1; labels: this node's host and vidline version", {}},
    {"vidline_jobs", kind::gauge,
     "Jobs the coordinator holds, by state (queued, sampling, sampled, decoding, succeeded, failed)", {}},
    {"vidline_runs", kind::gauge, "Runs the coordinator holds, by state (running, succeeded, failed)", {}},
    {"vidline_host_up", kind::gauge, "1 while the coordinator sees the host up, 0 while down", {}},
    {"vidline_gpu_temperature_celsius", kind::gauge,
     "The card's (edge) temperature, from NVML or amdgpu hwmon", {}},
    {"vidline_gpu_memory_temperature_celsius", kind::gauge,
     "The card's memory temperature where it reports one (HBM cards, amdgpu mem sensor)", {}},
    {"vidline_gpu_slowdown_celsius", kind::gauge,
     "The temperature at which the driver slows the card down (NVML slowdown threshold, amdgpu temp*_crit)", {}},
    {"vidline_gpu_power_watts", kind::gauge,
     "The card's power draw", {}},
    {"vidline_gpu_energy_joules_total", kind::counter,
     "Energy the card used since the node started: its driver's energy counter where it has one, else its power integrated between readings", {}},
    {"vidline_gpu_utilization_ratio", kind::gauge,
     "Share of the last sample period a kernel ran on the card, 0-1", {}},
    {"vidline_gpu_memory_used_bytes", kind::gauge,
     "Memory in use on the card, by every process", {}},
    {"vidline_gpu_memory_total_bytes", kind::gauge,
     "The card's memory", {}},
    {"vidline_gpu_sm_clock_hertz", kind::gauge,
     "The card's shader clock (NVML SM clock, amdgpu pp_dpm_sclk)", {}},
    {"vidline_gpu_memory_clock_hertz", kind::gauge,
     "The card's memory clock", {}},
    {"vidline_gpu_throttle_reasons", kind::gauge,
     "NVML's clock throttle reasons as a bit mask (0: none; 0x20 software thermal, 0x40 hardware thermal, 0x80 power brake)", {}},
    {"vidline_gpu_ecc_uncorrected_errors", kind::gauge,
     "Uncorrectable ECC errors since the driver loaded (volatile count); any drains the card's pools", {}},
    {"vidline_gpu_xid_events_total", kind::counter,
     "Xid events (NVML's critical-error events) the card raised since the node started; absent where the driver reports none", {}},
    {"vidline_gpu_xid_last_code", kind::gauge,
     "The code of the card's newest Xid since the node started (e.g. 13 an application's fault, 79 fallen off the bus); absent before the first", {}},
    {"vidline_gpu_xid_last_timestamp_seconds", kind::gauge,
     "When the node saw the card's newest Xid (unix seconds, its wall clock)", {}},
    {"vidline_gpu_pcie_link_width", kind::gauge,
     "PCIe lanes the card's link runs at now", {}},
    {"vidline_gpu_pcie_link_generation", kind::gauge,
     "PCIe generation the card's link runs at now", {}},
    {"vidline_gpu_healthy", kind::gauge,
     "1 while the health rule finds the card well, 0 while sick (its pools and decoders drained); absent without telemetry", {}},
    {"vidline_gpu_telemetry", kind::gauge,
     "1 per card the node reads: source nvml, amdgpu or unknown (no telemetry for it)", {}},
    {"vidline_gpu_samples_total", kind::counter,
     "Readings of all the host's cards (one per gpu_sample_interval_ms)", {}},
    {"vidline_gpu_sample_seconds_total", kind::counter,
     "Real seconds the node spent reading its cards (the telemetry's own cost)", {}},
    {"vidline_drained", kind::gauge,
     "1 while a pool or decoder (target pool:NAME, decoder:NAME) is drained: no new orders", {}},
    {"vidline_drain_changes_total", kind::counter,
     "Drains (drained 1) and returns to service (0) of a pool or decoder, by hand or by a card's health", {}},
    {"vidline_runs_forgotten_total", kind::counter,
     "Finished runs the coordinator dropped from its memory (knob finished_run_memory_s); the "
     "journal still answers for them", {}},
    {"vidline_journal_runs_dropped_total", kind::counter,
     "Finished runs whose records the coordinator deleted from its journal (knob "
     "journal_keep_finished_s)", {}},
    {"vidline_unknown_job_results_total", kind::counter,
     "Results naming a job the coordinator does not hold (a forgotten run's): acknowledged, "
     "otherwise ignored", {}},
    {"vidline_stage_duration_seconds", kind::histogram,
     "Duration of each finished stage attempt (conditioning, sampling, handoff, decode) by lane, "
     "in run-clock seconds (simulated seconds on the sim backend)", stage_buckets},
    {"vidline_stage_attempts_total", kind::counter,
     "Stage attempts ended, by stage, lane and outcome (ok, transient, fatal, corrupt, ...)", {}},
    {"vidline_pool_busy_seconds_total", kind::counter,
     "Real seconds a pool held an order (conditioning, sampling or committing)", {}},
    {"vidline_pool_idle_seconds_total", kind::counter, "Real seconds a pool held no order", {}},
    {"vidline_decoder_pending", kind::gauge,
     "Latents arrived at a decoder that wait for its decode (by design at most 1)", {}},
    {"vidline_decoder_pending_max", kind::gauge,
     "The most latents that waited at a decoder at once since the node started (by design 1)", {}},
    {"vidline_decoder_holding", kind::gauge, "Orders a decoder holds (fetching, pending or decoding; at most 2)", {}},
    {"vidline_decode_errors_total", kind::counter,
     "Decode attempts that failed at a decoder (fetch or decode), by outcome", {}},
    {"vidline_handoff_bytes_total", kind::counter, "Latent bytes a decoder fetched from their sampling host", {}},
    {"vidline_handoff_seconds_total", kind::counter, "Real seconds a decoder spent fetching latents", {}},
    {"vidline_latent_bytes_waiting", kind::gauge,
     "Bytes of latents held on this host (waiting for their decode or their retention)", {}},
    {"vidline_latent_files", kind::gauge, "Latent files held on this host", {}},
    {"vidline_videos_collected_total", kind::counter,
     "Videos a host with a collect_dir copied in, verified, from their decoder's host", {}},
    {"vidline_videos_not_collected", kind::gauge,
     "Videos of finished runs a host with a collect_dir could not collect (fetch failed, or another file at the name)", {}},
    {"vidline_leftovers_removed_total", kind::counter,
     "Leftovers a host removed past their retention (part files, work directories, conditioning, video links, receipts, inputs), by kind", {}},
    {"vidline_bus_frames_received_total", kind::counter, "Frames the bus read (valid or not)", {}},
    {"vidline_bus_frames_sent_total", kind::counter, "Frames the bus handed to ZeroMQ", {}},
    {"vidline_bus_dropped_frames_total", kind::counter,
     "Frames the bus dropped, by reason (a decode error's name, duplicate, send_refused, "
     "queue_full, unroutable, refused_peer, impersonation, bulk_misuse, stale_chunk)", {}},
    {"vidline_bus_handler_errors_total", kind::counter, "Exceptions thrown by the bus's message handlers", {}},
    {"vidline_refused_connections_total", kind::counter,
     "Connections refused, by channel (bus: unlisted key or failed handshake; bulk: unlisted "
     "address; http: missing or wrong bearer token, or another origin)", {}},
    {"vidline_actor_restarts_total", kind::counter, "Actors restarted by the node's supervisor", {}},
    {"vidline_data_dir_free_bytes", kind::gauge, "Bytes free to this node on the file system of its data directory", {}},
    {"vidline_http_requests_total", kind::counter, "HTTP requests answered, by status code", {}},
  };
  return defs;
}

registry::registry() {
  for (auto& d : definitions())
    defs_[d.name] = &d;
}

const definition* registry::find(const std::string& name, kind k) {
  auto it = defs_.find(name);
  if (it == defs_.end() || it->second->type != k) {
    ++misuse_;
    return nullptr;
  }
  return it->second;
}

namespace {
labels sorted(labels l) {
  std::sort(l.begin(), l.end());
  return l;
}
} // namespace

void registry::add(const std::string& name, const labels& l, double v) {
  std::lock_guard<std::mutex> lock(m_);
  if (find(name, kind::counter) == nullptr)
    return;
  if (!(v >= 0) || !std::isfinite(v)) {
    ++misuse_;
    return;
  }
  values_[name][sorted(l)].value += v;
}

void registry::set(const std::string& name, const labels& l, double v) {
  std::lock_guard<std::mutex> lock(m_);
  if (find(name, kind::gauge) == nullptr)
    return;
  values_[name][sorted(l)].value = v;
}

void registry::set_max(const std::string& name, const labels& l, double v) {
  std::lock_guard<std::mutex> lock(m_);
  if (find(name, kind::gauge) == nullptr)
    return;
  auto& by = values_[name];
  auto k = sorted(l);
  auto it = by.find(k);
  if (it == by.end())
    by[k].value = v;
  else
    it->second.value = std::max(it->second.value, v);
}

void registry::observe(const std::string& name, const labels& l, double v) {
  std::lock_guard<std::mutex> lock(m_);
  const auto* d = find(name, kind::histogram);
  if (d == nullptr)
    return;
  if (!std::isfinite(v)) {
    ++misuse_;
    return;
  }
  auto& s = values_[name][sorted(l)];
  if (s.bucket_counts.empty())
    s.bucket_counts.assign(d->buckets.size(), 0);
  auto at = std::lower_bound(d->buckets.begin(), d->buckets.end(), v) - d->buckets.begin();
  if (static_cast<std::size_t>(at) < s.bucket_counts.size())
    ++s.bucket_counts[at];
  ++s.count;
  s.sum += v;
}

void registry::clear(const std::string& name) {
  std::lock_guard<std::mutex> lock(m_);
  values_.erase(name);
}

int registry::add_collector(collector c) {
  std::lock_guard<std::mutex> lock(m_);
  int id = next_collector_++;
  collectors_[id] = std::move(c);
  return id;
}

void registry::remove_collector(int id) {
  std::lock_guard<std::mutex> lock(m_);
  collectors_.erase(id);
}

double registry::value(const std::string& name, const labels& l) const {
  std::lock_guard<std::mutex> lock(m_);
  auto it = values_.find(name);
  if (it == values_.end())
    return std::numeric_limits<double>::quiet_NaN();
  auto s = it->second.find(sorted(l));
  return s == it->second.end() ? std::numeric_limits<double>::quiet_NaN() : s->second.value;
}

uint64_t registry::misuse() const {
  std::lock_guard<std::mutex> lock(m_);
  return misuse_;
}

std::string escape_label(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string format_value(double v) {
  if (std::isnan(v))
    return "NaN";
  if (std::isinf(v))
    return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  // The shortest form that reads back the same.
  for (int p = 1; p <= 17; ++p) {
    char t[32];
    std::snprintf(t, sizeof t, "%.*g", p, v);
    if (std::strtod(t, nullptr) == v)
      return t;
  }
  return buf;
}

namespace {

std::string label_text(const labels& l, const std::string& extra_name = "",
                       const std::string& extra_value = "") {
  if (l.empty() && extra_name.empty())
    return "";
  std::string out = "{";
  bool first = true;
  for (auto& [k, v] : l) {
    out += (first ? "" : ",") + k + "=\"" + escape_label(v) + "\"";
    first = false;
  }
  if (!extra_name.empty())
    out += (first ? "" : ",") + extra_name + "=\"" + escape_label(extra_value) + "\"";
  return out + "}";
}

const char* type_name(kind k) {
  switch (k) {
  case kind::counter:
    return "counter";
  case kind::gauge:
    return "gauge";
  case kind::histogram:
    return "histogram";
  }
  return "untyped";
}

std::string help_text(const std::string& h) {
  std::string out;
  for (char c : h) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

} // namespace

std::string registry::render() const {
  // Collectors run without the lock (they may be slow: statvfs, another lock).
  std::vector<collector> cs;
  {
    std::lock_guard<std::mutex> lock(m_);
    for (auto& [id, c] : collectors_)
      cs.push_back(c);
  }
  std::map<std::string, std::map<key, double>> collected;
  for (auto& c : cs) {
    std::vector<sample> got;
    try {
      got = c();
    } catch (...) {
      continue;  // a collector that fails shows nothing this time
    }
    for (auto& s : got)
      collected[s.name][sorted(s.labels)] += s.value;
  }
  std::ostringstream out;
  std::lock_guard<std::mutex> lock(m_);
  for (auto& d : definitions()) {
    auto v = values_.find(d.name);
    auto c = collected.find(d.name);
    const bool any = (v != values_.end() && !v->second.empty()) ||
                     (c != collected.end() && !c->second.empty() && d.type != kind::histogram);
    if (!any)
      continue;
    out << "# HELP " << d.name << " " << help_text(d.help) << "\n";
    out << "# TYPE " << d.name << " " << type_name(d.type) << "\n";
    if (d.type == kind::histogram) {
      for (auto& [k, s] : v->second) {
        uint64_t cum = 0;
        for (std::size_t i = 0; i < d.buckets.size(); ++i) {
          cum += i < s.bucket_counts.size() ? s.bucket_counts[i] : 0;
          out << d.name << "_bucket" << label_text(k, "le", format_value(d.buckets[i])) << " "
              << cum << "\n";
        }
        out << d.name << "_bucket" << label_text(k, "le", "+Inf") << " " << s.count << "\n";
        out << d.name << "_sum" << label_text(k) << " " << format_value(s.sum) << "\n";
        out << d.name << "_count" << label_text(k) << " " << s.count << "\n";
      }
      continue;
    }
    std::map<key, double> all;
    if (v != values_.end())
      for (auto& [k, s] : v->second)
        all[k] = s.value;
    if (c != collected.end())
      for (auto& [k, x] : c->second)
        all[k] = x;
    for (auto& [k, x] : all)
      out << d.name << label_text(k) << " " << format_value(x) << "\n";
  }
  return out.str();
}

registry& global() {
  static registry r;
  return r;
}

} // namespace vidline::metrics
