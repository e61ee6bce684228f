#pragma once
/// A timing and capacity profile: how long each stage takes on each kind of pool, encoder
/// and decoder, and what a pool kind cannot hold. The `sim` backend paces itself by it, the
/// coordinator and the planner predict runs from it, `vidline profile` writes one. Loaded
/// from JSON; `profile::reference()` is the embedded profile calibrated on docs/reference.md.
/// docs/profile.md documents the format, the lookup rules and every number's source.

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace vidline::config::profile {

/// A job's size. Its load, width x height x seconds, is what unmeasured sizes are
/// interpolated by and what capacity limits are stated in.
struct job_size {
  uint32_t width = 0;
  uint32_t height = 0;
  uint32_t seconds = 0;

  /// width x height x seconds (saturates at UINT64_MAX).
  uint64_t load() const noexcept;
  /// "416x736x5".
  std::string str() const;
  /// Parses "WxHxS" (positive decimal integers); nullopt otherwise.
  static std::optional<job_size> parse(std::string_view text);

  friend bool operator==(const job_size& a, const job_size& b) noexcept {
    return a.width == b.width && a.height == b.height && a.seconds == b.seconds;
  }
  friend bool operator!=(const job_size& a, const job_size& b) noexcept { return !(a == b); }
};

/// Whether the model must be loaded first (the first job of a sampler instance).
enum class model_state { cold, warm };

/// One number of the profile: seconds, an optional spread, and where it came from.
struct timing {
  double s = 0;
  double min_s = 0;      ///< == s when no spread is given
  double max_s = 0;      ///< == s when no spread is given
  std::string source;
};

/// A lookup's answer: the seconds to use, the spread, and how it was obtained
/// ("measured 416x736x5", "interpolated by load between ...", ...).
struct estimate {
  double s = 0;
  double min_s = 0;
  double max_s = 0;
  std::string basis;
};

/// Sampling times of one pool kind at one size.
struct sampling_point {
  job_size size;
  timing cold;
  timing warm;
};

/// What a pool kind cannot hold: a job whose load exceeds `max_load` fails with an
/// out-of-memory error after `fail_after_s`.
struct capacity_limit {
  std::optional<uint64_t> max_load;  ///< nullopt = no known limit
  double fail_after_s = 0;
  std::string source;
};

/// What a pool kind's cards (all of them together) or a decoder kind's card draws while a
/// stage runs on them: the mean power over the stages measured (`vidline profile build`
/// learns it from runs whose nodes read GPU telemetry). `vidline plan` multiplies it by
/// each planned stage's length for the energy of a plan.
struct power_draw {
  double watts = 0;
  std::string source;
};

/// How one model samples on a pool kind, against the kind's own sampling rows (which are
/// the times of the model the kind was measured with): warm times scale by `warm_factor`,
/// and a cold stage (the model loaded first, or switched from another model) adds `load`.
struct model_timing {
  double warm_factor = 1;
  std::optional<timing> load;  ///< nullopt = the kind's own cold - warm
  std::string source;
};

/// One pool kind ("t10x8", "t10x4", "rx7900xtx"; kinds.hpp names them).
struct pool_profile {
  std::string description;
  std::optional<power_draw> power;  ///< nullopt = not measured
  /// Model-load seconds: fills a size's missing cold (warm + this) or warm (cold - this).
  std::optional<timing> cold_extra;
  capacity_limit capacity;
  std::vector<sampling_point> sampling;  ///< sorted by load
  /// Models (their keys, as workflows name them) that sample at other speeds or load in
  /// other times than the rows say; a model not named here samples as the rows say.
  std::map<std::string, model_timing> models;
};

/// One decode time of a decoder kind.
struct decode_point {
  job_size size;
  timing time;
};

/// A decoder kind that, at sizes it has no measurement for, takes `factor` times another.
struct decoder_scale {
  std::string decoder;
  double factor = 1;
  std::string source;
};

/// One decoder kind ("rtx3080ti", "t10").
struct decoder_profile {
  std::string description;
  std::optional<power_draw> power;  ///< nullopt = not measured
  std::vector<decode_point> decode;   ///< sorted by load
  std::optional<decoder_scale> scale_of;
};

/// The latent length the profile's latents scale from.
struct latent_reference {
  job_size size;
  uint64_t bytes = 0;
  std::string source;
};

/// Seconds to move one latent from a sampling host to the decoder's host.
struct handoff_profile {
  timing remote;         ///< across the link between hosts
  timing same_host;      ///< the latent already lies on the decoder's host
};

/// A profile that could not be accepted. `path` names the field, JSON-pointer style
/// ("/pools/t10x8/sampling/0/warm/s"); `what()` reads "<path>: <message>".
class profile_error : public std::runtime_error {
public:
  profile_error(std::string path, std::string message);
  const std::string& path() const noexcept { return path_; }
  /// The message without the path.
  const std::string& message() const noexcept { return message_; }

private:
  std::string path_;
  std::string message_;
};

/// A loaded, validated profile. Immutable; copies are cheap enough to keep one per backend.
class profile {
public:
  /// Parses and validates a profile from JSON. Throws profile_error naming the field.
  static profile from_json(const nlohmann::json& j);
  /// Parses JSON text (syntax errors are profile_error with path "").
  static profile parse(const std::string& text);
  /// Reads and parses a file (I/O errors are profile_error with path "").
  static profile load(const std::string& file);
  /// The embedded reference profile.
  static profile reference();
  /// The embedded reference profile's JSON text.
  static std::string_view reference_json();

  const std::string& name() const noexcept { return name_; }
  const latent_reference& latent() const noexcept { return latent_; }
  const handoff_profile& handoff_info() const noexcept { return handoff_; }
  const std::map<std::string, pool_profile>& pools() const noexcept { return pools_; }
  const std::map<std::string, decoder_profile>& decoders() const noexcept { return decoders_; }
  const std::map<std::string, timing>& encoders() const noexcept { return encoders_; }

  /// A kind the profile named by its old name (kinds.hpp): where, and its name now.
  struct old_name {
    std::string path;   ///< "/pools/xtx"
    std::string kind;   ///< "rx7900xtx"
  };
  /// The kinds it named by an old name; they load under the new one.
  const std::vector<old_name>& old_names() const noexcept { return renamed_; }

  bool has_pool(const std::string& key) const { return pools_.count(key) != 0; }
  bool has_decoder(const std::string& key) const { return decoders_.count(key) != 0; }
  bool has_encoder(const std::string& key) const { return encoders_.count(key) != 0; }

  /// Sampling seconds of one job of model `model` on pool kind `pool_key` (capacity not
  /// considered): cold = its model is loaded first (a pool's first job, or a switch from
  /// another model). Throws profile_error for an unknown key.
  estimate sampling(const std::string& pool_key, const job_size& size, model_state state,
                    const std::string& model = {}) const;
  /// False when `size` is over the pool kind's capacity.
  bool fits(const std::string& pool_key, const job_size& size) const;
  /// The pool kind's capacity limit.
  const capacity_limit& capacity(const std::string& pool_key) const;
  /// Conditioning seconds of one uncached prompt (a cached prompt costs 0).
  estimate conditioning(const std::string& encoder_key) const;
  /// Decode + mux seconds of one latent on decoder kind `decoder_key`.
  estimate decode(const std::string& decoder_key, const job_size& size) const;
  /// Seconds to hand one latent over to the decoder's host.
  estimate handoff(bool same_host) const;
  /// Bytes of a latent of this size: the profile's latent reference length scaled by
  /// width x height x seconds, rounded to the nearest byte (halves round up); 0 when any
  /// dimension is 0 (docs/sim-contract.md). Throws std::overflow_error past 2^64.
  uint64_t latent_bytes(const job_size& size) const;

private:
  profile() = default;
  friend class profile_reader;

  const pool_profile& pool(const std::string& key) const;
  const decoder_profile& decoder(const std::string& key) const;

  std::string name_;
  latent_reference latent_;
  handoff_profile handoff_;
  std::map<std::string, pool_profile> pools_;
  std::map<std::string, decoder_profile> decoders_;
  std::map<std::string, timing> encoders_;
  std::vector<old_name> renamed_;
};

} // namespace vidline::config::profile
