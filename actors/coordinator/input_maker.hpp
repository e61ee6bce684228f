#pragma once
/// The coordinator's shell makes the inputs of shots that follow shots (fx_make_input,
/// actors/coordinator/graph.hpp): frame k of the source's video, stored as an input by its
/// SHA-256 in <data_dir>/inputs/ like an uploaded image, so the sampling host pulls it as
/// it pulls a reference (nodes/inputs.hpp).
///
/// - a sim video (its decoder's backend is `sim`): the sim contract's frame(V, k), from the
///   video's digest alone (docs/sim-contract.md, "Frames and sequences of sim videos");
/// - any other video: decoded with ffmpeg (a process through the one spawner) from the file
///   on this host, after ffprobe counted its frames and found frame k among them; a video
///   on another host is refused, naming it.
/// Blocking (a real video's decode takes about a second); files only, no message.

#include <string>

#include "actors/context.hpp"
#include "actors/coordinator/scheduler.hpp"

namespace vidline::actors {

/// Makes the input; the answer for the machine (its `error` set when it could not).
sched::ev_input_made make_input(const context& ctx, const sched::fx_make_input& fx);

/// The backend type ("sim", "exec", ...) of decoder `name` in the config ("" unknown).
std::string decoder_backend_type(const config::cluster& c, const std::string& name);

} // namespace vidline::actors
