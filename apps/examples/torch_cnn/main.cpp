// The CNN of apps/examples/python/fmnist_cnn.py, written with libtorch and trained by Troupe:
// every flag of troupe-fmnist works (--mode ps|dp|hybrid, --role, --workers, ...), and
// --torch-threads N and --device cpu|cuda. Its own flags: --data DIR (Debian's
// dataset-fashion-mnist by default), --train-limit N and --test-limit N (0: all), and
// --mlp W1,W2,... to train an MLP 784-W1-...-10 instead (apps/bench/size_ladder.py's model).
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "troupe/app.hpp"
#include "troupe/error.hpp"
#include "troupe/torch.hpp"

namespace {

// Two convolutions and two linear layers; no dropout or batch norm.
struct NetImpl : torch::nn::Module {
  torch::nn::Conv2d conv1{torch::nn::Conv2dOptions(1, 8, 5).padding(2)};
  torch::nn::Conv2d conv2{torch::nn::Conv2dOptions(8, 16, 5).padding(2)};
  torch::nn::Linear fc1{16 * 7 * 7, 64};
  torch::nn::Linear fc2{64, 10};

  NetImpl() {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }

  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);
    return fc2(torch::relu(fc1(x.flatten(1))));
  }
};
TORCH_MODULE(Net);

// 784 -> widths... -> 10 with ReLUs.
torch::nn::Sequential mlp(const std::vector<int64_t>& widths) {
  torch::nn::Sequential net{torch::nn::Flatten{}};
  int64_t in = 784;
  for (int64_t w : widths) {
    net->push_back(torch::nn::Linear(in, w));
    net->push_back(torch::nn::ReLU());
    in = w;
  }
  net->push_back(torch::nn::Linear(in, 10));
  return net;
}

// "W1,W2,..." as widths; throws std::invalid_argument for anything else.
std::vector<int64_t> widths_of(const std::string& text) {
  std::vector<int64_t> out;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const int64_t w = std::stoll(text.substr(at, comma - at));
    if (w <= 0) throw std::invalid_argument("--mlp: widths must be positive");
    out.push_back(w);
    at = comma + 1;
  }
  return out;
}

// An IDX file (gzip) as a uint8 tensor of its first `limit` items (0: all).
torch::Tensor read_idx(const std::string& path, int64_t limit) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot open " + path);
  std::array<unsigned char, 4> magic{};
  std::vector<int64_t> shape;
  auto read = [&](void* into, unsigned n) {
    if (gzread(f, into, n) != static_cast<int>(n)) {
      gzclose(f);
      throw std::runtime_error(path + ": cut short");
    }
  };
  read(magic.data(), 4);
  for (int d = 0; d < magic[3]; ++d) {
    std::array<unsigned char, 4> b{};
    read(b.data(), 4);
    shape.push_back((int64_t{b[0]} << 24) | (b[1] << 16) | (b[2] << 8) | b[3]);
  }
  if (shape.empty()) {
    gzclose(f);
    throw std::runtime_error(path + ": no dimensions");
  }
  if (limit > 0 && limit < shape[0]) shape[0] = limit;
  auto out = torch::empty(shape, torch::kUInt8);
  read(out.data_ptr(), static_cast<unsigned>(out.numel()));
  gzclose(f);
  return out;
}

// Images as float32 N x 1 x 28 x 28 in [0, 1], labels as int64.
troupe::torch_examples fashion_mnist(const std::string& dir, const std::string& split,
                                     int64_t limit) {
  auto images = read_idx(dir + "/" + split + "-images-idx3-ubyte.gz", limit);
  auto labels = read_idx(dir + "/" + split + "-labels-idx1-ubyte.gz", limit);
  auto x = images.to(torch::kFloat32).div_(255.0).unsqueeze(1);
  return troupe::tensor_examples({x}, labels.to(torch::kLong));
}

caf::expected<std::unique_ptr<troupe::training_task>> make_task(const troupe::launch_options& o) {
  troupe::torch_task_options options;
  if (auto err = troupe::apply_torch_flags(o, options)) return err;
  try {
    options.train =
        fashion_mnist(o.app_value("data"), "train", std::stoll(o.app_value("train-limit")));
    options.test =
        fashion_mnist(o.app_value("data"), "t10k", std::stoll(o.app_value("test-limit")));
  } catch (const std::exception& e) {
    return troupe::make_error(troupe::errc::io_failure, e.what());
  }
  options.model = [] { return troupe::single_input_model(Net()); };
  if (const auto text = o.app_value("mlp"); !text.empty()) {
    std::vector<int64_t> widths;
    try {
      widths = widths_of(text);
    } catch (const std::exception&) {
      return troupe::make_error(troupe::errc::bad_configuration,
                                "--mlp takes widths W1,W2,..., not '" + text + "'");
    }
    options.model = [widths] { return troupe::single_input_model(mlp(widths)); };
  }
  return troupe::make_torch_task(std::move(options));
}

}  // namespace

int main(int argc, char** argv) {
  troupe::app_description app;
  app.name = "torch-cnn";
  app.summary = "a libtorch CNN on Fashion-MNIST, trained by Troupe";
  app.flags = {
      {"data", "DIR", "Fashion-MNIST IDX files", "/usr/share/datasets/fashion-mnist"},
      {"train-limit", "N", "use only the first N training examples (0: all)", "0",
       troupe::app_flag::whole},
      {"test-limit", "N", "use only the first N test examples (0: all)", "0",
       troupe::app_flag::whole},
      {"mlp", "W1,W2,...", "train an MLP 784-W1-...-10 instead of the CNN", ""},
  };
  for (auto& f : troupe::torch_flags()) app.flags.push_back(std::move(f));
  app.make_task = make_task;
  return troupe::run_app(argc, argv, app);
}
