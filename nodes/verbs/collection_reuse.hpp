#pragma once
/// A collection folder as a source of outputs to reuse (`vidline run --collect DIR`,
/// docs/shots.md, "Job keys"): the videos its index names that are still there with the
/// bytes their line says. The client reads and hashes them (the only I/O); the coordinator
/// decides which job reuses which (actors::coordinator::graph: a job whose key matches).
///
/// What is handled:
/// - a video whose file was removed, or altered (its SHA-256 is not its line's): not
///   offered, named in the notes, so its job renders again;
/// - lines that are not JSON (a fragment a kill left), sequences (joined files, no key) and
///   lines without a key (collected before job keys): skipped;
/// - a file collected twice under one name: its last line holds (the index's rule).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "messages/messages.hpp"

namespace vidline::nodes::verbs {

/// One video of the folder that may be reused, verified now.
struct collection_video {
  msg::collected_output offer;  ///< what the coordinator is told
  std::string path;             ///< DIR/<file>
  std::string name;             ///< its index line's name (the output stem)
  bool sim = false;             ///< made by a sim decoder: its frames follow from its digest
};

/// What a collection folder offers.
struct collection_offers {
  std::vector<collection_video> videos;
  std::vector<std::string> notes;  ///< one line per video not offered, and why
};

/// The videos of `dir`'s index (DIR/index.jsonl) still there with their bytes (hashed now),
/// at most `max` of them (the newest lines; a note says how many were left out). A folder
/// without an index offers nothing.
collection_offers read_collection(const config::cluster& c, const std::string& dir,
                                  std::size_t max);

} // namespace vidline::nodes::verbs
