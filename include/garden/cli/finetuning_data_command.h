// `garden create_finetuning_data ...`: Model Garden's
// create_finetuning_data.py with its flags; see nlp::create_finetuning_data.
#pragma once

namespace CLI {
class App;
}

namespace garden {

// Adds the `create_finetuning_data` subcommand (--fine_tuning_task_type,
// --classification_task_name, --input_data_dir, --train_data_output_path,
// --eval_data_output_path, --meta_data_file_path, --vocab_file or
// --sp_model_file, --do_lower_case, --max_seq_length). Prints the counts and
// the meta data. The work runs in the subcommand's callback and throws
// garden::Error (one line) on failure, leaving no partial output file.
CLI::App* add_create_finetuning_data_command(CLI::App& app);

}  // namespace garden
