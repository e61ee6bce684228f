#pragma once
/// `vidline preflight --config FILE --mode M`: checks what a run needs, one line per
/// check, ok or FAIL with how to fix it (warn for what may be fine). docs/backends.md
/// lists the checks.
///
/// Checks that look at this machine (ports, disk, socket paths, GPUs, programs) run for
/// the hosts of the config that are on it: --host names them, else every host whose
/// address is one of this machine's.

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "nodes/gpu/telemetry.hpp"

namespace vidline::nodes::verbs {

/// One line of the report.
struct check_line {
  enum class level { ok, warn, fail };
  level status = level::ok;
  std::string name;     ///< "config", "port alpha", "backend comfy", ...
  std::string detail;   ///< what was found
  std::string fix;      ///< how to fix it (fail and warn)
  std::string host;     ///< the host it is about; "" for the cluster (config, mode, backends, clock)
};

struct preflight_options {
  std::string config;
  std::string mode;
  std::vector<std::string> hosts;      ///< this machine's hosts; empty = by address
  uint64_t min_free_bytes = uint64_t{1} << 30;  ///< per data directory, for latents and outputs
  bool before_start = false;           ///< nodes are not running yet: ports must be free
  double timeout_s = 2;                ///< per network probe
};

/// Runs every check. Never throws for what it checks (a failure is a line).
std::vector<check_line> run_preflight(const preflight_options& o);

/// The report as text, one line per check plus a summary line.
std::string format_report(const std::vector<check_line>& lines);

/// The report as JSON: {"config", "mode", "ok", "checks": [{"status": "ok"|"warn"|"fail",
/// "name", "host" (null for the cluster), "detail", "fix"}], "hosts": {host: {"ok",
/// "checks": [names]}}, "summary": {"ok", "warn", "fail"}, "errors": ["name: detail"]}.
std::string format_report_json(const preflight_options& o, const std::vector<check_line>& lines);

/// Whether any line failed.
bool any_failed(const std::vector<check_line>& lines);

/// Parses "1073741824", "512M", "10G", "1T" (binary units). Throws std::invalid_argument.
uint64_t parse_bytes(const std::string& text);

/// One line per pool or decoder of mode `m` whose kind (profile_key) has no timings in the
/// profile the line plans by (the sim backends' profile file, else the embedded reference),
/// failed, naming the kind and `vidline profile build`; one ok line when all have them.
std::vector<check_line> check_profile_kinds(const config::cluster& c, const config::mode& m);

/// The cards `gpu_ids` of host `h` (those the mode's pools and decoders use with a real
/// backend), read as the node reads them (nodes/gpu/telemetry.hpp, through `o`): a line
/// failed for each card missing or lost, or without telemetry, and for each holding more
/// than gpu_foreign_memory_gib of other programs' memory (processes that are not a vidline
/// node or its children), naming the card and the processes; else one ok line.
std::vector<check_line> check_gpu_cards(const config::cluster& c, const config::host& h,
                                        const std::vector<std::string>& gpu_ids,
                                        const gpu::reader_options& o);

} // namespace vidline::nodes::verbs
