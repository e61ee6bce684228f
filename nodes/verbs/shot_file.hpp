#pragma once
/// A shot list for `vidline run --jobs FILE` and `vidline plan --jobs FILE` (docs/shots.md):
/// JSON Lines, one shot per line. The whole file is read and checked before anything is
/// submitted or planned; the first wrong line is named as "FILE:LINE: FIELD: what is wrong".

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "actors/coordinator/scheduler.hpp"
#include "config/knobs.hpp"
#include "config/workflows.hpp"
#include "messages/messages.hpp"

namespace vidline::nodes::verbs {

/// The most jobs `vidline run` submits at once: --count's maximum, and the most a shot list's
/// takes may add up to (a coordinator may hold fewer: knobs.max_jobs_per_run).
inline constexpr uint32_t run_max_jobs = 1000000;

/// The fields a shot line may have.
inline constexpr const char* shot_fields =
  "prompt, prompt_file, reference, width, height, seconds, seed, takes, name, priority, "
  "negative_prompt, workflow, params, inputs, sequence";

/// The largest reference image a shot may name (bytes).
inline constexpr uint64_t max_reference_image_bytes = 64ull << 20;

/// A shot list as read.
struct shot_list {
  std::vector<msg::shot> shots;
  std::vector<std::size_t> lines;  ///< the line (1-based) of each shot
  uint64_t jobs = 0;               ///< takes summed
};

/// Reads and checks a shot file: JSON Lines (a file whose name ends in .csv: CSV with a
/// header line naming the columns), every line a JSON object of shot_fields only, exactly one
/// of prompt and prompt_file (relative to the file's folder), width, height, seconds and
/// seed given, `reference` (relative to the file's folder) an existing regular file of at
/// most max_reference_image_bytes (its SHA-256 is recorded), each shot acceptable
/// (actors::coordinator::shot_problem), names and output stems unique, takes summed at most `max_jobs`.
/// Returns "" and fills `out`, or the errors "FILE:LINE: FIELD: what is wrong", one line each
/// for every bad line up to max_bad_lines (nothing else of the file is kept).
/// With `cat`, each shot's workflow, params and inputs are checked against it
/// (config::resolve_shot: "FILE:LINE: params.steps: ..."), CSV cells of params read as their
/// declared types. Inputs (`inputs`: {"NAME": "file"}, CSV columns input.NAME) are read as
/// `reference` is: existing files, their SHA-256 recorded.
/// The most bad lines of a shot file reported at once.
inline constexpr std::size_t max_bad_lines = 20;

std::string read_shot_file(const std::string& path, const config::knobs& k, uint64_t max_jobs,
                           shot_list& out, const config::catalog* cat = nullptr);

/// A prompt file's text, or "" with `why` set: a file (not a directory), not empty, and
/// within knobs.max_prompt_bytes.
std::string read_prompt_file(const std::string& path, const config::knobs& k, std::string& why);

/// A reference image for `run`: "" and `abs_path`, `sha256` set, or why not (missing, not a
/// regular file, over max_reference_image_bytes, unreadable, path not acceptable on the bus).
std::string read_reference(const std::string& path, std::string& abs_path, std::string& sha256);

/// The first shot of `list` (read from `path`) no pool of `mode` can hold, as
/// "FILE:LINE: size: <actors::coordinator::capacity_refusal>", else "".
std::string shot_file_capacity(const std::string& path, const shot_list& list,
                               const actors::coordinator::state& s, const std::string& mode);

/// The shot-model fields of one line's object (negative_prompt, workflow, params, inputs;
/// input paths relative to `folder`), read into `s`: "" or "FIELD: what is wrong". Shared by
/// the shot list's JSON and CSV lines (nodes/verbs/shot_model.cpp).
std::string read_shot_model(const nlohmann::json& j, const std::string& folder, msg::shot& s);

/// `--jobs` with options it excludes: the error for the first such option given, else "".
std::string jobs_exclusive_error(const std::vector<std::string>& given);

} // namespace vidline::nodes::verbs
