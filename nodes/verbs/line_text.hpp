#pragma once
/// What the CLI says of the line to the people at it: a job named by its shot, the
/// cluster in words, the hosts that are down, and a coordinator whose port nobody holds.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.hpp"

namespace vidline::nodes::verbs {

/// A job's shot in words, from its status record: its name (or shot and take) and the
/// prompt's first words, e.g. `city-night-take-2 "a neon city at dusk, rain..."`; "" when
/// the record names nothing (an older coordinator).
std::string shot_words(const nlohmann::json& job);

/// "job 4 city-night-take-2 "a neon city..."": the index beside the shot's words.
std::string job_label(const nlohmann::json& job);

/// Non-empty when nothing listens on the coordinator's port (the connection is refused at
/// once): that no node answers, and how to start them. "" when something listens or it
/// cannot tell quickly (then the request's own timeout says what happened).
std::string nobody_listens(const config::cluster& c, const std::string& config_path);

/// Hosts of `c` the coordinator's cluster view (`status @cluster`) has down.
std::vector<std::string> hosts_down(const nlohmann::json& cluster_view, const config::cluster& c);

/// "warning: host host_b is down (since ...): its pools ... wait for it" lines, one per host.
std::string hosts_down_warning(const std::vector<std::string>& down, const config::cluster& c);

/// `vidline status @cluster` in words: hosts, pools, decoders.
std::string format_cluster(const nlohmann::json& cluster_view);

} // namespace vidline::nodes::verbs
