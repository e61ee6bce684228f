#pragma once
/// Shots that follow shots (docs/shots.md, "Shots that follow shots"): the checks of a shot
/// list's graph before anything is submitted, and what the graph means for the jobs made
/// of it (which job an input is taken from, which jobs go first).
///
/// A shot's input may be taken from another shot of the same list: `from` (its name) with
/// `frame` "first", "last" or a frame number (a sim video, and every video this line makes,
/// has seconds x 24 + 1 frames, numbered from 0). Take t of a shot takes from take t of
/// its source when the source has that many takes, else from the source's take 0.
/// Shots naming the same `sequence` are its parts, in list order; they are joined into one
/// video when all are done, so they have one take each and one size.
///
/// Pure: no file, clock or socket; the CLI, the coordinator and the planner use it alike.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "messages/messages.hpp"

namespace vidline::config::graph {

/// Frames per second of every video the line makes.
inline constexpr uint32_t fps = 24;

/// The frames of a video `seconds` long: seconds x 24 + 1 (frame 0 and the last included).
inline uint32_t frames_of(uint32_t seconds) { return seconds * fps + 1; }

/// Frame `frame` ("first", "last" or a decimal number) of a video of `frames` frames, as
/// its number; nullopt when it is none of those or not below `frames`.
std::optional<uint32_t> frame_index(const std::string& frame, uint32_t frames);

/// An input taken from another shot, as a shot line or the API gives it:
/// {"from": NAME, "frame": "first" | "last" | N} (a missing frame is "last"), or
/// {"from": NAME, "latent": true}: the source's latent itself, where the workflow's input
/// declares that it continues from one.
/// "" and `out` set, or what is wrong ("from: ...").
std::string from_input_json(const std::string& name, const nlohmann::json& j, msg::job_input& out);

/// True when some shot takes an input from another shot or names a sequence.
bool has_graph(const std::vector<msg::shot>& shots);

/// "" when the list's graph is acceptable, else what is wrong, each shot named by
/// `label(i)` (the CLI: "FILE:LINE", the API: "shot 3 (name)"): an input taken from a name
/// no shot has or from its own shot, both a file and `from`, `frame` without `from`, a
/// frame outside the source's length, a frame with a latent hand-over (whether the shot's
/// workflow continues from a latent is config::resolve_shot's check), a cycle (every shot of it named), a sequence part with takes
/// or of another size than the sequence's first part (both named).
std::string graph_problem(const std::vector<msg::shot>& shots,
                          const std::function<std::string(std::size_t)>& label);

/// The critical path of each shot: its own estimated stage time (load: width x height x
/// seconds, in units of 416x736x5) plus the longest such path among the shots that take
/// from it. A shot with a higher rank starts a longer chain and goes first among equals.
/// Assumes graph_problem found no cycle (a cycle's shots get their own cost only).
std::vector<double> shot_ranks(const std::vector<msg::shot>& shots);

/// The job of `take` of shot `source` in a run whose jobs of shot k take t are at
/// `first_job[k] + t`: that take when the source has so many, else its take 0.
uint32_t source_job(const std::vector<msg::shot>& shots, const std::vector<uint32_t>& first_job,
                    std::size_t source, uint32_t take);

/// Fills the graph fields of the jobs of a shot list: for job `jobs[k]`, made of take
/// `takes[k]` of shot `shot_of[k]`: shot, take, sequence, and its inputs (the shot's,
/// ascending by name, unless the job has inputs already) with `from_index` set for each
/// taken from another shot. The shot names must be resolved (graph_problem found nothing).
void link_jobs(std::vector<msg::job_spec>& jobs, const std::vector<msg::shot>& shots,
               const std::vector<std::size_t>& shot_of, const std::vector<uint32_t>& takes);

/// The sequences of the jobs of a shot list: name -> the job index of each part (take 0),
/// in the list's order (jobs go by priority and rank, parts by where they are in the list).
std::map<std::string, std::vector<uint32_t>> sequence_parts(const std::vector<msg::shot>& shots,
                                                            const std::vector<msg::job_spec>& jobs);

/// The sim contract's frame k of a sim video whose file hashes to `video_sha256` (hex):
/// the 32-byte file SHA-256("vidline-sim-frame" || V || u32le(k)); "" for a malformed digest.
std::string sim_frame(const std::string& video_sha256, uint32_t k);

/// The sim contract's joined sequence: "vidline-sim-sequence 1\n" then "part <hex>\n" for
/// each part's video file digest, in order.
std::string sim_sequence(const std::vector<std::string>& part_sha256s);

} // namespace vidline::config::graph
