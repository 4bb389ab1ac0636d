// libgarden_sentencepiece: see garden_spm.h for why this is a module.
#include "garden_spm.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#ifndef GARDEN_SPM_0_2_API
// Exported by libsentencepiece 0.1 (its logging.h is not installed; 0.2
// declares sentencepiece::SetMinLogLevel in sentencepiece_processor.h).
namespace sentencepiece::logging {
void SetMinLogLevel(int v);
}
namespace sentencepiece {
using logging::SetMinLogLevel;
}
#endif

namespace {

char* copy_string(const std::string& text) {
  char* out = static_cast<char*>(std::malloc(text.size() + 1));
  if (out) std::memcpy(out, text.c_str(), text.size() + 1);
  return out;
}

int fail(char** error, const std::string& message) {
  if (error) *error = copy_string(message);
  return 1;
}

const sentencepiece::SentencePieceProcessor& processor_of(void* p) {
  return *static_cast<const sentencepiece::SentencePieceProcessor*>(p);
}

}  // namespace

extern "C" {

void garden_spm_free(void* buffer) { std::free(buffer); }

int garden_spm_train(const char* flags, char** error) {
  try {
    // The trainer logs its whole command line before it reads --minloglevel:
    // apply that flag first, so a quiet run is quiet.
    const char* level = std::strstr(flags, "--minloglevel=");
    sentencepiece::SetMinLogLevel(level ? std::atoi(level + 14) : 0);
    const auto status = sentencepiece::SentencePieceTrainer::Train(flags);
    if (!status.ok()) return fail(error, status.ToString());
    return 0;
  } catch (const std::exception& e) {
    return fail(error, e.what());
  }
}

void* garden_spm_load(const char* model_path, char** error) {
  auto* processor = new (std::nothrow) sentencepiece::SentencePieceProcessor();
  if (!processor) {
    fail(error, "out of memory");
    return nullptr;
  }
  const auto status = processor->Load(model_path);
  if (!status.ok()) {
    delete processor;
    fail(error, status.ToString());
    return nullptr;
  }
  return processor;
}

void garden_spm_unload(void* processor) {
  delete static_cast<sentencepiece::SentencePieceProcessor*>(processor);
}

int garden_spm_encode_ids(void* processor, const char* text, size_t length, int** ids,
                          size_t* count, char** error) {
  std::vector<int> out;
  const auto status = processor_of(processor).Encode(std::string_view(text, length), &out);
  if (!status.ok()) return fail(error, status.ToString());
  *ids = static_cast<int*>(std::malloc(out.empty() ? 1 : out.size() * sizeof(int)));
  if (!*ids) return fail(error, "out of memory");
  if (!out.empty()) std::memcpy(*ids, out.data(), out.size() * sizeof(int));
  *count = out.size();
  return 0;
}

int garden_spm_encode_pieces(void* processor, const char* text, size_t length, char** pieces,
                             size_t* count, char** error) {
  std::vector<std::string> out;
  const auto status = processor_of(processor).Encode(std::string_view(text, length), &out);
  if (!status.ok()) return fail(error, status.ToString());
  std::string packed;
  for (const auto& piece : out) packed.append(piece).push_back('\0');
  *pieces = static_cast<char*>(std::malloc(packed.empty() ? 1 : packed.size()));
  if (!*pieces) return fail(error, "out of memory");
  if (!packed.empty()) std::memcpy(*pieces, packed.data(), packed.size());
  *count = out.size();
  return 0;
}

int garden_spm_decode_ids(void* processor, const int* ids, size_t count, char** text,
                          char** error) {
  std::string out;
#ifdef GARDEN_SPM_0_2_API
  const auto status = processor_of(processor).Decode(absl::MakeConstSpan(ids, count), &out);
#else
  const auto status = processor_of(processor).Decode(std::vector<int>(ids, ids + count), &out);
#endif
  if (!status.ok()) return fail(error, status.ToString());
  *text = copy_string(out);
  return *text ? 0 : fail(error, "out of memory");
}

int garden_spm_decode_pieces(void* processor, const char* const* pieces, size_t count,
                             char** text, char** error) {
  std::vector<std::string> in(pieces, pieces + count);
  std::string out;
#ifdef GARDEN_SPM_0_2_API
  const auto status = processor_of(processor).Decode(absl::MakeConstSpan(in), &out);
#else
  const auto status = processor_of(processor).Decode(in, &out);
#endif
  if (!status.ok()) return fail(error, status.ToString());
  *text = copy_string(out);
  return *text ? 0 : fail(error, "out of memory");
}

}  // extern "C"
