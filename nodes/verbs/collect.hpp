#pragma once
/// Collecting a run's videos to the submitting host (`vidline run --collect DIR`,
/// `vidline resume RUN --collect DIR`, `vidline wait RUN --collect DIR`; docs/shots.md).
///
/// Each succeeded job's video is pulled from its decoder's host over that host's bus, by
/// its SHA-256 (`latent_fetch` of kind "output", served from the decoder's hard links in
/// <data_dir>/outputs/.by-sha256), one chunk of knobs.chunk_bytes at a time: written to
/// `DIR/<file>.part` and hashed as it comes (never the whole video in memory), fsynced,
/// verified, then renamed to `DIR/<file>` and the directory fsynced; only then is its line
/// appended to `DIR/index.jsonl`. A file already at the target with the same SHA-256 is
/// already collected (its index line added if a kill left it out); one with other bytes is
/// refused and left alone. A `.part` left by a kill is started over.

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.hpp"

namespace vidline::nodes::verbs {

/// What collect_run did.
struct collect_report {
  uint32_t collected = 0;   ///< copied now, verified
  uint32_t already = 0;     ///< at the target already with the same bytes
  uint32_t refused = 0;     ///< another file at the target name: not overwritten
  uint32_t failed = 0;      ///< could not be fetched or verified now (retry: resume)
  uint32_t not_made = 0;    ///< jobs with no video yet (not succeeded)
  std::vector<std::string> problems;  ///< one line per refused or failed job
};

/// The index line (JSON, no newline) of a collected job, from its status JSON: name, file,
/// run_id, index, seed, width, height, seconds, prompt_sha256, reference_sha256, pool,
/// decoder, timings {conditioning_s, sampling_s, handoff_s, decode_s}, output_sha256, bytes.
std::string collected_line(const std::string& run_id, const nlohmann::json& job, uint64_t bytes);

/// Collects a run's videos into one directory as they finish: `vidline run --collect` calls
/// pass() with each status it polls (the jobs succeeded since are fetched then, so a kill
/// loses at most the one in flight), and once more, `final`, with the whole status at the
/// end. A job collected, found there, or refused is not looked at again by this collector;
/// one that failed is tried again by the final pass only (a host down does not hold up the
/// polling).
class collector {
public:
  /// Creates `dir`; throws std::runtime_error when it cannot.
  collector(const config::cluster& c, std::string dir);
  ~collector();
  collector(const collector&) = delete;
  collector& operator=(const collector&) = delete;

  /// Collects the succeeded jobs of `status` (a run's status JSON, or a page of it) not
  /// handled yet.
  void pass(const nlohmann::json& status, bool final);

  /// What was done so far (failed and problems: those of the last pass that tried).
  const collect_report& report() const { return r_; }

private:
  struct impl;
  std::unique_ptr<impl> p_;
  collect_report r_;
};

/// One collector, one final pass over `status` (the run's whole status JSON).
collect_report collect_run(const config::cluster& c, const nlohmann::json& status,
                           const std::string& dir);

/// Pulls the video of SHA-256 `sha` from `host`'s bus (as a collector does) into `dest`,
/// verified, written durably; "" on success (`bytes` its size), else why not.
std::string fetch_output(const config::cluster& c, const std::string& host,
                         const std::string& sha, const std::string& dest, uint64_t& bytes);

/// Pulls the latent of SHA-256 `sha` from the host that holds it (its latents, as a decoder
/// pulls one, on the authenticated link) into `dest`, verified, written durably; "" on
/// success (`bytes` its size), else why not.
std::string fetch_latent(const config::cluster& c, const std::string& host,
                         const std::string& sha, const std::string& dest, uint64_t& bytes);

/// One line for the user: "collected N, M already there, ... into DIR".
std::string format_collect_report(const collect_report& r, const std::string& dir);

} // namespace vidline::nodes::verbs
