// LeakSanitizer reads its default suppressions from this hook in the
// executable, so every instrumented binary carries them without a file path
// in its environment. Linked under --config=asan only (see //tools/cc:asan).
//
// Static initializers in LibTorch and CUDA allocate objects once and keep
// them for the life of the process on purpose; they are not leaks of ours.
//
// AOTInductor takes a user-managed constant (a CPU package's weights, mapped
// by the runtime) as a new tensor handle that it never deletes (torch 2.14.1,
// aoti_runtime/utils.h: MaybeOwningAtenTensorHandle): one small tensor object
// per constant and model load. The weights themselves are the runtime's
// mapping, which it unmaps with the model; the tensors the handles hold are
// reachable only from those handles, and are reported with them.
extern "C" __attribute__((visibility("default"), used)) const char* __lsan_default_suppressions() {
  return "leak:_GLOBAL__sub_I_\n"
         "leak:aoti_torch_new_tensor_handle\n"
         "leak:.wrapper.so\n";
}
