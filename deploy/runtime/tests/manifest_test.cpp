#include "deploy/runtime/src/manifest.h"

#include <gtest/gtest.h>
#include <sodium.h>

#include <string>
#include <vector>

namespace my_ops::deploy::detail {
namespace {

const std::string kSha(64, 'a');

// As the exporter writes them for the default model, less two of its ops; "test::twice.out" stands
// for an op's overload other than the default.
const std::string kOps = R"j([
    {"name": "my_ops::silu_and_mul", "schema": "my_ops::silu_and_mul(Tensor x) -> Tensor"},
    {"name": "test::twice.out",
     "schema": "test::twice.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)"}])j";
const std::string kClasses = R"j([{"name": "my_ops::RMSNorm", "methods": [
    {"name": "forward",
     "schema": "forward(__torch__.torch.classes.my_ops.RMSNorm _0, Tensor x) -> Tensor"}]}])j";

std::string manifest_text(const std::string& extra = "", const std::string& ops = kOps,
                          const std::string& classes = kClasses) {
  return R"({"format": ")" + std::string(kManifestFormat) + R"(",
  "package": {"file": "model.pt2", "sha256": ")" +
         kSha + R"("},
  "op_libraries": [{"file": "libmy_ops.so", "sha256": ")" +
         kSha + R"("}],
  "torch_version": "2.14.1+cu130", "target": ")" +
         this_target() + R"(", "isa": "x86-64", "cpu_features": ["sse3"],
  "device": "cpu", "ops": )" +
         ops + R"(, "classes": )" + classes + extra + "}";
}

// manifest_text() with "ops" or "classes" left out.
std::string without_member(const std::string& name) {
  std::string text = manifest_text();
  const std::string member = ", \"" + name + "\": " + (name == "ops" ? kOps : kClasses);
  return text.replace(text.find(member), member.size(), "");
}

// An "ops" array of one entry: `name`, and a schema for it with `arguments`.
std::string one_op(const std::string& name, const std::string& arguments = "()",
                   const std::string& more = "") {
  return R"j([{"name": ")j" + name + R"j(", "schema": ")j" + name + arguments + R"j( -> ()")j" +
         more + "}]";
}

// The reason parse_manifest gives, or "" when it accepts the text.
std::string refusal(const std::string& text) {
  try {
    parse_manifest(text);
  } catch (const ManifestError& e) {
    return e.what();
  }
  return "";
}

// Passes when parse_manifest refuses `text` for `reason` (a part of what() it must hold); on
// failure it shows the reason it gave instead, so a refusal for another cause does not pass.
::testing::AssertionResult RefusedFor(const std::string& text, const std::string& reason) {
  const std::string given = refusal(text);
  if (given.empty()) {
    return ::testing::AssertionFailure() << "accepted; expected a refusal with '" << reason << "'";
  }
  if (given.find(reason) == std::string::npos) {
    return ::testing::AssertionFailure()
           << "refused with '" << given << "'; expected one with '" << reason << "'";
  }
  return ::testing::AssertionSuccess();
}

// manifest_text() with the package's "file" member replaced by `file`, a JSON string literal.
std::string with_package_file(const std::string& file) {
  std::string text = manifest_text();
  const std::string plain = R"("file": "model.pt2")";
  return text.replace(text.find(plain), plain.size(), R"("file": )" + file);
}

TEST(Manifest, ParsesWhatExportWrites) {
  Manifest m = parse_manifest(manifest_text());
  EXPECT_EQ(m.format, kManifestFormat);
  EXPECT_EQ(m.package.file, "model.pt2");
  EXPECT_EQ(m.package.sha256, kSha);
  ASSERT_EQ(m.op_libraries.size(), 1u);
  EXPECT_EQ(m.op_libraries[0].file, "libmy_ops.so");
  EXPECT_EQ(m.torch_version, "2.14.1+cu130");
  EXPECT_EQ(m.target, this_target());
  EXPECT_EQ(m.isa, "x86-64");
  EXPECT_EQ(m.cpu_features, std::vector<std::string>{"sse3"});
  EXPECT_EQ(m.device, "cpu");
  const Registrations& r = m.registrations;
  ASSERT_EQ(r.ops.size(), 2u);
  EXPECT_EQ(r.ops[0].name, "my_ops::silu_and_mul");
  EXPECT_EQ(r.ops[0].schema, "my_ops::silu_and_mul(Tensor x) -> Tensor");
  EXPECT_EQ(r.ops[1].name, "test::twice.out");
  EXPECT_EQ(r.ops[1].schema, "test::twice.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)");
  ASSERT_EQ(r.classes.size(), 1u);
  EXPECT_EQ(r.classes[0].name, "my_ops::RMSNorm");
  ASSERT_EQ(r.classes[0].methods.size(), 1u);
  EXPECT_EQ(r.classes[0].methods[0].name, "forward");
  EXPECT_EQ(r.classes[0].methods[0].schema,
            "forward(__torch__.torch.classes.my_ops.RMSNorm _0, Tensor x) -> Tensor");
}

