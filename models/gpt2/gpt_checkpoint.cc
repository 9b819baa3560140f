#include "models/gpt2/gpt_checkpoint.h"

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "io/safetensors/safetensors.h"
#include "models/common/export_tensor.h"

namespace chunkzero {
namespace {

constexpr absl::string_view kPrefix = "transformer.";

// Buffers and tied copies that Hugging Face files carry beside the
// parameters.
bool Ignored(absl::string_view name) {
  return absl::EndsWith(name, ".attn.bias") ||
         absl::EndsWith(name, ".attn.masked_bias") || name == "lm_head.weight";
}

// The config that `shapes` (parameter name -> shape) describe, checked to
// hold exactly the parameters of that config. `where` starts each error.
absl::StatusOr<GptConfig> InferConfig(
    const std::map<std::string, Shape>& shapes, int heads,
    absl::string_view where) {
  auto error = [&](auto&&... what) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", what...));
  };
  for (const char* name : {"wte.weight", "wpe.weight"}) {
    auto it = shapes.find(name);
    if (it == shapes.end()) return error("missing tensor '", name, "'");
    if (it->second.size() != 2) {
      return error("tensor '", name, "' is ", ShapeToString(it->second),
                   ", expected 2 dimensions");
    }
  }
  GptConfig config;
  config.vocab = static_cast<int>(shapes.at("wte.weight")[0]);
  config.d_model = static_cast<int>(shapes.at("wte.weight")[1]);
  config.seq_len = static_cast<int>(shapes.at("wpe.weight")[0]);
  config.heads = heads;
  config.layers = 0;
  for (const auto& [name, shape] : shapes) {
    if (!absl::StartsWith(name, "h.")) continue;
    const size_t dot = name.find('.', 2);
    int layer;
    if (dot == std::string::npos ||
        !absl::SimpleAtoi(absl::string_view(name).substr(2, dot - 2), &layer) ||
        layer < 0 || layer > 100000) {
      return error("unexpected tensor ", QuoteForMessage(name));
    }
    config.layers = std::max(config.layers, layer + 1);
  }
  if (absl::Status s = config.Validate(); !s.ok()) {
    return error(s.message(), " (from the tensor shapes)");
  }
  const std::vector<std::pair<std::string, Shape>> expected =
      GptParameterShapes(config);
  for (const auto& [name, shape] : expected) {
    auto it = shapes.find(name);
    if (it == shapes.end()) return error("missing tensor '", name, "'");
    if (it->second != shape) {
      return error("tensor '", name, "' is ", ShapeToString(it->second),
                   ", expected ", ShapeToString(shape));
    }
  }
  if (shapes.size() != expected.size()) {
    for (const auto& [name, shape] : shapes) {
      bool known = false;
      for (const auto& e : expected) known = known || e.first == name;
      if (!known) return error("unexpected tensor ", QuoteForMessage(name));
    }
  }
  return config;
}

}  // namespace

absl::StatusOr<GptCheckpoint> ReadGptCheckpoint(const std::string& path,
                                                int heads) {
  CZ_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Read(path));
  const std::string where = absl::StrCat("GPT-2 safetensors file ", path);
  std::map<std::string, std::string> file_names;  // Parameter -> in file.
  std::map<std::string, Shape> shapes;
  for (const std::string& file_name : file.names()) {
    absl::string_view name = file_name;
    absl::ConsumePrefix(&name, kPrefix);
    if (Ignored(name)) continue;
    if (!file_names.emplace(std::string(name), file_name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": tensor ", QuoteForMessage(name),
                       " appears with and without '", kPrefix, "'"));
    }
    CZ_ASSIGN_OR_RETURN(shapes[std::string(name)], file.shape(file_name));
  }
  GptCheckpoint out;
  CZ_ASSIGN_OR_RETURN(out.config, InferConfig(shapes, heads, where));
  // The model computes in these. Checked in file order, before any value
  // is read (the reader knows every dtype it lists: no escaping needed).
  for (const std::string& file_name : file.names()) {
    absl::string_view name = file_name;
    absl::ConsumePrefix(&name, kPrefix);
    if (Ignored(name)) continue;
    CZ_ASSIGN_OR_RETURN(const std::string dtype, file.dtype(file_name));
    if (dtype != "F32" && dtype != "F16" && dtype != "BF16") {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": tensor ", QuoteForMessage(file_name), " is ",
                       dtype, "; GPT-2 weights must be F32, F16 or BF16"));
    }
  }
  for (const auto& [name, file_name] : file_names) {
    CZ_ASSIGN_OR_RETURN(out.state[name], file.Get(file_name));
  }
  return out;
}

absl::Status WriteGptCheckpoint(const std::string& path,
                                const std::map<std::string, Tensor>& state) {
  const std::string where = absl::StrCat("writing GPT-2 checkpoint ", path);
  std::map<std::string, Shape> shapes;
  for (const auto& [name, t] : state) shapes[name] = t.shape();
  // Any head count divides d_model; the shapes do not depend on it.
  CZ_ASSIGN_OR_RETURN(GptConfig config, InferConfig(shapes, 1, where));
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, shape] : GptParameterShapes(config)) {
    CZ_ASSIGN_OR_RETURN(Tensor f32, ExportTensor(state.at(name), name, where));
    tensors.emplace_back(absl::StrCat(kPrefix, name), std::move(f32));
  }
  return WriteSafetensors(path, tensors, {{"format", "pt"}});
}

absl::Status SaveGptModel(GptModel& model, const std::string& path) {
  std::map<std::string, Tensor> state;
  for (Parameter* p : model.Parameters()) state[p->name()] = p->data();
  return WriteGptCheckpoint(path, state);
}

}  // namespace chunkzero
