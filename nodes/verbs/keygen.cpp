/// `vidline keygen`: writes this host's CURVE key pair with the key library
/// (nodes/bus/keys.hpp) the node and the command line read their keys with.

#include <climits>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include <unistd.h>

#include "nodes/verbs/exit_codes.hpp"
#include "nodes/bus/keys.hpp"
#include "nodes/verbs/verbs.hpp"

namespace vidline::nodes::verbs {
namespace {

/// This machine's host name, as the default --name.
std::string local_host_name() {
  char host[HOST_NAME_MAX + 1] = {};
  if (::gethostname(host, sizeof host - 1) != 0)
    return "";
  return host;
}

/// Options of `vidline keygen`; CLI11 keeps pointers into it.
struct keygen_options {
  std::string out;
  std::string name;
  bool force = false;
};

int run_keygen(const keygen_options& o) {
  const std::string name = o.name.empty() ? local_host_name() : o.name;
  bus::keygen_result r;
  try {
    r = bus::write_curve_keypair(o.out, name, o.force);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return exit_code::usage;
  }
  std::printf("secret key: %s (mode 0600: keep it on this host)\n", r.secret_path.c_str());
  std::printf("public key: %s\n", r.public_path.c_str());
  std::printf("%s\n", r.public_z85.c_str());
  return exit_code::ok;
}

} // namespace

void add_security_verbs(CLI::App& app, verb_list& out) {
  auto o = std::make_shared<keygen_options>();
  auto* keygen = app.add_subcommand(
      "keygen", "Write this host's CURVE key pair: DIR/HOST.key (secret, 0600) and DIR/HOST.pub");
  keygen->add_option("--out", o->out, "Directory for the key files (created 0700 if missing)")
      ->required();
  keygen->add_option("--name", o->name, "Host name as in the config (default: this machine's)");
  keygen->add_flag("--force", o->force, "Replace an existing pair (revokes the old key)");
  out.push_back({keygen, [o] { return run_keygen(*o); }});
}

} // namespace vidline::nodes::verbs