TEST(Manifest, RefusesDuplicateMembers) {
  // Two readers would disagree on which "device" counts.
  EXPECT_NE(refusal(manifest_text(R"(, "device": "cuda")")).find("duplicate member 'device'"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"format": "a", "format": "my_ops.manifest/1"})").find("duplicate"),
            std::string::npos);
}

TEST(Manifest, RefusesTextJsonReadersDisagreeOn) {
  std::string with_nul = manifest_text();
  with_nul[1] = '\0';
  EXPECT_NE(refusal(with_nul).find("NUL"), std::string::npos);
  EXPECT_TRUE(RefusedFor(manifest_text(R"(, "x": "\ud800")"), "surrogate U+D800..U+DBFF"));
  EXPECT_TRUE(RefusedFor(manifest_text(R"(, "n": 01)"), "unexpected number literal"));
  EXPECT_TRUE(RefusedFor(manifest_text(","), "expected string literal"));
  EXPECT_TRUE(RefusedFor(manifest_text() + " {}", "expected end of input"));
}

TEST(Manifest, RefusesAPackageFileThatIsNotAPlainName) {
  // The name is shown to users and compared with files; a path, "." or ".." never names the
  // package beside the manifest, and a control character would break the one error line.
  const std::string reason = "'package': 'file' must be a plain file name, not ";
  EXPECT_TRUE(
      RefusedFor(with_package_file(R"("../../etc/passwd")"), reason + "'../../etc/passwd'"));
  EXPECT_TRUE(RefusedFor(with_package_file(R"("a/b")"), reason + "'a/b'"));
  EXPECT_TRUE(RefusedFor(with_package_file(R"("/model.pt2")"), reason + "'/model.pt2'"));
  EXPECT_TRUE(RefusedFor(with_package_file(R"("..")"), reason + "'..'"));
  EXPECT_TRUE(RefusedFor(with_package_file(R"(".")"), reason + "'.'"));
  EXPECT_TRUE(RefusedFor(with_package_file(R"("")"), reason + "''"));
  EXPECT_TRUE(RefusedFor(with_package_file(R"("x\n")"), reason + "'x?'"));
  EXPECT_TRUE(RefusedFor(with_package_file(R"("x\u0000y")"), reason + "'x?y'"));
  EXPECT_TRUE(RefusedFor(with_package_file(R"("x\u007f")"), reason + "'x?'"));
  // What the exporter writes, and names with dots in them, are plain names.
  EXPECT_EQ(refusal(with_package_file(R"("model.pt2")")), "");
  EXPECT_EQ(refusal(with_package_file(R"("..model.v2.pt2")")), "");
}

TEST(Manifest, RefusesAnOpLibraryFileThatIsNotAPlainName) {
  std::string text = manifest_text();
  const std::string plain = R"("file": "libmy_ops.so")";
  text.replace(text.find(plain), plain.size(), R"("file": "../lib/libmy_ops.so")");
  EXPECT_TRUE(RefusedFor(text,
                         "'op_libraries': 'file' must be a plain file name, not "
                         "'../lib/libmy_ops.so'"));
}

TEST(Manifest, CapsDepthAndSize) {
  std::string deep;
  for (int i = 0; i < kManifestJsonLimits.max_depth + 2; ++i) deep += R"({"a":)";
  EXPECT_NE(
      refusal(deep + "1" + std::string(kManifestJsonLimits.max_depth + 2, '}')).find("nested"),
      std::string::npos);
  std::string many = "[";
  for (int i = 0; i < kManifestJsonLimits.max_values + 1; ++i) many += (i ? ",0" : "0");
  EXPECT_NE(refusal(many + "]").find("values"), std::string::npos);
}

TEST(Manifest, RefusesMissingOrMistypedFields) {
  EXPECT_NE(refusal("[]").find("object"), std::string::npos);
  // The format before "ops" and "classes": this loader could not check what the package calls.
  EXPECT_TRUE(RefusedFor(
      R"({"format": "my_ops.manifest/1"})",
      std::string("format 'my_ops.manifest/1', this loader reads '") + kManifestFormat + "'"));
  std::string bad_sha = manifest_text();
  bad_sha.replace(bad_sha.find(kSha), 64, std::string(64, 'A'));
  EXPECT_NE(refusal(bad_sha).find("lowercase hex"), std::string::npos);
  std::string no_features = manifest_text();
  no_features.replace(no_features.find(R"(["sse3"])"), 8, R"("sse3")");
  EXPECT_NE(refusal(no_features).find("cpu_features"), std::string::npos);
  std::string no_version = manifest_text();
  no_version.replace(no_version.find("torch_version"), 13, "torch_versio_");
  EXPECT_NE(refusal(no_version).find("torch_version"), std::string::npos);
}

