#include "actors/planner/gantt.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace vidline::planner {
namespace {

struct stage_style {
  const char* stage;
  const char* colour;
};

constexpr stage_style styles[] = {
  {"conditioning", "#9e9e9e"},
  {"sampling", "#3b7dd8"},
  {"handoff", "#f0a030"},
  {"decode", "#3aa655"},
};

const char* colour_of(const std::string& stage) {
  for (auto& s : styles)
    if (stage == s.stage)
      return s.colour;
  return "#c04040";
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

/// A round tick step giving about `want` ticks over `span` seconds.
double tick_step(double span, int want) {
  double raw = span / want;
  double mag = std::pow(10.0, std::floor(std::log10(std::max(raw, 1e-9))));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag)
      return m * mag;
  return 10 * mag;
}

} // namespace

std::string gantt_svg(const std::vector<gantt_chart>& charts) {
  constexpr double left = 150, right = 30, lane_h = 22, bar_h = 16, title_h = 28,
                   axis_h = 30, gap = 18, legend_h = 34, width = 1200;
  const double plot_w = width - left - right;

  double t_end = 0;
  for (auto& c : charts)
    for (auto& s : c.spans)
      t_end = std::max(t_end, s.end);
  if (t_end <= 0)
    t_end = 1;
  const double step = tick_step(t_end, 10);
  const double t_max = std::ceil(t_end / step) * step;
  auto x_of = [&](double t) { return left + plot_w * t / t_max; };
  auto tick_label = [&](double t) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), step >= 1 ? "%.0f" : "%.1f", t);
    return std::string(buf);
  };

  // Lanes per chart: the listed ones, then any others in order of appearance.
  std::vector<std::vector<std::string>> lanes(charts.size());
  double height = legend_h;
  for (std::size_t i = 0; i < charts.size(); ++i) {
    lanes[i] = charts[i].lanes;
    for (auto& s : charts[i].spans)
      if (std::find(lanes[i].begin(), lanes[i].end(), s.lane) == lanes[i].end())
        lanes[i].push_back(s.lane);
    height += title_h + lanes[i].size() * lane_h + axis_h + gap;
  }

  std::string svg;
  svg += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\""
         + num(height) + "\" viewBox=\"0 0 " + num(width) + " " + num(height)
         + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";

  // Legend.
  double lx = left;
  for (auto& s : styles) {
    svg += "<rect x=\"" + num(lx) + "\" y=\"10\" width=\"14\" height=\"14\" fill=\""
           + s.colour + "\"/>";
    svg += "<text x=\"" + num(lx + 20) + "\" y=\"22\">" + s.stage + "</text>\n";
    lx += 130;
  }

  double y = legend_h;
  for (std::size_t c = 0; c < charts.size(); ++c) {
    const auto& chart = charts[c];
    svg += "<text x=\"10\" y=\"" + num(y + 18) + "\" font-size=\"14\" font-weight=\"bold\">"
           + escape(chart.title) + "</text>\n";
    y += title_h;
    std::map<std::string, double> lane_y;
    for (std::size_t i = 0; i < lanes[c].size(); ++i) {
      double ly = y + i * lane_h;
      lane_y[lanes[c][i]] = ly;
      if (i % 2 == 0)
        svg += "<rect x=\"" + num(left) + "\" y=\"" + num(ly) + "\" width=\"" + num(plot_w)
               + "\" height=\"" + num(lane_h) + "\" fill=\"#f4f4f4\"/>";
      svg += "<text x=\"" + num(left - 8) + "\" y=\"" + num(ly + lane_h / 2 + 4)
             + "\" text-anchor=\"end\">" + escape(lanes[c][i]) + "</text>\n";
    }
    const double plot_bottom = y + lanes[c].size() * lane_h;
    // Grid and axis.
    for (double t = 0; t <= t_max + step / 2; t += step) {
      double x = x_of(t);
      svg += "<line x1=\"" + num(x) + "\" y1=\"" + num(y) + "\" x2=\"" + num(x) + "\" y2=\""
             + num(plot_bottom + 4) + "\" stroke=\"#d0d0d0\" stroke-width=\"1\"/>";
      svg += "<text x=\"" + num(x) + "\" y=\"" + num(plot_bottom + 17)
             + "\" text-anchor=\"middle\">" + tick_label(t) + "</text>\n";
    }
    svg += "<text x=\"" + num(left + plot_w) + "\" y=\"" + num(plot_bottom + 28)
           + "\" text-anchor=\"end\" fill=\"#606060\">seconds from submission</text>\n";
    // Bars: sampling spans labelled with the job index.
    for (auto& s : chart.spans) {
      auto ly = lane_y.find(s.lane);
      if (ly == lane_y.end())
        continue;
      double x0 = x_of(s.start), x1 = x_of(std::max(s.end, s.start));
      double w = std::max(x1 - x0, 1.0);
      // A handoff (the next latent fetched while the decoder decodes) as a low, thin bar.
      bool thin = s.stage == "handoff";
      double bh = thin ? bar_h / 3 : bar_h;
      double by = ly->second + (lane_h - bar_h) / 2 + (thin ? bar_h - bh : 0);
      svg += "<rect x=\"" + num(x0) + "\" y=\"" + num(by) + "\" width=\"" + num(w)
             + "\" height=\"" + num(bh) + "\" fill=\"" + colour_of(s.stage)
             + "\" stroke=\"white\" stroke-width=\"0.5\"><title>job " + std::to_string(s.job)
             + " " + escape(s.stage) + " " + num(s.start) + "-" + num(s.end) + " s</title></rect>";
      if (w > 18 && (s.stage == "sampling" || s.stage == "decode"))
        svg += "<text x=\"" + num(x0 + w / 2) + "\" y=\"" + num(by + bh - 4)
               + "\" text-anchor=\"middle\" fill=\"white\" font-size=\"10\">"
               + std::to_string(s.job) + "</text>";
      svg += "\n";
    }
    y = plot_bottom + axis_h + gap;
  }
  svg += "</svg>\n";
  return svg;
}

} // namespace vidline::planner
