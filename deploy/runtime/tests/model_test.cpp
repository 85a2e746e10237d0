// The deploy API (my_ops/model.h) on the default package: outputs, every error path's code,
// concurrency, models that outlive each other, and weights swapped in while runs go on.

#include "my_ops/model.h"

#include <ATen/Parallel.h>
#include <ATen/ops/allclose.h>
#include <dirent.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "deploy/runtime/tests/runfiles.h"
#include "my_ops/tensor_file.h"

namespace {

using my_ops::deploy::CheckedPackage;
using my_ops::deploy::Error;
using my_ops::deploy::ExitCode;
using my_ops::deploy::Model;
using my_ops::deploy::OpenOptions;

using my_ops::deploy::testing::file_of;
using my_ops::deploy::testing::runfile;

// The files of //deploy:default_package.
std::string package_file(const std::string& name) {
  return file_of("MY_OPS_DEFAULT_PACKAGE", name);
}

std::string op_library() { return runfile(std::getenv("MY_OPS_LIBRARY")); }

OpenOptions default_options() {
  OpenOptions options;
  options.package = package_file("model.pt2");
  options.op_libraries = {op_library()};
  return options;
}

std::vector<at::Tensor> read(const std::string& path) { return my_ops::deploy::read_tensors(path); }

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string temp_dir() { return std::getenv("TEST_TMPDIR"); }

std::string write_file(const std::string& name, const std::string& bytes) {
  const std::string path = temp_dir() + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// The private folders of open models ("my_ops_loader.*" under $TMPDIR).
int private_folders() {
  int n = 0;
  DIR* dir = ::opendir(temp_dir().c_str());
  while (const dirent* entry = dir ? ::readdir(dir) : nullptr) {
    if (std::string(entry->d_name).rfind("my_ops_loader.", 0) == 0) ++n;
  }
  if (dir) ::closedir(dir);
  return n;
}

void expect_same_bits(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(my_ops::deploy::bit_identical(got[i].cpu(), want[i])) << "output " << i;
  }
}

// The Error `body` throws, or a failure when it throws none (or another type).
Error error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a " << typeid(e).name() << ", not my_ops::deploy::Error: " << e.what();
    return Error(my_ops::deploy::kOk, "");
  }
  ADD_FAILURE() << "threw nothing";
  return Error(my_ops::deploy::kOk, "");
}

class ModelTest : public ::testing::Test {
 protected:
  // Every test starts with $TMPDIR its own, so that it can count the private folders.
  void SetUp() override { ::setenv("TMPDIR", temp_dir().c_str(), 1); }
};

TEST_F(ModelTest, RunsTheSampleInputToTheExpectedOutputBitForBit) {
  const Model model = Model::open(default_options());
  expect_same_bits(model.run(read(package_file("sample_input.pt"))),
                   read(package_file("expected_output.pt")));
}

TEST_F(ModelTest, MetadataComesFromTheManifestAndThePackage) {
  const Model model = Model::open(default_options());
  const auto& md = model.metadata();
  const auto manifest = nlohmann::json::parse(read_text(package_file("manifest.json")));
  EXPECT_EQ(md.package_sha256, manifest["package"]["sha256"].get<std::string>());
  EXPECT_EQ(md.torch_version, manifest["torch_version"].get<std::string>());
  EXPECT_EQ(md.target, "linux-x86_64");
  EXPECT_EQ(md.isa, manifest["isa"].get<std::string>());
  EXPECT_EQ(md.isa, "x86-64-v3");  // what the package's --isa portable means on x86-64
  EXPECT_EQ(md.cpu_features, manifest["cpu_features"].get<std::vector<std::string>>());
  EXPECT_EQ(md.device, "cpu");
  ASSERT_EQ(md.ops.size(), manifest["ops"].size());
  for (size_t i = 0; i < md.ops.size(); ++i) {
    EXPECT_EQ(md.ops[i], manifest["ops"][i]["name"].get<std::string>());
    EXPECT_EQ(md.ops[i].rfind("my_ops::", 0), 0u) << md.ops[i];
  }
  // The sample input fits the signature the package carries.
  const auto sample = read(package_file("sample_input.pt"));
  ASSERT_EQ(md.inputs.size(), sample.size());
  for (size_t i = 0; i < sample.size(); ++i) {
    EXPECT_EQ(md.inputs[i].dtype, c10::toString(sample[i].scalar_type()));
    ASSERT_EQ(md.inputs[i].dims.size(), static_cast<size_t>(sample[i].dim()));
    for (int64_t d = 0; d < sample[i].dim(); ++d) {
      const auto& range = md.inputs[i].dims[d];
      EXPECT_LE(range.min, sample[i].size(d));
      if (range.max) {
        EXPECT_GE(*range.max, sample[i].size(d));
      }
    }
  }
}

