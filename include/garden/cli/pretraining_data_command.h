// `garden create_pretraining_data ...`: BERT's create_pretraining_data.py
// (sentence pairs with random next sentences and 80/10/10 masking, as
// tf.Example TFRecords) with its flags; see nlp::create_pretraining_data.
#pragma once

namespace CLI {
class App;
}

namespace garden {

// Adds the `create_pretraining_data` subcommand to `app`, with BERT's flags
// (--input_file, --output_file, --vocab_file, --do_lower_case,
// --do_whole_word_mask, --max_seq_length, --max_predictions_per_seq,
// --random_seed, --dupe_factor, --masked_lm_prob, --short_seq_prob), plus
// --sp_model_file (a SentencePiece model instead of --vocab_file) and
// --num_threads. Prints the documents, records and files on stdout.
//
// Dispatch: call before app.parse(argc, argv); the work runs in the
// subcommand's CLI11 callback during parse() and throws garden::Error (one
// line) on failure, leaving no output file. Option storage lives in the
// callback, so `app` may outlive this call's stack frame.
CLI::App* add_create_pretraining_data_command(CLI::App& app);

}  // namespace garden
