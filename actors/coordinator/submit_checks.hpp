#pragma once
/// The checks of a submit before its run is made: its fields against the config
/// (check_submit) and its room beside the runs the coordinator holds (check_queue). The
/// machine asks them when it admits a submit (stepper_admission.cpp); the CLI's verbs ask
/// the same. Pure: no file, clock or socket.

#include <cstdint>
#include <string>

#include "actors/coordinator/scheduler.hpp"
#include "config/config.hpp"
#include "messages/messages.hpp"

namespace vidline::actors::coordinator {

/// Why a submit is refused, or "" when it is acceptable.
std::string check_submit(const config::cluster& c, const msg::submit_run& r);

/// Why a submit does not fit beside the runs the coordinator holds (knobs max_runs and
/// max_queued_prompt_bytes, over the unfinished runs of `s`), or "" when it does.
/// `new_run`: the submit opens a run (max_runs counts it); false for jobs added to one.
std::string check_queue(const state& s, const config::knobs& k, const msg::submit_run& r,
                        bool new_run = true);

/// The largest run priority either way (`vidline run --priority N`).
inline constexpr int32_t max_priority = 1000000;

} // namespace vidline::actors::coordinator
