#pragma once
/// Gantt charts as SVG: one lane per pool and per decoder, each stage of each job a bar
/// coloured by stage (conditioning, sampling, decode full height; handoff a thin bar at the
/// bottom of the decoder's lane; waiting for a decoder a thin bar at the top of the pool's
/// lane, pending at the decoder one at the top of the decoder's), a time axis in seconds and
/// a legend. A live run adds its failed attempts (red, crossed), host outages (a red band
/// over that host's lanes), the stages running now (faded, up to now) and a "now" line.
/// Shots that take a frame from another shot's video are joined to it by a dependency line.
/// Takes plain spans, so a plan (line_sim's spans) and a live run (spans read off a run's
/// status) draw alike. Every mark carries a class (bar, running, failed, outage, now, lane)
/// so a program can read the chart back (a dependency line's class is `dependency`).

#include <map>
#include <string>
#include <vector>

#include "actors/planner/line_sim.hpp"

namespace vidline::actors::planner {

/// One chart: a title, its lanes top to bottom, and the spans to draw on them. Spans on a
/// lane not listed get a lane of their own at the bottom.
struct gantt_chart {
  std::string title;
  std::vector<std::string> lanes;
  std::vector<stage_span> spans;
  /// Stages still running: drawn from their start to `now`.
  std::vector<stage_span> running;
  /// A failed or lost attempt: `stage` is "sampling" or "decode", `reason` why.
  struct failure {
    std::string lane;
    uint32_t job = 0;
    std::string stage;
    double start = 0, end = 0;
    std::string reason;
  };
  std::vector<failure> failures;
  /// A host down from `from` to `to` (to < 0: still down, drawn to `now`), over the lanes
  /// of its pools and decoders.
  struct outage {
    std::string host;
    std::vector<std::string> lanes;
    double from = 0, to = -1;
  };
  std::vector<outage> outages;
  double now = -1;  ///< >= 0: the run is running; a "now" line is drawn here
  /// A shot that takes an input (a frame) from another shot's video: a line from the end of
  /// the source's decode to the start of the taker's first stage.
  struct dependency {
    uint32_t from = 0;  ///< the source job
    uint32_t to = 0;    ///< the job that takes from it
  };
  std::vector<dependency> dependencies;
  /// A job's shot in words (its name, the prompt's first words), beside its index in the
  /// bars' labels and tooltips; a job not listed is labelled by its index alone.
  std::map<uint32_t, std::string> job_names;
};

/// An SVG document with the charts stacked, sharing one time scale (so they compare).
std::string gantt_svg(const std::vector<gantt_chart>& charts);

} // namespace vidline::actors::planner
