// Runs a model that calls our custom ops, with no Python in the process: loads the op
// libraries (their TORCH_LIBRARY static initialisers register the ops), then either an
// AOTInductor package (.pt2, torch.export) or a TorchScript file (the legacy path), runs
// it on inputs saved by torch.save and prints (and optionally saves) the outputs.
//
//   ops_runner --ops ops/lltm/_C.abi3.so [--ops ...] [--device cuda] \
//              MODEL.pt2|MODEL.ts INPUTS.pt [OUTPUTS.pt]
#include <dlfcn.h>

#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/script.h>
#include <torch/serialize.h>

namespace {

std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const std::string& path, const std::vector<char>& data) {
  std::ofstream out(path, std::ios::binary);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Every tensor of a (possibly nested) tuple/list output, in order.
void flatten(const c10::IValue& v, std::vector<at::Tensor>& out) {
  if (v.isTensor()) {
    out.push_back(v.toTensor());
  } else if (v.isTuple()) {
    for (const auto& e : v.toTupleRef().elements()) flatten(e, out);
  } else if (v.isList()) {
    for (const auto& e : v.toListRef()) flatten(e, out);
  } else {
    throw std::runtime_error("model output holds a " + v.tagKind() + ", not tensors");
  }
}

std::vector<at::Tensor> run_model(const std::string& model, std::vector<at::Tensor> inputs,
                                  const c10::Device& device) {
  if (ends_with(model, ".pt2")) {
    torch::inductor::AOTIModelPackageLoader loader(model);
    return loader.run(inputs);
  }
  torch::jit::Module module = torch::jit::load(model, device);
  module.eval();
  std::vector<c10::IValue> args(inputs.begin(), inputs.end());
  std::vector<at::Tensor> outputs;
  flatten(module.forward(args), outputs);
  return outputs;
}

int usage() {
  std::cerr << "usage: ops_runner --ops LIB.so [--ops LIB.so ...] [--device cpu|cuda[:N]]\n"
               "                  MODEL.pt2|MODEL.ts INPUTS.pt [OUTPUTS.pt]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> libs, positional;
  std::string device_name = "cpu";
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if ((arg == "--ops" || arg == "--device") && i + 1 < argc) {
      (arg == "--ops" ? libs.emplace_back() : device_name) = argv[++i];
    } else if (arg.rfind("--", 0) == 0) {
      return usage();
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() < 2 || positional.size() > 3) return usage();

  for (const auto& lib : libs) {
    // RTLD_GLOBAL: the ops' symbols stay resolvable for the model library loaded later.
    if (dlopen(lib.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      std::cerr << "ops_runner: cannot load op library " << lib << ": " << dlerror() << "\n";
      return 1;
    }
  }
  try {
    const c10::Device device(device_name);
    std::vector<at::Tensor> inputs;
    flatten(torch::pickle_load(read_file(positional[1])), inputs);
    for (auto& t : inputs) t = t.to(device);

    std::vector<at::Tensor> outputs = run_model(positional[0], inputs, device);

    std::vector<c10::IValue> saved;  // a tuple: torch.load(weights_only=True) reads it
    for (size_t i = 0; i < outputs.size(); ++i) {
      at::Tensor cpu = outputs[i].to(at::kCPU);
      std::cout << "output " << i << ": " << outputs[i].device() << " " << cpu.scalar_type()
                << " shape " << cpu.sizes() << " sum " << cpu.sum().item<double>() << "\n"
                << cpu.flatten().slice(0, 0, 6) << "\n";
      saved.push_back(cpu);
    }
    if (positional.size() == 3) {
      write_file(positional[2], torch::pickle_save(c10::ivalue::Tuple::create(std::move(saved))));
    }
  } catch (const c10::Error& e) {
    std::cerr << "ops_runner: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "ops_runner: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
