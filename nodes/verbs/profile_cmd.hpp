#pragma once
/// `vidline profile build`: a timing profile (docs/profile.md) learned from the runs a
/// coordinator's journal holds. Every job records its last attempt's measured stage times
/// with the kinds that ran them (actors::coordinator::job: pool_kind, encoder_kind, decoder_kind); the
/// builder groups them by kind x size x cold/warm: the median is the time, min and max the
/// spread, the source names the runs. What history did not measure comes from a base
/// profile (default: the embedded reference), so the result plans every kind the base knows.

#include <deque>
#include <string>

#include <nlohmann/json.hpp>

#include "actors/coordinator/scheduler.hpp"
#include "nodes/verbs/verbs.hpp"

namespace vidline::nodes::verbs {

/// The profile document learned from `runs` over `base` (a profile document, named
/// `base_name` in the sources): measured entries replace the base's of the same kind and
/// size; out-of-memory results lower a pool kind's max_load below the smallest load that
/// failed. Throws std::runtime_error when the runs hold no measured stage.
nlohmann::json profile_from_history(const std::deque<actors::coordinator::run>& runs, nlohmann::json base,
                                    const std::string& base_name);

/// The options of `vidline profile build`.
struct profile_build_options {
  std::string data_dir;  ///< the coordinator host's data_dir (its journal/journal.db)
  std::string journal;   ///< or the journal file itself
  std::string base;      ///< base profile file ("" = the embedded reference)
  std::string out;
};

/// Runs `vidline profile build`; returns the exit code.
int run_profile_build(const profile_build_options& o);

} // namespace vidline::nodes::verbs
