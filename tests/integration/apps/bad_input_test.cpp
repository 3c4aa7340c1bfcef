// Bad input to the programs, as a new user gives it: every case ends at once with exit status 2
// and an error that names the place, never a crash, a hang or a wrapped number.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "tests/support/process.hpp"
#include "tests/support/temp_dir.hpp"

namespace rekindle {
namespace {

using namespace std::chrono_literals;
using testing::run_process;

std::string bin(const char* name) { return (testing::bin_dir() / name).string(); }

// Runs the program (at most 60 s: a hang fails) and expects exit status 2 with `says` on stderr.
void refused(const std::vector<std::string>& argv, const std::string& says) {
  const auto r = run_process(argv, 60s);
  std::string cmd;
  for (const auto& a : argv)
    cmd += a + " ";
  EXPECT_EQ(r.exit_code, 2) << cmd << "\n" << r.out << r.err;
  EXPECT_NE(r.err.find(says), std::string::npos) << cmd << "\nstderr: " << r.err;
}

TEST(bad_input, files_that_are_not_files_are_refused_without_reading_them) {
  testing::temp_dir dir;
  const auto fifo = dir.path() / "fifo.toml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  refused({bin("rekindled"), "--check-config", "/dev/zero"}, "/dev/zero: is a character device, not a configuration file");
  refused({bin("rekindled"), "--check-config", fifo.string()}, "fifo.toml: is a FIFO, not a configuration file");
  refused({bin("rekindled"), "--check-config", dir.path().string()}, "is a directory, not a configuration file");
  refused({bin("rekindle"), "trace", "check", "/dev/zero"}, "/dev/zero: is a character device, not a trace file");
  refused({bin("rekindle"), "trace", "check", dir.path().string()}, "is a directory, not a trace file");
  for (const auto& token : {std::string{"/dev/zero"}, fifo.string()}) {
    const auto cfg = dir.write("t.toml", "[[nodes]]\nname = \"n0\"\nhost = \"127.0.0.1\"\n[security]\ntoken_file = \"" +
                                             token + "\"\n");
    refused({bin("rekindled"), "--check-config", cfg.string()}, "security.token_file: '" + token + "': is a");
  }
  refused({bin("rekindle"), "status", "--token-file", "/dev/zero"}, "--token-file /dev/zero: is a character device");
}

TEST(bad_input, numbers_and_addresses_out_of_range_are_refused_saying_the_range) {
  refused({bin("rekindled"), "--port", "70000", "--node", "n0"}, "'70000' is not a whole number from 0 to 65535");
  refused({bin("rekindled"), "--port", "-1", "--node", "n0"}, "'-1' is not a whole number from 0 to 65535");
  refused({bin("rekindled"), "--check-config"}, "--check-config");
  refused({bin("rekindled"), "--no-such-option"}, "--no-such-option");
  for (const char* bad : {"127.0.0.1:abc", "127.0.0.1:99999999999", "127.0.0.1:", "127.0.0.1:99999", "not-an-address"})
    refused({bin("rekindled"), "--node", "n0", "--supervisor", bad}, std::string{"--supervisor: '"} + bad + "' is not host:port");
  refused({bin("rekindle"), "status", "--connect", "127.0.0.1:99999", "--retries", "1"},
          "'127.0.0.1:99999' is not host:port: the port must be a number from 1 to 65535");
  refused({bin("rekindle"), "status", "--connect", "not-an-address"}, "'not-an-address' is not host:port");
  refused({bin("rekindle"), "events", "--since", "-1"}, "'-1' is not a whole number");
  refused({bin("rekindle"), "events", "--since", "99999999999999999999999"}, "is not a whole number");
  refused({bin("rekindle"), "demo", "--steps", "-5"}, "'-5' is not a whole number from 1 to");
  refused({bin("rekindle"), "trace", "generate", "--nodes", "-2", "--ranks-per-node", "2", "--rate", "0.1", "--days", "1"},
          "'-2' is not a whole number");
}

TEST(bad_input, hosts_that_name_no_machine_are_refused_in_the_configuration) {
  testing::temp_dir dir;
  for (const auto& [host, says] : std::vector<std::pair<std::string, std::string>>{
           {"999.1.1.1", "nodes[0].host: '999.1.1.1' is not a host: not an IPv4 address"},
           {"[::1]", "nodes[0].host: '[::1]' is not a host: write an IPv6 address without brackets"},
           {"", "nodes[0].host: '' is not a host: it is empty"}}) {
    const auto cfg = dir.write("h.toml", "[[nodes]]\nname = \"n0\"\nhost = \"" + host + "\"\n");
    refused({bin("rekindled"), "--check-config", cfg.string()}, says);
  }
  const auto v6 = dir.write("v6.toml", "[[nodes]]\nname = \"n0\"\nhost = \"::1\"\n");
  const auto r = run_process({bin("rekindled"), "--check-config", v6.string()}, 60s);
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST(bad_input, checkpoint_directories_made_by_hand_are_named_precisely) {
  testing::temp_dir dir;
  // A symlink loop as the directory.
  std::filesystem::create_directory_symlink(dir.path() / "loop", dir.path() / "loop");
  refused({bin("rekindle"), "checkpoint", "list", (dir.path() / "loop").string()}, "loop is not a directory");
  refused({bin("rekindle"), "checkpoint", "verify", (dir.path() / "loop").string()}, "loop is not a directory");
  // A manifest that is a directory.
  const auto d1 = dir.path() / "d1";
  std::filesystem::create_directories(d1 / "ckpt-000000000010.manifest.json");
  refused({bin("rekindle"), "checkpoint", "verify", d1.string()},
          "ckpt-000000000010.manifest.json: is a directory, not a checkpoint manifest");
  // World sizes no job has, and a shard outside the directory.
  const auto d2 = dir.path() / "d2";
  std::filesystem::create_directories(d2);
  const std::string shard = R"({"rank": 0, "file": "x.shard", "size": 1, "checksum": 1})";
  for (const auto& [world, says] : std::vector<std::pair<std::string, std::string>>{
           {"4000000000", "world_size 4000000000 is not from 1 to 1048576"},
           {"0", "world_size 0 is not from 1 to 1048576"},
           {"4294967296", "world_size 4294967296 is not from 1 to 1048576"}}) {
    testing::temp_dir d;
    d.write("ckpt-000000000010.manifest.json", R"({"step": 10, "world_size": )" + world + R"(, "shards": [)" + shard + "]}");
    refused({bin("rekindle"), "checkpoint", "verify", d.path().string()}, says);
  }
  testing::temp_dir d3;
  d3.write("ckpt-000000000010.manifest.json",
           R"({"step": 10, "world_size": 1, "shards": [{"rank": 0, "file": "../../../../etc/hostname", "size": 1, "checksum": 1}]})");
  refused({bin("rekindle"), "checkpoint", "verify", d3.path().string()},
          "shards[0].file '../../../../etc/hostname' is not a file name in the checkpoint's directory");
  testing::temp_dir d4;
  d4.write("ckpt-000000000010.manifest.json", std::string(100000, '[') + std::string(100000, ']'));
  refused({bin("rekindle"), "checkpoint", "list", d4.path().string()}, "nested 100000 levels deep");
}

}  // namespace
}  // namespace rekindle
