// LeakSanitizer reads its default suppressions from this hook in the
// executable, so every instrumented binary carries them without a file path
// in its environment. Linked under --config=asan only (see //tools/cc:asan).
//
// Static initializers in LibTorch and CUDA allocate objects once and keep
// them for the life of the process on purpose; they are not leaks of ours.
extern "C" __attribute__((visibility("default"), used)) const char* __lsan_default_suppressions() {
  return "leak:_GLOBAL__sub_I_\n";
}
