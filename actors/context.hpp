#pragma once
/// What every actor of a node is given: who it is, how to reach others, the clock and
/// randomness (injected, so tests and the planner can drive them).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "actors/outbox.hpp"
#include "common/data_paths.hpp"
#include "config/config.hpp"

namespace vidline::actors {

struct context {
  std::string host;                        ///< this node's host name
  std::shared_ptr<const config::cluster> cluster;
  std::shared_ptr<outbox> out;
  std::string data_dir;                    ///< this host's data directory
  double time_scale = 1.0;                 ///< real seconds per run-clock second
  std::function<double()> run_now;         ///< run-clock seconds
  /// Seconds on this host's monotonic clock (never steps, keeps counting while the process
  /// is stopped): what leases are measured on. Tests inject their own.
  std::function<double()> mono_now = [] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
  };
  std::function<uint64_t()> random64;      ///< fresh epochs and ids
  /// Real milliseconds for a run-clock duration.
  int64_t real_ms(double run_s) const { return static_cast<int64_t>(run_s * time_scale * 1000); }
  /// Run-clock seconds for a real duration in milliseconds.
  double run_s(int64_t real_ms) const { return real_ms / 1000.0 / time_scale; }
};

/// Sub-directories of a host's data directory (common/data_paths.hpp spells them).
std::string latent_dir(const context& c);      ///< <data>/latents: <sha256>.latent (+ .job)
std::string output_dir(const context& c);      ///< <data>/outputs/<run>/...
/// Under a host's data directory: every video its decoder published, hard-linked by its
/// SHA-256 (<sha256>, no extension), which its bus serves to `vidline run --collect`.
using data_paths::output_blobs_subdir;
/// Under a host's data directory: its inputs (reference images) by SHA-256 (<sha256>): on
/// the coordinator's host those uploaded (nodes/data/inputs.hpp), elsewhere those pulled from it.
using data_paths::inputs_subdir;
std::string input_dir(const context& c);       ///< <data>/inputs/<sha256>
std::string work_dir(const context& c);        ///< <data>/work/<attempt>/...
std::string conditioning_dir(const context& c);///< <data>/conditioning/<prompt sha>.cond
std::string output_blob_dir(const context& c); ///< <data>/outputs/.by-sha256/<sha256>

} // namespace vidline::actors
