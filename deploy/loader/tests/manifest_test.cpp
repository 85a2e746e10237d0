#include "deploy/loader/manifest.h"

#include <gtest/gtest.h>
#include <sodium.h>

#include <string>
#include <vector>

namespace my_ops::loader {
namespace {

const std::string kSha(64, 'a');

std::string manifest_text(const std::string& extra = "") {
  return R"({"format": "my_ops.manifest/1",
  "package": {"file": "model.pt2", "sha256": ")" +
         kSha + R"("},
  "op_libraries": [{"file": "libmy_ops.so", "sha256": ")" +
         kSha + R"("}],
  "torch_version": "2.14.1+cu130", "target": ")" +
         this_target() + R"(", "isa": "x86-64", "cpu_features": ["sse3"],
  "device": "cpu")" +
         extra + "}";
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
  // What export.py writes, and names with dots in them, are plain names.
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
  for (int i = 0; i < kMaxJsonDepth + 2; ++i) deep += R"({"a":)";
  EXPECT_NE(refusal(deep + "1" + std::string(kMaxJsonDepth + 2, '}')).find("nested"),
            std::string::npos);
  std::string many = "[";
  for (int i = 0; i < kMaxJsonValues + 1; ++i) many += (i ? ",0" : "0");
  EXPECT_NE(refusal(many + "]").find("values"), std::string::npos);
}

TEST(Manifest, RefusesMissingOrMistypedFields) {
  EXPECT_NE(refusal("[]").find("object"), std::string::npos);
  EXPECT_NE(refusal(R"({"format": "my_ops.manifest/2"})").find("format"), std::string::npos);
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
}  // namespace my_ops::loader