TEST(Manifest, RefusesAManifestThatDoesNotSayWhatThePackageCalls) {
  // Required even when empty: a manifest without them would let the loader check nothing.
  EXPECT_TRUE(RefusedFor(without_member("ops"), "'ops' must be an array"));
  EXPECT_TRUE(RefusedFor(without_member("classes"), "'classes' must be an array"));
  EXPECT_EQ(refusal(manifest_text("", "[]", "[]")), "");
}

TEST(Manifest, RefusesMalformedOps) {
  auto ops = [](const std::string& ops_json) { return manifest_text("", ops_json); };
  EXPECT_TRUE(RefusedFor(ops("{}"), "'ops' must be an array"));
  EXPECT_TRUE(RefusedFor(ops(R"(["my_ops::f"])"), "'ops': each entry must be an object"));
  EXPECT_TRUE(RefusedFor(ops(R"([{"name": 1, "schema": "x"}])"), "'ops': 'name' must be a string"));
  EXPECT_TRUE(RefusedFor(ops(R"([{"name": "my_ops::f"}])"), "'ops': 'schema' must be a string"));
  const std::string bad_name = "'ops': 'name' must be ns::name or ns::name.overload, not ";
  for (const std::string name : {"", "f", "my_ops::", "::f", "my_ops:f", "my_ops::f.", "my_ops::.f",
                                 "my_ops::f.a.b", "my ops::f", "1ns::f", "my_ops::f::g"}) {
    EXPECT_TRUE(RefusedFor(ops(one_op(name)), bad_name + "'" + name + "'")) << name;
  }
  EXPECT_TRUE(RefusedFor(ops(one_op("my_ops::f\\n")), bad_name + "'my_ops::f?'"));
  const std::string long_name = "my_ops::" + std::string(256, 'f');
  EXPECT_TRUE(RefusedFor(ops(one_op(long_name)), bad_name));
  EXPECT_EQ(refusal(ops(one_op("my_ops::f.out"))), "");
  EXPECT_TRUE(
      RefusedFor(ops(R"j([{"name": "my_ops::f", "schema": "my_ops::g(Tensor x) -> Tensor"}])j"),
                 "'ops': the schema of my_ops::f must start with 'my_ops::f(', not "
                 "'my_ops::g(Tensor x) -> Tensor'"));
  // The overload is part of the name the schema starts with.
  EXPECT_TRUE(
      RefusedFor(ops(R"j([{"name": "my_ops::f.out", "schema": "my_ops::f(Tensor x) -> Tensor"}])j"),
                 "must start with 'my_ops::f.out('"));
  EXPECT_TRUE(RefusedFor(ops(one_op("my_ops::f", "(Tensor x)\\n")),
                         "'ops': the schema of my_ops::f holds a control character"));
  EXPECT_TRUE(RefusedFor(ops(one_op("my_ops::f", "(" + std::string(4096, ' ') + ")")),
                         "'ops': the schema of my_ops::f is longer than 4096 bytes"));
  EXPECT_TRUE(RefusedFor(ops(one_op("my_ops::f", "()", R"(, "kernel": "cpu")")),
                         "'ops': unknown member 'kernel'"));
  const std::string twice = one_op("my_ops::f");
  EXPECT_TRUE(RefusedFor(ops(twice.substr(0, twice.size() - 1) + "," + twice.substr(1)),
                         "'ops': my_ops::f is listed twice"));
  std::string many;
  for (size_t i = 0; i <= 1024; ++i) {
    const std::string entry = one_op("my_ops::f" + std::to_string(i));
    many += (i ? "," : "") + entry.substr(1, entry.size() - 2);
  }
  EXPECT_TRUE(RefusedFor(ops("[" + many + "]"), "'ops' holds more than 1024 entries"));
}

