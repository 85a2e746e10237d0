#pragma once

// The my_ops deploy API: open an AOTInductor package that calls the my_ops ops, and run it from
// C++, in process, with the checks of the `loader` program (which is built on this API).
//
//   my_ops::deploy::OpenOptions options;
//   options.package = "model.pt2";  // manifest.json beside it is checked
//   my_ops::deploy::Model model = my_ops::deploy::Model::open(options);
//   std::vector<at::Tensor> outputs = model.run({at::ones({4, 64})});
//
// What open() does, in this order, before any code from the package or an op library runs: it
// copies the package, each op library and the weights file into a private folder (mode 0700)
// while hashing them, through one descriptor per file, and from then on uses only the copies;
// checks the weights file against its manifest (OpenOptions::weights); checks that the package
// is a zip that is safe to extract and holds a model; and, unless `verify` is false, checks the
// copies against the manifest (sha256, torch release, target, CPU features, signature with
// `public_key`). Then it loads the op libraries (dlopen, RTLD_GLOBAL), checks that they register
// every op and class the manifest says the package calls, with the same schemas, and loads the
// package. Each failure is one my_ops::deploy::Error (my_ops/error.h).
//
// New weights: update_weights() swaps in a weights file that `export --weights-only` wrote for
// this package, while runs go on; see it below.
//
// Threads: run() may be called from any number of threads at once; up to `runners` runs proceed
// together and the rest wait for a free runner. open() may be called from several threads too:
// the loads take turns. Each Model keeps its private folder (the copies, the extracted package)
// until it is destroyed; destroying one Model leaves every other working.
//
// What a caller must not do:
// - destroy a Model while a run() on it is in progress (as with any C++ object);
// - read or change $TMPDIR from another thread while a Model opens: the package is extracted
//   under $TMPDIR, which open() points at the private folder for the duration of the load;
// - open a model with another build of an op library this process has loaded already: the same
//   bytes, under any path, are found by their sha256 and loaded once, but a rebuilt library
//   would register its ops a second time, which LibTorch answers by ending the process.
// The op libraries stay loaded until the process ends (their registrations cannot be undone).

#include <ATen/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "my_ops/error.h"

namespace my_ops::deploy {

// A weights file for a model's package: values for its constants and custom objects.
struct WeightsOptions {
  // weights.bin, from the package's export or `export --weights-only`; empty is an Error (kUsage)
  // for update_weights(), and OpenOptions's default weights file for open().
  std::string weights;
  // Its manifest; "" for weights.json beside it.
  std::string manifest;
  // An Ed25519 public key; weights.sig beside the manifest must be its signature of the
  // manifest. Unset: the key the model was opened with (OpenOptions::public_key), if any. Set but
  // empty: an Error (kUsage), as for OpenOptions::public_key.
  std::optional<std::string> public_key;
};

struct OpenOptions {
  // The package (model.pt2) to load.
  std::string package;
  // The manifest the exporter wrote with it; "" for manifest.json beside the package.
  std::string manifest;
  // false: skip the manifest (and so the sha256, target and signature checks, and the check
  // that the weights file at open names this package). Only for packages of your own, on your
  // own machine.
  bool verify = true;
  // An Ed25519 public key (PEM or raw 32 bytes); when set, manifest.sig beside the manifest must
  // be its signature of the manifest. Unset: no signature needed. Set but empty: an Error
  // (kUsage), not "no key", since that is what an unset variable of the caller's looks like.
  std::optional<std::string> public_key;
  // The op libraries the package calls, loaded in this order; empty for the libmy_ops.so beside
  // the library that holds this API (the SDK's lib/, the loader's bundle folder).
  std::vector<std::string> op_libraries;
  // The package's total unpacked size may not exceed this (a zip bomb is refused unread).
  uint64_t max_unpacked_bytes = uint64_t{32} << 30;
  // How many runs may proceed at once (each runner holds its own activations).
  int runners = 1;
  // Threads each run uses inside its ops: LibTorch's intra-op threads, which run the package's
  // own parallel loops (OpenMP) and its matrix products. 0 keeps the process's setting
  // ($OMP_NUM_THREADS, else one per core). LibTorch has one such setting per process, so a
  // non-zero value applies to every Model in it. `runners` runs at once use up to
  // runners x intra_op_threads cores. At most 256.
  int intra_op_threads = 0;
  // The CUDA device a CUDA package runs on; -1 for the current device. Ignored on CPU.
  int device_index = -1;
  // The weights the package runs on. A CPU package's export writes them beside it (weights.bin,
  // weights.json, and weights.sig when signed), and the package holds none itself: with
  // `weights.weights` empty, open() takes weights.json beside the package when there is one
  // (and fails with kIntegrity for a package without its weights when there is none). The
  // weights are mapped, not read: the model computes on the file's pages, so that it holds them
  // once. A package that holds its weights (CUDA, cross-compiled, --mode max-autotune) runs on
  // its own unless a file is named, which then replaces them as update_weights() would.
  // `weights.public_key` unset: `public_key`.
  WeightsOptions weights;
};

// The sizes a dim of an input may take: min..max, max unset for unbounded. A static dim has
// min == max.
struct DimRange {
  int64_t min = 0;
  std::optional<int64_t> max;
};

// What an input of the package must be: its dtype (c10's name: "Float", "Half", "BFloat16", ...)
// and the range of each of its dims.
struct InputSignature {
  std::string dtype;
  std::vector<DimRange> dims;
};

// What a decoder package (export --kv-cache) generates with: my_ops/session.h.
struct DecoderInfo {
  int64_t cache_length = 0;  // positions in its KV cache
  int64_t vocab_size = 0;    // token ids are 0 .. vocab_size - 1
};

struct Metadata {
  // From the package itself.
  std::string package_sha256;          // of the bytes loaded
  std::string device;                  // "cpu" or "cuda"
  std::vector<InputSignature> inputs;  // empty when the package carries no input signature
  // From the manifest; empty when opened with verify = false.
  std::string torch_version;              // the torch release the package was exported with
  std::string target;                     // "linux-x86_64", "linux-aarch64"
  std::string isa;                        // the level its code was compiled for ("x86-64-v3")
  std::vector<std::string> cpu_features;  // what the package's code needs of the CPU
  std::vector<std::string> ops;           // the custom ops it calls, "ns::op[.overload]"
  std::vector<std::string> classes;       // the custom classes it holds, "ns::Class"
  // From the package: the buffers its runs update in place (a decoder's KV cache), which it
  // keeps between runs; empty for a package without state. A decoder's sizes, where it is one.
  std::vector<std::string> state;
  std::optional<DecoderInfo> decoder;
};

// A package and its op libraries copied into a private folder and checked, with none of their
// code loaded: the first half of Model::open. A program that has more to check (its own input
// files, say) can do it between the halves, so that a mistake there costs no model load.
class CheckedPackage {
 public:
  // Throws Error.
  static CheckedPackage check(const OpenOptions& options);

