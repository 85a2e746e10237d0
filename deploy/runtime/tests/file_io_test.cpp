#include "deploy/runtime/src/file_io.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "deploy/runtime/src/failure.h"

namespace my_ops::deploy::detail {
namespace {

constexpr FileRole kRole{"input file", 40, 41};

class FileIo : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = std::getenv("TEST_TMPDIR");
    std::string tmpl = std::string(base ? base : "/tmp") + "/file_io_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }

  std::string write(const std::string& name, const std::string& content) {
    std::ofstream(dir_ + "/" + name, std::ios::binary) << content;
    return dir_ + "/" + name;
  }
  static std::string read(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
  }
  // The failure from `fn`, which must fail.
  template <typename Fn>
  static Error failure_of(Fn fn) {
    try {
      fn();
    } catch (const Error& f) {
      return f;
    }
    ADD_FAILURE() << "did not fail";
    return Error(kOk, "");
  }

  std::string dir_;
};

TEST_F(FileIo, ReadsARegularFileThroughOneDescriptor) {
  const std::string path = write("a", "hello");
  UniqueFd fd = open_regular_file(path, kRole);
  ASSERT_TRUE(fd);
  // Replacing the file by name after the open changes nothing for the reader.
  write("b", "other");
  ASSERT_EQ(::rename((dir_ + "/b").c_str(), path.c_str()), 0);
  EXPECT_EQ(read_all(fd.get(), path, kRole, 100), "hello");
}

TEST_F(FileIo, RefusesASymbolicLink) {
  const std::string target = write("target", "x");
  const std::string link = dir_ + "/link";
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  Error f = failure_of([&] { open_regular_file(link, kRole); });
  EXPECT_EQ(f.code(), kRole.missing_code);
  EXPECT_NE(std::string(f.what()).find("symbolic link"), std::string::npos) << f.what();
  EXPECT_NE(std::string(f.what()).find(link), std::string::npos) << f.what();
}

TEST_F(FileIo, RefusesAFifoWithoutBlocking) {
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Error f = failure_of([&] { open_regular_file(fifo, kRole); });
  EXPECT_EQ(f.code(), kRole.invalid_code);
  EXPECT_NE(std::string(f.what()).find("not a regular file"), std::string::npos) << f.what();
}

TEST_F(FileIo, ReportsAMissingFile) {
  bool missing = false;
  EXPECT_FALSE(open_regular_file(dir_ + "/nope", kRole, &missing));
  EXPECT_TRUE(missing);
  EXPECT_EQ(failure_of([&] { open_regular_file(dir_ + "/nope", kRole); }).code(), 40);
}

TEST_F(FileIo, ReadAllStopsAtTheCap) {
  const std::string path = write("big", std::string(1000, 'x'));
  UniqueFd fd = open_regular_file(path, kRole);
  Error f = failure_of([&] { read_all(fd.get(), path, kRole, 999, "--max-input-mib"); });
  EXPECT_EQ(f.code(), kRole.invalid_code);
  EXPECT_NE(std::string(f.what()).find("--max-input-mib"), std::string::npos) << f.what();
  UniqueFd again = open_regular_file(path, kRole);
  EXPECT_EQ(read_all(again.get(), path, kRole, 1000).size(), 1000u);
}

TEST_F(FileIo, AtomicWriteNeverFollowsAPlantedLink) {
  const std::string victim = write("victim", "precious");
  const std::string out = dir_ + "/out.pt";
  ASSERT_EQ(::symlink(victim.c_str(), (out + ".tmp").c_str()), 0);
  write_file_atomically(out, "new data");
  EXPECT_EQ(read(out), "new data");
  EXPECT_EQ(read(victim), "precious");
  struct stat st{};
  ASSERT_EQ(::lstat(out.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
}

TEST_F(FileIo, AtomicWriteReplacesAndLeavesNoTemporaryFile) {
  const std::string out = write("out.pt", "old");
  std::string seen;
  write_file_atomically(out, "new", [&](const std::string* tmp) {
    if (tmp) seen = *tmp;
  });
  EXPECT_EQ(read(out), "new");
  EXPECT_FALSE(seen.empty());
  EXPECT_NE(seen, out + ".tmp");
  EXPECT_NE(::access(seen.c_str(), F_OK), 0);
}

TEST_F(FileIo, AtomicWriteGivesThePermissionsOfAPlainCreate) {
  // mkstemp makes 0600 files; an output should look like any other file the user creates.
  const mode_t saved = ::umask(027);
  write_file_atomically(dir_ + "/out.pt", "x");
  ::umask(saved);
  struct stat st{};
  ASSERT_EQ(::stat((dir_ + "/out.pt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}

TEST_F(FileIo, AtomicWriteIntoAMissingFolderFailsCleanly) {
  Error f = failure_of([&] { write_file_atomically(dir_ + "/no/such/out.pt", "x"); });
  EXPECT_EQ(f.code(), kOutputUnwritable);
  EXPECT_NE(std::string(f.what()).find(dir_ + "/no/such/out.pt"), std::string::npos) << f.what();
}

TEST_F(FileIo, CreateExclusiveRefusesAnythingInTheWay) {
  const std::string target = write("t", "x");
  ASSERT_EQ(::symlink(target.c_str(), (dir_ + "/l").c_str()), 0);
  EXPECT_FALSE(create_exclusive(dir_ + "/l", 0600));
  EXPECT_FALSE(create_exclusive(target, 0600));
  EXPECT_TRUE(create_exclusive(dir_ + "/new", 0600));
}

TEST_F(FileIo, OutputProblemCatchesTyposEarly) {
  EXPECT_EQ(output_problem(dir_), "is a folder");
  EXPECT_EQ(output_problem(dir_ + "/no/out.pt"), "its folder " + dir_ + "/no does not exist");
  const std::string file = write("f", "x");
  EXPECT_EQ(output_problem(file + "/out.pt"), file + " is not a folder");
  EXPECT_FALSE(output_problem(dir_ + "/out.pt"));
  EXPECT_FALSE(output_problem(file));  // an existing file is replaced
}

TEST_F(FileIo, OutputProblemRefusesWhatARenameWouldDestroy) {
  // A device node or a FIFO would be replaced by a regular file.
  EXPECT_EQ(output_problem("/dev/null"),
            "exists and is not a regular file (a device, a FIFO or a socket)");
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(output_problem(fifo),
            "exists and is not a regular file (a device, a FIFO or a socket)");
  // A file this run reads, by its path or by a hard link to it.
  const std::string input = write("input.pt", "x");
  EXPECT_FALSE(output_problem(input));
  UniqueFd fd = open_regular_file(input, kRole);
  EXPECT_EQ(output_problem(input), "is a file this run reads");
  ASSERT_EQ(::link(input.c_str(), (dir_ + "/alias.pt").c_str()), 0);
  EXPECT_EQ(output_problem(dir_ + "/alias.pt"), "is a file this run reads");
  const Error f = failure_of([&] { write_file_atomically(input, "new"); });
  EXPECT_EQ(f.code(), kOutputUnwritable);
  EXPECT_EQ(std::string(f.what()), "cannot write output " + input + ": is a file this run reads");
  EXPECT_EQ(read(input), "x");
}

TEST_F(FileIo, WritesAnOutputWhoseNameIsAsLongAsTheFolderAllows) {
  const std::string out = dir_ + "/" + std::string(255, 'o');
  write_file_atomically(out, "data");
  EXPECT_EQ(read(out), "data");
}

TEST_F(FileIo, ReadExactlyRefusesAFileOfAnotherSize) {
  const std::string path = write("five", "12345");
  char buf[8];
  for (size_t n : {4, 6}) {
    UniqueFd fd = open_regular_file(path, kRole);
    EXPECT_FALSE(read_exactly(fd.get(), buf, n)) << n;
  }
  UniqueFd fd = open_regular_file(path, kRole);
  ASSERT_TRUE(read_exactly(fd.get(), buf, 5));
  EXPECT_EQ(std::string(buf, 5), "12345");
}

TEST(Paths, DirAndBaseName) {
  EXPECT_EQ(dir_name("a/b/c"), "a/b");
  EXPECT_EQ(dir_name("/c"), "/");
  EXPECT_EQ(dir_name("c"), ".");
  EXPECT_EQ(base_name("a/b/c"), "c");
  EXPECT_EQ(base_name("c"), "c");
}

}  // namespace
}  // namespace my_ops::deploy::detail
