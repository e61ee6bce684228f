#pragma once
/// The index file of a run's output directory (docs/shots.md): <outputs>/<run>/index.jsonl,
/// one JSON line per video this host published for the run: its name, what it was made
/// from (prompt and reference digests, seed, size), where (pool, decoder), how long each
/// stage took, and the video's SHA-256.
///
/// Lines are appended (one write(2) with O_APPEND, then fsync) and never edited: a line once
/// there keeps its bytes. The one exception is a video retracted after it was published
/// (another attempt's video of the job won): its line is taken out (remove), the file
/// rewritten whole and renamed over the old one, so a reader sees it with or without the
/// line, never torn. A crash in the middle of an append can at worst leave
/// a last line without its newline; the next append first ends it with a newline, so that
/// fragment stays a line of its own that readers skip (it is not valid JSON) and every later
/// line is whole. A video already indexed with the same SHA-256 is not indexed again (a
/// video reused after a restart, a commit retried); one decoded again into other bytes gets
/// a new line, and the last line of a name is the one that holds.

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "messages/messages.hpp"

namespace vidline::actors::decoder {

/// The index file's name in a run's output directory.
inline constexpr const char* file_name = "index.jsonl";

/// What one index line says.
struct entry {
  msg::decode_order order;     ///< the job, the pool and the latent's stage seconds
  std::string output;          ///< the video's path
  std::string output_sha256;
  uint64_t bytes = 0;
  double handoff_s = 0;
  double decode_s = 0;
};

/// The line (JSON, no newline) of an entry. Keys: name (the file's stem), file, run_id,
/// index, seed, width, height, seconds, prompt_sha256, reference_sha256 (null: none), pool,
/// decoder, timings {conditioning_s, sampling_s, handoff_s, decode_s}, output_sha256, bytes,
/// and what it was made from (config::shot_record: workflow, model, params, inputs,
/// negative_prompt_sha256, ident, vidline_version), with negative_prompt and
/// model_identity (the sampled model's identity, null when unknown).
std::string line(const entry& e);

/// The (name, output_sha256) pairs an index file holds (lines that do not parse skipped).
std::set<std::pair<std::string, std::string>> read_keys(const std::string& path);

/// Indexes recently written to, by path: what they hold (so an append need not read the
/// whole file each time). Bounded: the oldest is forgotten past max_cached.
struct cache {
  static constexpr std::size_t max_cached = 8;
  std::map<std::string, std::set<std::pair<std::string, std::string>>> keys;
  std::map<std::string, uint64_t> used;
  uint64_t clock = 0;
};

/// Appends `e`'s line to the index at `path` unless a line with its name and SHA-256 is
/// there already (see the file comment). Returns true when it appended. Throws
/// std::runtime_error on an I/O error.
bool append(cache& c, const std::string& path, const entry& e);

/// The same for a line made elsewhere (`vidline run --collect`'s index): appends `line`
/// (JSON, no newline) unless the index holds (`name`, `sha256`) already.
bool append_line(cache& c, const std::string& path, const std::string& name,
                 const std::string& sha256, const std::string& line);

/// What append_review did.
enum class review_result {
  appended,  ///< the video's line again, with the review
  already,   ///< its last line holds a review of that revision or a later one
  no_line,   ///< the index holds no line of that video
};

/// A reviewer's verdict in the index (docs/shots.md): the last line of video `file` with
/// SHA-256 `sha256`, again, with `review` ({verdict, at_unix, take_index, revision}) set,
/// appended as any line is, so the last line of a name says the verdict. Idempotent by
/// revision: a review whose revision the video's last line holds already, or passed, is
/// not written again. Throws std::runtime_error on an I/O error.
review_result append_review(const std::string& path, const std::string& file,
                            const std::string& sha256, const nlohmann::json& review);

/// Takes the lines of (`name`, `sha256`) out of the index at `path` (a retracted video):
/// the rest is written to a temporary file, fsynced and renamed over it. Returns how many
/// lines went (0: none there, or no index: the file is left as it is). Throws
/// std::runtime_error on an I/O error.
std::size_t remove(cache& c, const std::string& path, const std::string& name,
                   const std::string& sha256);

} // namespace vidline::actors::decoder
