// The init_checkpoint adopters (garden/core/init_checkpoint_config.h) of the
// tasks that start from a Hugging Face directory: with task.init_checkpoint
// naming one, every key it determines and the user did not set is taken
// from it (garden/nlp/interop/huggingface_config.h), as from_pretrained
// does:
//
//   sentence_prediction, tagging, question_answering (BERT, ELECTRA)
//     task.model.encoder.bert.*  config.json's sizes, activation, dropouts
//     task.{train,validation}_data.vocab_file, tokenization, lower_case
//       (do_lower_case for question answering): the directory's WordPiece
//       vocabulary and its tokenizer's lower-casing
//     task.{train,validation}_data.seq_length: capped at
//       max_position_embeddings when the experiment's (one log line)
//     task.model.num_classes (sentence prediction) from id2label of a
//       *ForSequenceClassification, task.class_names (tagging) from that of
//       a *ForTokenClassification
//   translation (MarianMT)
//     task.model.embedding_width, dropout_rate, encoder.* and decoder.*
//     (layers, heads, feed-forward width, activation, dropouts), and what
//     MarianMT computes: use_bias, norm_first false, norm_epsilon 1e-5,
//     position_encoding marian, output_bias, zero_pad_embedding false
//
// A Garden checkpoint (a model_dir or ckpt-N file) instead gives the BERT-
// family tasks its encoder's config, from the params it carries: the
// module its checkpoint_items restores as "encoder" (an ELECTRA run's
// discriminator), at task.model.<module>_encoder.bert or
// task.model.<module>.bert. Sizes, heads, activation and norm_first are
// taken (the user's different value is refused); dropout_rate,
// attention_dropout_rate, initializer_range and alibi_slope are taken
// unless the user set them (a line names each the user's value replaces).
// Nothing is taken with init_checkpoint_rename set, without "encoder" in
// init_checkpoint_modules, or from a checkpoint that carries no params.
//
// Nothing is done when init_checkpoint names neither.
#pragma once

#include <string>
#include <vector>

#include "garden/config/definitions.h"
#include "garden/config/yaml_io.h"

namespace garden::nlp {

// Each returns the lines to log (InitCheckpointAdopter).
std::vector<std::string> adopt_sentence_prediction_checkpoint(config::TaskConfig& task,
                                                              const config::SetKeys& set_by_user);
std::vector<std::string> adopt_tagging_checkpoint(config::TaskConfig& task,
                                                  const config::SetKeys& set_by_user);
std::vector<std::string> adopt_question_answering_checkpoint(config::TaskConfig& task,
                                                             const config::SetKeys& set_by_user);
std::vector<std::string> adopt_translation_checkpoint(config::TaskConfig& task,
                                                      const config::SetKeys& set_by_user);

}  // namespace garden::nlp
