#include "actors/planner/gantt.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace vidline::actors::planner {
namespace {

struct stage_style {
  const char* stage;
  const char* colour;
};

constexpr stage_style styles[] = {
  {"conditioning", "#9e9e9e"},
  {"sampling", "#3b7dd8"},
  {"waiting", "#c9b458"},
  {"handoff", "#f0a030"},
  {"pending", "#a77bca"},
  {"decode", "#3aa655"},
};
constexpr const char* failed_colour = "#d03030";
constexpr const char* outage_colour = "#e04040";

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
  for (auto& c : charts) {
    for (auto& s : c.spans)
      t_end = std::max(t_end, s.end);
    for (auto& s : c.running)
      t_end = std::max({t_end, s.end, s.start});
    for (auto& f : c.failures)
      t_end = std::max(t_end, f.end);
    for (auto& o : c.outages)
      t_end = std::max({t_end, o.from, o.to});
    t_end = std::max(t_end, c.now);
  }
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
    auto add = [&](const std::string& lane) {
      if (std::find(lanes[i].begin(), lanes[i].end(), lane) == lanes[i].end())
        lanes[i].push_back(lane);
    };
    for (auto& s : charts[i].spans)
      add(s.lane);
    for (auto& s : charts[i].running)
      add(s.lane);
    for (auto& f : charts[i].failures)
      add(f.lane);
    height += title_h + lanes[i].size() * lane_h + axis_h + gap;
  }

  std::string svg;
  svg += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\""
         + num(height) + "\" viewBox=\"0 0 " + num(width) + " " + num(height)
         + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";

  // Legend.
  double lx = left - 100;
  for (auto& s : styles) {
    svg += "<rect x=\"" + num(lx) + "\" y=\"10\" width=\"14\" height=\"14\" fill=\""
           + s.colour + "\"/>";
    svg += "<text x=\"" + num(lx + 20) + "\" y=\"22\">" + s.stage + "</text>\n";
    lx += 112;
  }
  svg += "<rect x=\"" + num(lx) + "\" y=\"10\" width=\"14\" height=\"14\" fill=\""
         + failed_colour + "\" fill-opacity=\"0.4\" stroke=\"" + failed_colour
         + "\"/><text x=\"" + num(lx + 20) + "\" y=\"22\">failed attempt</text>\n";
  lx += 112;
  svg += "<rect x=\"" + num(lx) + "\" y=\"10\" width=\"14\" height=\"14\" fill=\""
         + outage_colour + "\" fill-opacity=\"0.15\"/><text x=\"" + num(lx + 20)
         + "\" y=\"22\">host down</text>\n";

  double y = legend_h;
  for (std::size_t c = 0; c < charts.size(); ++c) {
    const auto& chart = charts[c];
    auto name_of = [&chart](uint32_t job) {
      auto it = chart.job_names.find(job);
      return it == chart.job_names.end() ? std::string() : it->second;
    };
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
      svg += "<text class=\"lane\" x=\"" + num(left - 8) + "\" y=\""
             + num(ly + lane_h / 2 + 4) + "\" text-anchor=\"end\">" + escape(lanes[c][i])
             + "</text>\n";
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
      // A handoff (the next latent fetched while the decoder decodes) as a low, thin bar;
      // waiting (for a decoder, the latent on the pool's host) and pending (fetched, behind
      // the decoder's current decode) as thin bars at the top of the lane.
      bool low = s.stage == "handoff";
      bool high = s.stage == "waiting" || s.stage == "pending";
      double bh = low || high ? bar_h / 3 : bar_h;
      double by = high ? ly->second + 1
                       : ly->second + (lane_h - bar_h) / 2 + (low ? bar_h - bh : 0);
      if (high || low)
        w = std::max(x1 - x0, 0.5);
      svg += "<rect class=\"bar " + escape(s.stage) + "\" x=\"" + num(x0) + "\" y=\"" + num(by)
             + "\" width=\"" + num(w)
             + "\" height=\"" + num(bh) + "\" fill=\"" + colour_of(s.stage)
             + "\" stroke=\"white\" stroke-width=\"0.5\"><title>job " + std::to_string(s.job)
             + " " + escape(s.stage) + " " + num(s.start) + "-" + num(s.end) + " s"
             + (name_of(s.job).empty() ? "" : " " + escape(name_of(s.job))) + "</title></rect>";
      if (w > 18 && (s.stage == "sampling" || s.stage == "decode")) {
        // The index, and the shot's name where the bar has room for it (~6 px a letter).
        std::string label = std::to_string(s.job);
        const std::string name = name_of(s.job);
        const auto room = static_cast<std::size_t>(w / 6);
        if (!name.empty() && room > label.size() + 3) {
          const auto cut = name.substr(0, name.find(' '));
          label += " " + (cut.size() + label.size() + 1 <= room ? cut
                                                                 : cut.substr(0, room - label.size() - 2) + "~");
        }
        svg += "<text x=\"" + num(x0 + w / 2) + "\" y=\"" + num(by + bh - 4)
               + "\" text-anchor=\"middle\" fill=\"white\" font-size=\"10\">"
               + escape(label) + "</text>";
      }
      svg += "\n";
    }
    // Dependencies: from the end of the source's video to the start of the taker's first
    // stage (a grey line with a dot where the taker starts).
    if (!chart.dependencies.empty()) {
      std::map<uint32_t, std::pair<double, double>> video_end;  // job -> (x, y)
      std::map<uint32_t, std::pair<double, double>> first_start;
      for (auto& s : chart.spans) {
        auto ly = lane_y.find(s.lane);
        if (ly == lane_y.end())
          continue;
        const double mid = ly->second + lane_h / 2;
        if (s.stage == "decode") {
          auto& e = video_end[s.job];
          if (x_of(s.end) >= e.first)
            e = {x_of(s.end), mid};
        }
        if (s.stage == "conditioning" || s.stage == "sampling") {
          auto it = first_start.find(s.job);
          if (it == first_start.end() || x_of(s.start) < it->second.first)
            first_start[s.job] = {x_of(s.start), mid};
        }
      }
      for (auto& d : chart.dependencies) {
        auto a = video_end.find(d.from);
        auto b = first_start.find(d.to);
        if (a == video_end.end() || b == first_start.end())
          continue;
        svg += "<g class=\"dependency\"><line x1=\"" + num(a->second.first) + "\" y1=\""
               + num(a->second.second) + "\" x2=\"" + num(b->second.first) + "\" y2=\""
               + num(b->second.second) + "\" stroke=\"#505050\" stroke-width=\"1\""
               + " stroke-dasharray=\"4,2\"/><circle cx=\"" + num(b->second.first) + "\" cy=\""
               + num(b->second.second) + "\" r=\"2.5\" fill=\"#505050\"/><title>job "
               + std::to_string(d.to) + " takes from job " + std::to_string(d.from)
               + "</title></g>\n";
      }
    }
    // Stages running now: faded, dashed, up to now.
    for (auto& s : chart.running) {
      auto ly = lane_y.find(s.lane);
      if (ly == lane_y.end())
        continue;
      const double to = std::max(chart.now >= 0 ? chart.now : s.end, s.start);
      double x0 = x_of(s.start), w = std::max(x_of(to) - x0, 1.0);
      bool thin = s.stage == "waiting";
      double bh = thin ? bar_h / 3 : bar_h;
      double by = thin ? ly->second + 1 : ly->second + (lane_h - bar_h) / 2;
      svg += "<rect class=\"running " + escape(s.stage) + "\" x=\"" + num(x0) + "\" y=\""
             + num(by) + "\" width=\"" + num(w) + "\" height=\"" + num(bh) + "\" fill=\""
             + colour_of(s.stage == "decoding" ? "decode" : s.stage)
             + "\" fill-opacity=\"0.45\" stroke=\"#404040\" stroke-dasharray=\"3,2\""
             + " stroke-width=\"0.8\"><title>job " + std::to_string(s.job) + " running "
             + escape(s.stage) + " since " + num(s.start) + " s</title></rect>\n";
    }
    // Failed attempts: red, crossed.
    for (auto& f : chart.failures) {
      auto ly = lane_y.find(f.lane);
      if (ly == lane_y.end())
        continue;
      double x0 = x_of(f.start), w = std::max(x_of(std::max(f.end, f.start)) - x0, 3.0);
      double by = ly->second + (lane_h - bar_h) / 2;
      svg += std::string("<g class=\"failed\"><rect x=\"") + num(x0) + "\" y=\"" + num(by)
             + "\" width=\"" + num(w) + "\" height=\"" + num(bar_h) + "\" fill=\""
             + failed_colour + "\" fill-opacity=\"0.35\" stroke=\"" + failed_colour
             + "\" stroke-width=\"1\"><title>job " + std::to_string(f.job) + " failed "
             + escape(f.stage) + " attempt " + num(f.start) + "-" + num(f.end) + " s: "
             + escape(f.reason) + "</title></rect><line x1=\"" + num(x0) + "\" y1=\"" + num(by)
             + "\" x2=\"" + num(x0 + w) + "\" y2=\"" + num(by + bar_h) + "\" stroke=\""
             + failed_colour + "\" stroke-width=\"1\"/><line x1=\"" + num(x0) + "\" y1=\""
             + num(by + bar_h) + "\" x2=\"" + num(x0 + w) + "\" y2=\"" + num(by)
             + "\" stroke=\"" + failed_colour + "\" stroke-width=\"1\"/></g>\n";
    }
    // Host outages: a band over each lane of the host.
    for (auto& o : chart.outages) {
      const double to = o.to >= 0 ? o.to : std::max(chart.now, o.from);
      double x0 = x_of(o.from), w = std::max(x_of(to) - x0, 2.0);
      bool labelled = false;
      for (auto& lane : o.lanes) {
        auto ly = lane_y.find(lane);
        if (ly == lane_y.end())
          continue;
        svg += "<rect class=\"outage\" x=\"" + num(x0) + "\" y=\"" + num(ly->second)
               + "\" width=\"" + num(w) + "\" height=\"" + num(lane_h) + "\" fill=\""
               + outage_colour + "\" fill-opacity=\"0.15\" stroke=\"" + outage_colour
               + "\" stroke-width=\"0.5\"><title>host " + escape(o.host) + " down "
               + num(o.from) + "-" + (o.to >= 0 ? num(o.to) + " s" : std::string("now"))
               + "</title></rect>";
        if (!labelled) {
          svg += "<text x=\"" + num(x0 + 2) + "\" y=\"" + num(ly->second + 9)
                 + "\" fill=\"" + outage_colour + "\" font-size=\"9\">" + escape(o.host)
                 + " down</text>";
          labelled = true;
        }
        svg += "\n";
      }
    }
    if (chart.now >= 0) {
      const double x = x_of(chart.now);
      svg += "<line class=\"now\" x1=\"" + num(x) + "\" y1=\"" + num(y - 4) + "\" x2=\""
             + num(x) + "\" y2=\"" + num(plot_bottom + 4)
             + "\" stroke=\"#c00000\" stroke-width=\"1.5\"/><text x=\"" + num(x + 3)
             + "\" y=\"" + num(y + 6) + "\" fill=\"#c00000\" font-size=\"10\">now "
             + num(chart.now) + " s</text>\n";
    }
    y = plot_bottom + axis_h + gap;
  }
  svg += "</svg>\n";
  return svg;
}

} // namespace vidline::actors::planner
