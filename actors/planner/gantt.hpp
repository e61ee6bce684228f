#pragma once
/// Gantt charts as SVG: one lane per pool and per decoder, each stage of each job a bar
/// coloured by stage (conditioning, sampling, handoff, decode), a time axis in seconds and a
/// legend. Takes plain spans, so a plan (line_sim's spans) and a live run (spans rebuilt from
/// a run's status) draw alike.

#include <string>
#include <vector>

#include "actors/planner/line_sim.hpp"

namespace vidline::planner {

/// One chart: a title, its lanes top to bottom, and the spans to draw on them. Spans on a
/// lane not listed get a lane of their own at the bottom.
struct gantt_chart {
  std::string title;
  std::vector<std::string> lanes;
  std::vector<stage_span> spans;
};

/// An SVG document with the charts stacked, sharing one time scale (so they compare).
std::string gantt_svg(const std::vector<gantt_chart>& charts);

} // namespace vidline::planner