TEST_F(ModelTest, EightThreadsOnFourRunnersGiveTheSameBits) {
  OpenOptions options = default_options();
  options.runners = 4;
  const Model model = Model::open(options);
  const auto inputs = read(package_file("sample_input.pt"));
  const auto want = read(package_file("expected_output.pt"));
  std::vector<std::vector<at::Tensor>> got(8);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) got[t] = model.run(inputs);
    });
  }
  for (auto& thread : threads) thread.join();
  for (const auto& outputs : got) expect_same_bits(outputs, want);
}

TEST_F(ModelTest, DestroyingOneModelLeavesAnotherWorking) {
  const auto inputs = read(package_file("sample_input.pt"));
  const auto want = read(package_file("expected_output.pt"));
  const int before = private_folders();
  auto first = std::make_unique<Model>(Model::open(default_options()));
  const Model second = Model::open(default_options());
  EXPECT_EQ(private_folders(), before + 2);
  expect_same_bits(first->run(inputs), want);
  first.reset();
  EXPECT_EQ(private_folders(), before + 1) << "the destroyed model's folder is left behind";
  expect_same_bits(second.run(inputs), want);
}

TEST_F(ModelTest, CheckedPackageLoadsLater) {
  CheckedPackage checked = CheckedPackage::check(default_options());
  const Model model = Model::load(std::move(checked));
  expect_same_bits(model.run(read(package_file("sample_input.pt"))),
                   read(package_file("expected_output.pt")));
  EXPECT_EQ(error_of([&] { Model::load(std::move(checked)); }).code(), my_ops::deploy::kUsage);
}

TEST_F(ModelTest, WrongInputsGiveTheSignatureError) {
  const Model model = Model::open(default_options());
  auto inputs = read(package_file("sample_input.pt"));

  auto wrong_dtype = inputs;
  wrong_dtype[0] = wrong_dtype[0].to(at::kDouble);
  const Error dtype = error_of([&] { model.run(wrong_dtype); });
  EXPECT_EQ(dtype.code(), my_ops::deploy::kInputMismatch);
  EXPECT_EQ(std::string(dtype.what()).rfind("input 0 ", 0), 0u) << dtype.what();
  EXPECT_NE(std::string(dtype.what()).find("Double"), std::string::npos) << dtype.what();

  auto wrong_rank = inputs;
  wrong_rank[0] = wrong_rank[0].unsqueeze(0);
  const Error rank = error_of([&] { model.run(wrong_rank); });
  EXPECT_EQ(rank.code(), my_ops::deploy::kInputMismatch);
  EXPECT_EQ(std::string(rank.what()).rfind("input 0 ", 0), 0u) << rank.what();

  auto one_more = inputs;
  one_more.push_back(inputs[0]);
  const Error count = error_of([&] { model.run(one_more); });
  EXPECT_EQ(count.code(), my_ops::deploy::kInputMismatch);
  EXPECT_NE(std::string(count.what()).find("input(s), got " + std::to_string(one_more.size())),
            std::string::npos)
      << count.what();

  const Error undefined = error_of([&] { model.run({at::Tensor()}); });
  EXPECT_EQ(undefined.code(), my_ops::deploy::kInputMismatch);
  EXPECT_STREQ(undefined.what(), "input 0 is an undefined tensor");

  // The model still runs after refusing them.
  expect_same_bits(model.run(inputs), read(package_file("expected_output.pt")));
}

struct ErrorCase {
  const char* name;
  std::function<void(OpenOptions&)> change;
  ExitCode code;
  const char* in_message;
};

// gtest prints a failing case's parameter: its name, not its bytes.
void PrintTo(const ErrorCase& c, std::ostream* os) { *os << c.name; }

class OpenErrorTest : public ModelTest, public ::testing::WithParamInterface<ErrorCase> {};

TEST_P(OpenErrorTest, MapsToItsCodeAndLeavesNoFolder) {
  OpenOptions options = default_options();
  GetParam().change(options);
  const int before = private_folders();
  const Error e = error_of([&] { Model::open(options); });
  EXPECT_EQ(e.code(), GetParam().code) << e.what();
  EXPECT_NE(std::string(e.what()).find(GetParam().in_message), std::string::npos) << e.what();
  EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "more than one line";
  EXPECT_EQ(private_folders(), before);
}

