#include "nodes/bus/hello.hpp"

namespace vidline::nodes::bus {
namespace {

std::string shown(const std::string& digest) {
  return digest.empty() ? std::string("none") : digest.substr(0, 16);
}

} // namespace

std::optional<std::string> hello_mismatch(const hello_identity& ours,
                                          const msg::heartbeat& theirs) {
  if (theirs.version != ours.version) {
    if (theirs.version.empty())
      return "it announces no version (a vidline build older than the version check), this "
             "node runs " + ours.version + ": a cluster runs one version, upgrade every host";
    return "it runs vidline " + theirs.version + ", this node runs " +
           (ours.version.empty() ? std::string("no announced version") : ours.version) +
           ": a cluster runs one version, install the same one on every host";
  }
  if (theirs.config_digest != ours.config_digest)
    return "it was started from another cluster config (sha256 " + shown(theirs.config_digest) +
           "..., this node's " + shown(ours.config_digest) +
           "...): start every node from the same config file";
  return std::nullopt;
}

} // namespace vidline::nodes::bus
