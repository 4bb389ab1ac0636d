// `garden spm train|encode|decode`: SentencePiece from the command line.
//
// Wiring (in run_main, before app.parse):
//   add_spm_command(app);
// Each subcommand runs from its CLI11 callback during app.parse, so nothing
// else is needed; a garden::Error thrown there reaches run_main's handler
// like any other. The returned subcommand lets a caller check ->parsed().
//
// `spm train` checks every --input first (and refuses one that is
// PREFIX.model or PREFIX.vocab); --tsv_columns text goes to a fresh
// temporary directory, removed whatever happens; the outputs are replaced
// on success only (see data::train_sentencepiece).
#pragma once

#include <iosfwd>
#include <string>

namespace CLI {
class App;
}

namespace garden {

CLI::App* add_spm_command(CLI::App& app);

namespace cli {
// The bodies of `spm encode` and `spm decode` on any streams (for tests).
// encode: one line of text in, one line of space-separated ids (or pieces)
// out. decode: one line of space-separated ids in, one line of text out; a
// token that is not an id is an error naming the line.
void spm_encode_stream(const std::string& model, bool pieces, bool add_bos, bool add_eos,
                       std::istream& in, std::ostream& out);
void spm_decode_stream(const std::string& model, std::istream& in, std::ostream& out);
}  // namespace cli

}  // namespace garden