INSTANTIATE_TEST_SUITE_P(
    EveryPath, OpenErrorTest,
    ::testing::Values(
        ErrorCase{"NoPackage", [](OpenOptions& o) { o.package.clear(); }, my_ops::deploy::kUsage,
                  "no package given"},
        ErrorCase{"NoRunner", [](OpenOptions& o) { o.runners = 0; }, my_ops::deploy::kUsage,
                  "runners must be at least 1"},
        ErrorCase{"LibraryTwice",
                  [](OpenOptions& o) { o.op_libraries.push_back(o.op_libraries[0]); },
                  my_ops::deploy::kUsage, "is the same library as"},
        ErrorCase{"MissingPackage", [](OpenOptions& o) { o.package = temp_dir() + "/absent.pt2"; },
                  my_ops::deploy::kPackageMissing, "absent.pt2"},
        ErrorCase{"NotAZip",
                  [](OpenOptions& o) { o.package = write_file("junk.pt2", "not a zip at all"); },
                  my_ops::deploy::kPackageCorrupt, "not a zip archive"},
        ErrorCase{"ZipBomb", [](OpenOptions& o) { o.max_unpacked_bytes = 1024; },
                  my_ops::deploy::kPackageCorrupt, "-byte cap"},
        ErrorCase{"MissingLibrary",
                  [](OpenOptions& o) { o.op_libraries = {temp_dir() + "/libabsent.so"}; },
                  my_ops::deploy::kOpsLibrary, "libabsent.so"},
        ErrorCase{
            "LibraryNotInManifest",
            [](OpenOptions& o) { o.op_libraries = {write_file("libother.so", "other bytes")}; },
            my_ops::deploy::kIntegrity, "is not listed in manifest"},
        ErrorCase{"MissingManifest",
                  [](OpenOptions& o) { o.manifest = temp_dir() + "/absent.json"; },
                  my_ops::deploy::kIntegrity, "manifest not found"},
        ErrorCase{"MalformedManifest",
                  [](OpenOptions& o) { o.manifest = write_file("bad.json", "{\"format\": "); },
                  my_ops::deploy::kIntegrity, "is malformed"},
        ErrorCase{
            "UnsignedManifest",
            [](OpenOptions& o) { o.public_key = runfile(std::getenv("MY_OPS_TEST_PUBLIC_KEY")); },
            my_ops::deploy::kIntegrity, "is not signed"}),
    [](const ::testing::TestParamInfo<ErrorCase>& info) { return std::string(info.param.name); });

TEST_F(ModelTest, AFileThatIsNotALibraryIsAnOpLibraryError) {
  // Unverified, so that the manifest does not refuse it first.
  OpenOptions options = default_options();
  options.verify = false;
  options.op_libraries = {write_file("libempty.so", "")};
  const Error e = error_of([&] { Model::open(options); });
  EXPECT_EQ(e.code(), my_ops::deploy::kOpsLibrary) << e.what();
}

// --- update_weights: //deploy:retrained_weights (another training run of the default model) and
// //deploy:original_weights (the package's own weights as a weights file) -----------------------

std::string retrained(const std::string& name) { return file_of("MY_OPS_RETRAINED_WEIGHTS", name); }
std::string original(const std::string& name) { return file_of("MY_OPS_ORIGINAL_WEIGHTS", name); }

my_ops::deploy::WeightsOptions weights_at(const std::string& weights_bin) {
  my_ops::deploy::WeightsOptions options;
  options.weights = weights_bin;
  return options;
}

bool same_bits(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!my_ops::deploy::bit_identical(a[i].cpu(), b[i].cpu())) return false;
  }
  return true;
}

// weights.bin's sha256 as the weights.json at `path` records it.
std::string blob_sha256(const std::string& path) {
  return nlohmann::json::parse(read_text(path))["blob"]["sha256"].get<std::string>();
}

// The weights the default package's export wrote beside it, which it runs on.
std::string own_weights_sha256() { return blob_sha256(package_file("weights.json")); }

// The mappings of this process whose file is a copy of a weights file (unlinked once mapped).
int mapped_weights_files() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  std::set<std::string> files;
  while (std::getline(maps, line)) {
    if (line.find("/weights") != std::string::npos && line.find(".bin") != std::string::npos) {
      files.insert(line.substr(line.find('/')));
    }
  }
  return static_cast<int>(files.size());
}

