#pragma once
/// Dispatch setup: how the coordinator's scheduler state is made from a cluster's config
/// and a timing profile, the same for the live coordinator and for the planner (a plan and
/// a run of the same batch dispatch alike): the initial state, pool capacity limits from
/// the profile, the `auto` mode and each mode's policy, the stage estimates. The checks of
/// what a submit asks (modes, shot lists, capacity) are the machine's: admission.hpp,
/// included here for the callers that set a state up and check against it.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "actors/coordinator/admission.hpp"
#include "actors/coordinator/policy.hpp"
#include "actors/coordinator/scheduler.hpp"
#include "config/config.hpp"
#include "config/workflows.hpp"
#include "config/profile/profile.hpp"

namespace vidline::actors::coordinator {

/// The scheduler's initial state for a cluster: pools with their GPU conflicts, modes,
/// decoders, and params converted from the knobs to run-clock seconds.
state initial_state(const config::cluster& c, double time_scale);

/// Sets `s` (from initial_state) up to dispatch as `vidline plan` plans: pool capacity
/// limits and auto's estimates from the profile the config's sim backends name (else the
/// embedded reference), the mode "auto", each mode's configured policy (configure).
void configure_dispatch(state& s, const config::cluster& c);

/// Expected stage times from a profile, for a cluster (encoders per host, decoder hosts).
/// Lookups are cached: not for use from several threads at once.
class profile_estimates : public stage_estimates {
public:
  profile_estimates(const config::cluster& c, config::profile::profile p);

  std::optional<double> sampling(const std::string& kind, const msg::job_spec& j,
                                 bool cold) const override;
  double conditioning(const std::string& host) const override;
  double handoff(const std::string& from_host, const decoder_view& d,
                 const msg::job_spec& j) const override;
  double decode(const decoder_view& d, const msg::job_spec& j) const override;

  const config::profile::profile& profile() const { return p_; }

private:
  config::profile::profile p_;
  std::map<std::string, std::string> encoder_of_host_;  ///< host -> encoder profile key
  mutable std::map<std::tuple<std::string, uint32_t, uint32_t, uint32_t, bool, std::string>,
                   std::optional<double>> sampling_;
  mutable std::map<std::tuple<std::string, uint32_t, uint32_t, uint32_t>, double> decode_;
};

/// Estimates for a cluster from a profile file, or (empty) the one the config's sim
/// backends name, else the embedded reference. `source` (if given) says which. Throws
/// config::profile::profile_error.
std::shared_ptr<const profile_estimates> estimates_for(const config::cluster& c,
                                                       const std::string& profile_file = "",
                                                       std::string* source = nullptr);

/// Makes the coordinator's state plan like the line will run: pools get the profile's
/// capacity limits (max_load) for kinds it knows; a decoder on a GPU that pools also use is
/// marked as sharing it with them (they never work at once); the mode "auto" (every pool and decoder,
/// unless the config defines a mode of that name) gets the auto policy; a mode named in
/// `policies` gets that policy ("in_turn", "first_free", "auto"), every other mode in_turn.
/// Throws std::invalid_argument for an unknown policy name.
void configure(state& s, const config::cluster& c,
               std::shared_ptr<const profile_estimates> est,
               const std::map<std::string, std::string>& policies = {});

} // namespace vidline::actors::coordinator
