#pragma once
/// Shots that follow shots, in the scheduler (docs/shots.md, "Shots that follow shots"):
/// part of the pure machine (the scheduler's stepper calls it), no clock, file or socket.
///
///     waiting --every source has its video: fx_make_input ... ev_input_made--+
///        |                                                                    v
///        |                          key names an output held (no rerender) -> reused
///        |                                                      otherwise -> queued
///        +-- a source failed / was cancelled --> failed / cancelled (the reason named)
///
/// A job whose input is taken from another job's video (job_input::from_index) waits until
/// that video exists; the shell then makes the input (frame k of the video: the sim
/// contract's frame(V, k) for a sim video, a decoded frame otherwise), stores it by SHA-256
/// like an uploaded image and answers ev_input_made; with every input known the job has
/// its key (config::job_key). A job whose key names an output the cluster holds, or else a
/// video of its run's collection folder (run::collected: the client verified the file), is
/// `reused` (no GPU time) unless its run asked to render again (run::rerender). Critical path
/// first is in the jobs' order (config/shot_graph.hpp, shot_ranks): the policies take a
/// run's lowest queued index first, so the decision costs what it did without a graph.

#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include "actors/coordinator/scheduler.hpp"

namespace vidline::actors::coordinator {

/// How long an input asked for (fx_make_input) may stay unanswered before it is asked
/// again (run-clock seconds): the shell makes inputs idempotently, by content.
inline constexpr double input_resend_s = 10;

/// Prepares the jobs of a run (from index `first` on) before it is indexed: a job with an
/// input not made yet waits; any other gets its key and is reused or queued. Returns the
/// jobs reused (their effects, fx_persist_job and fx_job_final, are the caller's).
std::vector<uint32_t> admit(state& s, run& r, uint32_t first = 0);

/// The graph's part of indexing run `rp`: takers, waiting jobs whose sources have their
/// video (inputs_due), outputs by key. Called by index_run.
void index_run_graph(state& s, std::size_t rp);

/// Asks the shell for the inputs of every due job not asked for since `input_resend_s`
/// (all of them when `all`).
void ask_inputs(state& s, std::vector<effect>& fx, double now, bool all = false);

/// Job `j` has its video now (succeeded or reused): its key finds it again, and the jobs
/// taking from it whose sources all have their video are due (asked at once).
void on_output(state& s, const job& j, std::vector<effect>& fx, double now);

/// The jobs that take from `j`, and those that take from them, ..., not final, each once,
/// nearest first.
std::vector<job*> dependents(state& s, const job& j);

/// An input made (or not): set on the job; with all its inputs known the job is reused or
/// queued. Returns the job and why it fails when the input could not be made (nullptr
/// when nothing fails).
std::pair<job*, std::string> on_input_made(state& s, const ev_input_made& e,
                                           std::vector<effect>& fx, double now);

/// After `vidline resume`: run `rp`'s waiting jobs whose sources have their video are due.
void refresh_due(state& s, std::size_t rp);

/// The latents that waiting jobs take from their sources and have not got yet: kept on
/// their hosts (not released) until handed over. Looks only at runs that take latents.
void latents_wanted(const state& s, std::set<std::string>& out);

/// The most videos of its collection folder a run may be offered (run::collected): about
/// 300 bytes each in the submit, so they fit one frame of the default max_frame_bytes.
inline constexpr std::size_t max_collected_outputs = 20000;

/// The most outputs kept by key from runs the state forgot (state::held_outputs).
inline constexpr std::size_t max_held_outputs = 200000;

/// Run `r` leaves the state (retention): its outputs stay findable by key
/// (state::held_outputs, at most max_held_outputs: the oldest keys go first).
void remember_outputs(state& s, const run& r);

/// The source job of `j`'s input `in` ("shot NAME (job I)") for messages.
std::string source_label(const run& r, const msg::job_input& in);

} // namespace vidline::actors::coordinator
