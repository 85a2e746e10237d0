// Runs an exported package in process with the my_ops deploy API:
//   example PACKAGE INPUT.pt [EXPECTED.pt]
// The package's manifest.json beside it is checked, and the op library is the SDK's
// libmy_ops.so. With EXPECTED.pt, exits 0 only if every output matches it bit for bit.

#include <my_ops/model.h>
#include <my_ops/tensor_file.h>

#include <iostream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::cerr << "usage: " << argv[0] << " PACKAGE INPUT.pt [EXPECTED.pt]\n";
    return 2;
  }
  try {
    my_ops::deploy::OpenOptions options;
    options.package = argv[1];
    const my_ops::deploy::Model model = my_ops::deploy::Model::open(options);
    const std::vector<at::Tensor> outputs = model.run(my_ops::deploy::read_tensors(argv[2]));
    for (size_t i = 0; i < outputs.size(); ++i) {
      std::cout << "output " << i << ": " << outputs[i].sizes() << " " << outputs[i].dtype()
                << "\n";
    }
    if (argc == 4) {
      const std::vector<at::Tensor> expected = my_ops::deploy::read_tensors(argv[3]);
      bool same = outputs.size() == expected.size();
      for (size_t i = 0; same && i < outputs.size(); ++i) {
        same = my_ops::deploy::bit_identical(outputs[i], expected[i]);
      }
      std::cout << (same ? "outputs match bit for bit\n" : "outputs differ\n");
      return same ? 0 : 1;
    }
    return 0;
  } catch (const my_ops::deploy::Error& e) {
    std::cerr << "example: error: " << e.what() << "\n";
    return e.code();
  }
}