TEST(Manifest, ReadsTheCShimOfAnOp) {
  auto op = [](const std::string& more) {
    return manifest_text("", one_op("my_ops::rms_norm", "()", more));
  };
  const Manifest with = parse_manifest(op(R"(, "c_shim": "aoti_torch_cpu_rms_norm")"));
  ASSERT_EQ(with.registrations.ops.size(), 1u);
  EXPECT_EQ(with.registrations.ops[0].c_shim, "aoti_torch_cpu_rms_norm");
  // Without it, the package calls the op through the ProxyExecutor.
  EXPECT_EQ(parse_manifest(op("")).registrations.ops[0].c_shim, "");
  EXPECT_TRUE(RefusedFor(op(R"(, "c_shim": 1)"), "'ops': 'c_shim' must be a string"));
  // dlsym() is given only names of AOTI's shim family.
  const std::string bad =
      "'ops': 'c_shim' of my_ops::rms_norm must be a C function named "
      "aoti_torch_..., not ";
  for (const std::string name : {"", "system", "aoti_torch", "aoti_torch_cpu rms", "aoti-torch_x",
                                 "_ZN6my_ops3fooEv", "1aoti_torch_cpu_x"}) {
    EXPECT_TRUE(RefusedFor(op(R"(, "c_shim": ")" + name + "\""), bad + "'" + name + "'")) << name;
  }
  EXPECT_TRUE(RefusedFor(op(R"(, "c_shim": "aoti_torch_)" + std::string(256, 'x') + "\""), bad));
}

TEST(Manifest, RefusesMalformedClasses) {
  auto classes = [](const std::string& classes_json) {
    return manifest_text("", kOps, classes_json);
  };
  EXPECT_TRUE(RefusedFor(classes(R"("my_ops::RMSNorm")"), "'classes' must be an array"));
  EXPECT_TRUE(
      RefusedFor(classes(R"(["my_ops::RMSNorm"])"), "'classes': each entry must be an object"));
  EXPECT_TRUE(RefusedFor(classes(R"([{"name": "my_ops::RMSNorm.forward", "methods": []}])"),
                         "'classes': 'name' must be ns::Class, not 'my_ops::RMSNorm.forward'"));
  EXPECT_TRUE(RefusedFor(classes(R"([{"name": "RMSNorm", "methods": []}])"),
                         "'classes': 'name' must be ns::Class, not 'RMSNorm'"));
  EXPECT_TRUE(RefusedFor(classes(R"([{"name": "my_ops::RMSNorm"}])"),
                         "'classes': my_ops::RMSNorm: 'methods' must be an array"));
  EXPECT_TRUE(RefusedFor(classes(R"([{"name": "my_ops::RMSNorm", "methods": [], "x": 1}])"),
                         "'classes': unknown member 'x'"));
  EXPECT_TRUE(RefusedFor(classes(R"([{"name": "my_ops::RMSNorm", "methods": []},
                                     {"name": "my_ops::RMSNorm", "methods": []}])"),
                         "'classes': my_ops::RMSNorm is listed twice"));
  auto methods = [&](const std::string& methods_json) {
    return classes(R"([{"name": "my_ops::RMSNorm", "methods": )" + methods_json + "}]");
  };
  EXPECT_TRUE(RefusedFor(methods(R"(["forward"])"),
                         "'classes': my_ops::RMSNorm: each method must be an object"));
  EXPECT_TRUE(RefusedFor(methods(R"j([{"name": "a.b", "schema": "a.b() -> ()"}])j"),
                         "'classes': my_ops::RMSNorm: 'name' must be a method name, not 'a.b'"));
  EXPECT_TRUE(RefusedFor(methods(R"j([{"name": "forward", "schema": "eps() -> float"}])j"),
                         "'classes': my_ops::RMSNorm: the schema of forward must start with "
                         "'forward('"));
  EXPECT_TRUE(RefusedFor(methods(R"j([{"name": "eps", "schema": "eps() -> float"},
                                     {"name": "eps", "schema": "eps() -> float"}])j"),
                         "'classes': my_ops::RMSNorm: method eps is listed twice"));
  std::string many;
  for (size_t i = 0; i <= 256; ++i) {
    many += (i ? "," : "") + std::string(R"({"name": "my_ops::C)") + std::to_string(i) +
            R"(", "methods": []})";
  }
  EXPECT_TRUE(RefusedFor(classes("[" + many + "]"), "'classes' holds more than 256 entries"));
}

TEST(Manifest, RefusesMissingOrMistypedTarget) {
  // Without a target the loader could not tell another architecture's package from its own.
  std::string no_target = manifest_text();
  no_target.replace(no_target.find(R"("target")"), 8, R"("targe_")");
  EXPECT_NE(refusal(no_target).find("'target' must be a string"), std::string::npos);
  std::string number = manifest_text();
  const std::string quoted = std::string("\"") + this_target() + "\"";
  number.replace(number.find(quoted), quoted.size(), "64");
  EXPECT_NE(refusal(number).find("'target' must be a string"), std::string::npos);
}