  CheckedPackage(CheckedPackage&&) noexcept;
  CheckedPackage& operator=(CheckedPackage&&) noexcept;
  ~CheckedPackage();

  struct Impl;

 private:
  friend class Model;
  explicit CheckedPackage(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class Session;

class Model {
 public:
  // Throws Error; see the top of this file for what it checks, in which order.
  static Model open(const OpenOptions& options);
  // The second half of open(): loads the op libraries and the package.
  static Model load(CheckedPackage&& package);

  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  // Runs the package on `inputs`, which must fit its input signature (kInputMismatch otherwise,
  // before anything runs). CPU inputs are moved to a CUDA package's device; outputs are on the
  // package's device. Safe from several threads at once. A package with state (metadata().state)
  // runs on the model's own copy of it, which its runs update, one run at a time; a
  // my_ops::deploy::Session (my_ops/session.h) holds a state of its own.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const;

  // What run() does to its inputs first: checks them against the input signature, makes them
  // contiguous and moves them to the package's device. Inputs prepared once can be run many
  // times without those copies.
  std::vector<at::Tensor> prepare(const std::vector<at::Tensor>& inputs) const;

  // Replaces the model's weights with `weights`, checked first: its manifest (and signature),
  // that it is for this model's package (by sha256), weights.bin's sha256 as read, and that every
  // constant and custom-object tensor of the package is in it with its dtype and shape. Runs go on
  // meanwhile and are held back only for the swap, which is atomic for them: a run uses the old
  // weights or the new ones, never a mix, and a run in progress when the update is called
  // finishes on the weights it started with. Each failure is one Error (kIntegrity for a file
  // that does not check out or fit); the model then keeps the weights it had. One update at a
  // time: a second call waits for the first. Memory: on CPU the new weights are mapped from a
  // private copy of weights.bin, as open() maps them, and the old ones released once swapped out,
  // so that for the length of the call the model holds its weights twice.
  void update_weights(const WeightsOptions& weights);

  // The sha256 of the weights file the model runs with, as its manifest records it; "" while it
  // runs with the weights inside its package. Safe during runs and updates.
  std::string weights_sha256() const;

  const Metadata& metadata() const;

  // The intra-op threads a run of this model uses (OpenOptions::intra_op_threads, or the
  // process's setting it kept).
  int intra_op_threads() const;

  struct Impl;

 private:
  friend class Session;
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace my_ops::deploy
