#pragma once
/// `vidline config-adapt --host-map FILE --out FILE`: the full cluster config (pools,
/// encoders, decoder, modes) for a short description of the hardware, by the rules the
/// reference line's CLI followed. docs/backends.md describes the host map and the rules.
///
/// Rules, in short:
/// - GPUs: an entry with `count` N becomes N GPUs "<short>-<i>" (one GPU: "<short>"),
///   indices counted per vendor from 0 unless `first_index` says otherwise; <short> is the
///   entry's `name`, else its `profile`, else the kind derived from its model; the kind
///   (`profile`, else derived) names its pools' profiles: "<kind>" or "<kind>x<N>";
/// - the decoder: the GPU marked "decoder": true (else the smallest single GPU on a host
///   other than the one with the most GPUs); it samples nothing;
/// - each host's other GPUs, grouped by model, form pools: the whole group ("eight"),
///   and for an even group also its two halves ("four_a", "four_b"); a single GPU is a
///   pool named by its short name ("xtx");
/// - an encoder per host with pools, on the first half of its largest group (all of it when
///   it is one GPU), since the text encoder is unloaded before sampling;
/// - modes: the largest group is in every mode, in each of its layouts; every other group
///   is in or out, in each of its layouts; named like the reference's
///   ("single_eight_plus_one", "four_four_plus_one", "four_four_xtx_plus_one",
///   "eight_xtx_plus_one").

#include <string>

#include <nlohmann/json.hpp>

namespace vidline::nodes::verbs {

/// The cluster config for a host map. Pure. Throws config::config_error at the host map's
/// field (e.g. "/hosts/1/gpus/0/count") when it cannot be adapted.
nlohmann::json adapt_host_map(const nlohmann::json& host_map);

/// Reads the host map, adapts it, validates the result as a config (relative data_dir
/// resolved against the output file's directory) and writes it atomically. Prints what
/// it made. Returns the exit code. A host without `public_key` in the map takes
/// `keys_dir`/HOST.pub and HOST.key (`vidline keygen --out keys_dir --name HOST`); with no
/// `keys_dir` it is refused, naming the keygen command.
int run_config_adapt(const std::string& host_map_file, const std::string& out_file,
                     const std::string& keys_dir = "");

} // namespace vidline::nodes::verbs
