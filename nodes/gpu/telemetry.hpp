#pragma once
/// Reads a host's GPUs (docs/metrics.md, "GPU telemetry"): NVIDIA cards through NVML,
/// loaded at run time (`dlopen`: no build dependency; without the library there is simply
/// no NVIDIA telemetry), AMD cards through the amdgpu driver's sysfs and hwmon files.
/// No `nvidia-smi` text is parsed.
///
/// Failures handled:
///   - no NVML library, or nvmlInit fails: every NVIDIA card reads as source "unknown";
///   - a symbol this NVML lacks (an older driver): that field stays -1 (unknown);
///   - a call answering NOT_SUPPORTED or another error: that field stays -1;
///   - a call answering GPU_IS_LOST, or a card the config names that the driver no longer
///     lists: the card is `lost` (the health rule drains its pools);
///   - an amdgpu file missing or unreadable: that field stays -1;
///   - an NVML without event functions, one whose event set cannot be made, or a card whose
///     driver answers NOT_SUPPORTED to Xid events: that card's Xid figures stay unknown (-1);
///     a card that failed to register for another reason is tried again at each reading;
///   - NVML keeps only the newest Xid code between two waits: two Xids within one sampling
///     interval are counted twice, both with the later code (its documented behaviour).
/// Nothing here throws or ends the node.

#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "messages/gpu.hpp"

namespace vidline::nodes::gpu {

struct reader_options {
  std::string nvml_library = "libnvidia-ml.so.1";  ///< "" = do not try NVML
  std::string drm_root = "/sys/class/drm";         ///< "" = do not read amdgpu
  std::string proc_root = "/proc";                 ///< process names (<proc>/<pid>/comm)
};

/// The options of a node: the defaults, with VIDLINE_NVML_LIBRARY and VIDLINE_DRM_ROOT from
/// the environment when set (tests point them at a fake NVML and a fake sysfs tree).
reader_options options_from_environment();

class reader {
public:
  explicit reader(reader_options o);
  ~reader();
  reader(const reader&) = delete;
  reader& operator=(const reader&) = delete;

  /// Whether NVML loaded and initialised.
  bool nvml() const;
  /// Why NVML is not in use ("" when it is).
  const std::string& nvml_status() const;
  /// Why NVML's Xid events are not read ("" when they are, for the cards that support them).
  const std::string& xid_status() const;

  /// One reading of every card: first those `configured` names (vendor nvidia through
  /// NVML, amd through amdgpu, by their index; `id` set), then those found that it does
  /// not name (`id` ""). `unix_now` stamps the readings.
  std::vector<msg::gpu_sample> read(const std::vector<config::gpu>& configured, double unix_now);

  /// NVIDIA cards NVML lists (0 without NVML).
  int nvml_count();
  /// One NVIDIA card by index (lost when NVML has no such index). Takes the Xid events
  /// waiting in NVML (every card's) first, stamped `unix_now`.
  msg::gpu_sample read_nvml(int index, double unix_now);
  /// The amdgpu cards under drm_root, in card order (their index is their position).
  std::vector<msg::gpu_sample> read_amdgpu(double unix_now);

private:
  struct nvml_lib;
  std::unique_ptr<nvml_lib> nv_;
  reader_options o_;
};

} // namespace vidline::nodes::gpu
