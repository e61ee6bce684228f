// Internal to the auto policy (auto_policy*.cpp): the constants its parts share and the
// per-size constants of a mode (auto_policy::mode_consts), built by consts() in
// auto_policy_consts.cpp and read by next_of() and pick_decoder(). Not part of policy.hpp.
#pragma once

#include "actors/coordinator/policy.hpp"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace vidline::actors::coordinator {
namespace auto_detail {

constexpr double never = std::numeric_limits<double>::infinity();
constexpr double tie_s = 1e-9;  ///< two finishes closer than this are a tie (broken by mode order)

} // namespace auto_detail

/// Per pool of a mode (by position in the mode), for one size.
struct auto_policy::mode_consts {
  std::vector<uint32_t> ids;           ///< the mode's pool ids these were computed for
  std::vector<char> fits;
  std::vector<double> cold_s, warm_s, tail_s, cond_s;
  double decode_rate = 0;              ///< jobs per second all the mode's decoders manage
  double warm_rate = 0;                ///< sum of 1 / warm_s over the pools that fit
  std::size_t fitting = 0;             ///< pools that fit
  /// Groups of pools sharing GPUs (positions), with their layouts: bit a = members[a] runs.
  struct group {
    std::vector<std::size_t> members;
    std::vector<uint32_t> layouts;
  };
  std::vector<group> groups;
  std::vector<int> group_of;           ///< position -> index in groups, or -1
  /// The mode's decoders (in order): decode seconds, handoff from its own host / another.
  std::vector<const decoder_view*> decoders;
  std::vector<double> decode_s, handoff_local_s, handoff_remote_s;
  /// Decoders on a pool's GPU: used only once nothing of the run is left to sample, so
  /// left out of slots and batch ends.
  std::vector<char> decoder_shared;
};

} // namespace vidline::actors::coordinator