TEST_F(ModelTest, NewWeightsGiveTheRetrainedModelsOutputs) {
  Model model = Model::open(default_options());
  EXPECT_EQ(model.weights_sha256(), own_weights_sha256());
  const auto inputs = read(retrained("sample_input.pt"));
  const auto before = model.run(inputs);
  model.update_weights(weights_at(retrained("weights.bin")));
  const auto after = model.run(inputs);
  const auto eager = read(retrained("expected_output.pt"));
  ASSERT_EQ(after.size(), eager.size());
  // float32, the package's kernels against eager: the exporter's own verify tolerance.
  for (size_t i = 0; i < eager.size(); ++i) {
    EXPECT_TRUE(at::allclose(after[i], eager[i], 1e-4, 1e-4)) << "output " << i;
  }
  EXPECT_FALSE(same_bits(before, after)) << "the weights changed nothing";
  EXPECT_EQ(model.weights_sha256(), blob_sha256(retrained("weights.json")));
  // And back: the package's own weights as a weights file give its own outputs, bit for bit.
  model.update_weights(weights_at(original("weights.bin")));
  expect_same_bits(model.run(inputs), before);
  EXPECT_EQ(model.weights_sha256(), blob_sha256(original("weights.json")));
}

TEST_F(ModelTest, FourThreadsRunWhileTheWeightsAreSwappedTwentyTimes) {
  OpenOptions options = default_options();
  options.runners = 4;
  Model model = Model::open(options);
  const auto inputs = read(retrained("sample_input.pt"));
  // The package's own outputs for each set, one run at a time.
  const auto v1 = model.run(inputs);
  model.update_weights(weights_at(retrained("weights.bin")));
  const auto v2 = model.run(inputs);
  model.update_weights(weights_at(original("weights.bin")));
  ASSERT_TRUE(same_bits(model.run(inputs), v1));
  ASSERT_FALSE(same_bits(v1, v2));
  // Each set is its eager model's outputs (a mix would be neither).
  expect_same_bits(model.run(read(package_file("sample_input.pt"))),
                   read(package_file("expected_output.pt")));
  const auto eager_v2 = read(retrained("expected_output.pt"));
  for (size_t i = 0; i < v2.size(); ++i) EXPECT_TRUE(at::allclose(v2[i], eager_v2[i], 1e-4, 1e-4));

  std::atomic<bool> done{false};
  std::atomic<int> seen_v1{0}, seen_v2{0}, seen_other{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      while (!done.load()) {
        const auto out = model.run(inputs);
        if (same_bits(out, v1)) {
          ++seen_v1;
        } else if (same_bits(out, v2)) {
          ++seen_v2;
        } else {
          ++seen_other;
        }
      }
    });
  }
  for (int swap = 0; swap < 20; ++swap) {
    const bool to_v2 = swap % 2 == 0;
    model.update_weights(weights_at(to_v2 ? retrained("weights.bin") : original("weights.bin")));
    // Every run that starts after the swap uses the new set.
    EXPECT_TRUE(same_bits(model.run(inputs), to_v2 ? v2 : v1)) << "swap " << swap;
  }
  done = true;
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(seen_other.load(), 0) << "runs saw a mix of the two sets of weights";
  EXPECT_GT(seen_v1.load(), 0);
  EXPECT_GT(seen_v2.load(), 0);
}

TEST_F(ModelTest, WeightsThatDoNotCheckOutLeaveTheModelAsItWas) {
  Model model = Model::open(default_options());
  const auto inputs = read(package_file("sample_input.pt"));
  const auto want = read(package_file("expected_output.pt"));
  std::string blob = read_text(retrained("weights.bin"));
  blob[blob.size() / 2] ^= 1;
  const std::string folder = temp_dir() + "/flipped";
  ::mkdir(folder.c_str(), 0700);
  std::ofstream(folder + "/weights.bin", std::ios::binary) << blob;
  std::ofstream(folder + "/weights.json", std::ios::binary) << read_text(retrained("weights.json"));
  const Error flipped =
      error_of([&] { model.update_weights(weights_at(folder + "/weights.bin")); });
  EXPECT_EQ(flipped.code(), my_ops::deploy::kIntegrity) << flipped.what();
  EXPECT_NE(std::string(flipped.what()).find("does not match weights manifest"), std::string::npos)
      << flipped.what();
  EXPECT_EQ(error_of([&] { model.update_weights(weights_at(temp_dir() + "/none.bin")); }).code(),
            my_ops::deploy::kIntegrity);
  EXPECT_EQ(error_of([&] { model.update_weights(weights_at("")); }).code(), my_ops::deploy::kUsage);
  expect_same_bits(model.run(inputs), want);
  EXPECT_EQ(model.weights_sha256(), own_weights_sha256());
}