TEST(Target, RefusesAPackageForAnotherTarget) {
  Manifest m = parse_manifest(manifest_text());
  EXPECT_EQ(target_problem(m), "");
#if defined(__x86_64__)
  m.target = "linux-aarch64";
  EXPECT_EQ(target_problem(m),
            "the package was exported for linux-aarch64; this loader runs on linux-x86_64 "
            "(export it with --target linux-x86_64)");
#elif defined(__aarch64__)
  m.target = "linux-x86_64";
  EXPECT_EQ(target_problem(m),
            "the package was exported for linux-x86_64; this loader runs on linux-aarch64 "
            "(export it with --target linux-aarch64)");
#endif
  // A name the exporter would not write is quoted and kept printable.
  m.target = "";
  EXPECT_NE(target_problem(m).find("exported for ''"), std::string::npos);
  m.target = "linux-x86_64\nloader: ok";
  EXPECT_NE(target_problem(m).find("exported for 'linux-x86_64?loader: ok'"), std::string::npos);
  // Compared exactly: a name that differs in case only is not this target.
  m.target = this_target();
  for (auto& c : m.target) c = static_cast<char>(c == 'l' ? 'L' : c);
  EXPECT_NE(target_problem(m), "");
}

TEST(Signature, VerifiesOnlyTheSignedBytesUnderTheRightKey) {
  ASSERT_GE(sodium_init(), 0);
  unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
  crypto_sign_keypair(pk, sk);
  const std::string message = manifest_text();
  unsigned char sig[crypto_sign_BYTES];
  crypto_sign_detached(sig, nullptr, reinterpret_cast<const unsigned char*>(message.data()),
                       message.size(), sk);
  const std::string signature(reinterpret_cast<const char*>(sig), sizeof(sig));
  const std::vector<unsigned char> key =
      parse_public_key(std::string_view(reinterpret_cast<const char*>(pk), sizeof(pk)));
  EXPECT_TRUE(signature_valid(message, signature, key));
  EXPECT_FALSE(signature_valid(message + " ", signature, key));
  EXPECT_FALSE(signature_valid(message, signature.substr(1), key));
  unsigned char other_pk[crypto_sign_PUBLICKEYBYTES], other_sk[crypto_sign_SECRETKEYBYTES];
  crypto_sign_keypair(other_pk, other_sk);
  EXPECT_FALSE(signature_valid(message, signature,
                               std::vector<unsigned char>(other_pk, other_pk + sizeof(other_pk))));
}

TEST(PublicKey, ReadsPemSubjectPublicKeyInfo) {
  // RFC 8410, section 10.1: an Ed25519 public key in PEM.
  const std::string pem =
      "-----BEGIN PUBLIC KEY-----\n"
      "MCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n"
      "-----END PUBLIC KEY-----\n";
  const std::vector<unsigned char> key = parse_public_key(pem);
  ASSERT_EQ(key.size(), 32u);
  EXPECT_EQ(to_hex(key.data(), key.size()),
            "19bf44096984cdfe8541bac167dc3b96c85086aa30b6b6cb0c5c38ad703166e1");
  EXPECT_THROW(parse_public_key("not a key"), ManifestError);
  // An X25519 key: the same shape, another algorithm.
  EXPECT_THROW(parse_public_key("-----BEGIN PUBLIC KEY-----\n"
                                "MCowBQYDK2VuAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n"
                                "-----END PUBLIC KEY-----\n"),
               ManifestError);
}

TEST(SignaturePath, SwapsJsonForSig) {
  EXPECT_EQ(signature_path("a/manifest.json"), "a/manifest.sig");
  EXPECT_EQ(signature_path("a/manifest"), "a/manifest.sig");
}

TEST(CpuCheck, NamesUnknownFeaturesAndLevels) {
  Manifest m = parse_manifest(manifest_text());
  m.isa = "native";
  m.cpu_features = {"sse3", "quantum-tunnelling"};
  CpuCheck c = check_cpu(m);
  EXPECT_EQ(c.unknown, std::vector<std::string>{"quantum-tunnelling"});
  m.isa = "x86-64-v9";
  m.cpu_features = {};
  EXPECT_EQ(check_cpu(m).unknown, std::vector<std::string>{"x86-64-v9"});
}

TEST(Printable, KeepsHostileTextShortAndPrintable) {
  EXPECT_EQ(printable(std::string("a\nb\x01") + "c", 10), "a?b?c");
  EXPECT_EQ(printable(std::string(100, 'x'), 3), "xxx...");
}

}  // namespace
}  // namespace my_ops::deploy::detail
