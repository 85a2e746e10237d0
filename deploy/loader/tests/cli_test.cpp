#include "deploy/loader/cli.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "my_ops/error.h"

namespace my_ops::loader {
namespace {

Options parse(std::vector<const char*> args) {
  args.insert(args.begin(), "loader");
  return parse_args(static_cast<int>(args.size()), args.data());
}

const std::vector<const char*> kRequired = {"--package", "m.pt2",    "--input",
                                            "i.pt",      "--output", "o.pt"};

std::vector<const char*> with(std::vector<const char*> extra) {
  std::vector<const char*> args = kRequired;
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// The usage error's message, or "" when parsing succeeded.
std::string usage_error(std::vector<const char*> args) {
  try {
    parse(std::move(args));
  } catch (const deploy::Error& e) {
    EXPECT_EQ(e.code(), deploy::kUsage) << e.what();
    return e.what();
  }
  return "";
}

TEST(Cli, Defaults) {
  Options o = parse(kRequired);
  EXPECT_EQ(o.package, "m.pt2");
  EXPECT_TRUE(o.verify);
  EXPECT_EQ(o.threads, 1);
  EXPECT_EQ(o.runners, 1);  // follows --threads
  EXPECT_EQ(parse(with({"--threads=4"})).runners, 4);
  EXPECT_EQ(o.max_unpacked_mib, 32768u);
}

TEST(Cli, CapsThreadsAndRunnersWithAUsageError) {
  EXPECT_NE(usage_error(with({"--threads", "100000"})).find("--threads"), std::string::npos);
  EXPECT_NE(usage_error(with({"--runners", "257"})).find("<= 256"), std::string::npos);
  EXPECT_EQ(usage_error(with({"--threads", "256", "--runners", "256"})), "");
  EXPECT_NE(usage_error(with({"--intra-op-threads", "0"})).find(">= 1"), std::string::npos);
  EXPECT_NE(usage_error(with({"--intra-op-threads", "257"})).find("<= 256"), std::string::npos);
  EXPECT_EQ(parse(with({"--intra-op-threads=4"})).intra_op_threads, 4);
  EXPECT_EQ(parse(kRequired).intra_op_threads, 0);  // LibTorch's own default
}

TEST(Cli, RefusesMalformedCommandLines) {
  EXPECT_NE(usage_error({"--input", "i.pt", "--output", "o.pt"}).find("--package"),
            std::string::npos);
  EXPECT_NE(usage_error(with({"--bench", "ten"})).find("--bench"), std::string::npos);
  EXPECT_NE(usage_error(with({"--bench", "1", "--runs", "1"})).find("exclude"), std::string::npos);
  EXPECT_NE(usage_error(with({"--exact"})).find("--expect"), std::string::npos);
  EXPECT_NE(usage_error(with({"--atol", "-1"})).find("--atol"), std::string::npos);
  EXPECT_NE(usage_error(with({"--no-verify=1"})).find("unknown"), std::string::npos);
  EXPECT_NE(usage_error(with({"--ops"})).find("needs a value"), std::string::npos);
  EXPECT_NE(usage_error(with({"--max-unpacked-mib", "0"})).find("--max-unpacked-mib"),
            std::string::npos);
}

// A script whose variable is empty passes "": taken as "not given", `--public-key "$KEY"` would
// run unsigned code and `--weights "$W"` the package's own weights.
TEST(Cli, RefusesAnEmptyValueForEveryFlagThatTakesOne) {
  for (const std::string flag :
       {"--ops", "--package", "--input", "--output", "--expect", "--manifest", "--public-key",
        "--weights", "--weights-manifest", "--atol", "--rtol", "--bench", "--runs", "--threads",
        "--runners", "--intra-op-threads", "--max-unpacked-mib", "--max-input-mib"}) {
    for (const bool inline_value : {false, true}) {
      std::vector<std::string> args = {"--package", "m.pt2", "--input", "i.pt", "--output", "o.pt"};
      auto given = std::find(args.begin(), args.end(), flag);
      if (given != args.end()) args.erase(given, given + 2);
      if (inline_value) {
        args.push_back(flag + "=");
      } else {
        args.insert(args.end(), {flag, ""});
      }
      std::vector<const char*> argv;
      for (const auto& a : args) argv.push_back(a.c_str());
      EXPECT_EQ(usage_error(argv), flag + " needs a non-empty value") << flag;
    }
  }
}

TEST(Cli, RefusesAFlagGivenTwice) {
  // The last value silently winning would run another package, or write elsewhere, than the
  // caller reads on the command line.
  EXPECT_EQ(usage_error(with({"--package", "other.pt2"})), "--package is given more than once");
  EXPECT_EQ(usage_error(with({"--output=x.pt"})), "--output is given more than once");
  EXPECT_EQ(usage_error(with({"--threads", "2", "--threads", "3"})),
            "--threads is given more than once");
  EXPECT_EQ(usage_error(with({"--no-verify", "--no-verify"})),
            "--no-verify is given more than once");
  // --ops is the one list.
  EXPECT_EQ(usage_error(with({"--ops", "a.so", "--ops", "b.so"})), "");
}

TEST(Cli, BareOpsNamesAreFilesInTheCurrentFolder) {
  Options o = parse(with({"--ops", "libx.so", "--ops", "lib/liby.so", "--ops", "/abs/libz.so"}));
  resolve_paths(o, "");
  EXPECT_EQ(o.ops, (std::vector<std::string>{"./libx.so", "lib/liby.so", "/abs/libz.so"}));
}

TEST(Cli, RelativePathsFollowTheFolderBazelRunStartedIn) {
  Options o = parse(with({"--ops", "libx.so", "--expect", "/abs/e.pt"}));
  resolve_paths(o, "/home/me/work");
  EXPECT_EQ(o.package, "/home/me/work/m.pt2");
  EXPECT_EQ(o.input, "/home/me/work/i.pt");
  EXPECT_EQ(o.output, "/home/me/work/o.pt");
  EXPECT_EQ(o.expect, "/abs/e.pt");
  EXPECT_EQ(o.ops, (std::vector<std::string>{"/home/me/work/./libx.so"}));
  EXPECT_EQ(o.manifest, "");
}

TEST(Cli, DefaultOpLibraryPrefersTheBundleLayoutThenRunfiles) {
  char tmpl[] = "/tmp/cli_test.XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string exe = dir + "/bin/loader";
  ::mkdir((dir + "/bin").c_str(), 0700);
  // Nothing anywhere: the bundle path, for the error message.
  EXPECT_EQ(default_op_library(exe, ""), dir + "/bin/libmy_ops.so");
  // Runfiles: a symbolic link into the output tree, resolved to the file itself.
  ::mkdir((dir + "/real").c_str(), 0700);
  std::ofstream(dir + "/real/libmy_ops.so") << "x";
  ::mkdir((dir + "/rf").c_str(), 0700);
  ::mkdir((dir + "/rf/_main").c_str(), 0700);
  ::mkdir((dir + "/rf/_main/ops").c_str(), 0700);
  ASSERT_EQ(
      ::symlink((dir + "/real/libmy_ops.so").c_str(), (dir + "/rf/_main/ops/libmy_ops.so").c_str()),
      0);
  EXPECT_EQ(default_op_library(exe, dir + "/rf"), dir + "/real/libmy_ops.so");
  // Beside the executable wins.
  std::ofstream(dir + "/bin/libmy_ops.so") << "y";
  EXPECT_EQ(default_op_library(exe, dir + "/rf"), dir + "/bin/libmy_ops.so");
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace my_ops::loader