// A key that is set but empty is a caller's mistake (an unset variable), not "no key": taken as
// none, it would run a package or weights that nobody vouched for.
TEST_F(ModelTest, AnEmptyKeyThatIsSetIsAnError) {
  OpenOptions options = default_options();
  options.public_key = "";
  const Error open = error_of([&] { Model::open(options); });
  EXPECT_EQ(open.code(), my_ops::deploy::kUsage) << open.what();
  EXPECT_NE(std::string(open.what()).find("OpenOptions::public_key is empty"), std::string::npos)
      << open.what();

  Model model = Model::open(default_options());
  my_ops::deploy::WeightsOptions weights = weights_at(retrained("weights.bin"));
  weights.public_key = "";
  const Error update = error_of([&] { model.update_weights(weights); });
  EXPECT_EQ(update.code(), my_ops::deploy::kUsage) << update.what();
  EXPECT_NE(std::string(update.what()).find("WeightsOptions::public_key is empty"),
            std::string::npos)
      << update.what();
  EXPECT_EQ(model.weights_sha256(), own_weights_sha256());
}

// The default package holds no weights: its export wrote them beside it, and the model computes
// on a private mapping of them (one copy in memory), which an update replaces and which goes
// with the model.
TEST_F(ModelTest, APackageWithoutItsWeightsRunsOnAMappingOfTheFileBesideIt) {
  ASSERT_EQ(mapped_weights_files(), 0);
  {
    Model model = Model::open(default_options());
    EXPECT_EQ(mapped_weights_files(), 1);
    model.update_weights(weights_at(retrained("weights.bin")));
    EXPECT_EQ(mapped_weights_files(), 1) << "the previous weights stayed mapped";
    EXPECT_EQ(model.weights_sha256(), blob_sha256(retrained("weights.json")));
  }
  EXPECT_EQ(mapped_weights_files(), 0) << "the weights outlived their model";

  // Named at open, another weights file replaces the one beside the package.
  OpenOptions options = default_options();
  options.weights.weights = retrained("weights.bin");
  const Model model = Model::open(options);
  EXPECT_EQ(model.weights_sha256(), blob_sha256(retrained("weights.json")));
  const auto got = model.run(read(retrained("sample_input.pt")));
  const auto eager = read(retrained("expected_output.pt"));
  ASSERT_EQ(got.size(), eager.size());
  for (size_t i = 0; i < eager.size(); ++i) {
    EXPECT_TRUE(at::allclose(got[i], eager[i], 1e-4, 1e-4)) << "output " << i;
  }
}

TEST_F(ModelTest, APackageWithoutItsWeightsAndNoneBesideItIsAnIntegrityError) {
  const std::string folder = temp_dir() + "/alone";
  ::mkdir(folder.c_str(), 0700);
  for (const char* name : {"model.pt2", "manifest.json"}) {
    std::ofstream(folder + "/" + name, std::ios::binary) << read_text(package_file(name));
  }
  OpenOptions options = default_options();
  options.package = folder + "/model.pt2";
  const int before = private_folders();
  const Error e = error_of([&] { Model::open(options); });
  EXPECT_EQ(e.code(), my_ops::deploy::kIntegrity) << e.what();
  EXPECT_NE(std::string(e.what()).find("holds no weights, and there is no weights.json beside it"),
            std::string::npos)
      << e.what();
  EXPECT_EQ(private_folders(), before);
}

// A run from a thread of its own uses the option's thread count: at::set_num_threads sets
// OpenMP's count only for the thread that calls it, and a new thread starts from
// $OMP_NUM_THREADS's (or one per core). 3 is no machine's default here.
TEST_F(ModelTest, IntraOpThreadsReachEveryThreadThatRuns) {
  using OmpGetMaxThreads = int (*)();
  const auto omp_get_max_threads =
      reinterpret_cast<OmpGetMaxThreads>(::dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
  ASSERT_NE(omp_get_max_threads, nullptr) << "LibTorch's OpenMP runtime is not loaded";
  OpenOptions options = default_options();
  options.intra_op_threads = 3;
  const Model model = Model::open(options);
  const auto inputs = read(package_file("sample_input.pt"));
  int before = 0;
  int during = 0;
  std::thread([&] {
    before = omp_get_max_threads();
    expect_same_bits(model.run(inputs), read(package_file("expected_output.pt")));
    during = omp_get_max_threads();
  }).join();
  EXPECT_NE(before, 3) << "the new thread already had the option's count: this proves nothing";
  EXPECT_EQ(during, 3);
  EXPECT_EQ(model.intra_op_threads(), 3);

  options.intra_op_threads = -1;
  EXPECT_EQ(error_of([&] { Model::open(options); }).code(), my_ops::deploy::kUsage);
}

}  // namespace
