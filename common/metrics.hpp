#pragma once
/// A small thread-safe metrics registry and its Prometheus text exposition (format 0.0.4).
///
/// Every metric a node may expose is declared once, in `definitions()` (metrics.cpp), with
/// its type and help text; docs/metrics.md lists the same names (a test holds the two
/// together). The CAF shells, the bus and the node update the process's registry
/// (`global()`); the pure state machines never do: a shell reads what it needs off the
/// state after a step.
///
/// Values of a name that is not declared, or of the wrong type, are ignored (and counted
/// in `misuse()`), never thrown: a metric must not take a node down.

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace vidline::metrics {

enum class kind { counter, gauge, histogram };

/// Label pairs, e.g. {{"pool", "four_a"}}. Order does not matter (kept sorted).
using labels = std::vector<std::pair<std::string, std::string>>;

/// One declared metric family.
struct definition {
  std::string name;
  kind type = kind::counter;
  std::string help;
  std::vector<double> buckets;  ///< histograms: upper bounds, ascending (+Inf implied)
};

/// Every metric of vidline, in the order /metrics prints them.
const std::vector<definition>& definitions();

/// One value a collector contributes at exposition time (counters and gauges only).
struct sample {
  std::string name;
  metrics::labels labels;
  double value = 0;
};

class registry {
public:
  registry();

  /// Adds `v` (>= 0) to a counter.
  void add(const std::string& name, const labels& l, double v = 1);
  /// Sets a gauge.
  void set(const std::string& name, const labels& l, double v);
  /// Sets a gauge to `v` if it is higher than what it holds (or holds nothing yet).
  void set_max(const std::string& name, const labels& l, double v);
  /// Records one observation of a histogram.
  void observe(const std::string& name, const labels& l, double v);
  /// Removes every series of `name` (a gauge family a collector or shell rewrites whole).
  void clear(const std::string& name);

  /// A function called at each exposition; what it returns is printed beside the stored
  /// values (e.g. the bus's counters, free disk). Returns an id for remove_collector.
  using collector = std::function<std::vector<sample>()>;
  int add_collector(collector c);
  void remove_collector(int id);

  /// The current value of a counter or gauge series (tests); NaN when none.
  double value(const std::string& name, const labels& l = {}) const;
  /// Updates refused: unknown names, wrong types, negative counter increments.
  uint64_t misuse() const;

  /// The text exposition format 0.0.4: `# HELP`, `# TYPE`, then the series.
  std::string render() const;

private:
  struct series {
    double value = 0;
    std::vector<uint64_t> bucket_counts;  ///< histograms: per bucket (not cumulative)
    uint64_t count = 0;
    double sum = 0;
  };
  using key = std::vector<std::pair<std::string, std::string>>;
  const definition* find(const std::string& name, kind k);

  mutable std::mutex m_;
  std::map<std::string, const definition*> defs_;
  std::map<std::string, std::map<key, series>> values_;
  std::map<int, collector> collectors_;
  int next_collector_ = 1;
  uint64_t misuse_ = 0;
};

/// The process's registry (what a node's /metrics serves).
registry& global();

/// A label value escaped for the exposition format (backslash, double quote, newline).
std::string escape_label(const std::string& v);

/// A number as the exposition format writes it: "+Inf", "-Inf", "NaN", or the shortest
/// decimal that reads back as the same double.
std::string format_value(double v);

} // namespace vidline::metrics
