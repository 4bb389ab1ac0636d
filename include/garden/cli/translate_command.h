// `garden translate ...`: translates text with a model_dir trained by the
// translation task.
#pragma once

namespace CLI {
class App;
}

namespace garden {

// Adds the `translate` subcommand to `app`:
//   translate --model_dir DIR [--checkpoint PATH|best] [--beam_size N]
//             [--batch_size N] [--input FILE] [--output FILE]
// Reads DIR/params.yaml, the task's SentencePiece model and the latest
// checkpoint (or PATH, or the best exported one), then writes one translation
// per input line, in order; an empty line gives an empty line. Lines longer
// than validation_data.max_seq_length tokens are truncated with a warning
// naming the line. --input is checked before the model loads; --output is
// written atomically (an error leaves an existing file as it was) and is
// never the input, params.yaml, the SentencePiece model or the checkpoint.
// The work runs in the subcommand's callback during app.parse(); failures
// throw garden::Error with one line.
CLI::App* add_translate_command(CLI::App& app);

}  // namespace garden
