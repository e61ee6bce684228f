#pragma once
/// A shot list for `vidline run --jobs FILE` and `vidline plan --jobs FILE` (docs/shots.md):
/// JSON Lines, one shot per line. The whole file is read and checked before anything is
/// submitted or planned; the first wrong line is named as "FILE:LINE: FIELD: what is wrong".

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config/knobs.hpp"
#include "messages/messages.hpp"

namespace vidline::nodes {

/// The most jobs `vidline run` submits at once: --count's maximum, and the most a shot list's
/// takes may add up to (a coordinator may hold fewer: knobs.max_jobs_per_run).
inline constexpr uint32_t run_max_jobs = 1000000;

/// The fields a shot line may have.
inline constexpr const char* shot_fields =
  "prompt, prompt_file, width, height, seconds, seed, takes, name, priority";

/// A shot list as read.
struct shot_list {
  std::vector<msg::shot> shots;
  std::vector<std::size_t> lines;  ///< the line (1-based) of each shot
  uint64_t jobs = 0;               ///< takes summed
};

/// Reads and checks a shot file: every line a JSON object of shot_fields only, exactly one
/// of prompt and prompt_file (relative to the file's folder), width, height, seconds and
/// seed given, each shot acceptable (planner::shot_problem), names and output stems unique,
/// takes summed at most `max_jobs`. Returns "" and fills `out`, or the error (nothing else
/// of the file is kept).
std::string read_shot_file(const std::string& path, const config::knobs& k, uint64_t max_jobs,
                           shot_list& out);

/// A prompt file's text, or "" with `why` set: a file (not a directory), not empty, and
/// within knobs.max_prompt_bytes.
std::string read_prompt_file(const std::string& path, const config::knobs& k, std::string& why);

/// `--jobs` with options it excludes: the error for the first such option given, else "".
std::string jobs_exclusive_error(const std::vector<std::string>& given);

} // namespace vidline::nodes
