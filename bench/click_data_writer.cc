// Writes the recommender's click data (examples/ps_recommender/click_data.h,
// at the example's default options) as raw little-endian arrays, so that
// the PyTorch side of bench/compare_ps_recommender.sh trains on exactly the
// samples Tessera's side does:
//   DIR/{train,test}_ids.bin    int64 [n, fields]
//   DIR/{train,test}_dense.bin  float32 [n, dense]
//   DIR/{train,test}_clicks.bin float32 [n]
//   DIR/{train,test}_truth.bin  float32 [n], the hidden model's probabilities
//   click_data_writer DIR [train samples=400000] [test samples=50000]
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "examples/ps_recommender/click_data.h"

namespace {

void Write(const std::string& path, const at::Tensor& tensor) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(tensor.contiguous().data_ptr()),
            static_cast<std::streamsize>(tensor.numel() * tensor.element_size()));
  if (!out) {
    std::fprintf(stderr, "click_data_writer: cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

void WriteSet(const std::string& prefix, const tessera::examples::ClickData& data) {
  Write(prefix + "_ids.bin", data.ids);
  Write(prefix + "_dense.bin", data.dense);
  Write(prefix + "_clicks.bin", data.clicks);
  Write(prefix + "_truth.bin", data.truth);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: click_data_writer DIR [train samples] [test samples]\n");
    return 2;
  }
  const std::string dir = argv[1];
  tessera::examples::ClickDataOptions options;  // the example's seeds: train 1, test 1001
  options.samples = argc > 2 ? std::atoll(argv[2]) : 400000;
  WriteSet(dir + "/train", tessera::examples::GenerateClicks(options));
  options.samples = argc > 3 ? std::atoll(argv[3]) : 50000;
  options.seed += 1000;
  WriteSet(dir + "/test", tessera::examples::GenerateClicks(options));
  return 0;
}
