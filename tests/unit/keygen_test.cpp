// vidline keygen: a CURVE pair whose halves match, the secret readable by its owner only
// whatever the umask, no silent overwrite, host names that cannot leave the directory,
// key files read back strictly.

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <sys/stat.h>
#include <zmq.h>

#include "nodes/bus/keys.hpp"
#include "nodes/verbs/verbs.hpp"
#include "tests/support/processes.hpp"

using namespace vidline::nodes;
using namespace vidline::nodes::bus;
using namespace vidline::nodes::verbs;
using testing_support::read_file;
using testing_support::temp_dir;
namespace fs = std::filesystem;

namespace {

unsigned mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::lstat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

/// The public key libzmq derives from a secret key.
std::string public_of(const std::string& secret_z85) {
  char pub[41] = {};
  REQUIRE(zmq_curve_public(pub, secret_z85.c_str()) == 0);
  return pub;
}

/// Runs `vidline <args>` through the verbs keygen adds, as cli_main does.
int run_cli(const std::vector<std::string>& args) {
  CLI::App app;
  verb_list verbs;
  add_security_verbs(app, verbs);
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  app.parse(reversed);
  for (auto& v : verbs)
    if (v.cmd->parsed())
      return v.run();
  return -1;
}

/// Restores the umask at the end of a test.
struct umask_guard {
  mode_t old;
  explicit umask_guard(mode_t m) : old(::umask(m)) {}
  ~umask_guard() { ::umask(old); }
};

} // namespace

TEST_CASE("keygen writes a matching pair, the secret 0600 whatever the umask", "[keygen]") {
  temp_dir dir("vl-keygen");
  const std::string out = dir.path() + "/keys";  // created by keygen
  umask_guard wide(0);
  auto r = write_curve_keypair(out, "alpha");
  CHECK(r.secret_path == out + "/alpha.key");
  CHECK(r.public_path == out + "/alpha.pub");
  CHECK(mode_of(r.secret_path) == 0600);
  CHECK(mode_of(r.public_path) == 0644);
  CHECK(mode_of(out) == 0700);
  const std::string sec = read_file(r.secret_path);
  const std::string pub = read_file(r.public_path);
  REQUIRE(sec.size() == 41);
  REQUIRE(pub.size() == 41);
  CHECK(sec.back() == '\n');
  CHECK(pub == r.public_z85 + "\n");
  CHECK(public_of(sec.substr(0, 40)) == r.public_z85);
  CHECK(read_secret_key(r.secret_path) == sec.substr(0, 40));
  CHECK(read_public_key(r.public_path) == r.public_z85);
  CHECK_FALSE(fs::exists(r.secret_path + ".tmp"));

  // A second pair is a different pair.
  auto again = write_curve_keypair(out, "beta");
  CHECK(again.public_z85 != r.public_z85);
}

TEST_CASE("keygen never replaces a pair unless told to", "[keygen]") {
  temp_dir dir("vl-keygen");
  auto first = write_curve_keypair(dir.path(), "alpha");
  CHECK_THROWS_AS(write_curve_keypair(dir.path(), "alpha"), std::invalid_argument);
  CHECK(read_public_key(first.public_path) == first.public_z85);

  // Only the public half left behind still blocks: the pair goes together.
  fs::remove(first.secret_path);
  CHECK_THROWS_AS(write_curve_keypair(dir.path(), "alpha"), std::invalid_argument);

  auto forced = write_curve_keypair(dir.path(), "alpha", true);
  CHECK(forced.public_z85 != first.public_z85);
  CHECK(public_of(read_secret_key(forced.secret_path)) == forced.public_z85);
}

TEST_CASE("keygen refuses host names that would leave the directory", "[keygen]") {
  temp_dir dir("vl-keygen");
  for (const char* bad : {"", "..", ".hidden", "-rf", "a/b", "../alpha", "/etc/alpha", "a b",
                          "caf\xc3\xa9", "x\n"})
    CHECK_THROWS_AS(write_curve_keypair(dir.path(), bad), std::invalid_argument);
  CHECK(fs::is_empty(dir.path()));
  CHECK_NOTHROW(write_curve_keypair(dir.path(), "gpu-host_01.lan"));
}

TEST_CASE("key files are read strictly", "[keygen]") {
  temp_dir dir("vl-keygen");
  auto r = write_curve_keypair(dir.path(), "alpha");

  SECTION("a secret others may read is refused") {
    ::chmod(r.secret_path.c_str(), 0640);
    CHECK_THROWS_WITH(read_secret_key(r.secret_path), Catch::Contains("chmod 600"));
  }
  SECTION("a symlink to a key is refused") {
    const std::string link = dir.path() + "/link.key";
    fs::create_symlink(r.secret_path, link);
    CHECK_THROWS(read_secret_key(link));
    CHECK_THROWS(read_public_key(link));
  }
  SECTION("anything but one Z85 key is refused") {
    const std::string f = dir.path() + "/bad.pub";
    for (const std::string& text : {std::string(""), std::string(39, 'a') + "\n",
                                   std::string(41, 'a'), r.public_z85 + "\n\n",
                                   r.public_z85.substr(0, 39) + "\"\n",
                                   std::string(200, 'a')}) {
      std::ofstream(f, std::ios::trunc) << text;
      CHECK_THROWS(read_public_key(f));
    }
    CHECK_THROWS(read_public_key(dir.path() + "/missing.pub"));
    CHECK_THROWS(read_public_key(dir.path()));  // a directory
  }
  CHECK(is_z85_key(r.public_z85));
  CHECK_FALSE(is_z85_key(r.public_z85 + "a"));
}

TEST_CASE("vidline keygen --out DIR --name HOST", "[keygen][cli]") {
  temp_dir dir("vl-keygen");
  CHECK(run_cli({"keygen", "--out", dir.path(), "--name", "beta"}) == 0);
  CHECK(fs::exists(dir.path() + "/beta.key"));
  CHECK(public_of(read_secret_key(dir.path() + "/beta.key")) ==
        read_public_key(dir.path() + "/beta.pub"));
  // Again: refused with the usage code, nothing changed.
  const std::string pub = read_file(dir.path() + "/beta.pub");
  CHECK(run_cli({"keygen", "--out", dir.path(), "--name", "beta"}) == 2);
  CHECK(read_file(dir.path() + "/beta.pub") == pub);
  CHECK(run_cli({"keygen", "--out", dir.path(), "--name", "beta", "--force"}) == 0);
  CHECK(read_file(dir.path() + "/beta.pub") != pub);
  CHECK(run_cli({"keygen", "--out", dir.path(), "--name", "../x"}) == 2);
  CHECK_THROWS_AS(run_cli({"keygen", "--name", "beta"}), CLI::RequiredError);
}
