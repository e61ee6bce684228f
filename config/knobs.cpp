/// The knobs as data: one table (visit_knobs) names every knob and its range once; the
/// JSON reader, the JSON writer and the validator are visitors over it, so a knob added to
/// knobs.hpp and to the table is read, written and checked everywhere.

#include <cmath>
#include <limits>
#include <sstream>

#include "config/json_reader.hpp"
#include "config/schema.hpp"

namespace vidline::config {

namespace {

using detail::child;
using detail::json;

/// Inclusive bounds of an integer knob.
struct int_range {
  int64_t lo;
  int64_t hi;
};

/// A duration knob: more than 0 and at most `max` seconds.
struct seconds_range {
  double max;
};

/// An amount of memory in GiB: 0 up to `max`.
struct gib_range {
  double max;
};

constexpr int64_t kib = 1024;
constexpr int64_t mib = 1024 * kib;
constexpr int64_t gib = 1024 * mib;
constexpr int64_t u32_max = std::numeric_limits<uint32_t>::max();
/// Real-time intervals: 1 ms up to an hour.
constexpr int_range interval_ms{1, 3'600'000};
/// Room a frame needs besides its payload (envelope, job fields).
constexpr int64_t frame_headroom = 64 * kib;
constexpr double day_s = 86'400;

/// Calls `v(name, member, range)` for every knob of `k`, and `v(name, policy)` for every
/// restart policy. `K` is `knobs` or `const knobs`.
template <class K, class V>
void visit_knobs(K& k, V&& v) {
  v("heartbeat_interval_ms", k.heartbeat_interval_ms, interval_ms);
  v("heartbeat_misses", k.heartbeat_misses, int_range{1, 1000});
  v("reconnect_min_ms", k.reconnect_min_ms, interval_ms);
  v("reconnect_max_ms", k.reconnect_max_ms, interval_ms);
  v("status_interval_ms", k.status_interval_ms, interval_ms);
  v("order_resend_ms", k.order_resend_ms, interval_ms);
  v("lease_ms", k.lease_ms, interval_ms);
  v("sample_timeout_s", k.sample_timeout_s, seconds_range{30 * day_s});
  v("decode_timeout_s", k.decode_timeout_s, seconds_range{30 * day_s});
  v("max_attempts", k.max_attempts, int_range{1, 1000});
  v("handoff_retries", k.handoff_retries, int_range{0, 1000});
  v("retry_backoff_ms", k.retry_backoff_ms, int_range{0, 3'600'000});
  v("retry_backoff_max_ms", k.retry_backoff_max_ms, int_range{0, 3'600'000});
  v("model_wait_s", k.model_wait_s, int_range{-1, 30 * 86'400});
  v("checkpoint_interval_s", k.checkpoint_interval_s, seconds_range{day_s});
  v("stall_timeout_s", k.stall_timeout_s, int_range{0, 30 * 86'400});
  v("preempt_priority_gap", k.preempt_priority_gap, int_range{0, 1'000'000'000});
  v("chunk_bytes", k.chunk_bytes, int_range{4 * kib, 16 * mib});
  v("chunk_window", k.chunk_window, int_range{1, 1024});
  v("transfer_timeout_ms", k.transfer_timeout_ms, interval_ms);
  v("collect_interval_ms", k.collect_interval_ms, interval_ms);
  v("part_sync_bytes", k.part_sync_bytes, int_range{0, 1024 * gib});
  v("latent_retention_s", k.latent_retention_s, int_range{0, 30 * 86'400});
  v("latent_budget_bytes", k.latent_budget_bytes, int_range{0, 1024 * 1024 * gib});
  v("stale_part_s", k.stale_part_s, int_range{0, 365 * 86'400});
  v("conditioning_retention_s", k.conditioning_retention_s, int_range{0, 365 * 86'400});
  v("output_blob_retention_s", k.output_blob_retention_s, int_range{0, 365 * 86'400});
  v("receipt_retention_s", k.receipt_retention_s, int_range{0, 365 * 86'400});
  v("input_retention_s", k.input_retention_s, int_range{0, 365 * 86'400});
  v("max_frame_bytes", k.max_frame_bytes, int_range{4 * kib + frame_headroom, gib});
  v("max_prompt_bytes", k.max_prompt_bytes, int_range{1, gib - frame_headroom});
  v("max_jobs_per_run", k.max_jobs_per_run, int_range{1, u32_max});
  v("max_runs", k.max_runs, int_range{1, u32_max});
  v("max_queued_prompt_bytes", k.max_queued_prompt_bytes, int_range{1, 1024 * gib});
  v("finished_run_memory_s", k.finished_run_memory_s, int_range{0, 30 * 86'400});
  v("journal_keep_finished_s", k.journal_keep_finished_s, int_range{0, 3650 * 86'400});
  v("pool_restarts", k.pool_restarts);
  v("decoder_restarts", k.decoder_restarts);
  v("encoder_restarts", k.encoder_restarts);
  v("coordinator_restarts", k.coordinator_restarts);
  v("log_file_bytes", k.log_file_bytes, int_range{4 * kib, u32_max});
  v("log_files", k.log_files, int_range{1, 1000});
  v("gpu_sample_interval_ms", k.gpu_sample_interval_ms, int_range{100, 3'600'000});
  v("gpu_hot_s", k.gpu_hot_s, int_range{0, 86'400});
  v("gpu_recover_s", k.gpu_recover_s, int_range{0, 86'400});
  v("gpu_foreign_memory_gib", k.gpu_foreign_memory_gib, gib_range{1024});
}

constexpr int_range max_restarts_range{0, 1000};
constexpr seconds_range period_range{day_s};

std::string format_seconds(double s) {
  std::ostringstream out;
  out.precision(12);
  out << s;
  return out.str();
}

void check_seconds(double s, seconds_range r, const std::string& path) {
  if (!std::isfinite(s) || s <= 0 || s > r.max)
    throw config_error(path, "must be more than 0 and at most " + format_seconds(r.max) +
                                 " seconds, got " + format_seconds(s));
}

void check_integer(int64_t v, int_range r, const std::string& path) {
  if (v < r.lo || v > r.hi)
    throw config_error(path, detail::range_message(r.lo, r.hi, std::to_string(v)));
}

/// Reads the members present in a "knobs" object over the current values.
struct knob_reader {
  const detail::object_reader& r;

  template <class I>
  void operator()(const char* name, I& value, int_range range) const {
    if (r.has(name))
      value = static_cast<I>(r.integer(name, range.lo, range.hi));
  }
  void operator()(const char* name, double& value, seconds_range) const {
    value = r.number_or(name, value);
  }
  void operator()(const char* name, double& value, gib_range) const {
    value = r.number_or(name, value);
  }
  void operator()(const char* name, restart_policy& p) const {
    if (!r.has(name))
      return;
    const detail::object_reader policy(r.required(name), r.path_of(name),
                                       {"max_restarts", "period_s"});
    if (policy.has("max_restarts"))
      p.max_restarts = static_cast<int>(
          policy.integer("max_restarts", max_restarts_range.lo, max_restarts_range.hi));
    p.period_s = policy.number_or("period_s", p.period_s);
  }
};

/// Writes every knob into a JSON object.
struct knob_writer {
  json& out;

  template <class I>
  void operator()(const char* name, const I& value, int_range) const {
    out[name] = value;
  }
  void operator()(const char* name, const double& value, seconds_range) const {
    out[name] = value;
  }
  void operator()(const char* name, const double& value, gib_range) const {
    out[name] = value;
  }
  void operator()(const char* name, const restart_policy& p) const {
    out[name] = {{"max_restarts", p.max_restarts}, {"period_s", p.period_s}};
  }
};

/// Checks every knob against its own range.
struct knob_checker {
  template <class I>
  void operator()(const char* name, const I& value, int_range range) const {
    check_integer(static_cast<int64_t>(value), range, child("/knobs", name));
  }
  void operator()(const char* name, const double& value, seconds_range range) const {
    check_seconds(value, range, child("/knobs", name));
  }
  void operator()(const char* name, const double& value, gib_range range) const {
    if (!std::isfinite(value) || value < 0 || value > range.max)
      throw config_error(child("/knobs", name), "must be 0 to " + format_seconds(range.max) +
                                                    " GiB, got " + format_seconds(value));
  }
  void operator()(const char* name, const restart_policy& p) const {
    const std::string path = child("/knobs", name);
    check_integer(p.max_restarts, max_restarts_range, child(path, "max_restarts"));
    check_seconds(p.period_s, period_range, child(path, "period_s"));
  }
};

/// Collects the knob names, for the unknown-key check.
struct knob_namer {
  std::vector<std::string>& names;

  template <class... Rest>
  void operator()(const char* name, Rest&&...) const {
    names.emplace_back(name);
  }
};

/// The rules between knobs. Each names the knob that has to give way.
void check_relations(const knobs& k) {
  const auto fail = [](const char* name, const std::string& message) {
    throw config_error(child("/knobs", name), message);
  };
  if (k.reconnect_max_ms < k.reconnect_min_ms)
    fail("reconnect_max_ms", "must be at least reconnect_min_ms (" +
                                 std::to_string(k.reconnect_min_ms) + "), got " +
                                 std::to_string(k.reconnect_max_ms));
  // An order is confirmed by the next status report; resending sooner only duplicates it.
  if (k.order_resend_ms <= k.status_interval_ms)
    fail("order_resend_ms", "must be more than status_interval_ms (" +
                                std::to_string(k.status_interval_ms) + "), got " +
                                std::to_string(k.order_resend_ms));
  // A lease is renewed by status reports: it has to outlive two of them, or a lost report
  // would end a healthy worker's lease.
  if (int64_t{k.lease_ms} <= 2 * int64_t{k.status_interval_ms})
    fail("lease_ms", "must be more than 2 x status_interval_ms (" +
                         std::to_string(2 * int64_t{k.status_interval_ms}) + "), got " +
                         std::to_string(k.lease_ms));
  if (k.retry_backoff_max_ms < k.retry_backoff_ms)
    fail("retry_backoff_max_ms", "must be at least retry_backoff_ms (" +
                                     std::to_string(k.retry_backoff_ms) + "), got " +
                                     std::to_string(k.retry_backoff_max_ms));
  // A run leaves the coordinator's memory before the journal: deleting the records of a
  // run still in memory would leave its next change (a resume) half journaled.
  if (k.journal_keep_finished_s != 0 && k.journal_keep_finished_s < k.finished_run_memory_s)
    fail("journal_keep_finished_s", "must be 0 (keep forever) or at least finished_run_memory_s (" +
                                        std::to_string(k.finished_run_memory_s) + "), got " +
                                        std::to_string(k.journal_keep_finished_s));
  const int64_t min_frame = int64_t{k.chunk_bytes} + frame_headroom;
  if (k.max_frame_bytes < min_frame)
    fail("max_frame_bytes", "must be at least chunk_bytes + 64 KiB (" +
                                std::to_string(min_frame) + "), got " +
                                std::to_string(k.max_frame_bytes));
  const int64_t max_prompt = int64_t{k.max_frame_bytes} - frame_headroom;
  if (k.max_prompt_bytes > max_prompt)
    fail("max_prompt_bytes", "must be at most max_frame_bytes - 64 KiB (" +
                                 std::to_string(max_prompt) + "), got " +
                                 std::to_string(k.max_prompt_bytes));
}

} // namespace

namespace detail {

knobs read_knobs(const json& j, const std::string& path) {
  std::vector<std::string> names;
  visit_knobs(static_cast<const knobs&>(knobs{}), knob_namer{names});
  const object_reader r(j, path, names);
  knobs k;
  visit_knobs(k, knob_reader{r});
  return k;
}

} // namespace detail

knobs knobs_from_json(const nlohmann::json& j) {
  knobs k = detail::read_knobs(j, "/knobs");
  validate(k);
  return k;
}

nlohmann::json to_json(const knobs& k) {
  json out = json::object();
  visit_knobs(k, knob_writer{out});
  return out;
}

void validate(const knobs& k) {
  visit_knobs(k, knob_checker{});
  check_relations(k);
}

} // namespace vidline::config
